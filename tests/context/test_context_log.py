"""The context hooks' log end to end: Claude Code's SessionStart and UserPromptSubmit payloads
through the real ``recallctl context``, then context_log through the client. Each block a
hook was given is logged with its items as injected, each memory's outcome as its use now
stands (what memory_record_use of its token made it); a page at a time; only the caller's
own (its workspace and agent, unless admin:workspace asks wider); and a store of the
previous schema gains the log when the daemon starts on it."""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest
from recall_client import protocol as p
from recall_client.client import RemoteError, connect
from recall_client.paths import read_admin_token
from recalld.store.postgres import schema as pg_schema
from recalld.store.sqlite import schema as sqlite_schema
from recalld.store.sqlite.schema import DB_NAME, SqliteDb

from tests.support.context import (
    AGENT,
    hook_block,
    hook_payload,
    hook_session,
    make_shop,
    seed_shop,
)
from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.team import ROLE_PASSWORDS, TeamDb

pytestmark = pytest.mark.both_backends

SESSION = "9f7c2c1e-log-session"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return make_shop(tmp_path)


def as_logged(block: p.ContextInjected) -> list[tuple[str, str, int, str | None, bool]]:
    return [(i.id, i.section, i.tokens, i.drift, i.contested) for i in block.items]


async def log_of(rc: Any, **filters: Any) -> p.ContextLogResult:
    reply: p.ContextLogResult = await rc.call(p.ContextLog(**filters), p.ContextLogResult)
    return reply


async def test_each_block_is_logged_with_its_items_and_their_outcomes_as_they_stand(
    running_daemon: DaemonProcess, shop: Path
) -> None:
    d = running_daemon
    ids = await seed_shop(d, shop)
    start, prompt = await hook_session(d, shop, SESSION)
    assert start.items and prompt.items
    assert ids["lesson"] in {i.id for i in start.items}
    assert ids["discount"] in {i.id for i in prompt.items}
    token = next(i.use_token for i in prompt.items if i.id == ids["discount"])
    assert token is not None
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        await rc.call(p.MemoryRecordUse(use_token=token, outcome="used"), p.UseRecorded)
        log = await log_of(rc)
    # Newest first: the prompt's block, then the session start's, each as it was injected.
    assert [(e.event, e.session_id, e.agent) for e in log.injections] == [
        ("prompt", SESSION, AGENT),
        ("session_start", SESSION, AGENT),
    ]
    for entry, block in zip(log.injections, (prompt, start), strict=True):
        assert (entry.budget, entry.tokens) == (block.budget, block.tokens)
        assert [(i.id, i.section, i.tokens, i.drift, i.contested) for i in entry.items] == (
            as_logged(block)
        )
    assert log.injections[0].ts >= log.injections[1].ts
    assert log.next_before is None
    # Each memory's outcome is its use's now; a lesson is no use.
    outcomes = {i.id: i.outcome for e in log.injections for i in e.items}
    assert outcomes[ids["discount"]] == "used"
    assert outcomes[ids["lesson"]] is None
    memories = [i for e in log.injections for i in e.items if i.id.startswith("mem_")]
    assert {i.outcome for i in memories if i.id != ids["discount"]} == {"injected"}


async def test_the_log_pages_and_narrows_to_a_session_or_a_memory(
    running_daemon: DaemonProcess, shop: Path
) -> None:
    d = running_daemon
    ids = await seed_shop(d, shop)
    await hook_session(d, shop, SESSION)
    hook_block(d, hook_payload("claude_code_session_start.json", shop, session_id="another"))
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        await rc.call(p.CaptureEpisode(summary="after the other session", session_id="another"))
        first = await log_of(rc, limit=2)
        assert len(first.injections) == 2 and first.next_before is not None
        rest = await log_of(rc, limit=2, before=first.next_before)
        assert rest.next_before is None
        pages = [*first.injections, *rest.injections]
        assert [e.session_id for e in pages] == ["another", SESSION, SESSION]
        assert len({e.id for e in pages}) == 3
        mine = await log_of(rc, session_id=SESSION)
        assert [e.event for e in mine.injections] == ["prompt", "session_start"]
        holding = await log_of(rc, memory_id=ids["discount"])
        assert all(ids["discount"] in {i.id for i in e.items} for e in holding.injections)
        assert {e.id for e in holding.injections} < {e.id for e in pages}
        with pytest.raises(RemoteError) as bad:
            await log_of(rc, before="1e999:ctx_never")  # no reply hands out an infinite ts
        assert bad.value.code == "invalid_request"


