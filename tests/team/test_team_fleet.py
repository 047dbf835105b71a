"""Many daemons on one database: each holds a bounded number of connections, and they run
behind PgBouncer in transaction mode (Debian's pgbouncer, started for real in front of the
test PostgreSQL), two people each on their own pool of their own role.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import psycopg
import pytest
from pooler import PgBouncer, installed
from recall_client import protocol as p
from recall_client.client import RemoteError, connect
from recall_client.ctl.main import render_status
from recall_client.paths import read_admin_token

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.recallctl import run_recallctl
from tests.support.team import ROLE_PASSWORDS, TeamDb, raw_count, search, store, team

WS = "/ws/fleet"


def _recalld_backends(db: TeamDb) -> int:
    """Connections the server holds to ``db`` for recalld (any role, direct or pooled)."""
    with psycopg.connect(db.server.superuser_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name = 'recalld'",
            (db.name,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_daemon_holds_at_most_its_connections_however_many_read_aside(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("laptop", "alice")) as (a,):
        report = await a.status()
        db = report.database
        assert db is not None and db.connections_max == 2 + 4  # search_workers + 4
        async with a.client(workspace=WS) as rc:
            await store(rc, "the nightly export runs at two in the morning")

        # Twenty status reports and exports at once, each a read aside on a connection of
        # its own: they share the one connection left beside the search workers'.
        async def aside(i: int) -> None:
            if i % 2:
                await a.status()
            else:
                async with connect(
                    agent="ops", workspace=WS, path=a.socket, admin_token=read_admin_token()
                ) as rc:
                    await rc.call(p.Export(limit=50), p.ExportPage)

        most = 0

        async def watch(done: anyio.Event) -> None:
            nonlocal most
            while not done.is_set():
                most = max(most, await anyio.to_thread.run_sync(_recalld_backends, team_db))
                await anyio.sleep(0.02)

        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, done)
            async with anyio.create_task_group() as readers:
                for i in range(20):
                    readers.start_soon(aside, i)
            done.set()
        report = await a.status()
        assert report.database is not None
        assert report.database.connections is not None
        assert 0 < most <= report.database.connections <= 6, (most, report.database)
        assert f"connections {report.database.connections}/6" in render_status(report)


def test_a_bound_that_leaves_no_connection_aside_is_refused() -> None:
    from recalld.config import ConfigError, load_settings

    with pytest.raises(ConfigError, match="at least 8"):
        load_settings(search_workers=4, database_connections=7)
    assert load_settings(search_workers=4).database_connection_limit == 8


# ---------------------------------------------------------------- behind PgBouncer


@pytest.fixture
def pgbouncer(team_db: TeamDb) -> Iterator[PgBouncer]:
    if installed() is None:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer; .ci/run does)")
    with PgBouncer(team_db.server, ROLE_PASSWORDS, pool_size=3) as bouncer:
        yield bouncer


@asynccontextmanager
async def pooled(
    factory: DaemonFactory, db: TeamDb, bouncer: PgBouncer, *people: tuple[str, str]
) -> AsyncIterator[list[DaemonProcess]]:
    daemons = [
        factory(
            name,
            extra_env={
                "RECALLD_DATABASE_URL": bouncer.url_for(role, db.name),
                # PgBouncer before 1.21 keeps no prepared statement between transactions.
                "RECALLD_DATABASE_PREPARE": "false",
            },
        )
        for name, role in people
    ]
    for d in daemons:
        await d.start()
    try:
        yield daemons
    finally:
        for d in daemons:
            await d.stop()


async def test_two_people_share_team_memory_through_pgbouncer_in_transaction_mode(
    daemon_factory: DaemonFactory, team_db: TeamDb, pgbouncer: PgBouncer
) -> None:
    async with pooled(daemon_factory, team_db, pgbouncer, ("alice", "alice"), ("bob", "bob")) as (
        a,
        b,
    ):
        report = await a.status()
        assert report.database is not None and report.database.role == "alice"
        async with a.client(workspace=WS) as rc:
            await store(rc, "alice keeps the release signing key on the hardware token")
            await store(rc, "the billing service retries webhooks for a day", visibility="team")
            for ts, region in ((100.0, "eu-west-1"), (200.0, "us-east-2")):
                await store(
                    rc,
                    f"the billing service runs in {region}",
                    kind="fact",
                    subject="billing service region",
                    ts=ts,
                    visibility="team",
                )
        await a.settled()
        await b.settled()
        async with b.client(workspace=WS) as rc:
            for mode in ("keyword", "hybrid"):
                seen = await search(rc, "billing service webhooks retries", mode=mode)
                assert "the billing service retries webhooks for a day" in seen, (mode, seen)
                hidden = await search(rc, "release signing key hardware token", mode=mode)
                assert not any("signing key" in t for t in hidden), (mode, hidden)
            reply = await rc.call(
                p.MemorySearch(query="why are the billing webhooks retried", mode="hybrid"),
                p.MemorySearchResult,
            )
            assert reply.semantic_used and reply.hits
            facts = await rc.call(
                p.MemorySearch(query="billing service region", mode="keyword"),
                p.MemorySearchResult,
            )
        # The later fact supersedes the earlier one (decided under a transaction-scoped
        # lock, which holds behind the pooler), and bob is shown which is current.
        by_text = {h.text: h for h in facts.hits}
        assert not by_text["the billing service runs in us-east-2"].superseded
        old = by_text.get("the billing service runs in eu-west-1")
        assert old is None or old.superseded_by_text == "the billing service runs in us-east-2"
        current = raw_count(
            team_db,
            "bob",
            "SELECT count(*) FROM memory_meta m WHERE m.subject = %s AND m.superseded_by IS NULL",
            "billing service region",
        )
        assert current == 1
        async with a.client(workspace=WS) as rc:
            assert any(
                "signing key" in t for t in await search(rc, "release signing key", mode="keyword")
            )
        # The database's own search settings reach every pooled session.
        with psycopg.connect(pgbouncer.url_for("bob", team_db.name)) as conn:
            conn.prepare_threshold = None
            row = conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone()
        assert row == ("100",)
        # Two daemons, each with its connections bound at 6, hold no more server
        # connections than their two pools (3 each).
        assert _recalld_backends(team_db) <= 2 * 3


async def test_a_restart_of_postgresql_behind_pgbouncer_costs_retries_never_an_acknowledgement(
    daemon_factory: DaemonFactory, team_db: TeamDb, pgbouncer: PgBouncer
) -> None:
    async with pooled(daemon_factory, team_db, pgbouncer, ("laptop", "alice")) as (a,):
        acknowledged: list[str] = []
        refused: list[RemoteError] = []
        stop = anyio.Event()
        restarted = anyio.Event()
        # Set once 20 writes are acknowledged after the restart: PgBouncer reconnected.
        recovered = anyio.Event()

        async def keep_writing() -> None:
            after_restart = 0
            async with a.client(workspace=WS) as rc:
                i = 0
                while not stop.is_set():
                    i += 1
                    try:
                        r = await store(rc, f"pooled note {i}", idempotency_key=f"k{i}")
                        acknowledged.append(r.record_id)
                    except RemoteError as exc:
                        refused.append(exc)
                        await anyio.sleep(0.05)
                        continue
                    if restarted.is_set():
                        after_restart += 1
                        if after_restart >= 20:
                            recovered.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_writing)
            await anyio.sleep(0.5)
            before = len(acknowledged)
            team_db.server.stop(remove=False)
            await anyio.sleep(1.0)
            team_db.server.start()
            restarted.set()
            with anyio.fail_after(60):
                await recovered.wait()
            stop.set()
        assert before > 0
        assert all(e.code == "unavailable" and e.retryable for e in refused), refused
        async with a.client(workspace=WS) as rc:
            for mode in ("keyword", "hybrid"):
                assert await search(rc, "pooled note", mode=mode)
        with psycopg.connect(team_db.url("alice")) as conn:
            stored = {r[0] for r in conn.execute("SELECT id FROM records WHERE kind = 'memory'")}
        assert set(acknowledged) <= stored, set(acknowledged) - stored


async def test_recallctl_migrate_moves_a_local_store_in_through_pgbouncer_in_transaction_mode(
    daemon_factory: DaemonFactory, team_db: TeamDb, pgbouncer: PgBouncer
) -> None:
    local = daemon_factory("local")
    await local.start()
    async with local.client(workspace=WS) as rc:
        for i in range(30):
            await store(rc, f"local note {i} about the pooled move", tags=["moved"])
    await local.settled()
    assert await local.stop() == 0
    url = pgbouncer.url_for("alice", team_db.name)
    # A second run copies nothing twice: every statement goes through the pooler again,
    # where a statement prepared by the first run's server connection is unknown.
    for copied, already in ((30, 0), (0, 30)):
        out = run_recallctl("migrate", "--to", url, "--data-dir", str(local.data_dir), "--json")
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert (report["role"], report["copied"], report["already"]) == ("alice", copied, already)
    assert raw_count(team_db, "alice", "SELECT count(*) FROM records") == 30
