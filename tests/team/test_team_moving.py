"""Moving in: a real local store (made by a real daemon) copied into a real team PostgreSQL
with ``recallctl migrate``, then served by a daemon on that database; ``recallctl db init``
on a fresh database; export from one team database and import into another.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from recall_client import protocol as p
from recall_client.client import RecallClient
from recalld.store import moving
from recalld.store.postgres.schema import MIGRATIONS

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.recallctl import run_recallctl
from tests.support.team import TeamDb, make_db

WS = "/ws/moving"
LESSON = "Run the schema migrations before the integration tests."
# Every table a store holds (daemon_keys aside: each database keeps its own use_token key).
TABLES = (
    "records",
    "vectors",
    "idempotency",
    "episodes",
    "workspace_approvals",
    "experiences",
    "lesson_support",
    "memory_meta",
    "memory_labels",
    "memory_links",
    "memory_paths",
    "memory_uses",
    "memory_events",
    "experience_rollups",
    "agent_credentials",
    "workspace_aliases",
)


def migrate(d: DaemonProcess, url: str) -> dict[str, Any]:
    out = run_recallctl("migrate", "--to", url, "--data-dir", str(d.data_dir), "--json")
    assert out.returncode == 0, out.stderr
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def local_counts(d: DaemonProcess) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{d.data_dir / 'recalld.db'}?mode=ro", uri=True)
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        conn.close()


def team_counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        return {t: _one(conn, f"SELECT count(*) FROM {t}") for t in TABLES}


def _one(conn: psycopg.Connection[Any], sql: str, *params: object) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


async def store(rc: RecallClient, text: str, **kw: Any) -> p.MemoryStored:
    return await rc.call(p.MemoryStore(text=text, **kw), p.MemoryStored)


async def build_local_store(d: DaemonProcess, tmp_path: Path) -> dict[str, str]:
    """Every kind of record with everything that can hang off it; the ids by role."""
    await d.status(wait_model_s=30)
    ids: dict[str, str] = {}
    async with d.client(agent="alice-agent", workspace=WS) as rc:
        ids["build"] = (
            await store(rc, "the build server lives at build-01.internal", tags=["infra"])
        ).record_id
        ids["old_fact"] = (
            await store(rc, "the api listens on port 8080", kind="fact", subject="api port", ts=1e9)
        ).record_id
        new_fact = await store(
            rc, "the api listens on port 9090", kind="fact", subject="api port", ts=1.1e9
        )
        assert new_fact.superseded == [ids["old_fact"]]
        ids["new_fact"] = new_fact.record_id
        ids["deploy"] = (
            await store(
                rc,
                "the deploy script in scripts/deploy.sh relies on the build server",
                depends_on=[p.DependsOn(id=ids["build"], note="it fetches artifacts there")],
                paths=["scripts/deploy.sh"],
                scopes=["ops"],
                idempotency_key="deploy-note-1",
            )
        ).record_id
        ids["old_url"] = (await store(rc, "staging is served at stage-a.internal")).record_id
        ids["new_url"] = (
            await store(rc, "staging moved to stage-b.internal", supersedes=[ids["old_url"]])
        ).record_id
        ids["shared"] = (
            await store(rc, "the on-call rota lives in the team wiki", visibility="team")
        ).record_id
        ids["gone"] = (await store(rc, "a scratch note about a temporary branch")).record_id
        await rc.call(p.Forget(record_id=ids["gone"]), p.Forgotten)
        hits = (await rc.call(p.MemorySearch(query="build server"), p.MemorySearchResult)).hits
        token = {h.id: h.use_token for h in hits}[ids["build"]]
        await rc.call(p.MemoryRecordUse(use_token=token), p.UseRecorded)
        await rc.call(
            p.MemoryRecordUse(memory_ids=[ids["deploy"]], outcome="contradicted", note="moved"),
            p.UseRecorded,
        )
        for i, status in enumerate(("ok", "error", "ok")):
            await rc.call(
                p.CaptureEpisode(
                    summary=f"step {i} of the release: ran the tests",
                    session_id="release-1",
                    tool="bash",
                    status=status,
                    files=[f"{WS}/src/step{i}.py"],
                ),
                p.EpisodeCaptured,
            )
        await rc.call(p.WorkResult(session_id="release-1", task_result=1.0), p.VerdictSet)
        rolled = await rc.call(p.RollUpExperience(session="release-1"), p.ExperienceRolledUp)
        ids["rollup"] = rolled.record_id
        for text in ("set up the staging database", "set up the review database"):
            recorded = await rc.call(
                p.RecordExperience(description=text, status="success", lessons=[LESSON]),
                p.ExperienceRecorded,
            )
            ids["lesson"] = recorded.lessons[0].id
    assert run_recallctl("workspace", "approve", "--exact", WS, d=d).returncode == 0
    out = run_recallctl("agent", "add", "helper", "-o", str(tmp_path / "helper.token"), d=d)
    assert out.returncode == 0, out.stderr
    await d.settled()
    return ids


async def test_moving_in_copies_everything_once_and_a_team_daemon_serves_it(
    daemon_factory: DaemonFactory, team_db: TeamDb, tmp_path: Path
) -> None:
    local = daemon_factory("local")
    await local.start()
    ids = await build_local_store(local, tmp_path)
    assert await local.stop() == 0
    url = team_db.url("alice")
    # As the database's owner the rows would be no daemon's: refused.
    refused = run_recallctl("migrate", "--to", team_db.admin_url, "--data-dir", str(local.data_dir))
    assert refused.returncode == 1 and "daemon's own role" in refused.stderr

    first = migrate(local, url)
    before = local_counts(local)
    assert first["role"] == "alice"
    assert first["seen"] == first["copied"] == before["records"] and first["already"] == 0
    assert first["vectors_skipped"] == 0
    # Every table with rows was copied row for row (records are counted apart).
    assert first["rows"] == {t: n for t, n in before.items() if n and t != "records"}
    assert team_counts(url) == before
    again = migrate(local, url)
    assert (again["copied"], again["already"], again["rows"]) == (0, before["records"], {})
    assert team_counts(url) == before

    lite = sqlite3.connect(f"file:{local.data_dir / 'recalld.db'}?mode=ro", uri=True)
    with psycopg.connect(url) as pg:
        rows = "SELECT id, kind, text, tags, visibility, tombstoned_at IS NULL FROM records"
        assert sorted(pg.execute(rows).fetchall()) == sorted(lite.execute(rows).fetchall())
        by_id = "SELECT m.superseded_by FROM memory_meta m JOIN records r ON r.rowid = m.rowid"
        assert _one(pg, by_id + " WHERE r.id = %s", ids["old_fact"]) == ids["new_fact"]
        links = (
            "SELECT r.id, l.rel, l.dst_id, l.note FROM memory_links l"
            " JOIN records r ON r.rowid = l.src"
        )
        assert sorted(pg.execute(links).fetchall()) == sorted(lite.execute(links).fetchall())
        assert (ids["new_url"], "supersedes", ids["old_url"], None) in pg.execute(links)
        assert _one(pg, by_id + " WHERE r.id = %s", ids["old_url"]) == ids["new_url"]
        support = (
            "SELECT count(*) FROM lesson_support s JOIN records l ON l.rowid = s.lesson_rowid"
            " JOIN records e ON e.rowid = s.experience_rowid AND e.kind = 'experience'"
            " WHERE l.id = %s"
        )
        assert _one(pg, support, ids["lesson"]) == 2
        uses = "SELECT u.outcome, u.note FROM memory_uses u JOIN records r ON r.rowid = u.rowid"
        assert sorted(pg.execute(uses).fetchall()) == sorted(lite.execute(uses).fetchall())
        chain = "SELECT r.id, e.prev_id, e.task_result FROM episodes e JOIN records r USING (rowid)"
        assert sorted(pg.execute(chain).fetchall()) == sorted(lite.execute(chain).fetchall())
        assert _one(pg, "SELECT count(*) FROM records WHERE owner <> 'alice'") == 0
        assert _one(pg, "SELECT visibility FROM records WHERE id = %s", ids["shared"]) == "team"
        vec = "SELECT v.vec FROM vectors v JOIN records r USING (rowid) WHERE r.id = ?"
        stored = np.frombuffer(lite.execute(vec, (ids["build"],)).fetchone()[0], np.float32)
        moved = _one(pg, vec.replace("?", "%s") + "::text", ids["build"])
        np.testing.assert_allclose(np.array(json.loads(moved), np.float32), stored, rtol=1e-6)
    lite.close()
    # The same records through row-level security: bob sees the team memory alone.
    with psycopg.connect(team_db.url("bob")) as pg:
        assert _one(pg, "SELECT count(*) FROM records") == 1

    team = daemon_factory("team", extra_env={"RECALLD_DATABASE_URL": url})
    await team.start()
    async with team.client(agent="alice-agent", workspace=WS) as rc:
        keyword = await rc.call(
            p.MemorySearch(query="build server", mode="keyword"), p.MemorySearchResult
        )
        assert ids["build"] in [h.id for h in keyword.hits]
        await team.settled()
        hybrid = await rc.call(
            p.MemorySearch(query="where does the api listen", mode="hybrid"),
            p.MemorySearchResult,
        )
        assert hybrid.semantic_used
        assert hybrid.hits[0].id == ids["new_fact"]
        assert ids["gone"] not in [h.id for h in hybrid.hits]
        found = await rc.call(
            p.SearchExperience(query="set up the staging database"), p.ExperienceSearchResult
        )
        lessons = {lesson.id: lesson for lesson in found.lessons}
        assert lessons[ids["lesson"]].support == 2
        # The idempotency keys moved too: a retry of a request made locally replays.
        retry = await store(rc, "the deploy script relies on it", idempotency_key="deploy-note-1")
        assert retry.replayed and retry.record_id == ids["deploy"]
    assert await team.stop() == 0


async def test_moving_in_resumes_after_a_crash_and_reads_one_snapshot_while_writes_go_on(
    daemon_factory: DaemonFactory, team_db: TeamDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = daemon_factory("local")
    await local.start()
    async with local.client(workspace=WS) as rc:
        first = await store(rc, "record 0 of the bulk set")
        async with anyio.create_task_group() as tg:
            for i in range(1, 1200):
                depends = [p.DependsOn(id=first.record_id)] if i % 100 == 0 else []
                text = f"record {i} of the bulk set, about topic {i % 17}"
                tg.start_soon(partial(store, rc, text, depends_on=depends))
    await local.settled()
    url = team_db.url("alice")
    monkeypatch.setattr(moving, "PAGE", 200)

    def crash(seen: int) -> None:
        if seen >= 600:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await anyio.to_thread.run_sync(
            lambda: moving.copy_store(local.data_dir, url, progress=crash)
        )
    assert team_counts(url)["records"] == 600  # three pages committed, links not yet

    # Again, while the daemon goes on writing: the rest of one snapshot is copied.
    written = 0
    copying = anyio.Event()

    async def keep_writing() -> None:
        nonlocal written
        async with local.client(workspace=WS) as rc:
            while not copying.is_set():
                await store(rc, f"written during the copy {written}")
                written += 1

    def slowly(seen: int) -> None:
        time.sleep(0.05)  # let the daemon commit between pages

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep_writing)
        await anyio.sleep(0.05)
        rest = await anyio.to_thread.run_sync(
            lambda: moving.copy_store(local.data_dir, url, progress=slowly)
        )
        copying.set()
    assert written > 0 and rest.seen >= 1200
    assert (rest.copied, rest.already) == (rest.seen - 600, 600)
    with psycopg.connect(url) as pg:
        during = {t for (t,) in pg.execute("SELECT text FROM records WHERE text LIKE 'written%'")}
        # A prefix of the writes (one instant), each record with everything of its own.
        assert during == {f"written during the copy {i}" for i in range(len(during))}
        assert _one(pg, "SELECT count(*) FROM records") == rest.seen
        assert _one(pg, "SELECT count(*) FROM memory_meta") == rest.seen
        assert _one(pg, "SELECT count(*) FROM memory_links") == 11
        unembedded = "SELECT count(*) FROM records r WHERE embed_state = 1 AND NOT EXISTS"
        assert _one(pg, unembedded + " (SELECT 1 FROM vectors v WHERE v.rowid = r.rowid)") == 0
    assert await local.stop() == 0
    last = moving.copy_store(local.data_dir, url)
    assert last.copied == 1200 + written - rest.seen
    moved, there = team_counts(url), local_counts(local)
    # A record copied before its vector was made waits for the team daemon to embed it.
    assert moved.pop("vectors") <= there.pop("vectors")
    assert moved == there

    # The rate of one whole run, on a fresh database.
    other = make_db(team_db)
    whole = moving.copy_store(local.data_dir, other.url("alice"))
    assert whole.copied == whole.seen == 1200 + written
    print(f"moved {whole.seen} records in {whole.seconds:.2f}s: {whole.per_s:.0f} records/s")


async def test_a_second_machine_of_the_same_person_merges_into_what_is_there(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    """Two local stores of alice, both with one memory and one lesson: moved in one after
    the other, each is kept once, and what named the second copy names the first."""
    laptop, devbox = daemon_factory("laptop"), daemon_factory("devbox")
    ids: dict[str, dict[str, str]] = {}
    for d, task in (
        (laptop, "set up the staging database"),
        (devbox, "set up the review database"),
    ):
        await d.start()
        await d.status(wait_model_s=30)
        async with d.client(agent="alice-agent", workspace=WS) as rc:
            shared = await store(rc, "the release train leaves on thursdays")
            mine = await store(
                rc, f"{task} before the train", depends_on=[p.DependsOn(id=shared.record_id)]
            )
            recorded = await rc.call(
                p.RecordExperience(description=task, status="success", lessons=[LESSON]),
                p.ExperienceRecorded,
            )
        ids[d.root.name] = {
            "shared": shared.record_id,
            "mine": mine.record_id,
            "lesson": recorded.lessons[0].id,
        }
        await d.settled()
        assert await d.stop() == 0
    url = team_db.url("alice")
    assert migrate(laptop, url)["merged"] == 0
    second = migrate(devbox, url)
    assert (second["copied"], second["merged"]) == (second["seen"] - 2, 2)
    assert migrate(devbox, url)["merged"] == 2  # and again: nothing changes
    a, b = ids["laptop"], ids["devbox"]
    with psycopg.connect(url) as pg:
        assert (
            _one(pg, "SELECT count(*) FROM records WHERE id = ANY(%s)", [b["shared"], b["lesson"]])
            == 0
        )
        link = (
            "SELECT l.dst_id FROM memory_links l JOIN records r ON r.rowid = l.src WHERE r.id = %s"
        )
        assert _one(pg, link, b["mine"]) == a["shared"]
        support = (
            "SELECT count(*) FROM lesson_support s JOIN records l ON l.rowid = s.lesson_rowid"
            " WHERE l.id = %s"
        )
        assert _one(pg, support, a["lesson"]) == 2


def test_db_init_creates_a_role_that_can_log_in(team_db: TeamDb, tmp_path: Path) -> None:
    server = team_db.server
    name = f"t_{uuid.uuid4().hex[:12]}"
    server.create_database(name)
    admin = make_conninfo(server.superuser_url, dbname=name)
    role = f"carol_{uuid.uuid4().hex[:6]}"
    secret = tmp_path / "carol.password"
    secret.write_text("carol-secret-3\n")
    secret.chmod(0o600)
    # Not a terminal, no password file: refused before anything is changed.
    refused = run_recallctl("db", "init", "--url", admin, "--role", role)
    assert refused.returncode == 1 and f"--password-file {role}=FILE" in refused.stderr
    init = ["db", "init", "--url", admin, "--host", f"127.0.0.1:{server.port}", "--role", role]
    for _ in range(2):  # and again: nothing to migrate, the role re-passworded
        out = run_recallctl(*init, "--password-file", f"{role}={secret}")
        assert out.returncode == 0, out.stderr
        assert f"schema version {len(MIGRATIONS)}" in out.stdout
        assert "carol-secret-3" not in out.stdout + out.stderr
    # What it prints is what a daemon's config and ~/.pgpass need.
    lines = [line.strip() for line in out.stdout.splitlines()]
    url = next(x for x in lines if x.startswith("database_url = ")).split('"')[1]
    assert url == f"postgresql://{role}@127.0.0.1:{server.port}/{name}"
    pgpass = tmp_path / "pgpass"
    entry = next(x for x in lines if x.endswith(":PASSWORD"))
    pgpass.write_text(entry.replace(":PASSWORD", ":carol-secret-3") + "\n")
    pgpass.chmod(0o600)
    with psycopg.connect(url, passfile=str(pgpass)) as conn:
        assert _one(conn, "SELECT current_user") == role
        assert _one(conn, "SELECT pg_has_role(current_user, 'recalld_member', 'member')")
        assert _one(conn, "SELECT count(*) FROM records") == 0
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.url_for(role, "wrong", name)).close()


async def test_export_from_a_team_daemon_imports_into_another_team_database(
    daemon_factory: DaemonFactory, team_db: TeamDb, tmp_path: Path
) -> None:
    source = daemon_factory("source", extra_env={"RECALLD_DATABASE_URL": team_db.url("alice")})
    await source.start()
    async with source.client(agent="alice-agent", workspace=WS) as rc:
        for i in range(5):
            await store(rc, f"team note {i} about the release train", tags=[f"n{i}"], ts=1e9 + i)
        for text in ("cut the release branch", "tagged the release"):
            await rc.call(
                p.RecordExperience(description=text, status="success", lessons=[LESSON]),
                p.ExperienceRecorded,
            )
    dump = tmp_path / "dump.jsonl"
    out = run_recallctl("export", "--kind", "all", "-o", str(dump), d=source)
    assert out.returncode == 0, out.stderr
    assert await source.stop() == 0

    other = make_db(team_db)
    target = daemon_factory("target", extra_env={"RECALLD_DATABASE_URL": other.url("alice")})
    await target.start()
    await target.status(wait_model_s=30)
    out = run_recallctl("import", str(dump), d=target)
    assert out.returncode == 0, out.stderr
    assert "8 new" in out.stderr, out.stderr
    assert "8 already there" in run_recallctl("import", str(dump), d=target).stderr

    exported = run_recallctl("export", "--kind", "all", d=target)
    assert exported.stdout.splitlines() == dump.read_text().splitlines()
    async with target.client(agent="alice-agent", workspace=WS) as rc:
        found = await rc.call(p.SearchExperience(query="release branch"), p.ExperienceSearchResult)
    assert [lesson.support for lesson in found.lessons if lesson.text == LESSON] == [2]
    assert await target.stop() == 0
    # The import was written by the target's daemon, as its role: alice owns every row.
    with psycopg.connect(other.url("alice")) as pg:
        assert _one(pg, "SELECT count(*) FROM records WHERE kind = 'memory'") == 5
        assert _one(pg, "SELECT count(*) FROM records WHERE owner != 'alice'") == 0
