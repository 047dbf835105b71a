from recalld.main import main

main()
