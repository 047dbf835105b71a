"""What every MCP tool module shares: the server the tools are registered on, forwarding a
request to recalld, and its errors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal, Protocol, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations
from mcp_types import Tool as MCPTool
from pydantic import Field

from . import protocol as p
from .client import DaemonUnavailable, RemoteError, Session

__all__ = ["StrictMCPServer", "ToolRegistry", "VisibilityArg", "forwarder", "tool_error"]

R = TypeVar("R", bound=p.Reply)
L = TypeVar("L")
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


class StrictMCPServer(MCPServer[L]):
    """An ``MCPServer`` whose tools refuse arguments they do not declare.

    The SDK's argument models keep pydantic's default ``extra="ignore"`` and offer no setting
    for it (python-sdk#3067), so a misnamed argument (``outcome`` for ``status``) would run the
    tool on the default instead. The SDK answers tools/list and tools/call through these two
    public methods; both read the published inputSchema, so what a client is told and what is
    refused cannot drift apart.
    """

    async def list_tools(self) -> list[MCPTool]:
        """Every tool, its inputSchema closed with ``additionalProperties: false``."""
        # A copy: the SDK hands out the tool's own schema dict.
        return [
            t.model_copy(update={"input_schema": {**t.input_schema, "additionalProperties": False}})
            for t in await super().list_tools()
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[L, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Call the tool once its arguments are all declared.

        Raises:
            ToolError: naming the unknown arguments and the ones the tool takes; the SDK sends
                it as an isError result, and the tool does not run.
        """
        for tool in await self.list_tools():
            if tool.name == name:
                _refuse_unknown(name, arguments, tool.input_schema)
        return await super().call_tool(name, arguments, context)


def _refuse_unknown(tool: str, arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    known = schema.get("properties", {})
    unknown = [name for name in arguments if name not in known]
    if unknown:
        noun = "argument" if len(unknown) == 1 else "arguments"
        raise ToolError(
            f"unknown {noun} {', '.join(map(repr, unknown))}; "
            f"{tool} takes: {', '.join(known) or 'no arguments'}"
        )


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
