"""``recallctl``: the status and admin client's commands, one module per family."""
