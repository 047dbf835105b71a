"""How long the start-up re-keying of a path-keyed store takes (SQLite schema 11 -> 12).

Builds a schema-11 store with N memories filed under two checkouts of one repository (made
by git in a tmp dir; a tenth of the texts stored in both), then times
``rekey_workspaces`` on it and the identification of a checkout, cold and cached:

    .venv/bin/python scripts/bench_rekey.py --records 20000
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "daemon"), str(REPO / "clients")]

from recall_client import protocol as p  # noqa: E402
from recalld.domain import workspace_identity  # noqa: E402
from recalld.domain.ids import new_id  # noqa: E402
from recalld.handlers.ops import store_rows  # noqa: E402
from recalld.store.rekey import rekey_workspaces  # noqa: E402
from recalld.store.sql.operations import SqlOperationReads, SqlOperationWrites  # noqa: E402
from recalld.store.sqlite import schema  # noqa: E402
from recalld.store.sqlite.engine import SqliteStore  # noqa: E402


def _git(repo: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "PATH": "/usr/bin:/bin"}
    env |= {"GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@b"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def _checkout(path: Path, origin: str) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q")
    _git(path, "commit", "-q", "--allow-empty", "-m", "one")
    _git(path, "remote", "add", "origin", origin)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        one = _checkout(root / "one" / "app", "git@github.com:acme/app.git")
        two = _checkout(root / "two" / "app", "https://github.com/acme/app")
        data = root / "data"
        data.mkdir()
        conn = sqlite3.connect(data / schema.DB_NAME, isolation_level=None, factory=schema.SqliteDb)
        conn.create_function("recalld_key_digest", 1, lambda k: k, deterministic=True)
        for version, script in enumerate(schema.MIGRATIONS[:11], start=1):
            for statement in schema._split(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={version}")
        now = time.time()
        rows = [
            p.ExportedRecord(
                id=new_id("mem"),
                kind="memory",
                # The first tenth in pairs, one of each pair in each checkout.
                text=f"memory number {i // 2 if i < args.records // 10 else i} of the bench",
                workspace=str(one if i % 2 else two),
                agent="bench",
                ts=now,
                created_at=now,
                updated_at=now,
                trust=1.0,
                eligibility="eligible",
                memory=p.ExportedMemory(origin=str(one if i % 2 else two), last_verified_at=now),
            )
            for i in range(args.records)
        ]
        conn.execute("BEGIN")
        store_rows(SqlOperationReads(conn), SqlOperationWrites(conn), rows, uid=1000)
        conn.execute("COMMIT")
        conn.close()

        store = SqliteStore(data)
        started = time.perf_counter()
        moved = rekey_workspaces(store, workspace_identity.identify)
        took = time.perf_counter() - started
        store.close()
        print(f"rekey: {moved} records of 2 checkouts in {took * 1000:.0f} ms")

        cold = root / "cold" / "app"
        _checkout(cold, "git@github.com:acme/cold.git")
        started = time.perf_counter()
        workspace_identity.identify(str(cold))
        first = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(1000):
            workspace_identity.identify(str(cold))
        cached = (time.perf_counter() - started) / 1000
        print(f"identify: first {first * 1e3:.2f} ms, cached {cached * 1e6:.1f} us")


if __name__ == "__main__":
    main()
