"""Memories and facts through a real daemon: memory_search, memory_list."""
