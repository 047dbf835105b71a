"""What a daemon failure reads as to a model: the MCP tool error of recall-mcp's tools."""

from __future__ import annotations

from mcp.server.mcpserver.exceptions import ToolError

from ..client import DaemonUnavailable, RemoteError

__all__ = ["tool_error"]


def tool_error(exc: DaemonUnavailable | RemoteError) -> ToolError:
    """The MCP tool error a model can act on, for a daemon failure."""
    if isinstance(exc, DaemonUnavailable):
        return ToolError(f"recalld unavailable: {exc}")
    hint = " (retry shortly)" if exc.retryable else ""
    return ToolError(f"{exc.code}: {exc.message}{hint}")
