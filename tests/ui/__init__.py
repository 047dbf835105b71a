"""The web page (recallctl ui): its views, its guard, and a real browser."""
