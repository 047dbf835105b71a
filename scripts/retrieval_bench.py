"""Retrieval benchmark: load a dataset folder into a fresh daemon, search it, score the ranking.

A dataset folder holds ``memories.jsonl`` (``{"id", "text", "session", "ts", "speaker",
"scope"}`` a line) and ``queries.jsonl`` (``{"qid", "query", "relevant_ids", "category",
"scope"}`` a line); ``../shared/benchdata/`` has LoCoMo in that shape. Everything goes through
the public client API, as an agent's would: one workspace per ``scope``, ``memory_store`` with
the record's ``ts``, ``session`` and speaker (as ``source``), then ``memory_search`` in the
query's workspace. The metrics are those of ``benchdata/eval_baseline.py``, computed the same
way, so the two can sit in one table:

    recall@k      = |relevant in the top k| / |relevant|   (k = 5, 10)
    MRR@10        = 1 / rank of the first relevant hit in the top 10, else 0
    latency       = wall time of one memory_search round trip, queries sent one at a time

and what an agent reading the answer meets, the measures published systems report:

    P@1           = 1 if the first hit is relevant, else 0
    recall_any@10 = 1 if any relevant id is in the top 10, else 0
    recall_all@10 = 1 if every relevant id is in the top 10, else 0

``--categories 1,2,3,4`` keeps the queries of those categories, named whole or by the number
before a ``-`` (LoCoMo's "1-multi-hop"), as published LoCoMo figures leave out category 5.

A folder may also hold ``queries_none.jsonl``: prompts that no memory answers (no relevant
id, category "none"). They never enter the recall metrics; each is searched as an agent
searches (the daemon's default floor), and the report's ``none`` gives the share whose top hit
claims more than low relevance, the share the daemon did not mark ``low_confidence`` and the
share with any hit at all: each the lower the better.

Identical texts in one workspace are stored once (content-hash dedup): a hit on such a record
counts for every dataset id that carries its text.

Run it as ``scripts/bench_retrieval DIR [--mode hybrid] [--categories 1,2] [--json]``. It
lives beside the daemon, not in it: it drives a daemon as any client would.

``--backend postgres`` runs the daemon on team memory instead: a fresh database on a
throwaway PostgreSQL 18 with pgvector (``pgserver.py``), logged into as a member role, so
row-level security applies as it would for a person. ``--backend both`` loads the dataset
into a SQLite daemon, then into a PostgreSQL one, searches each the same way and reports
both and their difference (postgres - sqlite), with how many queries got the same top 10.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from bench_backends import PgBench, backends_of, daemon_env
from inject_bench import inject_all, parse_budgets, print_table
from recall_client import protocol as p
from recall_client.client import RecallClient, connect
from recall_client.launch import daemon_command, start_daemon

__all__ = [
    "Dataset",
    "Memory",
    "Query",
    "claims",
    "difference",
    "in_categories",
    "load_dataset",
    "main",
    "score",
    "summarize",
]

METRICS = ("recall@5", "recall@10", "mrr@10", "p@1", "recall_any@10", "recall_all@10")
# Their column headings, in that order.
LABELS = ("R@5", "R@10", "MRR@10", "P@1", "any@10", "all@10")
# Requests in flight while loading: enough to fill the writer's group commits.
LOAD_CONCURRENCY = 256
DEFAULT_SCOPE = "default"
SearchMode = Literal["keyword", "bm25", "hybrid"]
# PostgreSQL against SQLite: recall@10 within this much.
RECALL_TOLERANCE = 0.02


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    text: str
    scope: str
    session: str | None = None
    ts: float | None = None
    speaker: str | None = None


@dataclass(frozen=True, slots=True)
class Query:
    qid: str
    query: str
    relevant_ids: tuple[str, ...]
    scope: str
    category: str = "all"


@dataclass(slots=True)
class Dataset:
    name: str
    memories: list[Memory]
    queries: list[Query]
    # Queries left out: no relevant id, or an empty query text.
    skipped: int = 0
    # Prompts no memory answers (queries_none.jsonl): for abstention, never for recall.
    none: list[Query] = field(default_factory=list)


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError(f"{path}:{n}: not a JSON object")
                yield row


def _str_or_none(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _query(row: dict[str, Any]) -> Query:
    return Query(
        qid=str(row["qid"]),
        query=str(row["query"]),
        relevant_ids=tuple(str(r) for r in row.get("relevant_ids") or ()),
        scope=str(row.get("scope") or DEFAULT_SCOPE),
        category=str(row.get("category") or "all"),
    )


def in_categories(category: str, wanted: frozenset[str] | None) -> bool:
    """Whether ``category`` is one of ``wanted`` (None: all), named whole or by the number
    LoCoMo puts before its name ("1" for "1-multi-hop")."""
    return wanted is None or category in wanted or category.split("-", 1)[0] in wanted


def _subsample(queries: list[Query], max_queries: int) -> list[Query]:
    """The first ``max_queries`` by sha1 of the qid, as ``eval_baseline.py --max-queries``."""
    if not max_queries or len(queries) <= max_queries:
        return queries
    return sorted(queries, key=lambda q: hashlib.sha1(q.qid.encode()).hexdigest())[:max_queries]


def load_dataset(
    folder: Path, *, max_queries: int = 0, categories: frozenset[str] | None = None
) -> Dataset:
    """Read a dataset folder, and its ``queries_none.jsonl`` when there is one.
    ``max_queries`` keeps a deterministic subsample of each query file; ``categories`` keeps
    the answered queries of those categories (:func:`in_categories`).

    Raises:
        FileNotFoundError: a file is missing. ValueError: a line is not a JSON object.
    """
    memories = [
        Memory(
            id=str(row["id"]),
            text=str(row["text"]),
            scope=str(row.get("scope") or DEFAULT_SCOPE),
            session=_str_or_none(row.get("session")),
            ts=float(row["ts"]) if row.get("ts") is not None else None,
            speaker=_str_or_none(row.get("speaker")),
        )
        for row in _jsonl(folder / "memories.jsonl")
    ]
    queries, skipped = [], 0
    for row in _jsonl(folder / "queries.jsonl"):
        q = _query(row)
        if not q.relevant_ids or not q.query.strip():
            skipped += 1
        elif in_categories(q.category, categories):
            queries.append(q)
    none_file = folder / "queries_none.jsonl"
    none = (
        [q for q in map(_query, _jsonl(none_file)) if q.query.strip()] if none_file.exists() else []
    )
    return Dataset(
        folder.resolve().name,
        memories,
        _subsample(queries, max_queries),
        skipped,
        _subsample(none, max_queries),
    )


# --------------------------------------------------------------------------- metrics


def score(ranked: Sequence[Sequence[str]], relevant: Sequence[str]) -> dict[str, float]:
    """Metrics of one query (:data:`METRICS`). ``ranked`` holds, for each hit best first, the
    dataset ids its record stands for (more than one when identical texts were deduplicated)."""
    rel = set(relevant)
    out = {}
    for k in (5, 10):
        found = rel.intersection(i for ids in ranked[:k] for i in ids)
        out[f"recall@{k}"] = len(found) / len(rel)
    out["mrr@10"] = next(
        (1.0 / rank for rank, ids in enumerate(ranked[:10], 1) if rel.intersection(ids)), 0.0
    )
    out["p@1"] = float(bool(ranked) and bool(rel.intersection(ranked[0])))
    out["recall_any@10"] = float(out["recall@10"] > 0)
    out["recall_all@10"] = float(out["recall@10"] == 1)
    return out


def summarize(rows: Sequence[dict[str, float]]) -> dict[str, float | int]:
    """Mean of each metric over ``rows``, and their count ``n``."""
    out: dict[str, float | int] = {k: sum(r[k] for r in rows) / len(rows) for k in METRICS}
    out["n"] = len(rows)
    return out


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile, as ``eval_baseline.py`` computes it."""
    data = sorted(values)
    if not data:
        return 0.0
    return data[min(len(data) - 1, round(pct / 100.0 * (len(data) - 1)))]


