"""What every MCP tool module shares: forwarding a request to recalld, and its errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from mcp.server.mcpserver.exceptions import ToolError

from . import protocol as p
from .client import DaemonUnavailable, RemoteError, Session

__all__ = ["forwarder", "tool_error"]

R = TypeVar("R", bound=p.Reply)


def tool_error(exc: Exception) -> ToolError:
    """The MCP tool error a model can act on, for a daemon failure."""
    if isinstance(exc, DaemonUnavailable):
        return ToolError(f"recalld unavailable: {exc}")
    if isinstance(exc, RemoteError):
        hint = " (retry shortly)" if exc.retryable else ""
        return ToolError(f"{exc.code}: {exc.message}{hint}")
    return ToolError(str(exc))


def forwarder(session: Callable[[], Session]) -> Callable[[p.Request, type[R]], Awaitable[R]]:
    """A ``call(request, reply_type)`` that sends through the shim's live session and turns
    daemon failures into MCP tool errors."""

    async def call(request: p.Request, reply_type: type[R]) -> R:
        try:
            return await session().call(request, reply_type)
        except (DaemonUnavailable, RemoteError) as exc:
            raise tool_error(exc) from exc

    return call
