"""What memory_search answers with beside its ranking, through a real daemon: the current fact
an expanded top hit serves, and a cortex that holds only the facts the query is about."""

from __future__ import annotations

import time

import pytest

from tests.support.daemon import DaemonProcess
from tests.support.memories import search, settled, store

pytestmark = pytest.mark.both_backends

DAY = 86400.0


async def test_expand_top_serves_the_current_fact_of_a_superseded_top_hits_chain(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client(workspace="/ws/expand-chain") as rc:
        # Only the oldest fact words it as the query does; two newer ones replaced it in turn.
        oldest = await store(
            rc,
            "Postgres uses port 5432 on the prod host.",
            kind="fact",
            subject="prod db port",
            ts=time.time() - 20 * DAY,
        )
        middle = await store(
            rc,
            "The prod database moved to 5433.",
            kind="fact",
            subject="prod db port",
            ts=time.time() - 10 * DAY,
        )
        current = await store(
            rc, "The prod database now listens on 5434.", kind="fact", subject="prod db port"
        )
        assert current.superseded == [middle.record_id]
        await settled(running_daemon)
        ranked = await search(rc, "which port does postgres use")
        expanded = await search(rc, "which port does postgres use", expand_top=True)
    # Ranked alone, the superseded fact the query's words match comes first.
    assert ranked.hits[0].id == oldest.record_id and ranked.hits[0].superseded
    assert not ranked.hits[0].expanded
    top, *rest = expanded.hits
    assert top.id == current.record_id and top.expanded and not top.superseded
    assert top.text == "The prod database now listens on 5434." and top.path_drift is not None
    assert top.score == ranked.hits[0].score
    # The hit that earned the expansion follows, compact, still pointing to its successor.
    assert rest[0].id == oldest.record_id and rest[0].superseded_by == middle.record_id
    assert not any(h.expanded for h in rest)
    assert [h.id for h in expanded.hits].count(current.record_id) == 1


async def test_the_cortex_holds_only_the_facts_of_hits_about_the_query(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client(workspace="/ws/cortex-related") as rc:
        formatter = await store(
            rc, "We format python code with black.", kind="fact", subject="code formatter"
        )
        # Each shares one word with the query, no more: weak hits about something else.
        await store(
            rc,
            "Python 3.11 is the minimum version.",
            kind="fact",
            subject="python version",
            distortion_tolerance="constraint",
        )
        # Stored with one timestamp, neither is newer: the second contests the first.
        ts = time.time() - DAY
        await store(
            rc, "Deploy the python service to fly.io.", kind="fact", subject="deploy host", ts=ts
        )
        contested = await store(
            rc, "Deploy the python service to render.", kind="fact", subject="deploy host", ts=ts
        )
        assert contested.action == "contested"
        await settled(running_daemon)
        result = await search(rc, "how do we format python code", min_score=0.0)
    assert [c.id for c in result.cortex] == [formatter.record_id]
    # The weak hits are still ranked, only their facts stay out of the answer.
    assert {h.subject for h in result.hits} >= {"python version", "deploy host"}
