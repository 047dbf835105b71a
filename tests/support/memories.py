"""Memories through a client: store, search, and wait until the pipeline has settled."""

from __future__ import annotations

from recall_client import protocol as p
from recall_client.client import RecallClient

from .daemon import DaemonProcess


async def search(rc: RecallClient, query: str, **kw: object) -> p.MemorySearchResult:
    return await rc.call(p.MemorySearch(query=query, **kw), p.MemorySearchResult)  # type: ignore[arg-type]


async def store(rc: RecallClient, text: str, **kw: object) -> p.MemoryStored:
    reply = await rc.call(p.MemoryStore(text=text, **kw), p.MemoryStored)  # type: ignore[arg-type]
    return reply


async def settled(d: DaemonProcess) -> None:
    """Wait until the model is up and every memory is embedded: rankings then use both channels."""
    report = await d.settled()
    assert report.semantic_search and report.index.embedding_backlog == 0


async def wait_embedded(d: DaemonProcess, n: int) -> None:
    """Wait until ``n`` vectors are indexed, by asking status (the daemon's own word)."""
    report = await d.settled(30)
    assert report.index.size >= n and report.index.embedding_backlog == 0, report.index
