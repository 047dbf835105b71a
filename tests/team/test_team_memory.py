"""Team memory: several real daemons on one real PostgreSQL (with pgvector).

Each daemon has its own socket, data dir and model, and connects as a database role: alice
on two machines (laptop and dev box: one role, two daemons) and bob. What one stores, the
others search; private rows stay their owner's, also through raw SQL as the other role; the
guarantees of the single-writer SQLite store hold with many writers at once; a database
restart costs retryable errors, never a false acknowledgement.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from functools import partial
from pathlib import Path

import anyio
import psycopg
import pytest
from mcp import Client
from recall_client import protocol as p
from recall_client.client import DaemonUnavailable, RemoteError

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.git import checkout
from tests.support.mcp_client import call, shim
from tests.support.team import (
    TeamDb,
    raw_count,
    recallctl_on,
    search,
    store,
    team,
    team_daemon,
)

WS = "/ws/team"


async def test_team_memories_are_shared_and_private_ones_stay_private(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        # Through recall-mcp, as an agent host would.
        async with Client(shim(str(a.socket), "--workspace", WS)) as client:
            private = await client.call_tool(
                "memory_store", {"text": "alice keeps her ssh passphrase hint in the blue notebook"}
            )
            shared = await client.call_tool(
                "memory_store",
                {
                    "text": "the staging cluster deploys from the release branch",
                    "visibility": "team",
                },
            )
        assert not private.is_error and not shared.is_error
        await a.settled()
        await b.settled()
        async with b.client(workspace=WS) as rc:
            seen = await search(rc, "staging cluster release branch")
            hidden = await search(rc, "ssh passphrase blue notebook")
        assert "the staging cluster deploys from the release branch" in seen
        assert not any("passphrase" in t for t in hidden)
        # The list says whose each memory is, as hits and memory_show do.
        async with b.client(workspace=WS) as rc:
            listed = await rc.call(p.MemoryList(), p.MemoryListResult)
        assert [(i.owner, i.visibility) for i in listed.items] == [("alice", "team")]
        async with a.client(workspace=WS) as rc:
            assert any("passphrase" in t for t in await search(rc, "ssh passphrase notebook"))
        # Row-level security holds for any SQL a role sends, not only the daemon's.
        like = "SELECT count(*) FROM records WHERE text LIKE %s"
        assert raw_count(team_db, "bob", like, "%passphrase%") == 0
        assert raw_count(team_db, "alice", like, "%passphrase%") == 1
        assert raw_count(team_db, "bob", like, "%staging cluster%") == 1
        for table in ("memory_meta", "vectors", "memory_paths", "memory_labels"):
            assert raw_count(team_db, "bob", f"SELECT count(*) FROM {table}") <= raw_count(
                team_db, "alice", f"SELECT count(*) FROM {table}"
            )
        assert (
            raw_count(
                team_db,
                "bob",
                "SELECT count(*) FROM vectors v WHERE NOT EXISTS"
                " (SELECT 1 FROM records r WHERE r.rowid = v.rowid AND r.visibility = 'team')",
            )
            == 0
        )
        # Nor by shadowing records with a table of its own, which the policies never consult.
        with psycopg.connect(team_db.url("bob")) as conn:
            conn.execute("CREATE TEMP TABLE records (rowid bigint, visibility text, owner text)")
            conn.execute(
                "INSERT INTO records SELECT g, 'team', 'bob' FROM generate_series(1, 999) g"
            )
            shadowed = conn.execute("SELECT count(*) FROM memory_meta").fetchone()
        assert shadowed is not None and shadowed[0] == raw_count(
            team_db, "bob", "SELECT count(*) FROM memory_meta"
        )
        # Nor can a role write in another's name.
        with psycopg.connect(team_db.url("bob")) as conn, pytest.raises(psycopg.Error):
            conn.execute(
                "INSERT INTO records (id, kind, ts, created_at, updated_at, workspace, agent,"
                " uid, text, content_hash, owner) VALUES ('mem_x', 'memory', 0, 0, 0, %s, 'x',"
                " 0, 'forged', '\\x00', 'alice')",
                (WS,),
            )


async def test_the_team_corrects_a_team_record_and_only_with_the_record_do_its_rows_go(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with a.client(workspace=WS) as rc:
            stored = await store(
                rc,
                "the nightly export job writes to the archive bucket",
                visibility="team",
                scopes=["ops"],
            )
        await a.settled()
        rowid = raw_count(
            team_db, "alice", "SELECT rowid FROM records WHERE id = %s", stored.record_id
        )
        children = "SELECT count(*) FROM {} WHERE rowid = %s"
        # Raw SQL as bob removes none of the rows that go only with the record: refused, or
        # (the vector, until the record is forgotten) matched by no row.
        with psycopg.connect(team_db.url("bob"), autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("DELETE FROM memory_meta WHERE rowid = %s", (rowid,))
            assert conn.execute("DELETE FROM vectors WHERE rowid = %s", (rowid,)).rowcount == 0
        for table in ("memory_meta", "vectors"):
            assert raw_count(team_db, "alice", children.format(table), rowid) == 1, table
        # Through his daemon, bob corrects it (its labels are rewritten) and forgets it (its
        # vector goes with it).
        scopes = "SELECT value FROM memory_labels WHERE rowid = ? AND kind = 'scope' ORDER BY 1"
        async with b.client(workspace=WS) as rc:
            for given in (["ops", "backups"], ["backups"]):
                await rc.call(
                    p.MemoryUpdate(memory_id=stored.record_id, scopes=given), p.MemoryChanged
                )
                assert a.sql(scopes, rowid) == [(s,) for s in sorted(given)]
            forgotten = await rc.call(p.Forget(record_id=stored.record_id), p.Forgotten)
        assert not forgotten.already
        assert raw_count(team_db, "alice", children.format("vectors"), rowid) == 0
        assert raw_count(team_db, "alice", children.format("memory_meta"), rowid) == 1


async def test_a_write_on_one_daemon_is_searchable_from_another(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("laptop", "alice"), ("devbox", "alice")) as (a, b):
        async with a.client(workspace=WS) as rc:
            await store(rc, "the flaky test in payments is caused by a shared tmp dir")
        # Lexically at once: the COMMIT is what the other daemon reads.
        async with b.client(workspace=WS) as rc:
            assert await search(rc, "flaky payments tmp", mode="keyword")
        # Semantically once embedded (by the daemon that stored it, or the other).
        await a.settled()
        await b.settled()
        async with b.client(workspace=WS) as rc:
            reply = await rc.call(
                p.MemorySearch(query="why does the payments test fail sometimes", mode="hybrid"),
                p.MemorySearchResult,
            )
        assert reply.semantic_used and reply.hits
        assert "shared tmp dir" in reply.hits[0].text


async def test_concurrent_writers_keep_dedup_and_idempotency(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("laptop", "alice"), ("devbox", "alice")) as (a, b):
        texts = [
            f"note {i}: the build cache lives under /var/cache/build-{i % 7}" for i in range(60)
        ]
        # (Not hex: a long hex string would be redacted as a secret, and all would be alike.)
        keys = [f"retry-{n}-{uuid.uuid4().int % 1000}" for n in range(20)]
        results: dict[str, list[p.MemoryStored]] = {"a": [], "b": []}

        async def writer(d: DaemonProcess, out: list[p.MemoryStored]) -> None:
            async with d.client(workspace=WS) as rc:
                async with anyio.create_task_group() as tg:
                    for t in texts:
                        tg.start_soon(_append, out, store(rc, t))
                    for k in keys:
                        tg.start_soon(_append, out, store(rc, f"keyed note {k}", idempotency_key=k))

        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, a, results["a"])
            tg.start_soon(writer, b, results["b"])
    # Every text once, though both daemons stored every one at the same moment.
    assert raw_count(team_db, "alice", "SELECT count(*) FROM records WHERE kind = 'memory'") == (
        len(texts) + len(keys)
    )
    assert (
        raw_count(
            team_db,
            "alice",
            "SELECT count(*) FROM (SELECT content_hash FROM records GROUP BY content_hash"
            " HAVING count(*) > 1) d",
        )
        == 0
    )
    both = results["a"] + results["b"]
    assert len(both) == 2 * (len(texts) + len(keys))
    # Each pair of answers for one text names one record, one of them inserted.
    inserted = [r for r in both if not (r.duplicate or r.replayed)]
    assert len(inserted) == len(texts) + len(keys)


async def _append(out: list[p.MemoryStored], call: Awaitable[p.MemoryStored]) -> None:
    out.append(await call)


async def test_concurrent_facts_on_one_subject_are_decided_once(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("laptop", "alice"), ("devbox", "alice")) as (a, b):
        async with a.client(workspace=WS) as ra, b.client(workspace=WS) as rb:
            for i in range(12):
                subject = f"service {i} region"
                first, second = await _both(
                    store(
                        ra, f"service {i} runs in eu-west-1", kind="fact", subject=subject, ts=100.0
                    ),
                    store(
                        rb, f"service {i} runs in us-east-2", kind="fact", subject=subject, ts=200.0
                    ),
                )
                current = raw_count(
                    team_db,
                    "alice",
                    "SELECT count(*) FROM memory_meta m JOIN records r ON r.rowid = m.rowid"
                    " WHERE m.subject = %s AND m.superseded_by IS NULL",
                    subject,
                )
                # The later fact supersedes the earlier one, whichever committed first.
                assert current == 1, (i, first, second)
                assert (
                    raw_count(
                        team_db,
                        "alice",
                        "SELECT count(*) FROM memory_meta m JOIN records r ON r.rowid = m.rowid"
                        " WHERE m.subject = %s AND m.superseded_by IS NULL AND r.text LIKE %s",
                        subject,
                        "%us-east-2%",
                    )
                    == 1
                )


async def _both(
    x: Awaitable[p.MemoryStored], y: Awaitable[p.MemoryStored]
) -> tuple[p.MemoryStored, p.MemoryStored]:
    out: dict[int, p.MemoryStored] = {}

    async def run(i: int, call: Awaitable[p.MemoryStored]) -> None:
        out[i] = await call

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0, x)
        tg.start_soon(run, 1, y)
    return out[0], out[1]


async def test_a_database_restart_costs_retries_never_a_false_acknowledgement(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("laptop", "alice")) as (a,):
        acknowledged: list[str] = []
        refused: list[RemoteError] = []
        stop = anyio.Event()

        async def keep_writing() -> None:
            async with a.client(workspace=WS) as rc:
                i = 0
                while not stop.is_set():
                    i += 1
                    try:
                        r = await store(rc, f"restart note {i}", idempotency_key=f"r{i}")
                        acknowledged.append(r.record_id)
                    except RemoteError as exc:
                        refused.append(exc)
                        await anyio.sleep(0.02)

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_writing)
            await anyio.sleep(0.5)
            team_db.server.stop(remove=False)
            await anyio.sleep(0.5)
            report = await a.status()
            assert report.database is not None and report.database.engine == "postgresql"
            assert report.database.state == "unavailable", report.database
            # Searches say so too, by either channel, typed and retryable.
            async with a.client(workspace=WS) as rc:
                for mode in ("keyword", "hybrid"):
                    with pytest.raises(RemoteError) as away:
                        await search(rc, "restart note", mode=mode)
                    assert away.value.code == "unavailable" and away.value.retryable, away.value
            team_db.server.start()
            await anyio.sleep(1.5)
            stop.set()
        assert refused and all(e.code == "unavailable" and e.retryable for e in refused), refused
        report = await a.status()
        assert report.database is not None and report.database.state == "ok"
        async with a.client(workspace=WS) as rc:
            assert await search(rc, "restart note", mode="keyword")
        ids = set(acknowledged)
        with psycopg.connect(team_db.url("alice")) as conn:
            stored = {r[0] for r in conn.execute("SELECT id FROM records WHERE kind = 'memory'")}
        assert ids <= stored, ids - stored
        # It reconnected by itself: writes after the restart are acknowledged again.
        assert len(acknowledged) > 10


async def test_words_in_more_records_than_the_cached_statistics_count_are_still_searched(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    # A daemon keeps the table's statistics for a minute while another daemon writes: the
    # words' exact counts then exceed the record count it holds (idf was a log of a negative
    # number, and the search failed with ValueError).
    async with team(daemon_factory, team_db, ("laptop", "alice"), ("devbox", "alice")) as (a, b):
        async with a.client(workspace=WS) as ra, b.client(workspace=WS) as rb:
            await store(ra, "an opening note")
            assert await search(rb, "opening", mode="keyword") == ["an opening note"]
            for i in range(40):
                await store(ra, f"quorum ledger entry {i}")
            found = await search(rb, "quorum ledger", mode="keyword", limit=50)
    assert sorted(found) == sorted(f"quorum ledger entry {i}" for i in range(40))


async def test_kill_9_of_one_daemon_loses_nothing_acknowledged(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("laptop", "alice"), ("devbox", "alice")) as (a, b):
        acked: list[str] = []

        async def write() -> None:
            async with a.client(workspace=WS) as rc:
                for i in range(10_000):
                    try:
                        acked.append((await store(rc, f"crash note {i}")).record_id)
                    except (RemoteError, DaemonUnavailable, OSError, anyio.EndOfStream):
                        return

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await anyio.sleep(1.0)
            a.kill()
        assert len(acked) > 20
        async with b.client(workspace=WS) as rc:
            found = await rc.call(
                p.MemorySearch(query="crash note", mode="keyword", limit=50), p.MemorySearchResult
            )
        assert found.hits
        with psycopg.connect(team_db.url("alice")) as conn:
            stored = {r[0] for r in conn.execute("SELECT id FROM records")}
        assert set(acked) <= stored


async def test_importing_another_persons_export_keeps_what_the_importer_may_see(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with a.client(workspace=WS) as rc:
            await store(rc, "alice's private note on the flaky login test")
            await store(rc, "the release train leaves on thursdays", visibility="team")
        exported = recallctl_on(a, "export")
        assert exported.returncode == 0, exported.stderr
        assert len(exported.stdout.splitlines()) == 2
        imported = recallctl_on(b, "import", "-", stdin=exported.stdout)
        # The team record is there for bob already; alice's private one holds its id, which
        # bob cannot see: that line fails with a typed answer, never an internal error.
        assert imported.returncode == 1
        assert "internal" not in imported.stderr and "Traceback" not in imported.stderr
        assert "1 already there" in imported.stderr and "1 failed" in imported.stderr
        assert "held by a record this database role cannot see" in imported.stderr
        # bob's daemon goes on writing, and nothing of alice's private note reached bob.
        async with b.client(workspace=WS) as rc:
            await store(rc, "bob's note after the import")
            assert not any("flaky login" in t for t in await search(rc, "flaky login test"))
        assert raw_count(team_db, "bob", "SELECT count(*) FROM records") == 2


async def test_a_daemon_started_while_the_database_is_down_waits_for_it(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    d = team_daemon(daemon_factory, team_db, "early", "alice")
    team_db.server.stop(remove=False)
    down = True
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(d.start, within_s=90))
            with anyio.fail_after(30):
                while d.log().count("trying again") < 2:  # noqa: ASYNC110  (its log file)
                    await anyio.sleep(0.2)
            # Still waiting, not gone: it never exits for a database that does not answer.
            assert d.proc is None or d.proc.poll() is None
            team_db.server.start()
            down = False
    finally:
        if down:  # the next test's database
            team_db.server.start()
    assert any("EXTEND_TIMEOUT_USEC" in n for n in d.notifications), d.notifications
    async with d.client(workspace=WS) as rc:
        stored = await store(rc, "written once the database came up")
    await d.settled()
    async with d.client(workspace=WS) as rc:
        assert "written once the database came up" in await search(rc, "database came up")
    assert stored.record_id
    assert await d.stop() == 0


async def test_a_team_memory_s_drift_is_judged_in_each_reader_s_own_checkout(
    daemon_factory: DaemonFactory, team_db: TeamDb, tmp_path: Path
) -> None:
    # One repository, checked out by each person at a path of their own; alice's checkout
    # has src/x.py, bob's has src/y.py in its place.
    alice = checkout(tmp_path / "home" / "alice" / "src" / "app", "git@github.com:acme/app.git")
    bob = checkout(tmp_path / "Users" / "bob" / "work" / "app", "https://github.com/acme/app")
    (alice / "src").mkdir()
    (alice / "src" / "x.py").write_text("x = 1\n")
    (bob / "src").mkdir()
    (bob / "src" / "y.py").write_text("y = 1\n")
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with Client(shim(str(a.socket), "--workspace", str(alice))) as client:
            stored = await call(
                client,
                "memory_store",
                text="The parser lives in src/x.py and its tests beside src/y.py.",
                visibility="team",
            )
        seen: dict[str, dict[str, bool]] = {}
        for who, d, where in (("alice", a, alice), ("bob", b, bob)):
            async with Client(shim(str(d.socket), "--workspace", str(where))) as client:
                shown = await call(client, "memory_show", id=stored["id"])
            assert shown["owner"] == "alice" and shown["origin_repo"] == str(alice)
            seen[who] = {c["path"]: c["exists"] for c in shown["cited_paths"]}
        assert seen["alice"] == {"src/x.py": True, "src/y.py": False}
        assert seen["bob"] == {"src/x.py": False, "src/y.py": True}
        # memory_list judges it where memory_show does.
        async with b.client(workspace=str(bob)) as rc:
            listed = await rc.call(p.MemoryList(), p.MemoryListResult)
        assert [i.path_drift_missing for i in listed.items] == [1]


async def test_a_team_fact_contested_by_another_member_shows_both_contenders_to_both(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        subject = "staging database host"
        async with a.client(workspace=WS) as rc:
            first = await store(
                rc,
                "the staging database is db-stage-1",
                kind="fact",
                subject=subject,
                ts=100.0,
                visibility="team",
            )
        async with b.client(workspace=WS) as rc:
            second = await store(
                rc,
                "the staging database is db-stage-2",
                kind="fact",
                subject=subject,
                ts=100.0,
                visibility="team",
            )
        assert second.contested and second.contested_with == [first.record_id]
        for who, d in (("alice", a), ("bob", b)):
            async with d.client(workspace=WS) as rc:
                for mid, other in ((first.record_id, second), (second.record_id, first)):
                    shown = await rc.call(p.MemoryShow(memory_id=mid), p.MemoryShown)
                    assert shown.memory.contested, (who, mid)
                    assert [c.id for c in shown.memory.contenders] == [other.record_id]
                found = await rc.call(
                    p.MemorySearch(query=subject, mode="keyword"), p.MemorySearchResult
                )
                assert {h.id for h in found.hits if h.contested} == {
                    first.record_id,
                    second.record_id,
                }, who
        # A later private fact of bob's supersedes his own earlier one and leaves the team's
        # answer as it was for alice (no fact she cannot see replaces it); bob, who sees
        # both, is shown them contested.
        async with b.client(workspace=WS) as rc:
            mine = await store(
                rc,
                "the staging queue is q-stage-0",
                kind="fact",
                subject="staging queue host",
                ts=50.0,
            )
        async with a.client(workspace=WS) as rc:
            theirs = await store(
                rc,
                "the staging queue is q-stage-1",
                kind="fact",
                subject="staging queue host",
                ts=100.0,
                visibility="team",
            )
        async with b.client(workspace=WS) as rc:
            later = await store(
                rc,
                "the staging queue is q-stage-2",
                kind="fact",
                subject="staging queue host",
                ts=300.0,
            )
        assert later.action == "superseded" and later.superseded == [mine.record_id]
        async with a.client(workspace=WS) as rc:
            shown = await rc.call(p.MemoryShow(memory_id=theirs.record_id), p.MemoryShown)
        assert not shown.memory.superseded and not shown.memory.contested
        async with b.client(workspace=WS) as rc:
            shown = await rc.call(p.MemoryShow(memory_id=theirs.record_id), p.MemoryShown)
        assert not shown.memory.superseded
        assert [c.id for c in shown.memory.contenders] == [later.record_id]
