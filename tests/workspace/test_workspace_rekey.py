"""A store made by the schema before workspace identities (SQLite 11, PostgreSQL 2), keyed
by checkout paths, is re-keyed at the daemon's start: two checkouts of one origin become one
workspace, their approval with them, a plain directory and a path that is gone keep their
path. A start cut short resumes.

The old store is built with the previous schema's own SQL (the shipped migrations, never
edited) and filled by the store's import statements, which that schema already had.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from recall_client import protocol as p
from recalld.domain import workspace_identity
from recalld.domain.ids import new_id
from recalld.domain.workspace_identity import Workspace
from recalld.handlers.ops import store_rows
from recalld.store.postgres import schema as pg_schema
from recalld.store.postgres.db import ConnectionState, PgDb, connect
from recalld.store.rekey import rekey_workspaces
from recalld.store.sql.db import Db
from recalld.store.sql.operations import SqlOperationReads, SqlOperationWrites
from recalld.store.sqlite import schema as sqlite_schema
from recalld.store.sqlite.engine import SqliteStore
from recalld.store.sqlite.schema import DB_NAME, SqliteDb

from tests.support.daemon import DaemonFactory
from tests.support.git import checkout
from tests.support.team import ROLE_PASSWORDS, TeamDb

IDENTITY = "github.com/acme/app"
GONE = "/ws/gone-checkout"


def memory(workspace: str, text: str) -> p.ExportedRecord:
    now = time.time()
    return p.ExportedRecord(
        id=new_id("mem"),
        kind="memory",
        text=text,
        workspace=workspace,
        agent="old-agent",
        ts=now,
        created_at=now,
        updated_at=now,
        trust=1.0,
        eligibility="eligible",
        memory=p.ExportedMemory(origin=workspace, last_verified_at=now),
    )


def old_rows(alice: Path, bob: Path, plain: Path) -> list[p.ExportedRecord]:
    return [
        memory(str(alice), "Release builds need the arm64 runner."),
        memory(str(bob), "The staging bastion is bastion-2."),
        # Both checkouts stored it: one workspace keeps one live copy.
        memory(str(alice), "Run make lint before pushing."),
        memory(str(bob), "Run make lint before pushing."),
        memory(str(plain), "Notes are exported on Sundays."),
        memory(GONE, "This checkout was removed long ago."),
    ]


def fill(conn: Db, rows: list[p.ExportedRecord], approved: str) -> None:
    conn.execute("BEGIN")
    store_rows(SqlOperationReads(conn), SqlOperationWrites(conn), rows, uid=1000)
    conn.execute(
        "INSERT INTO workspace_approvals (workspace, approved_at, approved_by) VALUES (?, ?, ?)",
        (approved, time.time(), "recallctl"),
    )
    conn.execute("COMMIT")


def sqlite_schema_11(data_dir: Path) -> SqliteDb:
    """A database at schema version 11, made by migrations 1 to 11 as they shipped."""
    data_dir.mkdir(parents=True)
    conn = sqlite3.connect(data_dir / DB_NAME, isolation_level=None, factory=SqliteDb)
    conn.create_function("recalld_key_digest", 1, lambda key: key, deterministic=True)
    for version, script in enumerate(sqlite_schema.MIGRATIONS[:11], start=1):
        for statement in sqlite_schema._split(script):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={version}")
    return conn


@contextmanager
def pg_schema_2(server: Any) -> Iterator[TeamDb]:
    """A database at schema version 2 with the team's roles, dropped afterwards."""
    db = TeamDb(server, f"t_{new_id('db')[3:15].lower()}")
    server.create_database(db.name)
    try:
        with psycopg.connect(db.admin_url, autocommit=True) as conn:
            assert pg_schema.migrate(conn, upto=2) == 2
            for role, password in ROLE_PASSWORDS.items():
                pg_schema.add_role(conn, role, password)
        yield db
    finally:
        server.drop_database(db.name)


def repositories(tmp_path: Path) -> tuple[Path, Path, Path]:
    alice = checkout(tmp_path / "home" / "alice" / "src" / "app", "git@github.com:Acme/App.git")
    bob = checkout(tmp_path / "work" / "app-two", "https://github.com/acme/app.git")
    plain = tmp_path / "notes"
    plain.mkdir()
    return alice, bob, plain


