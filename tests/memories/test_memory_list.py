"""memory_list and experience_list through a real daemon: browsing newest first under the
searches' reader contracts, page by page, on both engines; and recallctl's commands for them."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

import msgspec
import pytest
from recall_client import protocol as p
from recall_client.client import RecallClient, RemoteError, connect
from recall_client.paths import read_admin_token
from recalld.domain.principal import Principal
from recalld.retrieval import listing
from recalld.store.port import Filter, MemoryRow, Reader

from tests.support.daemon import BIN, DaemonFactory, DaemonProcess, unchecked_call
from tests.support.team import TeamDb

pytestmark = pytest.mark.both_backends

WS, OTHER = "/ws/browse", "/ws/elsewhere"
DAY = 86400.0
# A path no machine has: a memory whose claims rest on it wants a spot check.
GONE = "/nonexistent-recalld-test/src/billing/invoice.py"


async def store(rc: RecallClient, text: str, **kw: Any) -> str:
    return (await rc.call(p.MemoryStore(text=text, **kw), p.MemoryStored)).record_id


async def listed(rc: RecallClient, **kw: Any) -> p.MemoryListResult:
    return await rc.call(p.MemoryList(**kw), p.MemoryListResult)


async def ids(rc: RecallClient, **kw: Any) -> list[str]:
    return [m.id for m in (await listed(rc, limit=200, **kw)).items]


@asynccontextmanager
async def admin(d: DaemonProcess, workspace: str = WS) -> AsyncIterator[RecallClient]:
    async with connect(
        agent="operator", workspace=workspace, path=d.socket, admin_token=read_admin_token()
    ) as rc:
        yield rc


def ctl(d: DaemonProcess, *args: str) -> Any:
    done = subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), "--workspace", WS, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=d.env(),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_pages_hold_every_memory_once_newest_first_and_each_filter_narrows(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    now = time.time()
    async with connect(
        agent="writer", workspace=WS, client="claude-code", model="opus", path=d.socket
    ) as rc:
        # Two share a ts: the id orders them, and paging must neither skip nor repeat one.
        entries = [
            await store(rc, f"entry number {i} about the deploy pipeline", ts=now - 60 * (i // 2))
            for i in range(7)
        ]
        tagged = await store(
            rc, "the kafka brokers restart on Sunday", tags=["kafka", "ops"], source="user"
        )
        old_fact = await store(
            rc, "the billing db listens on 5432", kind="fact", subject="billing db port", ts=1.0
        )
        new_fact = await store(
            rc, "the billing db listens on 5433 now", kind="fact", subject="Billing DB  port"
        )
        global_one = await store(rc, "prefer tabs over spaces everywhere", global_scope=True)
        forgotten = await store(rc, "a memory that will be forgotten soon")
        await store(rc, "a memory that expires at once", ttl_s=0.001)
    async with connect(agent="helper", workspace=WS, path=d.socket) as rc:
        by_helper = await store(rc, "the helper agent wrote this one", ts=now - 30 * DAY)
        await rc.call(p.Forget(record_id=forgotten), p.Forgotten)
    async with connect(agent="writer", workspace=OTHER, path=d.socket) as rc:
        elsewhere = await store(rc, "a memory of another workspace")
    await d.settled()

    async with d.client(agent="writer", workspace=WS) as rc:
        everything = await listed(rc, limit=200)
        order = [(m.ts, m.id) for m in everything.items]
        assert order == sorted(order, reverse=True)
        every_id = {m.id for m in everything.items}
        expected = {*entries, tagged, old_fact, new_fact, global_one, by_helper}
        assert every_id == expected, every_id ^ expected
        assert everything.next_before is None
        # Page by page, three at a time: the same memories in the same order, each once.
        paged: list[str] = []
        before = None
        for _ in range(10):
            page = await listed(rc, limit=3, before=before)
            assert len(page.items) <= 3
            paged += [m.id for m in page.items]
            before = page.next_before
            if before is None:
                break
        assert paged == [m.id for m in everything.items]
        # What an item says of itself.
        items = {m.id: m for m in everything.items}
        assert items[old_fact].superseded and items[old_fact].superseded_by == new_fact
        assert items[new_fact].kind == "fact" and items[new_fact].subject == "Billing DB  port"
        assert not items[new_fact].superseded and not items[new_fact].contested
        assert items[tagged].tags == ["kafka", "ops"] and items[tagged].source == "user"
        assert items[tagged].client == "claude-code" and items[tagged].model == "opus"
        assert items[tagged].eligibility == "eligible" and items[tagged].visibility == "private"
        assert items[global_one].global_scope and not items[tagged].global_scope
        assert items[by_helper].agent == "helper" and items[tagged].staleness_verdict == "fresh"
        # The workspace a plain agent sees counted: its own only.
        assert everything.workspaces == {WS: len(expected)}

        # Each filter narrows.
        assert set(await ids(rc, kind="fact")) == {old_fact, new_fact}
        assert new_fact not in await ids(rc, kind="entry")
        assert await ids(rc, kind="fact", include_superseded=False) == [new_fact]
        assert set(await ids(rc, subject="billing db PORT")) == {old_fact, new_fact}
        assert await ids(rc, tags=["kafka"]) == [tagged]
        assert await ids(rc, sources=["user"]) == [tagged]
        assert await ids(rc, agent="helper") == [by_helper]
        assert by_helper not in await ids(rc, client="claude-code")
        assert set(await ids(rc, model="opus")) == expected - {by_helper}
        assert await ids(rc, until=2.0) == [old_fact]
        assert set(await ids(rc, since=now - 61, until=now - 59)) == set(entries[2:4])
        # Every workspace, as memory_search's auto_scope false reads them.
        assert set(await ids(rc, all_workspaces=True)) == expected | {elsewhere}
        assert {m.workspace for m in (await listed(rc, all_workspaces=True)).items} == {WS, OTHER}

        # Another workspace named: refused without the admin token.
        with pytest.raises(RemoteError) as refused:
            await listed(rc, workspace=OTHER)
        assert refused.value.code == "forbidden"
        with pytest.raises(RemoteError) as bad:
            await listed(rc, before="not a cursor")
        assert bad.value.code == "invalid_request"
        with pytest.raises(p.RequestRuleError):
            p.MemoryList(workspace=WS, all_workspaces=True)
        both = {"op": "memory_list", "workspace": WS, "all_workspaces": True}
        contradicted = await unchecked_call(d, both, workspace=WS)
        assert isinstance(contradicted, p.Error) and contradicted.code == "invalid_request"
        assert "all_workspaces" in contradicted.message
    async with admin(d) as rc:
        theirs = await listed(rc, workspace=OTHER)
        # OTHER's own memory, and WS's global one (every workspace sees it).
        assert {m.id for m in theirs.items} == {elsewhere, global_one}
        assert theirs.workspaces == {WS: len(expected), OTHER: 1}

    # recallctl memories, as a person browses.
    shown = ctl(d, "memories", "--kind", "fact", "--json")
    assert [m["id"] for m in shown["items"]] == [new_fact, old_fact]
    assert [m["id"] for m in ctl(d, "memories", "--agent", "helper", "--json")["items"]] == [
        by_helper
    ]
    # recallctl acts with the admin token it can read, so it may name another workspace.
    assert [m["id"] for m in ctl(d, "memories", "--in", OTHER, "--json")["items"]] == [
        elsewhere,
        global_one,
    ]
    first = ctl(d, "memories", "--limit", "2", "--json")
    assert len(first["items"]) == 2 and first["next_before"]
    rest = ctl(d, "memories", "--before", first["next_before"], "--limit", "200", "--json")
    assert [m["id"] for m in first["items"] + rest["items"]] == paged


async def test_a_staleness_filter_lists_memories_whose_cited_path_is_gone(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    async with d.client(workspace=WS) as rc:
        stale = await store(rc, "invoices are rendered by the billing module", paths=[GONE])
        fresh = [await store(rc, f"a fresh memory about topic {i}") for i in range(4)]
    await d.settled()
    async with d.client(workspace=WS) as rc:
        page = await listed(rc, staleness="spot_check_recommended")
        assert [m.id for m in page.items] == [stale]
        assert page.items[0].path_drift_missing == 1 and page.next_before is None
        assert set(await ids(rc, staleness="fresh")) == set(fresh)
        assert await ids(rc, staleness="spot_check_required") == []
        # Filtered pages still page: one fresh memory at a time, each once.
        seen: list[str] = []
        before = None
        for _ in range(10):
            page = await listed(rc, staleness="fresh", limit=1, before=before)
            seen += [m.id for m in page.items]
            before = page.next_before
            if before is None:
                break
        assert sorted(seen) == sorted(fresh) and len(seen) == len(set(seen))
        # memory_search and memory_show judge it the same way.
        shown = (await rc.call(p.MemoryShow(memory_id=stale), p.MemoryShown)).memory
        assert shown.staleness_verdict == "spot_check_recommended"
        found = await rc.call(
            p.MemorySearch(query="invoices rendered billing module", min_score=0.0),
            p.MemorySearchResult,
        )
        assert [h.staleness_verdict for h in found.hits if h.id == stale] == [
            "spot_check_recommended"
        ]
    listed_ctl = ctl(d, "memories", "--staleness", "spot_check_recommended", "--json")
    assert [m["id"] for m in listed_ctl["items"]] == [stale]


async def test_experience_list_pages_the_workspaces_experiences_with_their_lessons(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    now = time.time()
    async with d.client(workspace=WS) as rc:
        recorded = []
        tasks: list[tuple[p.ExperienceStatus, str, str]] = [
            ("success", "bugfix", "run the failing test first"),
            ("failure", "ops", "drain the node before upgrading"),
            ("success", "bugfix", "run the failing test first"),
            ("unknown", "feature", "sketch the API before coding"),
        ]
        for i, (status, task_class, lesson) in enumerate(tasks):
            reply = await rc.call(
                p.RecordExperience(
                    description=f"task number {i}: {task_class} work",
                    status=status,
                    task_class=task_class,
                    lessons=[lesson],
                    ts=now - 100 * i,
                ),
                p.ExperienceRecorded,
            )
            recorded.append(reply.record_id)
        forgotten = recorded.pop()
        await rc.call(p.ForgetExperience(record_id=forgotten), p.ExperienceForgotten)
    async with d.client(workspace=OTHER) as rc:
        await rc.call(
            p.RecordExperience(description="another workspace's task"), p.ExperienceRecorded
        )
    await d.settled()

    async with d.client(workspace=WS) as rc:
        whole = await rc.call(p.ExperienceList(), p.ExperienceListResult)
        assert [e.id for e in whole.experiences] == recorded
        assert all(e.score == 0.0 for e in whole.experiences) and whole.next_before is None
        lessons = {x.text: x.support for x in whole.lessons}
        # The forgotten one's lesson has no live support left: it is not listed.
        assert lessons == {
            "run the failing test first": 2,
            "drain the node before upgrading": 1,
        }
        first = await rc.call(p.ExperienceList(limit=2), p.ExperienceListResult)
        assert [e.id for e in first.experiences] == recorded[:2] and first.next_before
        assert {x.text for x in first.lessons} == set(lessons)
        rest = await rc.call(
            p.ExperienceList(limit=2, before=first.next_before), p.ExperienceListResult
        )
        assert [e.id for e in rest.experiences] == recorded[2:] and rest.next_before is None
        assert [x.text for x in rest.lessons] == ["run the failing test first"]
        bugfixes = await rc.call(p.ExperienceList(task_class="bugfix"), p.ExperienceListResult)
        assert [e.id for e in bugfixes.experiences] == [recorded[0], recorded[2]]
        failures = await rc.call(p.ExperienceList(status="failure"), p.ExperienceListResult)
        assert [e.id for e in failures.experiences] == [recorded[1]]
    shown = ctl(d, "experience", "list", "--outcome", "success", "--json")
    assert [e["id"] for e in shown["experiences"]] == [recorded[0], recorded[2]]
    assert [x["text"] for x in shown["lessons"]] == ["run the failing test first"]


async def test_another_roles_private_memories_are_not_listed_but_team_ones_are(
    daemon_factory: DaemonFactory, team_db: TeamDb
) -> None:
    alice = daemon_factory("alice", extra_env={"RECALLD_DATABASE_URL": team_db.url("alice")})
    bob = daemon_factory("bob", extra_env={"RECALLD_DATABASE_URL": team_db.url("bob")})
    await alice.start()
    await bob.start()
    try:
        async with alice.client(workspace=WS) as rc:
            private = await store(rc, "alice's own note about her review queue")
            team = await store(rc, "the staging cluster deploys from main", visibility="team")
        await alice.settled()
        await bob.settled()
        async with bob.client(workspace=WS) as rc:
            theirs = await listed(rc)
            assert [m.id for m in theirs.items] == [team]
            assert theirs.items[0].visibility == "team"
            assert theirs.workspaces == {WS: 1}
        async with admin(bob) as rc:
            assert private not in await ids(rc, all_workspaces=True)
        async with alice.client(workspace=WS) as rc:
            assert await ids(rc) == [team, private]
    finally:
        await alice.stop()
        await bob.stop()


class _Rows:
    """Just enough of a reader for memory_list's loop: memories newest first, no uses."""

    def __init__(self, rows: list[MemoryRow]) -> None:
        self.rows = sorted(rows, key=lambda r: (r.ts, r.id), reverse=True)
        self.examined = 0

    def newest_page(
        self, f: Filter, *, before: tuple[float, str] | None, limit: int, **narrowing: Any
    ) -> list[MemoryRow]:
        after = [r for r in self.rows if before is None or (r.ts, r.id) < before][:limit]
        self.examined += len(after)
        return after

    def uses(self, rowids: Sequence[int]) -> list[Any]:
        return []

    def workspace_counts(self, f: Filter) -> dict[str, int]:
        return {}


