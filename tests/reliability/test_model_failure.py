"""A model that cannot load: every path still serves, lexical only, and says why."""

from __future__ import annotations

import json

from mcp import Client
from recall_client import protocol as p

from tests.support.daemon import DaemonFactory, DaemonProcess

from .writes import ctl, shim_params


async def test_without_a_model_every_path_searches_lexically_and_status_says_why(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(
        embedder="minilm", extra_env={"RECALLD_MODEL_PATH": "/nonexistent/model"}
    )
    await d.start()
    report = await d.status(wait_model_s=60)
    assert report.model.state == "failed"
    assert report.model.reason and "/nonexistent/model" in report.model.reason

    ws = "/ws/no-model"
    ctl(d, ws, "store", "the release checklist lives in docs/release.md")
    async with d.client(workspace=ws) as rc:
        await rc.call(p.MemoryStore(text="rotate the signing key every ninety days"), p.Stored)
        result = await rc.call(
            p.MemorySearch(query="signing key rotation", mode="hybrid"), p.MemorySearchResult
        )
    assert not result.semantic_used
    assert "signing key" in result.hits[0].text

    async with Client(shim_params(d, ws, agent="no-model")) as client:
        found = await client.call_tool("memory_search", {"query": "release checklist"})
    assert not found.is_error, found.content
    assert found.structured_content["semantic_used"] is False
    assert "docs/release.md" in found.structured_content["entries"][0]["text"]

    table = ctl(d, ws, "status")
    assert "lexical only" in table
    assert "failed" in table and "/nonexistent/model" in table
    status = json.loads(ctl(d, ws, "status", "--json"))
    assert status["semantic_search"] is False
    assert status["model"]["state"] == "failed" and status["model"]["reason"]
    # Nothing is lost meanwhile: the records wait, unembedded, for a model that works.
    assert status["index"]["embedding_backlog"] == 2
    assert await d.stop() == 0
