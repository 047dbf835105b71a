"""Evidence recall at a token budget: what a context hook injects, beside top-k search cut to
the same budget (``bench_retrieval --inject 300,600,1200``).

Each query of the dataset is sent as a prompt, as ``recallctl context`` sends a
UserPromptSubmit payload's: a ``context_block`` in the query's workspace, each query a
session of its own (nothing was given before). Its evidence recall is the share of the
query's relevant ids among the memories the block carries. The baseline asks memory_search
(the agent's own call, its default floor) for up to 50 hits and keeps them best first, each as
the line ``- [id] text``, while their tokens (the host-token estimate the daemon counts with)
fit the budget; its evidence recall is counted the same way. The block pays for its preamble
and headings out of the same budget; the baseline pays for nothing but its lines.
"""

from __future__ import annotations

import collections
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from recall_client import protocol as p
from recall_client.client import RecallClient

__all__ = ["DEFAULT_BUDGETS", "evidence_recall", "inject_all", "parse_budgets", "top_k_cut"]

DEFAULT_BUDGETS = (300, 600, 1200)
SEARCH_DEPTH = 50

Counter = Callable[[Sequence[str]], list[int]]


class _Query(Protocol):  # retrieval_bench.Query's fields this module reads
    @property
    def qid(self) -> str: ...
    @property
    def query(self) -> str: ...
    @property
    def relevant_ids(self) -> tuple[str, ...]: ...
    @property
    def scope(self) -> str: ...
    @property
    def category(self) -> str: ...


def parse_budgets(text: str) -> list[int]:
    """``300,600,1200`` -> [300, 600, 1200]. Raises ValueError: not positive integers."""
    budgets = [int(part) for part in text.split(",") if part.strip()]
    if not budgets or any(b <= 0 for b in budgets):
        raise ValueError(f"--inject takes positive token budgets, e.g. 300,600,1200: {text!r}")
    return list(dict.fromkeys(budgets))


def counter_for(tokenizer: str) -> Counter:
    """The daemon's token counter, by the name its reply gives (``ContextInjected.tokenizer``).

    Raises:
        ValueError: a daemon counting otherwise (an older recalld).
    """
    from recalld.retrieval import host_tokens

    if tokenizer != host_tokens.NAME:
        raise ValueError(f"the daemon counts with {tokenizer!r}, not {host_tokens.NAME!r}")
    return host_tokens.count


def top_k_cut(hits: Sequence[p.MemoryHit], budget: int, count: Counter) -> tuple[list[str], int]:
    """The ids of the best hits whose lines fit ``budget`` tokens, best first, and their tokens."""
    if not hits:
        return [], 0
    sizes = count([f"- [{h.id}] {h.text}" for h in hits])
    taken, used = [], 0
    for hit, size in zip(hits, sizes, strict=True):
        if used + size > budget:
            break
        taken.append(hit.id)
        used += size
    return taken, used


def evidence_recall(
    record_ids: Sequence[str], ids: Mapping[str, list[str]], relevant: Sequence[str]
) -> float:
    """The share of ``relevant`` among the dataset ids the daemon records stand for."""
    rel = set(relevant)
    return len(rel.intersection(i for r in record_ids for i in ids.get(r, []))) / len(rel)


def _mean(rows: Sequence[dict[str, float]], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows) if rows else 0.0


def _summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    cats: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        cats[r["category"]].append(r)

    def side(of: Sequence[dict[str, Any]], prefix: str) -> dict[str, float]:
        return {
            "evidence_recall": _mean(of, f"{prefix}_recall"),
            "tokens_mean": _mean(of, f"{prefix}_tokens"),
            "items_mean": _mean(of, f"{prefix}_items"),
        }

    return {
        "n": len(rows),
        "injected": side(rows, "inject"),
        "top_k": side(rows, "topk"),
        "by_category": {
            c: {
                "n": len(v),
                "injected": _mean(v, "inject_recall"),
                "top_k": _mean(v, "topk_recall"),
            }
            for c, v in sorted(cats.items())
        },
    }


async def inject_all(
    rc: RecallClient,
    queries: Sequence[_Query],
    ids: Mapping[str, list[str]],
    budgets: Sequence[int],
    mode: str,
) -> dict[str, Any]:
    """{budget: summary} for each budget, and the context requests' latency (ms)."""
    out: dict[str, Any] = {}
    latencies: list[float] = []
    count: Counter | None = None
    for budget in budgets:
        rows = []
        for q in queries:
            started = time.perf_counter()
            block = await rc.call(
                p.ContextBlock(
                    event="prompt",
                    session_id=f"inject-{budget}-{q.qid}"[:200],
                    prompt=q.query[:4000],
                    workspace=q.scope,
                    budget=budget,
                ),
                p.ContextInjected,
            )
            latencies.append((time.perf_counter() - started) * 1000)
            count = count or counter_for(block.tokenizer)
            found = await rc.call(
                p.MemorySearch(
                    query=q.query[:4000],
                    limit=SEARCH_DEPTH,
                    mode=mode,  # type: ignore[arg-type]
                    workspace=q.scope,
                ),
                p.MemorySearchResult,
            )
            kept, used = top_k_cut(found.hits, budget, count)
            injected = [i.id for i in block.items if i.id.startswith("mem_")]
            rows.append(
                {
                    "category": q.category,
                    "inject_recall": evidence_recall(injected, ids, q.relevant_ids),
                    "inject_tokens": block.tokens,
                    "inject_items": len(injected),
                    "topk_recall": evidence_recall(kept, ids, q.relevant_ids),
                    "topk_tokens": used,
                    "topk_items": len(kept),
                }
            )
        out[str(budget)] = _summary(rows)
    out["latency_ms"] = {
        "p50": statistics.median(latencies) if latencies else 0.0,
        "p95": sorted(latencies)[int(0.95 * (len(latencies) - 1))] if latencies else 0.0,
    }
    return out


def print_table(name: str, result: dict[str, Any]) -> None:
    print(f"{name}: evidence recall at a token budget (injected block vs top-k search cut)")
    print(
        "| budget | n | injected | top-k cut | tokens injected / top-k | items injected / top-k |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for budget, r in result.items():
        if budget == "latency_ms":
            continue
        i, t = r["injected"], r["top_k"]
        print(
            f"| {budget} | {r['n']} | {i['evidence_recall']:.3f} | {t['evidence_recall']:.3f}"
            f" | {i['tokens_mean']:.0f} / {t['tokens_mean']:.0f}"
            f" | {i['items_mean']:.1f} / {t['items_mean']:.1f} |"
        )
    lat = result["latency_ms"]
    print(f"context_block latency ms: p50 {lat['p50']:.2f}, p95 {lat['p95']:.2f}")
