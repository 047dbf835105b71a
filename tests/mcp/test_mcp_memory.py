"""The memory tools through recall-mcp, driven by the MCP SDK's stdio client, on a real daemon:
every memory_search parameter and result field of seeds 003 and 004, and the tools around it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest
from mcp import Client

from tests.support.daemon import DaemonProcess
from tests.support.git import git
from tests.support.mcp_client import hints_of, open_tools, shim
from tests.support.memories import settled

pytestmark = pytest.mark.both_backends

TOOLS = {
    "memory_store",
    "memory_search",
    "memory_update",
    "memory_verify",
    "memory_show",
    "memory_record_use",
    "memory_fact_resolve",
}
SEED_PARAMETERS = {
    # seed 003 (PseudoLife-MCP)
    "query",
    "top_k",
    "tags",
    "sources",
    "bands",
    "episodes",
    "bm25",
    "rerank",
    "min_score",
    "disable_recency_boost",
    "explain",
    "verbose",
    # seed 004 (bettermemory)
    "mode",
    "model",
    "client",
    "scopes",
    "auto_scope",
    "expand_top",
    "max_results",
    "since_prior_session",
}
COMPACT = {
    "id",
    "text",
    "source",
    "tags",
    "score",
    "relevance",
    "match_terms",
    "staleness_verdict",
    "path_drift_missing",
    "use_token",
}


async def test_every_memory_tool_is_listed_with_the_seed_parameters(
    running_daemon: DaemonProcess,
) -> None:
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/mcp")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert TOOLS <= set(tools)
    for name in TOOLS:
        tool = tools[name]
        assert tool.output_schema is not None and tool.annotations is not None, name
        for section in ("Returns:", "Use when:", "Not for:", "Side effects:", "Errors:"):
            assert section in (tool.description or ""), (name, section)
    assert hints_of(tools["memory_search"]).read_only_hint is True
    assert hints_of(tools["memory_show"]).read_only_hint is True
    assert hints_of(tools["memory_record_use"]).idempotent_hint is False
    props = tools["memory_search"].input_schema["properties"]
    assert SEED_PARAMETERS <= set(props)
    assert props["top_k"]["maximum"] == 50 and props["max_results"]["maximum"] == 50
    assert props["min_score"]["anyOf"][0]["maximum"] == 1
    assert (
        props["auto_scope"]["default"] is True and props["since_prior_session"]["default"] is False
    )
    assert set(props["mode"]["anyOf"][0]["enum"]) == {"keyword", "bm25", "hybrid"}
    assert props["min_score"]["description"] == "Override the 0.25 relevance floor."
    assert props["explain"]["description"] == "Attach a ranking ``trace``; implies verbose."
    out = cast(dict[str, Any], tools["memory_search"].output_schema)["properties"]
    assert {"query", "count", "cortex", "entries", "low_confidence"} <= set(out)
    store = tools["memory_store"].input_schema["properties"]
    assert {
        "kind",
        "subject",
        "tags",
        "source",
        "scopes",
        "bands",
        "episodes",
        "authority",
        "distortion_tolerance",
        "supersedes",
        "depends_on",
        "paths",
        "ttl_s",
        "idempotency_key",
    } <= set(store)


async def test_memory_search_through_the_shim_with_every_parameter(
    running_daemon: DaemonProcess,
) -> None:
    params = shim(str(running_daemon.socket), "--workspace", "/ws/mcp", "--model", "model-m")
    async with Client(params) as client:
        call = await open_tools(client)
        base = await call(
            "memory_store",
            text="The build cache lives in .cache/build and is keyed by lockfile hash.",
            tags=["build"],
            source="user",
            scopes=["ci"],
            bands=["long"],
            episodes=["ep1"],
        )
        dep = await call(
            "memory_store",
            text="CI restores the build cache before running tests.",
            tags=["build", "ci"],
            source="ci-log",
            scopes=["ci"],
            bands=["working"],
            episodes=["ep2"],
            depends_on=[{"id": base["id"], "note": "where the cache lives"}],
        )
        old = await call(
            "memory_store",
            text="The build cache budget is 2 GB.",
            kind="fact",
            subject="build cache budget",
            ts=time.time() - 86400,
        )
        new = await call(
            "memory_store",
            text="The build cache budget is 5 GB.",
            kind="fact",
            subject="build cache budget",
        )
        assert new["action"] == "superseded" and new["superseded"] == [old["id"]]
        rule = await call(
            "memory_store",
            text="Never commit the build cache directory.",
            kind="fact",
            subject="build cache",
            distortion_tolerance="constraint",
        )
        quoted = await call(
            "memory_store",
            text="Someone on the forum said the build cache should be shared.",
            authority="quoted",
        )

        await settled(running_daemon)
        r = await call("memory_search", query="build cache budget", top_k=10)
        assert list(r)[:5] == ["query", "count", "cortex", "entries", "low_confidence"]
        assert r["count"] == len(r["entries"]) and not r["low_confidence"]
        cortex = {c["subject"]: c for c in r["cortex"]}
        assert cortex["build cache"]["pinned"] and r["cortex"][0]["id"] == rule["id"]
        assert (
            cortex["build cache budget"]["id"] == new["id"]
            and not cortex["build cache budget"]["contested"]
        )
        entries = {e["id"]: e for e in r["entries"]}
        assert entries[old["id"]]["superseded_by_text"] == "The build cache budget is 5 GB."
        assert r["entries"][0]["id"] == rule["id"] and r["entries"][0]["pinned"] is True
        for e in r["entries"]:
            assert COMPACT <= set(e), e
            assert "created_at" not in e and "trace" not in e and "scopes" not in e
            assert e["relevance"] in ("high", "medium", "low")
        assert all(
            "recent_negative_outcomes" not in e and "depends_on_resolved" not in e
            for e in r["entries"]
            if e["id"] != dep["id"]
        )

        linked = await call(
            "memory_search", query="CI restores before running tests", max_results=1
        )
        [hit] = linked["entries"]
        assert hit["id"] == dep["id"]
        assert hit["depends_on_resolved"] == [
            {
                "id": base["id"],
                "scopes": ["ci"],
                "summary": "The build cache lives in .cache/build and is keyed by lockfile hash.",
                "link_note": "where the cache lives",
            }
        ]

        verbose = await call("memory_search", query="build cache", verbose=True, top_k=10)
        v = {e["id"]: e for e in verbose["entries"]}
        assert v[base["id"]]["scopes"] == ["ci"] and v[base["id"]]["bands"] == ["long"]
        assert v[base["id"]]["episodes"] == ["ep1"] and v[base["id"]]["model"] == "model-m"
        assert v[base["id"]]["client"] == "recall-mcp" and "snippet" in v[base["id"]]
        assert v[quoted["id"]]["authority"] == "quoted"

        explained = await call(
            "memory_search",
            query="build cache",
            explain=True,
            rerank=True,
            bm25=True,
            mode="hybrid",
            disable_recency_boost=True,
            min_score=0.1,
        )
        trace = explained["trace"]
        assert trace["rerank"]["requested"] is True and trace["rerank"]["available"] is False
        assert (
            trace["recency_boost"] is False and trace["min_score"] == 0.1 and trace["bm25"] is True
        )
        assert all("trace" in e and "created_at" in e for e in explained["entries"])

        filtered = await call(
            "memory_search",
            query="build cache",
            tags=["ci"],
            sources=["ci-log"],
            scopes=["ci"],
            bands=["working"],
            episodes=["ep2"],
            model="model-m",
            client="recall-mcp",
            mode="keyword",
        )
        assert [e["id"] for e in filtered["entries"]] == [dep["id"]] and filtered[
            "mode"
        ] == "keyword"
        assert (await call("memory_search", query="build cache", model="other"))["entries"] == []
        bm25 = await call("memory_search", query="build cache", mode="bm25", auto_scope=False)
        assert bm25["entries"] and bm25["semantic_used"] is False

        # this shim's session wrote everything and nobody else has: no prior session
        assert (await call("memory_search", query="build cache", since_prior_session=True))[
            "entries"
        ] == []
        nothing = await call("memory_search", query="quantum chromodynamics lattice")
        assert (
            nothing["entries"] == []
            and nothing["low_confidence"] is True
            and nothing["cortex"] == []
        )

        assert "top_k" in await call.error("memory_search", query="x", top_k=51)
        assert "max_results" in await call.error("memory_search", query="x", top_k=3, max_results=4)
        assert "min_score" in await call.error("memory_search", query="x", min_score=2)
        assert "bm25" in await call.error("memory_search", query="x", mode="bm25", bm25=False)


async def test_contest_resolve_outcomes_and_show_through_the_shim(
    running_daemon: DaemonProcess,
) -> None:
    ts = time.time() - 3600
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/mcp2")) as client:
        call = await open_tools(client)
        a = await call(
            "memory_store",
            text="The VPN gateway is vpn1.corp.",
            kind="fact",
            subject="vpn gateway",
            ts=ts,
        )
        b = await call(
            "memory_store",
            text="The VPN gateway is vpn2.corp.",
            kind="fact",
            subject="vpn gateway",
            ts=ts,
        )
        assert b["contested"] and b["contested_with"] == [a["id"]]
        await settled(running_daemon)
        r = await call("memory_search", query="VPN gateway")
        [fact] = r["cortex"]
        assert fact["contested"] and [c["id"] for c in fact["contenders"]] == [b["id"]]
        resolution = await call("memory_fact_resolve", subject="vpn gateway", keep_id=b["id"])
        assert (
            resolution["resolved"]
            and resolution["current"] == b["id"]
            and resolution["superseded"] == [a["id"]]
        )
        assert (await call("memory_fact_resolve", subject="vpn gateway", accept=True))[
            "reason"
        ] == "no_contender"

        r = await call("memory_search", query="VPN gateway")
        token = {e["id"]: e["use_token"] for e in r["entries"]}
        used = await call("memory_record_use", use_token=token[b["id"]])
        assert used["recorded"] == [{"id": b["id"], "outcome": "used"}]
        await call(
            "memory_record_use", memory_ids=[b["id"]], outcome="contradicted", note="it moved"
        )
        r = await call("memory_search", query="VPN gateway")
        hit = {e["id"]: e for e in r["entries"]}[b["id"]]
        assert hit["recent_negative_outcomes"][0]["outcome"] == "contradicted"
        assert hit["staleness_verdict"] == "spot_check_required"

        changed = await call("memory_update", id=b["id"], text="The VPN gateway is vpn3.corp.")
        assert "text" in changed["changed"]
        shown = await call("memory_show", id=b["id"])
        assert (
            shown["text"] == "The VPN gateway is vpn3.corp."
            and shown["staleness_verdict"] == "fresh"
        )
        assert shown["outcomes"] == {"contradicted": 1, "used": 1} and shown["kind"] == "fact"
        assert shown["superseded_by"] is None and shown["contested"] is False
        assert "not_found" in await call.error("memory_show", id="mem_missing")
        assert "use_token" in await call.error("memory_record_use", use_token="not.valid")


async def test_drift_through_the_shim_on_a_real_git_repository(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "deploy.sh").write_text("echo deploy\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    async with Client(shim(str(running_daemon.socket), "--workspace", str(repo))) as client:
        call = await open_tools(client)
        m = await call("memory_store", text="Deploys run ./deploy.sh from the repo root.")
        assert m["origin_repo"] == str(repo) and m["cited_paths"] == ["./deploy.sh"]
        await settled(running_daemon)
        fresh = (await call("memory_search", query="deploys run deploy"))["entries"][0]
        assert fresh["commit_drift_count"] == 0 and fresh["path_drift_missing"] == 0
        assert "path_drift" not in fresh and "claim_anchored_missing" not in fresh
        await call("memory_verify", id=m["id"], verified_paths=["./deploy.sh"])
        (repo / "deploy.sh").unlink()
        git(repo, "commit", "-qam", "drop deploy.sh")
        top = (await call("memory_search", query="deploys run deploy", expand_top=True))["entries"][
            0
        ]
        assert top["commit_drift_count"] == 1
        assert top["claim_anchored_missing"] == ["./deploy.sh"]
        assert top["path_drift"] == {
            "checked": ["./deploy.sh"],
            "missing": ["./deploy.sh"],
            "verified": [],
        }
        assert top["staleness_verdict"] == "spot_check_recommended"
        assert top["expanded"] is True and top["commit_drift"]["count"] == 1
        verified = await call("memory_verify", id=m["id"])
        assert verified["verified_commit"] == git(repo, "rev-parse", "HEAD")
        again = (await call("memory_search", query="deploys run deploy"))["entries"][0]
        assert again["commit_drift_count"] == 0
