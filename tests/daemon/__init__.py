"""The daemon end to end, and its frame reader."""