async def test_only_the_callers_own_injections_are_read(
    running_daemon: DaemonProcess, shop: Path
) -> None:
    d = running_daemon
    await seed_shop(d, shop)
    await hook_session(d, shop, SESSION)
    # Another agent of the workspace, and the same agent name in another workspace.
    async with d.client(agent="helper", workspace=str(shop)) as rc:
        assert (await log_of(rc)).injections == []
        assert (await log_of(rc, session_id=SESSION)).injections == []
        for wider in ({"any_caller": True}, {"all_workspaces": True}):
            with pytest.raises(RemoteError) as refused:
                await log_of(rc, **wider)
            assert refused.value.code == "forbidden" and "admin:workspace" in refused.value.message
    async with d.client(agent=AGENT, workspace="/ws/elsewhere") as rc:
        assert (await log_of(rc, session_id=SESSION)).injections == []
        with pytest.raises(RemoteError) as refused:
            await log_of(rc, workspace=str(shop))
        assert refused.value.code == "forbidden"
    # The admin token (the page's) reads every agent's and every workspace's.
    async with connect(
        agent="helper", workspace="/ws/elsewhere", path=d.socket, admin_token=read_admin_token()
    ) as rc:
        every = await log_of(rc, any_caller=True, all_workspaces=True)
        assert [e.session_id for e in every.injections] == [SESSION, SESSION]


# ---------------------------------------------------------------- an older store


def sqlite_schema_12(data_dir: Path) -> None:
    """A store at schema version 12 (before the log), made by migrations 1 to 12."""
    data_dir.mkdir(parents=True)
    conn = sqlite3.connect(data_dir / DB_NAME, isolation_level=None, factory=SqliteDb)
    conn.create_function("recalld_key_digest", 1, lambda key: key, deterministic=True)
    for version, script in enumerate(sqlite_schema.MIGRATIONS[:12], start=1):
        for statement in sqlite_schema._split(script):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version={version}")
    conn.close()


async def test_a_store_of_the_previous_schema_gains_the_log_at_start(
    daemon_factory: DaemonFactory,
    shop: Path,
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    d = daemon_factory()
    with ExitStack() as stack:
        if backend == "sqlite":
            sqlite_schema_12(d.data_dir)
        else:
            server = request.getfixturevalue("pg_server")
            db = TeamDb(server, f"t_{uuid.uuid4().hex[:12]}")
            server.create_database(db.name)
            stack.callback(server.drop_database, db.name)
            with psycopg.connect(db.admin_url, autocommit=True) as conn:
                assert pg_schema.migrate(conn, upto=3) == 3
                for role, password in ROLE_PASSWORDS.items():
                    pg_schema.add_role(conn, role, password)
            # recallctl db init, as an upgrade says, then the daemon's start.
            assert pg_schema.init_database(db.admin_url, ROLE_PASSWORDS) == len(
                pg_schema.MIGRATIONS
            )
            d.extra_env["RECALLD_DATABASE_URL"] = db.url("alice")
        await d.start()
        try:
            ids = await seed_shop(d, shop)
            start, _ = await hook_session(d, shop, SESSION)
            async with d.client(agent=AGENT, workspace=str(shop)) as rc:
                log = await log_of(rc, memory_id=ids["fact"])
            assert [e.event for e in log.injections][-1:] == ["session_start"]
            assert as_logged(start) == [
                (i.id, i.section, i.tokens, i.drift, i.contested) for i in log.injections[-1].items
            ]
        finally:
            assert await d.stop() == 0, d.log()
    if backend == "sqlite":
        assert d.sql("PRAGMA user_version") == [(len(sqlite_schema.MIGRATIONS),)]
