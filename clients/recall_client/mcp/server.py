"""recall-mcp's MCP server: the SDK's protocol kernel, serving the methods ``MCPServer`` served.

The shim used to be an ``MCPServer``. That module loads the SDK's HTTP and SSE transports and
OAuth, and it builds every tool's argument and output models before it can answer
``initialize``: about a second and 70 MB per shim, with eight shims to a machine. The SDK's
low-level ``Server`` imports those transports too. What serves stdio is under both: the runner
(``mcp.server.runner``: initialize and version negotiation in both protocol eras, the
per-version validation of every request and result, every protocol error), the JSON-RPC
dispatcher and the stdio transport. The runner reads a server as a registry (a handler per
method, the middleware around them, the server's identity); ``_Methods`` is that registry,
holding what ``MCPServer`` registered, with the same answers:

- initialize, ping and server/discover: the low-level ``Server``'s, with the capabilities
  ``MCPServer`` advertises (tools, resources, prompts; at 2026-07-28, ``listChanged`` and
  ``subscribe``, which its subscriptions/listen stream delivers);
- tools/list: mcp/tools.json, the listing the protocol makes of the tool modules (``shapes``;
  written by scripts/mcp_tools.py, held equal to it by a test);
- tools/call: the tool modules and the protocol are imported by the first call; arguments a
  tool does not declare are refused, as the listing's ``additionalProperties: false`` says, and
  the rest are converted into the tool's protocol request by the protocol's rules;
- prompts: ``recall`` (mcp/prompts.py), the workspace's memory brought into the conversation;
- resources: each memory at ``recalld://memory/{id}`` (mcp/resources.py), listed and read;
  a prompt or URI the shim does not have is refused as ``MCPServer`` refuses one;
- subscriptions/listen: the SDK's ``ListenHandler``;
- requestState: the SDK's boundary, loaded by the first request that carries one.

tests/mcp/test_mcp_wire.py replays every method, notification and error against what ``MCPServer``
answered, byte for byte (tools/list against mcp/tools.json), and the prompt and resources since.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import mcp_types as types
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.models import InitializationOptions
from mcp.server.runner import serve_dual_era_loop
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel
from pydantic_core import to_json

from .. import __version__
from .prompts import Prompts
from .resources import Resources

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from mcp.server.caching import CacheHint
    from mcp.server.lowlevel import Server
    from mcp.server.request_state import RequestStateBoundary

    from ..client import Session
    from . import shapes

__all__ = ["INSTRUCTIONS", "LISTING", "ShimConfig", "Tools", "every_tool", "serve"]

log = logging.getLogger("recall-mcp")

LISTING = Path(__file__).with_name("tools.json")

INSTRUCTIONS = """recalld is the shared, local memory of the agents on this machine.
Search before you re-derive: memory_search for facts, notes and decisions. Store what a later
session would want to know with memory_store (decisions, conventions, gotchas), not what the
repository already says. work_search finds what agents actually did (commands, failures,
sessions); work_result records how a task turned out. Before planning a task,
get_execution_context for the lessons and similar past tasks that apply; when a task is done,
record_experience with its outcome and lessons. Hits are leads about the past: check them
against the task at hand."""


@dataclass(frozen=True, slots=True)
class ShimConfig:
    """What recall-mcp was started with: who it speaks for and how it reaches the daemon."""

    agent: str
    workspace: str
    model: str | None = None
    socket: str | None = None
    # Present the admin token file: the admin:workspace scope (work_search any_caller, ...).
    admin: bool = False
    autostart: bool = False
    # The agent's own credential (recallctl agent add), presented in every hello.
    agent_token_file: str | None = None


def every_tool() -> tuple[shapes.Tool, ...]:
    """Every tool recall-mcp serves, in the order it lists them (loads the protocol)."""
    from . import experience, memory, work

    return (*memory.TOOLS, *work.TOOLS, *experience.TOOLS)


class Tools:
    """The shim's tools: listed from mcp/tools.json, their code loaded when first called."""

    def __init__(self, session: Callable[[], Session]) -> None:
        self._session = session

    @cached_property
    def _listed(self) -> dict[str, types.Tool]:
        entries = json.loads(LISTING.read_text())
        return {entry["name"]: types.Tool.model_validate(entry) for entry in entries}

    @cached_property
    def _tools(self) -> dict[str, shapes.Tool]:
        # Loaded by the first call, with the protocol: initialize and tools/list need neither.
        return {tool.name: tool for tool in every_tool()}

    def listing(self) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self._listed.values()))

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Run tool ``name``, once its arguments are all declared, in the SDK's words for each
        failure (mcp.server.mcpserver.tools.base.Tool.run).

        Raises:
            ToolError: an unknown tool, an argument it does not declare or one that does not
                make its request, or a failure of the daemon: its text is what the model reads.
            UnexpectedToolError: the tool crashed; the model reads only the tool's name.
        """
        listed = self._listed.get(name)
        if listed is None:
            raise ToolError(f"Unknown tool: {name}")
        _refuse_unknown(name, arguments, listed.input_schema)
        from ..client import DaemonUnavailable, RemoteError
        from .common import tool_error
        from .shapes import ArgumentError

        try:
            structured = await self._tools[name](self._session().call, arguments)
        except ArgumentError as exc:
            raise ToolError(f"Error executing tool {name}: {exc}") from exc
        except (DaemonUnavailable, RemoteError) as exc:
            raise ToolError(f"Error executing tool {name}: {tool_error(exc)}") from exc
        except Exception as exc:
            raise UnexpectedToolError(f"Error executing tool {name}") from exc
        # The text block is the content as the SDK writes a structured result's text.
        text = to_json(structured, indent=2).decode()
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=structured
        )


def _refuse_unknown(tool: str, arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    # By the inputSchema the listing carries: what a client is told and what is refused cannot
    # drift apart.
    known = schema.get("properties", {})
    unknown = [name for name in arguments if name not in known]
    if unknown:
        noun = "argument" if len(unknown) == 1 else "arguments"
        raise ToolError(
            f"unknown {noun} {', '.join(map(repr, unknown))}; "
            f"{tool} takes: {', '.join(known) or 'no arguments'}"
        )


class _RequestState:
    """The SDK's requestState boundary, loaded by the first request that carries requestState.

    ``MCPServer`` installs ``RequestStateBoundary`` around tools/call, prompts/get and
    resources/read. It seals the state of an input_required answer and refuses state it did not
    seal; recall-mcp never answers input_required, so the boundary only ever refuses. Loading it
    costs cryptography and starlette's authentication, so a request without requestState (which
    the boundary passes straight on) never loads it.
    """

    _METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})

    def __init__(self) -> None:
        self._boundary: RequestStateBoundary | None = None

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method not in self._METHODS or ctx.params is None:
            return await call_next(ctx)
        if ctx.params.get("requestState") is None:
            return await call_next(ctx)
        if self._boundary is None:
            from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity

            self._boundary = RequestStateBoundary(
                RequestStateSecurity.ephemeral(), default_audience=_IDENTITY.name
            )
        return await self._boundary(ctx, call_next)


class _DaemonSession:
    """The shim's one daemon session: made by the first tool call (``initialize`` and
    tools/list load neither the client nor the protocol), closed when serving ends."""

    def __init__(self, config: ShimConfig) -> None:
        self._config = config
        self._tg: TaskGroup | None = None
        self._session: Session | None = None
        # One agent session per shim process, kept across reconnects.
        self.id = f"mcp-{uuid.uuid4().hex}"

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                if self._session is not None:
                    await self._session.aclose()
                tg.cancel_scope.cancel()

    def __call__(self) -> Session:
        if self._session is None:
            from ..client import Session

            assert self._tg is not None, "tools run while the session is open"
            config = self._config
            self._session = Session(
                self._tg,
                autostart=config.autostart,
                agent=config.agent,
                workspace=config.workspace,
                client="recall-mcp",
                model=config.model,
                path=config.socket,
                admin=config.admin,
                agent_token_file=config.agent_token_file,
                session=self.id,
            )
        return self._session


@dataclass(frozen=True, slots=True)
class _Handler:
    """A method's handler and the model its params are validated into, as the runner reads
    them from a server (the low-level ``Server``'s ``HandlerEntry``)."""

    params_type: type[BaseModel]
    handler: Callable[[ServerRequestContext[None], Any], Awaitable[HandlerResult]]


_IDENTITY = types.Implementation(name="recalld", title="recalld memory", version=__version__)


def _capabilities(protocol_version: str | None) -> types.ServerCapabilities:
    """What ``MCPServer`` advertises: its tools, resources and prompts. At 2026-07-28 their
    change notifications (and resource updates) ride subscriptions/listen, which it serves; on
    the handshake era it sends none."""
    modern = protocol_version in MODERN_PROTOCOL_VERSIONS
    return types.ServerCapabilities(
        prompts=types.PromptsCapability(list_changed=modern),
        resources=types.ResourcesCapability(subscribe=modern, list_changed=modern),
        tools=types.ToolsCapability(list_changed=modern),
    )


_INITIALIZATION = InitializationOptions(
    server_name=_IDENTITY.name,
    server_version=_IDENTITY.version,
    title=_IDENTITY.title,
    capabilities=_capabilities(None),
    instructions=INSTRUCTIONS,
)


class _Methods:
    """The server as the SDK's runner reads one: ``get_request_handler``,
    ``get_notification_handler``, ``middleware``, ``cache_hints`` and ``server_info_stamp``
    (mcp.server.runner.ServerRunner), filled as ``MCPServer`` fills its low-level ``Server``."""

    def __init__(self, tools: Tools, prompts: Prompts, resources: Resources) -> None:
        self._tools = tools
        self._prompts = prompts
        self._resources = resources
        # The low-level Server's default (a span per message), then MCPServer's boundary.
        self.middleware: list[ServerMiddleware[None]] = [OpenTelemetryMiddleware(), _RequestState()]
        # MCPServer sets no cache hints.
        self.cache_hints: dict[str, CacheHint] = {}
        self._handlers = {
            "ping": _Handler(types.RequestParams, self._ping),
            "server/discover": _Handler(types.RequestParams, self._discover),
            "prompts/list": _Handler(types.PaginatedRequestParams, self._list_prompts),
            "prompts/get": _Handler(types.GetPromptRequestParams, self._get_prompt),
            "resources/list": _Handler(types.PaginatedRequestParams, self._list_resources),
            "resources/templates/list": _Handler(
                types.PaginatedRequestParams, self._list_resource_templates
            ),
            "resources/read": _Handler(types.ReadResourceRequestParams, self._read_resource),
            "subscriptions/listen": _Handler(
                types.SubscriptionsListenRequestParams, ListenHandler(InMemorySubscriptionBus())
            ),
            "tools/list": _Handler(types.PaginatedRequestParams, self._list_tools),
            "tools/call": _Handler(types.CallToolRequestParams, self._call_tool),
        }

    def get_request_handler(self, method: str) -> _Handler | None:
        return self._handlers.get(method)

    def get_notification_handler(self, method: str) -> _Handler | None:
        # MCPServer handles no notification; the runner acts on the ones it must itself.
        return None

    @property
    def server_info_stamp(self) -> dict[str, Any]:
        """The serverInfo a 2026-07-28 result carries in ``_meta``: a fresh dict each time."""
        return _IDENTITY.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _ping(
        self, ctx: ServerRequestContext[None], params: types.RequestParams
    ) -> types.EmptyResult:
        return types.EmptyResult()

    async def _discover(
        self, ctx: ServerRequestContext[None], params: types.RequestParams
    ) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=_capabilities(ctx.protocol_version),
            instructions=INSTRUCTIONS,
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[None], params: types.PaginatedRequestParams
    ) -> types.ListToolsResult:
        return self._tools.listing()

    async def _call_tool(
        self, ctx: ServerRequestContext[None], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            return await self._tools.call(params.name, params.arguments or {})
        except Exception as exc:
            # As MCPServer answers and logs a failed call: a crash logged in full, any other
            # failure in a line; either way the model reads an isError result.
            if isinstance(exc, ToolError) and not isinstance(exc, UnexpectedToolError):
                log.info("tool %r failed: %r", params.name, str(exc))
            else:
                log.exception("tool %r raised an unexpected exception", params.name)
            text = types.TextContent(type="text", text=str(exc))
            return types.CallToolResult(content=[text], is_error=True)

    async def _list_resources(
        self, ctx: ServerRequestContext[None], params: types.PaginatedRequestParams
    ) -> types.ListResourcesResult:
        return await self._resources.listing(params.cursor)

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[None], params: types.PaginatedRequestParams
    ) -> types.ListResourceTemplatesResult:
        return self._resources.templates()

    async def _read_resource(
        self, ctx: ServerRequestContext[None], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await self._resources.read(params.uri)

    async def _list_prompts(
        self, ctx: ServerRequestContext[None], params: types.PaginatedRequestParams
    ) -> types.ListPromptsResult:
        return self._prompts.listing()

    async def _get_prompt(
        self, ctx: ServerRequestContext[None], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        return await self._prompts.get(params.name, params.arguments or {})


async def serve(config: ShimConfig) -> None:
    """Serve MCP on stdin and stdout until the host closes stdin."""
    session = _DaemonSession(config)
    # The runner is typed for the low-level Server; it reads only what _Methods has.
    methods = cast(
        "Server[None]", _Methods(Tools(session), Prompts(session, session.id), Resources(session))
    )
    async with stdio_server() as (read, write), session.open():
        await serve_dual_era_loop(
            methods, read, write, lifespan_state=None, init_options=_INITIALIZATION
        )
