"""Replay: does a store's learned relevance lift its ranking? Outcomes of half the queries,
measured on the other half.

A dataset folder (``retrieval_bench``'s format) is loaded into a fresh daemon. In each scope
(a workspace) the queries are split in halves by a hash of their qid. The second halves are
measured (R@10, MRR@10, P@1) before anything is learned. Then, for each first-half query, the
agent of that workspace searches (limit 10) and records an outcome for every hit through
memory_record_use with the hit's use token: "used" for a relevant hit, "ignored" for the
others. The second halves are measured again: ``after``. Last, ``recallctl relevance reset``
forgets the calibrations and they are measured once more: ``outcomes only`` (the outcomes
recorded still lower the ignored memories' scores, as before this calibration learned), so
``after - outcomes only`` is what the learned calibration itself adds.

Run as ``scripts/bench_replay DIR [--json] [--max-queries N]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from recall_client import protocol as p
from recall_client.client import RecallClient
from retrieval_bench import (
    Dataset,
    Loaded,
    Query,
    _Daemon,
    _load,
    _search_all,
    _wait_embedded,
    _workdir,
    load_dataset,
    served,
)

__all__ = ["halves", "main"]

REPORTED = ("recall@10", "mrr@10", "p@1")


def halves(queries: Sequence[Query]) -> tuple[list[Query], list[Query]]:
    """Each scope's queries split in two by the sha1 of their qid: (taught, measured). A
    scope of one query is measured only."""
    by_scope: dict[str, list[Query]] = {}
    for q in queries:
        by_scope.setdefault(q.scope, []).append(q)
    taught, measured = [], []
    for rows in by_scope.values():
        rows = sorted(rows, key=lambda q: hashlib.sha1(q.qid.encode()).hexdigest())
        cut = len(rows) // 2
        taught += rows[:cut]
        measured += rows[cut:]
    return taught, measured


async def _measure(
    rc: RecallClient, queries: Sequence[Query], loaded: Loaded, min_score: float
) -> dict[str, float]:
    rows, _, _ = await _search_all(rc, queries, loaded, "hybrid", min_score)
    n = len(rows)
    return {
        "recall@10": sum(r["recall@10"] for r in rows) / n,
        "mrr@10": sum(r["mrr@10"] for r in rows) / n,
        "p@1": sum(r["mrr@10"] == 1.0 for r in rows) / n,
        "n": n,
    }


async def _teach(
    rc: RecallClient, queries: Sequence[Query], loaded: Loaded, min_score: float
) -> dict[str, int]:
    """Record the outcome of every hit of each query (a memory's outcome teaches the
    calibration of its workspace, the query's scope)."""
    counts = {"used": 0, "ignored": 0}
    for q in queries:
        result = await rc.call(
            p.MemorySearch(query=q.query[:4000], limit=10, workspace=q.scope, min_score=min_score),
            p.MemorySearchResult,
        )
        relevant = set(q.relevant_ids)
        for hit in result.hits:
            if hit.use_token is None:
                continue
            used = bool(relevant.intersection(loaded.ids.get(hit.id, [])))
            outcome: p.Outcome = "used" if used else "ignored"
            await rc.call(
                p.MemoryRecordUse(use_token=hit.use_token, outcome=outcome),
                p.UseRecorded,
            )
            counts[outcome] += 1
    return counts


async def _calibrations(rc: RecallClient, scopes: Sequence[str]) -> dict[str, Any]:
    out = {}
    for scope in scopes:
        shown = await rc.call(p.RelevanceShow(workspace=scope), p.RelevanceShown)
        out[scope] = {
            "source": shown.calibration.source,
            "bias": shown.calibration.bias,
            "lexical": shown.calibration.lexical,
            "semantic": shown.calibration.semantic,
            "updates": shown.calibration.updates,
        }
    return out


async def replay(args: argparse.Namespace) -> dict[str, Any]:
    data: Dataset = load_dataset(args.dataset, max_queries=args.max_queries)
    taught, measured = halves(data.queries)

    def say(*parts: object) -> None:
        if not args.quiet:
            print(*parts, file=sys.stderr)

    say(f"{data.name}: {len(data.memories)} memories, {len(taught)} taught, {len(measured)} kept")
    out: dict[str, Any] = {"dataset": data.name, "taught": len(taught), "measured": len(measured)}
    with _workdir(args.keep) as root:
        async with served(_Daemon(root, args.embedder), "bench_replay") as rc:
            loaded = await _load(rc, data.memories)
            await _wait_embedded(rc, len(loaded.ids), args.timeout)
            say("loaded and embedded; measuring before")
            out["before"] = await _measure(rc, measured, loaded, args.min_score)
            started = time.perf_counter()
            out["outcomes"] = await _teach(rc, taught, loaded, args.min_score)
            say(f"taught {out['outcomes']} in {time.perf_counter() - started:.1f}s")
            out["after"] = await _measure(rc, measured, loaded, args.min_score)
            scopes = sorted({q.scope for q in taught})
            out["calibrations"] = await _calibrations(rc, scopes)
            out["cleared"] = (await rc.call(p.RelevanceReset(), p.RelevanceCleared)).cleared
            out["outcomes_only"] = await _measure(rc, measured, loaded, args.min_score)
    out["lift"] = {k: out["after"][k] - out["before"][k] for k in REPORTED}
    out["learned_lift"] = {k: out["after"][k] - out["outcomes_only"][k] for k in REPORTED}
    return out


def _print(out: dict[str, Any]) -> None:
    print(f"{out['dataset']}: {out['taught']} queries taught, {out['measured']} measured")
    print(f"outcomes recorded: {out['outcomes']}")
    print(f"{'':16}" + "".join(f"{k:>11}" for k in REPORTED))
    for name in ("before", "after", "outcomes_only", "lift", "learned_lift"):
        print(f"{name:16}" + "".join(f"{out[name][k]:>+11.4f}" for k in REPORTED))
    weights = [c for c in out["calibrations"].values() if c["source"] == "workspace"]
    if weights:
        mean = {
            k: sum(c[k] for c in weights) / len(weights) for k in ("bias", "lexical", "semantic")
        }
        print(
            f"learned calibration (mean of {len(weights)} workspaces): bias {mean['bias']:.2f},"
            f" lexical {mean['lexical']:.2f}, semantic {mean['semantic']:.2f}"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="bench_replay", description=__doc__.split("\n")[0])
    ap.add_argument("dataset", type=Path, help="folder with memories.jsonl and queries.jsonl")
    ap.add_argument("--embedder", choices=["minilm", "hash"], default="minilm", help="the embedder")
    ap.add_argument("--max-queries", type=int, default=0, help="a deterministic subsample")
    ap.add_argument("--min-score", type=float, default=0.0, help="memory_search's min_score")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait to embed")
    ap.add_argument("--keep", type=Path, help="keep the daemon's folder here")
    ap.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)
    out = anyio.run(replay, args)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print(out)


if __name__ == "__main__":
    main()