# --------------------------------------------------------------------------- the daemon


@dataclass(slots=True)
class _Daemon:
    root: Path
    embedder: str
    database_url: str | None = None  # team memory on PostgreSQL; None: the SQLite store
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / "daemon.log"

    @property
    def socket(self) -> Path:
        return self.root / "recalld.sock"

    def admin_token(self) -> str:
        """The token this daemon wrote at start: the bench stores into one workspace per
        scope, which only an admin connection may name."""
        return (self.root / "config" / "recalld" / "admin.token").read_text().strip()

    async def start(self) -> None:
        """Start ``recalld`` and return once it reports READY=1."""
        env = daemon_env(os.environ, self.database_url)
        env.update(
            RECALLD_SOCKET=str(self.socket),
            RECALLD_DATA_DIR=str(self.root / "data"),
            RECALLD_EMBEDDER=self.embedder,
            XDG_CONFIG_HOME=str(self.root / "config"),  # no user config leaks in
        )
        with self.log.open("ab") as log:
            started = await start_daemon(daemon_command(), env, stderr=log.fileno(), timeout=120.0)
        self.proc = started.proc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@asynccontextmanager
async def served(daemon: _Daemon, agent: str) -> AsyncIterator[RecallClient]:
    """``daemon`` started, and an admin connection to it as ``agent``; on a failure its log's
    tail goes to stderr; stopped on the way out."""
    try:
        await daemon.start()
        async with connect(
            agent=agent,
            workspace=DEFAULT_SCOPE,
            path=daemon.socket,
            timeout=30,
            admin_token=daemon.admin_token(),
        ) as rc:
            yield rc
    except BaseException:
        if daemon.log.exists():
            sys.stderr.write(daemon.log.read_text(errors="replace")[-4000:])
        raise
    finally:
        daemon.stop()


@contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    # Short path: a Unix socket path must fit in 108 bytes.
    with tempfile.TemporaryDirectory(prefix="recalld-bench-") as tmp:
        yield Path(tmp)


# --------------------------------------------------------------------------- the run


@dataclass(slots=True)
class Loaded:
    """Daemon record id -> the dataset ids stored as that record."""

    ids: dict[str, list[str]] = field(default_factory=dict)
    duplicates: int = 0
    seconds: float = 0.0


async def _load(rc: RecallClient, memories: Sequence[Memory]) -> Loaded:
    loaded = Loaded()
    limiter = anyio.Semaphore(LOAD_CONCURRENCY)
    started = time.perf_counter()

    async def store(m: Memory) -> None:
        try:
            stored = await rc.call(
                p.MemoryStore(
                    text=m.text,
                    workspace=m.scope,
                    session=m.session[:200] if m.session else None,
                    ts=m.ts,
                    source=m.speaker[:128] if m.speaker else None,
                ),
                p.Stored,
            )
        finally:
            limiter.release()
        loaded.ids.setdefault(stored.record_id, []).append(m.id)
        loaded.duplicates += stored.duplicate

    async with anyio.create_task_group() as tg:
        for m in memories:
            await limiter.acquire()
            tg.start_soon(store, m)
    loaded.seconds = time.perf_counter() - started
    return loaded


