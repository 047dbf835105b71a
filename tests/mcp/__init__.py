"""recall-mcp: the shim, its tools, schemas and wire bytes, through the MCP SDK's client."""
