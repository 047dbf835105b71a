"""MCP tools for memories: ``memory_store`` and ``memory_search``.

Each tool's inputSchema carries the bounds the daemon enforces too, and each returns a
pydantic model, so the SDK publishes an outputSchema and sends structuredContent.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from . import protocol as p
from .client import Session
from .mcp_common import forwarder

__all__ = ["register"]


class MemoryStoreResult(BaseModel):
    id: str = Field(description="Id of the stored memory (or of the identical one already stored).")
    duplicate: bool = Field(description="True when identical text was already stored in this workspace; nothing new was written.")
    replayed: bool = Field(description="True when this idempotency_key was used before; the first result is returned.")


class MemoryEntry(BaseModel):
    id: str = Field(description="Memory id, for memory_show, memory_update and forget.")
    text: str = Field(description="The stored text (secrets already redacted).")
    snippet: str = Field(description="The part of the text around the first matching query word.")
    source: str | None = Field(description="Who or what the memory came from, when declared.")
    tags: list[str] = Field(description="Tags stored with the memory.")
    score: float = Field(description="Relevance in 0..1; higher ranks first.")
    ts: float = Field(description="When the remembered thing happened, unix seconds.")


class MemorySearchOutput(BaseModel):
    query: str = Field(description="The query as received.")
    count: int = Field(description="Number of entries returned.")
    entries: list[MemoryEntry] = Field(description="Matching memories, best first.")
    semantic_used: bool = Field(description="True when the meaning-based channel took part; false means lexical only (model not loaded, or a keyword/bm25 mode).")


MEMORY_STORE_DESCRIPTION = """Store one memory in recalld, the shared local memory of this machine's agents.

Returns: {id, duplicate, replayed}. The write is durable when this returns.
Use when: you learned something a later session would want: a decision and its reason, a convention, a gotcha, a user preference.
Not for: what the repository or its docs already say; transient scratch notes.
Side effects: writes one record to the current workspace (secrets are redacted before storage). Identical text is stored once (duplicate: true); a repeated idempotency_key returns the first result.
Errors: invalid_request for empty or oversize text or bad tags; unavailable when the daemon is down or its disk is full (retry later)."""

MEMORY_SEARCH_DESCRIPTION = """Search stored memories of this workspace, by words and by meaning.

Returns: {query, count, entries, semantic_used}; entries best first, each {id, text, snippet, source, tags, score, ts}.
Use when: the task touches shared context you lack ("the script we wrote", a past decision), or before re-deriving something a past session may have settled.
Not for: searching the code itself; listing everything stored.
Side effects: none; read-only.
Errors: invalid_request for an empty query or out-of-range top_k/max_results; unavailable when the daemon is down."""


def register(server: MCPServer, session: Callable[[], Session]) -> None:
    """Register every tool on ``server``; ``session`` returns the live daemon session."""

    call = forwarder(session)

    @server.tool(
        name="memory_store",
        title="Store a memory",
        description=MEMORY_STORE_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Store a memory", readOnlyHint=False, destructiveHint=False,
            idempotentHint=True, openWorldHint=False,
        ),
    )
    async def memory_store(
        text: Annotated[str, Field(min_length=1, max_length=100_000, description="The memory itself: one self-contained statement a later reader can act on.")],
        tags: Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=32, description="Short labels to filter by later, e.g. ['deploy', 'postgres'].")] = [],  # noqa: B006
        source: Annotated[str | None, Field(max_length=128, description="Who or what it came from, e.g. 'user', 'ci-log'.")] = None,
        ttl_s: Annotated[float | None, Field(gt=0, description="Forget it after this many seconds; omit to keep it.")] = None,
        idempotency_key: Annotated[str | None, Field(min_length=1, max_length=200, description="Retry-safe key: a repeated key returns the first result instead of storing again.")] = None,
    ) -> MemoryStoreResult:
        req = p.MemoryStore(
            text=text, tags=tags, source=source, ttl_s=ttl_s,
            # The shim may retry after a reconnect; a key makes that retry harmless.
            idempotency_key=idempotency_key or f"mcp-{uuid.uuid4().hex}",
        )
        reply = await call(req, p.Stored)
        return MemoryStoreResult(id=reply.record_id, duplicate=reply.duplicate, replayed=reply.replayed)

    @server.tool(
        name="memory_search",
        title="Search memories",
        description=MEMORY_SEARCH_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Search memories", readOnlyHint=True, destructiveHint=False,
            idempotentHint=True, openWorldHint=False,
        ),
    )
    async def memory_search(
        query: Annotated[str, Field(min_length=1, max_length=4000, description="Nouns a memory would contain (tool, file, error names); specific beats vague.")],
        top_k: Annotated[int | None, Field(ge=1, le=50, description="Max entries returned (default 5, cap 50). Alias: max_results.")] = None,
        max_results: Annotated[int | None, Field(ge=1, le=50, description="Max entries returned (default 5, cap 50). Alias: top_k.")] = None,
        mode: Annotated[Literal["keyword", "bm25", "hybrid"] | None, Field(description="keyword or bm25: lexical only; hybrid (default): words and meaning fused.")] = None,
        tags: Annotated[list[str] | None, Field(description="Keep only entries carrying one of these tags.")] = None,
    ) -> MemorySearchOutput:
        req = p.MemorySearch(
            query=query, limit=top_k or max_results or 5, mode=mode or "hybrid", tags=tags or [],
        )
        reply = await call(req, p.MemorySearchResult)
        entries = [
            MemoryEntry(id=h.id, text=h.text, snippet=h.snippet, source=h.source, tags=h.tags,
                        score=h.score, ts=h.ts)
            for h in reply.hits
        ]
        return MemorySearchOutput(query=reply.query, count=len(entries), entries=entries,
                                  semantic_used=reply.semantic_used)
