"""memory_share: the reviewed step that makes a private memory or lesson team memory.

Two people (two database roles on a real PostgreSQL, a daemon each) share through recall-mcp
with the MCP SDK's client and through recallctl: the preview shows what every member would
read with its provenance and changes nothing, the share makes it the team's and logs who
shared it; only the owner may share (an admin token included), redaction runs again and
refuses a secret, and a local (SQLite) store answers that there is no team to share with.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from mcp import Client
from recall_client import protocol as p
from recall_client.client import RemoteError, connect
from recall_client.paths import read_admin_token

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.git import checkout
from tests.support.mcp_client import call, shim
from tests.support.team import TeamDb, raw_count, recallctl_on, search, store, team

SECRET = "ghp_0123456789abcdefghijABCDEFGHIJ012345"


async def tool_error(client: Client, name: str, **args: Any) -> str:
    result = await client.call_tool(name, args)
    assert result.is_error, (name, args, result.structured_content)
    text = result.content[0]
    assert text.type == "text"
    return text.text


async def test_the_owner_reviews_then_shares_a_private_memory_through_recall_mcp(
    daemon_factory: DaemonFactory, team_db: TeamDb, tmp_path: Path
) -> None:
    app = checkout(tmp_path / "home" / "alice" / "src" / "app", "git@github.com:acme/app.git")
    text = "The release checklist lives in docs/release.md; run it before tagging."
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with Client(shim(str(a.socket), "--workspace", str(app))) as client:
            stored = await call(client, "memory_store", text=text, source="standup")
            preview = await call(client, "memory_share", id=stored["id"])
            record = preview["record"]
            assert preview["shared"] is False and "shared_at" not in preview
            assert record["text"] == text and record["owner"] == "alice"
            assert record["kind"] == "memory" and record["workspace"] == "github.com/acme/app"
            assert record["cited_paths"] == ["docs/release.md"] and record["redactions"] == []
            assert record["agent"] and record["created_at"] > 0 and record["source"] == "standup"
            # The preview changed nothing: bob does not see it.
            like = "SELECT count(*) FROM records WHERE text = %s"
            assert raw_count(team_db, "bob", like, text) == 0
            shared = await call(client, "memory_share", id=stored["id"], confirm=True)
            assert shared["shared"] is True and shared["shared_at"] >= record["created_at"]
            assert shared["record"] == record
            # Once is enough: a second share says what it is.
            again = await tool_error(client, "memory_share", id=stored["id"], confirm=True)
            assert "team memory already" in again
        assert raw_count(team_db, "bob", like, text) == 1
        # Who shared it and when is in its owner's log.
        with psycopg.connect(team_db.url("alice")) as conn:
            logged = conn.execute(
                "SELECT agent, ts FROM memory_events WHERE record_id = %s AND event = 'shared'",
                (stored["id"],),
            ).fetchall()
        assert logged == [(record["agent"], shared["shared_at"])]
        await b.settled()
        async with Client(shim(str(b.socket), "--workspace", str(app))) as client:
            shown = await call(client, "memory_show", id=stored["id"])
            assert (shown["visibility"], shown["owner"]) == ("team", "alice")
            # bob cannot share alice's memory, nor name one of hers he cannot see.
            refused = await tool_error(client, "memory_share", id=stored["id"])
            assert "forbidden" in refused and "only its owner" in refused
        async with b.client(workspace=str(app)) as rc:
            assert text in await search(rc, "release checklist tagging")


async def test_only_the_owner_shares_even_with_the_admin_token(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with a.client(workspace="/ws/share") as rc:
            private = await store(rc, "alice's private note about the flaky login test")
            team_note = await store(rc, "the login test needs the fake clock", visibility="team")
        async with connect(
            agent="operator", workspace="/ws/share", path=b.socket, admin_token=read_admin_token()
        ) as rc:
            with pytest.raises(RemoteError) as seen:
                await rc.call(p.MemoryShare(record_id=team_note.record_id), p.MemoryShared)
            assert seen.value.code == "forbidden"
            # Another's private record is no record at all to bob.
            with pytest.raises(RemoteError) as hidden:
                await rc.call(p.MemoryShare(record_id=private.record_id), p.MemoryShared)
            assert hidden.value.code == "not_found"
        # An episode is not something memory_share shares.
        async with a.client(workspace="/ws/share") as rc:
            episode = await rc.call(
                p.CaptureEpisode(summary="ran the login test"),
                p.EpisodeCaptured,
            )
            with pytest.raises(RemoteError) as wrong:
                await rc.call(p.MemoryShare(record_id=episode.record_id), p.MemoryShared)
            assert wrong.value.code == "not_found"


async def test_a_secret_redaction_finds_now_is_refused_and_nothing_is_shared(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    async with team(daemon_factory, team_db, ("alice", "alice")) as (a,):
        # Written by hand, as a member may (or stored before a rule knew the secret).
        record_id = f"mem_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(team_db.url("alice")) as conn:
            conn.execute(
                "INSERT INTO records (id, kind, ts, created_at, updated_at, workspace, agent,"
                " uid, text, content_hash, eligibility) VALUES (%s, 'memory', 1, 1, 1, %s,"
                " 'hand', 0, %s, '\\x01', 'eligible')",
                (record_id, "/ws/share", f"the deploy token is {SECRET}"),
            )
        async with a.client(workspace="/ws/share") as rc:
            preview = await rc.call(p.MemoryShare(record_id=record_id), p.MemoryShared)
            assert preview.record.redactions == ["github_token"] and not preview.shared
            with pytest.raises(RemoteError) as refused:
                await rc.call(p.MemoryShare(record_id=record_id, confirm=True), p.MemoryShared)
        assert refused.value.code == "forbidden" and "github_token" in refused.value.message
        assert SECRET not in refused.value.message
        sql = "SELECT count(*) FROM records WHERE id = %s AND visibility = 'private'"
        assert raw_count(team_db, "alice", sql, record_id) == 1


async def test_recallctl_previews_then_shares_a_lesson(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    lesson_text = "Pin the CI image's digest before bisecting a flaky build."
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with a.client(workspace="/ws/share") as rc:
            recorded = await rc.call(
                p.RecordExperience(
                    description="bisected a flaky build", status="success", lessons=[lesson_text]
                ),
                p.ExperienceRecorded,
            )
        lesson = recorded.lessons[0].id
        preview = recallctl_on(a, "--workspace", "/ws/share", "share", lesson)
        assert preview.returncode == 0, preview.stderr
        assert f"lesson {lesson} of alice" in preview.stdout and lesson_text in preview.stdout
        assert f"recallctl share {lesson} --yes" in preview.stdout
        like = "SELECT count(*) FROM records WHERE text = %s"
        assert raw_count(team_db, "bob", like, lesson_text) == 0
        shared = recallctl_on(a, "--workspace", "/ws/share", "share", lesson, "--yes", "--json")
        assert shared.returncode == 0, shared.stderr
        reply = json.loads(shared.stdout)
        assert reply["shared"] is True and reply["record"]["kind"] == "lesson"
        assert raw_count(team_db, "bob", like, lesson_text) == 1
        refused = recallctl_on(b, "--workspace", "/ws/share", "share", lesson)
        assert refused.returncode == 1 and "forbidden" in refused.stderr


async def test_a_local_store_has_no_team_to_share_with(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        stored = await store(rc, "a note that stays on this machine")
        with pytest.raises(RemoteError) as refused:
            await rc.call(p.MemoryShare(record_id=stored.record_id), p.MemoryShared)
    assert refused.value.code == "invalid_request"
    assert "no team to share with" in refused.value.message


async def test_a_shared_fact_is_contested_with_the_team_s_current_one_for_both(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    subject = "on-call rota owner"
    async with team(daemon_factory, team_db, ("alice", "alice"), ("bob", "bob")) as (a, b):
        async with b.client(workspace="/ws/share") as rc:
            theirs = await store(
                rc, "bob owns the on-call rota", kind="fact", subject=subject, visibility="team"
            )
        async with a.client(workspace="/ws/share") as rc:
            mine = await store(rc, "carol owns the on-call rota", kind="fact", subject=subject)
            await rc.call(p.MemoryShare(record_id=mine.record_id, confirm=True), p.MemoryShared)
        # Shared, it joins the team's facts on the subject: both current, each the other's
        # contender, for both members.
        for d in (a, b):
            async with d.client(workspace="/ws/share") as rc:
                for mid, other in ((mine, theirs), (theirs, mine)):
                    shown = await rc.call(p.MemoryShow(memory_id=mid.record_id), p.MemoryShown)
                    assert [c.id for c in shown.memory.contenders] == [other.record_id]
