"""Experiences and lessons: record, search, roll-up, through the daemon, recall-mcp, recallctl."""