class _Ops:
    def aliases(self) -> list[Any]:
        return []  # no checkout of the workspace here: cited paths go unchecked


class _Reader:
    def __init__(self, rows: list[MemoryRow]) -> None:
        self.memories = _Rows(rows)
        self.ops = _Ops()


def _row(i: int, now: float, verified_days_ago: float = 0.0) -> MemoryRow:
    return MemoryRow(
        rowid=i,
        id=f"mem_{i:06d}",
        text=f"memory {i}",
        ts=now - i,
        tags=[],
        source=None,
        trust=1.0,
        created_at=now - i,
        updated_at=now - i,
        agent="a",
        workspace=WS,
        session=None,
        eligibility="eligible",
        expires_at=None,
        kind="entry",
        subject=None,
        subject_key=None,
        authority="first-party",
        distortion_tolerance=None,
        origin=WS,
        origin_repo=None,
        origin_commit=None,
        verified_commit=None,
        last_verified_at=now - verified_days_ago * DAY,
        writer_client=None,
        writer_model=None,
        superseded_by=None,
        visibility="private",
    )


def test_a_staleness_filter_examines_a_bounded_number_of_memories_a_request() -> None:
    now = time.time()
    rows = [_row(i, now, verified_days_ago=400 if i == 1500 else 0) for i in range(2500)]
    fake = _Reader(rows)
    reader = cast(Reader, fake)
    who = Principal(agent="a", workspace=WS, uid=0, pid=0, scopes=frozenset(), session="s")
    req = p.MemoryList(staleness="spot_check_required", limit=5)
    first = listing.memories(reader, who, req, every_count=False)
    # Nothing in the first MAX_EXAMINED: an empty page, and where to go on from.
    assert first.items == [] and fake.memories.examined == listing.MAX_EXAMINED
    assert first.next_before == listing.cursor(rows[999].ts, rows[999].id)
    second = listing.memories(
        reader, who, msgspec.structs.replace(req, before=first.next_before), every_count=False
    )
    assert [m.id for m in second.items] == ["mem_001500"] and second.next_before is not None
    third = listing.memories(
        reader, who, msgspec.structs.replace(req, before=second.next_before), every_count=False
    )
    assert third.items == [] and third.next_before is None
    assert fake.memories.examined == len(rows)
