"""recall-mcp's resources: each memory at ``recalld://memory/{id}``.

A host lists them (Claude Code's ``@`` menu, Codex's and Gemini CLI's resource tools) and
reads one into the conversation. resources/list is memory_list's first page of this
workspace's current memories, newest first (its cursor is memory_list's); resources/read is
memory_show's answer, the memory_show tool's structured result as JSON: one shape for both.

The template is static: resources/templates/list loads neither the protocol nor the daemon
client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic_core import to_json

if TYPE_CHECKING:
    from ..client import Session
    from ..protocol import MemoryItem

__all__ = ["MEMORY", "PREFIX", "Resources"]

PREFIX = "recalld://memory/"
_JSON = "application/json"
# A listed memory's title: its subject, else its text's start.
_TITLE_CHARS = 80

MEMORY = types.ResourceTemplate(
    uri_template=PREFIX + "{id}",
    name="memory",
    title="A recalld memory",
    description=(
        "One memory in full, as memory_show answers: its text, provenance (agent, workspace, "
        "origin commit), links, outcomes and path and commit drift. {id} is a memory id "
        "(mem_...), as memory_search and memory_list give it."
    ),
    mime_type=_JSON,
)


class Resources:
    """The shim's resources, answered through its one daemon session."""

    def __init__(self, session: Callable[[], Session]) -> None:
        self._session = session

    def templates(self) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[MEMORY])

    async def listing(self, cursor: str | None) -> types.ListResourcesResult:
        """One page of this workspace's current memories, newest first.

        Raises:
            MCPError: a cursor memory_list did not give (invalid params), or a daemon failure.
        """
        import msgspec

        from .. import protocol as p

        try:
            request = msgspec.convert({"include_superseded": False, "before": cursor}, p.MemoryList)
        except msgspec.ValidationError:
            raise MCPError(code=types.INVALID_PARAMS, message=f"bad cursor: {cursor!r}") from None
        try:
            page = await self._session().call(request, p.MemoryListResult)
        except Exception as exc:
            _daemon_failed(exc, None)
        return types.ListResourcesResult(
            resources=[_listed(item) for item in page.items], next_cursor=page.next_before
        )

    async def read(self, uri: str) -> types.ReadResourceResult:
        """The memory at ``uri``, as memory_show shows it.

        Raises:
            MCPError: a URI that names no memory of this caller (invalid params, as for any
                unknown resource), or a daemon failure (internal error).
        """
        from .memory import TOOLS
        from .shapes import ArgumentError

        memory_id = uri.removeprefix(PREFIX)
        if memory_id == uri or "/" in memory_id:
            raise _unknown(uri)
        show = next(tool for tool in TOOLS if tool.name == "memory_show")
        try:
            shown = await show(self._session().call, {"id": memory_id})
        except ArgumentError:
            raise _unknown(uri) from None
        except Exception as exc:
            _daemon_failed(exc, uri)
        # The text the memory_show tool's result carries.
        text = to_json(shown, indent=2).decode()
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=_JSON, text=text)]
        )


def _unknown(uri: str) -> MCPError:
    """What the SDK answers for a resource it does not have."""
    return MCPError(
        code=types.INVALID_PARAMS, message=f"Unknown resource: {uri}", data={"uri": uri}
    )


def _daemon_failed(exc: Exception, uri: str | None) -> NoReturn:
    """Raise ``exc`` as MCP answers it: a memory the daemon does not show the caller is an
    unknown resource, a request it refuses invalid params, an unreachable or failing daemon an
    internal error; each in the tools' words."""
    from ..client import DaemonUnavailable, RemoteError
    from .common import tool_error

    if isinstance(exc, RemoteError) and exc.code == "not_found" and uri is not None:
        raise _unknown(uri) from exc
    if isinstance(exc, RemoteError) and exc.code in {"invalid_request", "forbidden"}:
        raise MCPError(code=types.INVALID_PARAMS, message=str(tool_error(exc))) from exc
    if isinstance(exc, DaemonUnavailable | RemoteError):
        raise MCPError(code=types.INTERNAL_ERROR, message=str(tool_error(exc))) from exc
    raise exc


def _listed(item: MemoryItem) -> types.Resource:
    title = item.subject or item.text.split("\n", 1)[0][:_TITLE_CHARS]
    return types.Resource(
        uri=PREFIX + item.id,
        name=item.id,
        title=f"{item.kind}: {title}",
        description=item.text,
        mime_type=_JSON,
    )
