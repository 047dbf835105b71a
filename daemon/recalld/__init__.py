"""recalld: the local memory daemon for AI coding agents."""
