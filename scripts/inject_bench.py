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

Beside recall, each side's precision: the share of the memories it carries that are
relevant, the mean over the queries that carried any (``empty`` counts the others). Prompts
no memory answers (the dataset's ``queries_none.jsonl``) are sent the same way, and their
``none`` figure is the share of them given any memory at all: each one a block the agent
reads for nothing.
"""

from __future__ import annotations

import collections
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from recall_client import protocol as p
from recall_client.client import RecallClient

__all__ = [
    "DEFAULT_BUDGETS",
    "evidence_precision",
    "evidence_recall",
    "inject_all",
    "parse_budgets",
    "top_k_cut",
]

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


def evidence_precision(
    record_ids: Sequence[str], ids: Mapping[str, list[str]], relevant: Sequence[str]
) -> float | None:
    """The share of the daemon records that stand for a relevant dataset id; None for no
    record (an empty block is neither precise nor not)."""
    if not record_ids:
        return None
    rel = set(relevant)
    return sum(bool(rel.intersection(ids.get(r, []))) for r in record_ids) / len(record_ids)


def _mean(rows: Sequence[dict[str, Any]], key: str) -> float:
    """The mean of ``key`` over the rows that have a value for it (not None)."""
    values = [r[key] for r in rows if r[key] is not None]
    return sum(values) / len(values) if values else 0.0


def _summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    cats: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        cats[r["category"]].append(r)

    def side(of: Sequence[dict[str, Any]], prefix: str) -> dict[str, float | int]:
        return {
            "evidence_recall": _mean(of, f"{prefix}_recall"),
            "precision": _mean(of, f"{prefix}_precision"),
            "empty": sum(r[f"{prefix}_items"] == 0 for r in of),
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


@dataclass(slots=True)
class _Sides:
    """What one prompt got: the block's memories and tokens, and the top-k cut's."""

    injected: list[str]
    tokens: int
    kept: list[str]
    used: int


class _Prompter:
    """Sends prompts as the context hook does, and the same prompts as an agent's search."""

    def __init__(self, rc: RecallClient, mode: str) -> None:
        self.rc, self.mode = rc, mode
        self.latencies: list[float] = []
        self.count: Counter | None = None

    async def both(self, q: _Query, budget: int) -> _Sides:
        """The block a prompt gets at ``budget`` (timed), and search's hits cut to it."""
        started = time.perf_counter()
        block = await self.rc.call(
            p.ContextBlock(
                event="prompt",
                session_id=f"inject-{budget}-{q.qid}"[:200],
                prompt=q.query[:4000],
                workspace=q.scope,
                budget=budget,
            ),
            p.ContextInjected,
        )
        self.latencies.append((time.perf_counter() - started) * 1000)
        self.count = self.count or counter_for(block.tokenizer)
        found = await self.rc.call(
            p.MemorySearch(
                query=q.query[:4000],
                limit=SEARCH_DEPTH,
                mode=self.mode,  # type: ignore[arg-type]
                workspace=q.scope,
            ),
            p.MemorySearchResult,
        )
        kept, used = top_k_cut(found.hits, budget, self.count)
        injected = [i.id for i in block.items if i.id.startswith("mem_")]
        return _Sides(injected, block.tokens, kept, used)


async def inject_all(
    rc: RecallClient,
    queries: Sequence[_Query],
    ids: Mapping[str, list[str]],
    budgets: Sequence[int],
    mode: str,
    none: Sequence[_Query] = (),
) -> dict[str, Any]:
    """{budget: summary} for each budget, and the context requests' latency (ms). ``none``:
    prompts no memory answers, whose summary is the share given any memory."""
    out: dict[str, Any] = {}
    prompter = _Prompter(rc, mode)
    for budget in budgets:
        rows = []
        for q in queries:
            got = await prompter.both(q, budget)
            rows.append(
                {
                    "category": q.category,
                    "inject_recall": evidence_recall(got.injected, ids, q.relevant_ids),
                    "inject_precision": evidence_precision(got.injected, ids, q.relevant_ids),
                    "inject_tokens": got.tokens,
                    "inject_items": len(got.injected),
                    "topk_recall": evidence_recall(got.kept, ids, q.relevant_ids),
                    "topk_precision": evidence_precision(got.kept, ids, q.relevant_ids),
                    "topk_tokens": got.used,
                    "topk_items": len(got.kept),
                }
            )
        out[str(budget)] = _summary(rows)
        if none:
            given = [await prompter.both(q, budget) for q in none]
            out[str(budget)]["none"] = {
                "n": len(given),
                "injected_any": sum(bool(g.injected) for g in given) / len(given),
                "top_k_any": sum(bool(g.kept) for g in given) / len(given),
            }
    latencies = prompter.latencies
    out["latency_ms"] = {
        "p50": statistics.median(latencies) if latencies else 0.0,
        "p95": sorted(latencies)[int(0.95 * (len(latencies) - 1))] if latencies else 0.0,
    }
    return out


def print_table(name: str, result: dict[str, Any]) -> None:
    print(f"{name}: evidence at a token budget (injected block vs top-k search cut)")
    print(
        "| budget | n | recall injected / top-k | precision injected / top-k"
        " | empty injected / top-k | tokens injected / top-k | items injected / top-k |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for budget, r in result.items():
        if budget == "latency_ms":
            continue
        i, t = r["injected"], r["top_k"]
        print(
            f"| {budget} | {r['n']} | {i['evidence_recall']:.3f} / {t['evidence_recall']:.3f}"
            f" | {i['precision']:.3f} / {t['precision']:.3f} | {i['empty']} / {t['empty']}"
            f" | {i['tokens_mean']:.0f} / {t['tokens_mean']:.0f}"
            f" | {i['items_mean']:.1f} / {t['items_mean']:.1f} |"
        )
    for budget, r in result.items():
        if none := r.get("none"):
            print(
                f"budget {budget}: {none['n']} prompts no memory answers given any memory:"
                f" injected {none['injected_any']:.3f}, top-k {none['top_k_any']:.3f}"
            )
    lat = result["latency_ms"]
    print(f"context_block latency ms: p50 {lat['p50']:.2f}, p95 {lat['p95']:.2f}")
