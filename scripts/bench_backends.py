"""The storage backends the benchmarks compare: the embedded SQLite store, and PostgreSQL with
pgvector (team memory) on a throwaway server (``pgserver.py``).

Both benches run a daemon per measurement; :func:`daemon_env` gives its environment for a
backend, and :class:`PgBench` owns the one PostgreSQL of a run, with a fresh database (schema
and a login role, as ``recallctl db init`` makes them) for each daemon. :meth:`PgBench.fill`
copies a SQLite store into such a database with ``recallctl migrate``'s own
:func:`~recalld.store.moving.copy_store`, so the two backends search the same
records and vectors.

psycopg and the PostgreSQL modules are imported only when a PostgreSQL run is asked for.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pgserver import PgServer

__all__ = [
    "BACKENDS",
    "Backend",
    "FillReport",
    "PgBench",
    "backends_of",
    "daemon_env",
    "ratio",
]

Backend = Literal["sqlite", "postgres"]
BACKENDS: tuple[Backend, ...] = ("sqlite", "postgres")
# The login role every bench daemon connects as (the records are its own, as a person's are).
ROLE = "bench"
PASSWORD = "bench-password-1"
# Settings a bench daemon must not pick up from the caller's environment.
_LEAKS = ("RECALLD_DATABASE_URL", "RECALLD_VISIBILITY")


def backends_of(choice: str) -> list[Backend]:
    """``--backend``'s value (sqlite, postgres or both) as the backends to run, in order."""
    if choice == "both":
        return list(BACKENDS)
    if choice == "sqlite":
        return ["sqlite"]
    if choice == "postgres":
        return ["postgres"]
    raise ValueError(f"unknown backend {choice!r} (sqlite, postgres, both)")


def daemon_env(base: Mapping[str, str], database_url: str | None) -> dict[str, str]:
    """``base`` (usually ``os.environ`` plus the daemon's own settings) for a daemon on
    ``database_url``, or on its embedded SQLite store when None: a team database named by
    the caller's environment never leaks into a SQLite run."""
    env = {k: v for k, v in base.items() if k not in _LEAKS}
    if database_url is not None:
        env["RECALLD_DATABASE_URL"] = database_url
    return env


def ratio(pg: float | None, sqlite: float | None) -> float | None:
    """pg / sqlite, or None when either is missing (or sqlite is 0)."""
    if pg is None or sqlite is None or sqlite == 0:
        return None
    return pg / sqlite


@dataclass(frozen=True, slots=True)
class FillReport:
    records: int
    copy_s: float  # copy_store, without the HNSW index
    index_s: float  # building the HNSW index over the copied vectors, and VACUUM ANALYZE

    @property
    def seconds(self) -> float:
        return self.copy_s + self.index_s


class PgBench:
    """One throwaway PostgreSQL 18 (pgvector) for a bench run; a database per daemon.

    Use as a context manager: the server starts on enter and is stopped, its data removed,
    on exit.
    """

    def __init__(self, base_dir: Path) -> None:
        from pgserver import PgServer

        self.server: PgServer = PgServer(base_dir)

    def __enter__(self) -> PgBench:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def admin_url(self, name: str) -> str:
        """The superuser's URL for database ``name`` (owner of its tables)."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(self.server.superuser_url, dbname=name)

    def fresh(self, name: str) -> str:
        """A new database ``name`` with recalld's schema and the bench role; that role's URL,
        as a daemon's ``RECALLD_DATABASE_URL``."""
        from recalld.store.postgres.schema import init_database

        self.server.create_database(name)
        init_database(self.admin_url(name), {ROLE: PASSWORD})
        return self.server.url_for(ROLE, PASSWORD, name)

    def fill(self, name: str, data_dir: Path) -> FillReport:
        """Copy the SQLite store in ``data_dir`` into database ``name`` (made by :meth:`fresh`)
        with ``copy_store``, owned by the bench role.

        copy_store inserts each vector into the HNSW index as it goes (about 2 ms a vector
        on 2 cores, some minutes for 100k): the index is dropped first and built again over
        the copied vectors (the migration's own definition; the same graph parameters).
        Then VACUUM ANALYZE: the planner's statistics and the visibility map a store that
        grew by use would have, and no autovacuum of the fresh rows later, in the middle of
        another measurement.
        """
        import psycopg
        from recalld.store.moving import copy_store

        admin = self.admin_url(name)
        with psycopg.connect(admin, autocommit=True) as conn:
            row = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'vectors_hnsw'"
            ).fetchone()
            if row is None:
                raise RuntimeError(f"database {name} has no vectors_hnsw index")
            definition = str(row[0])
            conn.execute("DROP INDEX vectors_hnsw")
        started = time.perf_counter()
        report = copy_store(data_dir, self.server.url_for(ROLE, PASSWORD, name))
        copied = time.perf_counter()
        with psycopg.connect(admin, autocommit=True) as conn:
            # In memory (the graph of 100k vectors needs a few hundred MB), one worker
            # beside the leader: the machine's two cores.
            conn.execute("SET maintenance_work_mem = '2GB'")
            conn.execute("SET max_parallel_maintenance_workers = 1")
            conn.execute(definition)
            conn.execute("VACUUM (ANALYZE)")
        return FillReport(report.copied, copied - started, time.perf_counter() - copied)

    def server_mb(self) -> float:
        """Memory of the server's processes (postmaster and every backend): the sum of their
        proportional set sizes, so the shared buffers count once."""
        pid_file = self.server.data_dir / "postmaster.pid"
        try:
            postmaster = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return float("nan")
        pids = [postmaster]
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    if int(stat.rpartition(")")[2].split()[1]) == postmaster:
                        pids.append(int(entry))
        total_kb = 0
        for pid in pids:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        total_kb += int(line.split()[1])
        return total_kb / 1024
