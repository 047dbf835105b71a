"""What every MCP tool module shares: the server the tools are registered on, forwarding a
request to recalld, and its errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, Protocol, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from . import protocol as p
from .client import DaemonUnavailable, RemoteError, Session

__all__ = ["ToolRegistry", "VisibilityArg", "forwarder", "tool_error"]

R = TypeVar("R", bound=p.Reply)
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

# The visibility argument of the write tools (memory_store, record_experience).
VisibilityArg = Annotated[
    Literal["private", "team"] | None,
    Field(
        description="In a team database: private (only your role sees it) or team (every "
        "member does). Omit for the daemon's configured default (private).",
    ),
]


class ToolRegistry(Protocol):
    """Where a tool module registers its tools: the shim's server, or the SDK's ``MCPServer``
    that makes their listing (scripts/mcp_tools.py). The decorator's keywords are MCPServer's."""

    def tool(
        self, name: str, title: str, description: str, annotations: ToolAnnotations
    ) -> Callable[[F], F]: ...


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