# The budget is also the daemon's wait_settled_s, which a caller's deadline could not pass on.
async def _wait_embedded(rc: RecallClient, records: int, timeout: float) -> p.StatusReport:  # noqa: ASYNC109
    """Wait until every record has its vector in the index.

    Raises:
        RuntimeError: the model did not load (a hybrid run would silently be lexical).
        TimeoutError: the backlog did not drain in time.
    """
    deadline = time.monotonic() + timeout
    while True:
        # The daemon waits (at most 600 s a request); asked again while it has not settled.
        wait = min(600.0, max(0.0, deadline - time.monotonic()))
        report = (
            await rc.call(p.Status(wait_model_s=wait, wait_settled_s=wait), p.StatusResult)
        ).report
        if report.settled or time.monotonic() >= deadline:
            break
    if report.model.state in ("failed", "disabled"):
        raise RuntimeError(f"the embedding model is not up: {report.model.reason}")
    if not report.settled or report.index.size < records or report.index.embedding_backlog:
        raise TimeoutError(f"{report.index.embedding_backlog} records still unembedded")
    return report


async def _search_all(
    rc: RecallClient, queries: Sequence[Query], loaded: Loaded, mode: SearchMode, min_score: float
) -> tuple[list[dict[str, Any]], list[float], list[list[str]]]:
    """Each query's metrics, its latency (ms) and its top 10 as dataset ids."""
    # Warm-up, untimed and unscored: the first searches pay for caches and thread start-up.
    for i in range(20):
        await rc.call(
            p.MemorySearch(
                query=f"warm up {i} memory search", limit=10, mode=mode, workspace=queries[0].scope
            )
        )
    rows, latencies, tops = [], [], []
    for q in queries:
        started = time.perf_counter()
        result = await rc.call(
            p.MemorySearch(
                query=q.query[:4000], limit=10, mode=mode, workspace=q.scope, min_score=min_score
            ),
            p.MemorySearchResult,
        )
        latencies.append((time.perf_counter() - started) * 1000)
        if mode == "hybrid" and not result.semantic_used:
            raise RuntimeError("a hybrid search ran without its semantic channel")
        ranked = [loaded.ids.get(hit.id, []) for hit in result.hits]
        rows.append(score(ranked, q.relevant_ids) | {"category": q.category})
        tops.append([min(ids, default="") for ids in ranked])
    return rows, latencies, tops


def claims(result: p.MemorySearchResult) -> dict[str, float]:
    """What one search's answer claims to a reader: its top hit more than low relevance, the
    daemon not calling it ``low_confidence``, any hit at all. For a prompt no memory answers
    each is a false claim."""
    return {
        "top_hit_claims": float(bool(result.hits) and result.hits[0].relevance != "low"),
        "not_low_confidence": float(not result.low_confidence),
        "any_hit": float(bool(result.hits)),
    }


async def _abstain_all(
    rc: RecallClient, prompts: Sequence[Query], mode: SearchMode
) -> dict[str, float | int]:
    """Each unanswerable prompt searched as an agent would (the daemon's default floor): the
    mean of its :func:`claims`, and their count ``n``."""
    rows = []
    for q in prompts:
        result = await rc.call(
            p.MemorySearch(query=q.query[:4000], limit=10, mode=mode, workspace=q.scope),
            p.MemorySearchResult,
        )
        rows.append(claims(result))
    out: dict[str, float | int] = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    out["n"] = len(rows)
    return out


def _report(rows: list[dict[str, Any]], latencies: list[float]) -> dict[str, Any]:
    cats: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        cats[r["category"]].append(r)
    return {
        "overall": summarize(rows),
        "by_category": {c: summarize(v) for c, v in sorted(cats.items())},
        "latency_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)},
    }


