"""Workspaces: a repository's identity, and re-keying stores keyed by path."""
