"""Many daemons on one PostgreSQL: N daemons (one person each, as N laptops), each with agents
storing and searching at once, against one throwaway server (scripts/pgserver.py).

For each N: operations/s over all daemons, p50/p99 of stores and of searches, the most
connections the server held for recalld (sampled from pg_stat_activity) beside the bound
(N x database_connections), errors, and acknowledged writes missing afterwards. It fails
(exit 1) on any error or any lost acknowledged write.

Daemon 0 runs the bundled MiniLM model; the others the hashing embedder (``embedder =
"hash"``, the same 384 dimensions): N copies of the model would measure the two cores'
embedding, not the database. The output says so.

  scripts/bench_fleet                       N = 8, 16, 32; 20 s of load each
  scripts/bench_fleet --sizes 8,16 --seconds 10 --json
  scripts/bench_fleet --pgbouncer           through PgBouncer in transaction mode (Debian's
                                            pgbouncer), a pool of 2 per person
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "daemon"), str(REPO / "clients"), str(REPO / "scripts")]

from bench import Daemon, log, pct, synthetic_queries, synthetic_texts  # noqa: E402
from bench_backends import PgBench  # noqa: E402
from pooler import PgBouncer, installed  # noqa: E402
from recall_client import protocol as p  # noqa: E402
from recall_client.client import RemoteError, connect  # noqa: E402

Figures = dict[str, float | int | str | None]
PASSWORD = "fleet-password-1"
# Search workers per daemon (the default) and so the default connection bound of each.
SEARCH_WORKERS = 2
CONNECTIONS_PER_DAEMON = SEARCH_WORKERS + 4
# With --pgbouncer: the server connections of each person's pool.
POOL_SIZE = 2


class ConnectionSampler:
    """The most backends of ``dbname`` the daemons' roles hold, sampled every 0.2 s in a
    thread."""

    def __init__(self, admin_url: str, dbname: str) -> None:
        self._admin_url = admin_url
        self._dbname = dbname
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="connection sampler")

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self._admin_url, autocommit=True) as conn:
            while not self._stop.wait(0.2):
                (n,) = conn.execute(
                    # The daemons' roles (through PgBouncer the backends' application_name
                    # is what the pooler last set), not this sampler's.
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = %s AND usename <> current_user",
                    (self._dbname,),
                ).fetchone() or (0,)
                self.most = max(self.most, int(n))


async def _load(
    daemons: list[Daemon], agents: int, seconds: float, texts: list[str], queries: list[str]
) -> tuple[dict[str, list[float]], list[str], list[str]]:
    """``agents`` clients on each daemon, half storing, half searching (hybrid, then
    keyword, in turn), one request in flight each, for ``seconds``. The latencies of each
    kind, the errors, and the ids of the acknowledged stores."""
    latencies: dict[str, list[float]] = {"store": [], "search": []}
    errors: list[str] = []
    acknowledged: list[str] = []
    deadline = time.perf_counter() + seconds

    async def agent(d: int, k: int) -> None:
        kind = "store" if k % 2 == 0 else "search"
        name = f"agent{k}"
        async with connect(agent=name, workspace=f"/fleet/{d}", path=daemons[d].socket) as rc:
            i = d * 1000 + k
            while time.perf_counter() < deadline:
                request: p.Request
                if kind == "store":
                    request = p.MemoryStore(text=f"{texts[i % len(texts)]} (daemon {d} #{i})")
                else:
                    request = p.MemorySearch(
                        query=queries[i % len(queries)],
                        mode="hybrid" if i % 2 else "keyword",
                        limit=10,
                    )
                t = time.perf_counter()
                try:
                    reply = await rc.call(request)
                except RemoteError as exc:
                    errors.append(f"daemon {d} {kind}: {exc}")
                    continue
                latencies[kind].append((time.perf_counter() - t) * 1000)
                if isinstance(reply, p.Stored):
                    acknowledged.append(reply.record_id)
                i += agents

    async with anyio.create_task_group() as tg:
        for d in range(len(daemons)):
            for k in range(agents):
                tg.start_soon(agent, d, k)
    return latencies, errors, acknowledged


def _missing(admin_url: str, ids: list[str]) -> int:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        (found,) = conn.execute(
            "SELECT count(*) FROM records WHERE id = ANY(%s) AND tombstoned_at IS NULL", (ids,)
        ).fetchone() or (0,)
    return len(set(ids)) - int(found)


def _people(n: int) -> dict[str, str]:
    return {f"person{d}": PASSWORD for d in range(n)}


async def run_fleet(
    pg: PgBench, root: Path, n: int, agents: int, seconds: float, bouncer: PgBouncer | None
) -> Figures:
    from recalld.store.postgres.schema import init_database

    dbname = f"fleet{n}"
    pg.server.create_database(dbname)
    admin = pg.admin_url(dbname)
    init_database(admin, _people(n))

    def url(d: int) -> str:
        if bouncer is not None:
            return bouncer.url_for(f"person{d}", dbname)
        return pg.server.url_for(f"person{d}", PASSWORD, dbname)

    daemons = [
        Daemon(root / f"n{n}-d{d}", embedder="minilm" if d == 0 else "hash", database_url=url(d))
        for d in range(n)
    ]
    texts, queries = synthetic_texts(4000, seed=5), synthetic_queries(64, seed=9)
    try:
        for d in daemons:
            d.root.mkdir()
            await d.start()
        for d in daemons:
            await d.status(wait=600)
        log(f"N={n}: {n} daemons up; {agents} agents each for {seconds:.0f} s")
        with ConnectionSampler(admin, dbname) as sampler:
            started = time.perf_counter()
            latencies, errors, acknowledged = await _load(daemons, agents, seconds, texts, queries)
            took = time.perf_counter() - started
        missing_running = _missing(admin, acknowledged)
    finally:
        for d in daemons:
            d.stop()
    missing = max(missing_running, _missing(admin, acknowledged))
    stores, searches = latencies["store"], latencies["search"]
    for line in errors[:5]:
        log(f"  error: {line}")
    return {
        "daemons": n,
        "agents": n * agents,
        "ops_per_s": round((len(stores) + len(searches)) / took, 1),
        "stores_per_s": round(len(stores) / took, 1),
        "searches_per_s": round(len(searches) / took, 1),
        "store_p50_ms": round(statistics.median(stores), 1) if stores else None,
        "store_p99_ms": round(pct(stores, 0.99), 1) if stores else None,
        "search_p50_ms": round(statistics.median(searches), 1) if searches else None,
        "search_p99_ms": round(pct(searches, 0.99), 1) if searches else None,
        "connections_most": sampler.most,
        "connections_bound": n * (POOL_SIZE if bouncer is not None else CONNECTIONS_PER_DAEMON),
        "errors": len(errors),
        "acknowledged": len(acknowledged),
        "lost": missing,
    }


COLUMNS = [
    ("daemons", "N"),
    ("ops_per_s", "ops/s"),
    ("stores_per_s", "stores/s"),
    ("searches_per_s", "searches/s"),
    ("store_p50_ms", "store p50"),
    ("store_p99_ms", "store p99"),
    ("search_p50_ms", "search p50"),
    ("search_p99_ms", "search p99"),
    ("connections_most", "conns"),
    ("connections_bound", "bound"),
    ("errors", "errors"),
    ("acknowledged", "acked"),
    ("lost", "lost"),
]


def render(rows: list[Figures], load: str, pooled: bool) -> str:
    via = (
        f"through PgBouncer (transaction mode, {POOL_SIZE} server connections per person)"
        if pooled
        else "directly"
    )
    lines = [
        "N daemons on one PostgreSQL 18 (pgvector), one person (role) each, connected"
        f" {via}; daemon 0 embeds with MiniLM, the others with the hashing embedder."
        " Latencies in ms; conns: the most server connections seen, bound: what they may reach.",
        f"load before the run: {load}",
        "  ".join(f"{title:>10}" for _, title in COLUMNS),
    ]
    for row in rows:
        lines.append("  ".join(f"{row[key]!s:>10}" for key, _ in COLUMNS))
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> list[Figures]:
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="recalld-fleet-") as tmp,
        PgBench(Path(tmp) / "pg") as pg,
        ExitStack() as stack,
    ):
        bouncer = None
        if args.pgbouncer:
            people = _people(max(args.sizes))
            bouncer = stack.enter_context(PgBouncer(pg.server, people, pool_size=POOL_SIZE))
            # PgBouncer 1.18 keeps no prepared statement between transactions.
            os.environ["RECALLD_DATABASE_PREPARE"] = "false"
        for n in args.sizes:
            row = await run_fleet(pg, Path(tmp), n, args.agents, args.seconds, bouncer)
            log(json.dumps(row))
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="scripts/bench_fleet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--sizes", default="8,16,32", help="the N to run, comma separated")
    ap.add_argument("--agents", type=int, default=2, help="agents per daemon (half store)")
    ap.add_argument("--seconds", type=float, default=20.0, help="load per N (20)")
    ap.add_argument("--pgbouncer", action="store_true", help="through PgBouncer")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.pgbouncer and installed() is None:
        ap.error("--pgbouncer: pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    load = Path("/proc/loadavg").read_text().strip() if os.path.exists("/proc/loadavg") else "?"
    rows = anyio.run(run, args)
    if args.json:
        print(json.dumps({"load": load, "pgbouncer": args.pgbouncer, "runs": rows}, indent=2))
    else:
        print(render(rows, load, args.pgbouncer))
    if any(row["errors"] or row["lost"] for row in rows):
        sys.exit("scripts/bench_fleet: errors or lost acknowledged writes (see above)")


if __name__ == "__main__":
    main()