@dataclass(slots=True)
class BackendRun:
    """One backend's results: {mode: report}, and each mode's top 10s (dataset ids)."""

    results: dict[str, dict[str, Any]]
    tops: dict[str, list[list[str]]]
    # With --inject: evidence recall at each budget (inject_bench.inject_all).
    inject: dict[str, Any] | None = None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The results of every backend asked for: ``{backend: {mode: report}}``, and with two
    backends also ``difference`` (:func:`difference`, by mode)."""
    data = load_dataset(args.dataset, max_queries=args.max_queries, categories=args.categories)
    if not data.queries:
        raise SystemExit(f"bench_retrieval: {args.dataset} has no query with relevant ids")
    backends = backends_of(args.backend)
    say = _say(args.quiet)
    say(
        f"{data.name}: {len(data.memories)} memories, {len(data.queries)} queries"
        f" ({data.skipped} skipped), {len(data.none)} unanswerable prompts,"
        f" {len({m.scope for m in data.memories})} scopes"
    )
    runs: dict[str, BackendRun] = {}
    with _workdir(args.keep) as root:
        if backends == ["sqlite"]:
            runs["sqlite"] = await _run_backend(args, data, root, None)
        else:
            with PgBench(root / "pg") as pg:
                for b in backends:
                    # One daemon folder each when both run; one after the other, same data.
                    where = root / b if len(backends) > 1 else root
                    where.mkdir(exist_ok=True)
                    url = pg.fresh("bench_retrieval") if b == "postgres" else None
                    say(f"backend {b}")
                    runs[b] = await _run_backend(args, data, where, url)
    out: dict[str, Any] = {b: r.results for b, r in runs.items()}
    if args.inject:
        out["inject"] = {b: r.inject for b, r in runs.items()}
    if len(runs) > 1:
        sq, pg_run = runs["sqlite"], runs["postgres"]
        out["difference"] = {
            mode: difference(
                sq.results[mode], pg_run.results[mode], sq.tops[mode], pg_run.tops[mode]
            )
            for mode in args.modes
        }
    return out


def _say(quiet: bool) -> Callable[..., None]:
    def say(*parts: object) -> None:
        if not quiet:
            print(*parts, file=sys.stderr)

    return say


async def _run_backend(
    args: argparse.Namespace, data: Dataset, root: Path, database_url: str | None
) -> BackendRun:
    """Load ``data`` into a fresh daemon in ``root`` (on ``database_url``, else on SQLite) and
    search it in every mode."""
    say = _say(args.quiet)
    # A lexical ranking owes nothing to the model: leave it out rather than let it embed
    # in the background while the searches are timed.
    embedder = args.embedder if "hybrid" in args.modes else "none"
    async with served(_Daemon(root, embedder, database_url), "bench_retrieval") as rc:
        loaded = await _load(rc, data.memories)
        say(
            f"stored {len(loaded.ids)} records ({loaded.duplicates} duplicate texts)"
            f" in {loaded.seconds:.1f}s"
        )
        if "hybrid" in args.modes:
            started = time.perf_counter()
            report = await _wait_embedded(rc, len(loaded.ids), args.timeout)
            say(
                f"embedded with {report.model.name} in"
                f" {time.perf_counter() - started:.1f}s after the last store"
            )
        run = BackendRun({}, {})
        for mode in args.modes:  # one load, every mode over the same store
            rows, latencies, tops = await _search_all(
                rc, data.queries, loaded, mode, args.min_score
            )
            run.results[mode] = _report(rows, latencies)
            if data.none:
                run.results[mode]["none"] = await _abstain_all(rc, data.none, mode)
            run.tops[mode] = tops
        if args.inject:
            run.inject = await inject_all(
                rc, data.queries, loaded.ids, args.inject, args.modes[0], data.none
            )
    return run


def difference(
    sqlite: dict[str, Any],
    postgres: dict[str, Any],
    sqlite_tops: Sequence[Sequence[str]],
    postgres_tops: Sequence[Sequence[str]],
) -> dict[str, Any]:
    """postgres - sqlite for each metric (overall and by category) and latency, the latency
    ratio, the share of queries whose top 10 is the same (same records, same order; a
    record named by the smallest dataset id it stands for), and whether recall@10 is within
    :data:`RECALL_TOLERANCE`."""

    def delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
        return {k: b[k] - a[k] for k in METRICS}

    lat_s, lat_p = sqlite["latency_ms"], postgres["latency_ms"]
    same = sum(list(a) == list(b) for a, b in zip(sqlite_tops, postgres_tops, strict=True))
    same_set = sum(set(a) == set(b) for a, b in zip(sqlite_tops, postgres_tops, strict=True))
    d_recall = postgres["overall"]["recall@10"] - sqlite["overall"]["recall@10"]
    return {
        "overall": delta(sqlite["overall"], postgres["overall"]),
        "by_category": {
            c: delta(s, postgres["by_category"][c])
            for c, s in sqlite["by_category"].items()
            if c in postgres["by_category"]
        },
        "latency_ms": {k: lat_p[k] - lat_s[k] for k in ("p50", "p95")},
        "latency_ratio": {k: lat_p[k] / lat_s[k] if lat_s[k] else None for k in ("p50", "p95")},
        "same_top10": same / len(sqlite_tops) if sqlite_tops else 1.0,
        "same_top10_set": same_set / len(sqlite_tops) if sqlite_tops else 1.0,
        "recall@10_within_tolerance": abs(d_recall) <= RECALL_TOLERANCE,
    }


def _print_table(name: str, mode: str, result: dict[str, Any]) -> None:
    o, lat = result["overall"], result["latency_ms"]
    print(f"{name}, mode {mode}: {o['n']} queries")
    print(f"| scope | n | {' | '.join(LABELS)} |\n|{' --- |' * (len(LABELS) + 2)}")
    for label, s in [("overall", o), *result["by_category"].items()]:
        print(f"| {label} | {s['n']} | {' | '.join(f'{s[k]:.3f}' for k in METRICS)} |")
    print(f"latency ms: p50 {lat['p50']:.2f}, p95 {lat['p95']:.2f}")
    if none := result.get("none"):
        print(
            f"{none['n']} prompts no memory answers (lower is better): top hit above low"
            f" relevance {none['top_hit_claims']:.3f}, not low_confidence"
            f" {none['not_low_confidence']:.3f}, any hit {none['any_hit']:.3f}"
        )


def _print_difference(
    name: str, mode: str, sqlite: dict[str, Any], postgres: dict[str, Any], d: dict[str, Any]
) -> None:
    print(f"{name}, mode {mode}: postgres against sqlite")
    print("| | sqlite | postgres | postgres - sqlite |\n| --- | --- | --- | --- |")
    for k, label in zip(METRICS, LABELS, strict=True):
        print(
            f"| {label} | {sqlite['overall'][k]:.3f} | {postgres['overall'][k]:.3f}"
            f" | {d['overall'][k]:+.3f} |"
        )
    for k in ("p50", "p95"):
        ratio = d["latency_ratio"][k]
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        print(
            f"| latency {k} ms | {sqlite['latency_ms'][k]:.2f} | {postgres['latency_ms'][k]:.2f}"
            f" | {d['latency_ms'][k]:+.2f} ({shown}) |"
        )
    print(
        f"same top 10: {d['same_top10']:.1%} of queries in the same order,"
        f" {d['same_top10_set']:.1%} as a set"
    )
    verdict = "ok" if d["recall@10_within_tolerance"] else "MISSED"
    print(f"target: R@10 within {RECALL_TOLERANCE} of sqlite: {verdict}")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench_retrieval",
        description="Load a dataset folder (memories.jsonl, queries.jsonl) into a fresh recalld"
        " through the client API, run every query through memory_search and report recall@5,"
        " recall@10, MRR@10, P@1, recall_any@10, recall_all@10 (overall and per category),"
        " latency, and, given queries_none.jsonl, how often prompts no memory answers get a"
        " confident answer.",
    )
    ap.add_argument("dataset", type=Path, help="folder with memories.jsonl and queries.jsonl")
    ap.add_argument(
        "--mode",
        default="hybrid",
        help="keyword, bm25 or hybrid (the default), or several separated by"
        " commas (bm25,hybrid), each run over the same store",
    )
    ap.add_argument(
        "--json",
        action="store_true",
        help="print {overall, by_category, latency_ms} (and none, given queries_none.jsonl)"
        " as JSON, as one method of eval_baseline.py's results; with several modes,"
        " {mode: that}",
    )
    ap.add_argument(
        "--embedder",
        choices=["minilm", "hash", "none"],
        default="minilm",
        help="the daemon's embedder (default: the bundled all-MiniLM-L6-v2)",
    )
    ap.add_argument(
        "--min-score",
        type=float,
        default=0.0,
        help="memory_search's relevance floor (default 0: score the whole top 10;"
        " the daemon's own default floor, 0.25, hides weak hits from agents)",
    )
    ap.add_argument(
        "--categories",
        type=lambda text: frozenset(c.strip() for c in text.split(",") if c.strip()),
        metavar="1,2,3,4",
        help="only the queries of these categories, named whole or by LoCoMo's number"
        " (1,2,3,4 leaves out adversarial, as published LoCoMo figures do);"
        " queries_none.jsonl is kept",
    )
    ap.add_argument(
        "--max-queries",
        type=int,
        default=0,
        help="a deterministic subsample of N queries (sha1 of qid)",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        help="run the daemon in this folder and keep it"
        " (default: a temporary folder, removed afterwards; a PostgreSQL database is not kept)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="seconds to wait for the embedding backlog to drain",
    )
    ap.add_argument(
        "--backend",
        choices=["sqlite", "postgres", "both"],
        default="sqlite",
        help="the daemon's store: sqlite (the default), postgres (team memory on a throwaway"
        " PostgreSQL 18 with pgvector, a fresh database) or both, one after the other, with"
        " the difference; --json then prints {sqlite, postgres, difference}",
    )
    ap.add_argument(
        "--inject",
        nargs="?",
        const="300,600,1200",
        metavar="BUDGETS",
        help="also each query as a context hook's prompt: the share of its evidence in the"
        " injected block at each token budget (default 300,600,1200) and the share of the"
        " block's memories that are relevant, beside top-k search cut to the same budget"
        " (first --mode), and how often a prompt no memory answers is given any;"
        " --json then prints {search, inject}",
    )
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    args = ap.parse_args(argv)
    try:
        args.inject = parse_budgets(args.inject) if args.inject else None
    except ValueError as exc:
        ap.error(str(exc))
    args.modes = list(dict.fromkeys(m.strip() for m in args.mode.split(",")))
    if unknown := [m for m in args.modes if m not in ("keyword", "bm25", "hybrid")]:
        ap.error(f"unknown --mode {', '.join(unknown)} (keyword, bm25, hybrid)")
    if "hybrid" in args.modes and args.embedder == "none":
        ap.error("--mode hybrid needs an embedder")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    out = anyio.run(run, args, backend="asyncio")

    def one(results: dict[str, Any]) -> Any:
        return results[args.modes[0]] if len(args.modes) == 1 else results

    name = args.dataset.resolve().name
    backends = backends_of(args.backend)
    if args.json:
        shown = (
            one(out[backends[0]])
            if len(backends) == 1
            else {k: one(v) for k, v in out.items() if k != "inject"}
        )
        if args.inject:
            inject = out["inject"]
            shown = {
                "search": shown,
                "inject": inject[backends[0]] if len(backends) == 1 else inject,
            }
        print(json.dumps(shown, indent=1))
        return
    for b in backends:
        for mode, result in out[b].items():
            _print_table(name if len(backends) == 1 else f"{name} on {b}", mode, result)
    if len(backends) > 1:
        for mode in args.modes:
            _print_difference(
                name, mode, out["sqlite"][mode], out["postgres"][mode], out["difference"][mode]
            )
    for b in backends if args.inject else ():
        print_table(name if len(backends) == 1 else f"{name} on {b}", out["inject"][b])


if __name__ == "__main__":
    main()
