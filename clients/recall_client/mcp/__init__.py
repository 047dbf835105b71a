"""``recall-mcp``: the MCP stdio shim that forwards an agent host's tool calls to the daemon."""
