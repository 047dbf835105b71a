"""The local web page of ``recallctl ui``: guard, pages, templates, live figures."""