async def assert_rekeyed(daemon: Any, alice: Path, bob: Path, plain: Path) -> None:
    async with daemon.client(workspace=str(bob)) as rc:
        assert rc.welcome is not None and rc.welcome.workspace == IDENTITY
        listed = await rc.call(p.MemoryList(limit=50), p.MemoryListResult)
        texts = sorted(i.text for i in listed.items)
        assert texts == [
            "Release builds need the arm64 runner.",
            "Run make lint before pushing.",
            "The staging bastion is bastion-2.",
        ]
        assert {i.workspace for i in listed.items} == {IDENTITY}
    async with daemon.client(workspace=str(plain)) as rc:
        listed = await rc.call(p.MemoryList(limit=50), p.MemoryListResult)
        assert [i.text for i in listed.items] == ["Notes are exported on Sundays."]
    async with daemon.client(workspace=GONE) as rc:
        listed = await rc.call(p.MemoryList(limit=50), p.MemoryListResult)
        assert [i.text for i in listed.items] == ["This checkout was removed long ago."]


@pytest.mark.both_backends
async def test_a_store_of_the_previous_schema_is_rekeyed_at_start(
    daemon_factory: DaemonFactory, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    alice, bob, plain = repositories(tmp_path)
    rows = old_rows(alice, bob, plain)
    d = daemon_factory()
    admin_url: str | None = None
    with ExitStack() as stack:
        if backend == "sqlite":
            old = sqlite_schema_11(d.data_dir)
            fill(old, rows, approved=str(alice))
            old.close()
        else:
            db = stack.enter_context(pg_schema_2(request.getfixturevalue("pg_server")))
            conn = PgDb(
                lambda: connect(db.url("alice"), autocommit=True),
                ConnectionState(""),
                reconnect=False,
            )
            fill(conn, rows, approved=str(alice))
            conn.conn.close()
            # recallctl db init, as the upgrade's note says, then the daemon's start.
            assert pg_schema.init_database(db.admin_url, ROLE_PASSWORDS) == len(
                pg_schema.MIGRATIONS
            )
            d.extra_env["RECALLD_DATABASE_URL"] = db.url("alice")
            admin_url = db.admin_url
        await d.start()
        await assert_rekeyed(d, alice, bob, plain)
        assert await d.stop() == 0
        aliases, left, approved = after(d, admin_url)
    assert aliases[str(alice)] == aliases[str(bob)] == IDENTITY
    assert aliases[str(plain)] == str(plain) and aliases[GONE] == GONE
    assert left == 0
    assert approved == [IDENTITY]


def after(d: Any, admin_url: str | None) -> tuple[dict[str, str], int, list[str]]:
    """(aliases, re-keyings left, approved workspaces) as the store holds them."""
    queries = (
        "SELECT path, workspace FROM workspace_aliases",
        "SELECT count(*) FROM workspace_rekey",
        "SELECT workspace FROM workspace_approvals",
    )
    if admin_url is None:
        conn = sqlite3.connect(d.data_dir / DB_NAME)
        results = [conn.execute(q).fetchall() for q in queries]
        conn.close()
    else:
        with psycopg.connect(admin_url) as pg:
            results = [pg.execute(q).fetchall() for q in queries]
    return dict(results[0]), int(results[1][0][0]), [r[0] for r in results[2]]


@pytest.mark.sqlite_only
async def test_a_rekeying_cut_short_resumes_at_the_next_start(
    daemon_factory: DaemonFactory, tmp_path: Path, backend: str
) -> None:
    alice, bob, plain = repositories(tmp_path)
    d = daemon_factory()
    old = sqlite_schema_11(d.data_dir)
    fill(old, old_rows(alice, bob, plain), approved=str(alice))
    old.close()

    # A start that dies after its first path: that path is done, the rest untouched.
    store = SqliteStore(d.data_dir)
    seen: list[str] = []

    def dies_second(path: str) -> Workspace:
        if seen:
            raise RuntimeError("killed mid-way")
        seen.append(path)
        return workspace_identity.identify(path)

    with pytest.raises(RuntimeError, match="killed mid-way"):
        rekey_workspaces(store, dies_second)
    reader = store.reader()
    left = reader.ops.rekey_pending()
    store.close_reader(reader)
    store.close()
    assert len(seen) == 1 and seen[0] not in left and len(left) == 3

    await d.start()
    await assert_rekeyed(d, alice, bob, plain)
    assert await d.stop() == 0
    aliases, pending, approved = after(d, None)
    assert len(aliases) == 4 and pending == 0 and approved == [IDENTITY]


def schema_13(data_dir: Path) -> SqliteDb:
    """A database at schema version 13 (identities folded the path's case, the port and the
    ssh user), made by the migrations as they shipped."""
    data_dir.mkdir(parents=True)
    conn = sqlite3.connect(data_dir / DB_NAME, isolation_level=None, factory=SqliteDb)
    conn.create_function("recalld_key_digest", 1, lambda key: key, deterministic=True)
    for version, script in enumerate(sqlite_schema.MIGRATIONS[:13], start=1):
        for statement in sqlite_schema._split(script):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={version}")
    conn.execute("DELETE FROM workspace_rekey")  # schema 12's re-keying long done
    return conn


@contextmanager
def pg_schema_4(server: Any) -> Iterator[TeamDb]:
    db = TeamDb(server, f"t_{new_id('db')[3:15].lower()}")
    server.create_database(db.name)
    try:
        with psycopg.connect(db.admin_url, autocommit=True) as conn:
            assert pg_schema.migrate(conn, upto=4) == 4
            for role, password in ROLE_PASSWORDS.items():
                pg_schema.add_role(conn, role, password)
            conn.execute("DELETE FROM workspace_rekey")
        yield db
    finally:
        server.drop_database(db.name)


def fill_identities(conn: Db, rows: list[p.ExportedRecord], aliases: dict[str, str]) -> None:
    conn.execute("BEGIN")
    store_rows(SqlOperationReads(conn), SqlOperationWrites(conn), rows, uid=1000)
    for path, workspace in aliases.items():
        SqlOperationWrites(conn).note_alias(path, workspace, time.time())
    conn.execute("COMMIT")


@pytest.mark.both_backends
async def test_identities_folded_by_the_old_rule_move_where_their_checkouts_agree(
    daemon_factory: DaemonFactory, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """A workspace whose one checkout now names another identity moves there; one whose
    checkouts are now two repositories is read by neither (its rows cannot be told apart,
    and the checkout whose identity did not change would read the other's); GitHub's
    identities do not change."""
    ported = checkout(tmp_path / "ported", "ssh://host:2222/team/app")
    upper = checkout(tmp_path / "upper", "/srv/git/Payments.git")
    lower = checkout(tmp_path / "lower", "/srv/git/payments.git")
    hub = checkout(tmp_path / "hub", "git@github.com:Acme/App.git")
    rows = [
        memory("host/team/app", "The app listens on 8443."),
        memory("file:/srv/git/payments", "Payouts settle at 17:00."),
        memory(IDENTITY, "Release builds need the arm64 runner."),
    ]
    aliases = {
        str(ported): "host/team/app",
        str(upper): "file:/srv/git/payments",
        str(lower): "file:/srv/git/payments",
        str(hub): IDENTITY,
    }
    d = daemon_factory()
    admin_url: str | None = None
    with ExitStack() as stack:
        if backend == "sqlite":
            old = schema_13(d.data_dir)
            fill_identities(old, rows, aliases)
            old.close()
        else:
            db = stack.enter_context(pg_schema_4(request.getfixturevalue("pg_server")))
            conn = PgDb(
                lambda: connect(db.url("alice"), autocommit=True),
                ConnectionState(""),
                reconnect=False,
            )
            fill_identities(conn, rows, aliases)
            conn.conn.close()
            assert pg_schema.init_database(db.admin_url, ROLE_PASSWORDS) == len(
                pg_schema.MIGRATIONS
            )
            d.extra_env["RECALLD_DATABASE_URL"] = db.url("alice")
            admin_url = db.admin_url
        await d.start()
        for repo, workspace, texts in (
            (ported, "host:2222/team/app", ["The app listens on 8443."]),
            (upper, "file:/srv/git/Payments", []),
            (lower, "file:/srv/git/payments", []),
            (hub, IDENTITY, ["Release builds need the arm64 runner."]),
        ):
            async with d.client(workspace=str(repo)) as rc:
                assert rc.welcome is not None and rc.welcome.workspace == workspace
                listed = await rc.call(p.MemoryList(limit=50), p.MemoryListResult)
                assert [i.text for i in listed.items] == texts, repo.name
        assert await d.stop() == 0
        moved, left, _ = after(d, admin_url)
    assert moved[str(ported)] == "host:2222/team/app"
    assert moved[str(upper)] == "file:/srv/git/Payments"
    assert moved[str(lower)] == "file:/srv/git/payments"
    assert moved[str(hub)] == IDENTITY
    assert left == 0
