"""A store learns its relevance calibration from what its agents did with the hits.

Outcomes recorded with a hit's use token move the calibration of the caller's workspace and
user, not another workspace's; what was learned changes memory_search's relevance in the
direction taught, explain names it, relevance_reset brings the prior back, and a token of
an older recalld (no evidence in it) still records its outcome, teaching nothing.
"""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager

import pytest
from recall_client import protocol as p
from recall_client.client import RecallClient, connect
from recall_client.paths import read_admin_token
from recalld.domain import use_tokens

from tests.support.daemon import DaemonProcess
from tests.support.memories import search, settled, store
from tests.support.recallctl import ctl

pytestmark = pytest.mark.both_backends

WS, OTHER = "/ws/learning", "/ws/elsewhere"
NOTES = [
    "The staging deploy runs from the release branch every Tuesday.",
    "Database migrations are applied by the deploy job before the web tier restarts.",
    "The billing service retries failed webhooks three times with backoff.",
    "Feature flags live in the flags table and are cached for a minute.",
]
QUERY = "when does the staging deploy run"


def admin(d: DaemonProcess, workspace: str = WS) -> AbstractAsyncContextManager[RecallClient]:
    return connect(
        agent="operator", workspace=workspace, path=d.socket, admin_token=read_admin_token()
    )


async def shown(d: DaemonProcess, workspace: str = WS) -> p.RelevanceCalibration:
    async with d.client(workspace=workspace) as rc:
        reply = await rc.call(p.RelevanceShow(), p.RelevanceShown)
    return reply.calibration


async def teach(rc: RecallClient, outcome: p.Outcome, rounds: int) -> int:
    """Search ``rounds`` times and record ``outcome`` for every hit; how many outcomes."""
    taught = 0
    for _ in range(rounds):
        result = await search(rc, QUERY, min_score=0.0)
        for hit in result.hits:
            assert hit.use_token is not None
            await rc.call(
                p.MemoryRecordUse(use_token=hit.use_token, outcome=outcome), p.UseRecorded
            )
            taught += 1
    return taught


async def top_relevance(rc: RecallClient) -> tuple[float, dict[str, object]]:
    result = await search(rc, QUERY, min_score=0.0, explain=True)
    assert result.trace is not None and result.hits[0].trace is not None
    return float(result.hits[0].trace["relevance"]), result.trace["calibration"]


async def test_outcomes_teach_the_workspace_and_the_user_and_move_relevance_as_taught(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    async with d.client(workspace=WS) as rc:
        for text in NOTES:
            await store(rc, text)
        await settled(d)
        before, prior = await top_relevance(rc)
        assert prior["source"] == "prior" and prior["updates"] == 0
        taught = await teach(rc, "used", 5)
        after, learned = await top_relevance(rc)
    # Every hit used: the workspace learns its hits are more relevant than the prior said.
    assert learned["source"] == "workspace" and learned["updates"] == taught
    assert learned["user_updates"] == taught
    assert after > before
    mine = await shown(d)
    assert (mine.source, mine.updates, mine.user_updates) == ("workspace", taught, taught)
    assert mine.bias > prior["bias"]  # type: ignore[operator]
    # Another workspace of the same user falls back to the user's calibration; it has
    # learned nothing of its own.
    other = await shown(d, OTHER)
    assert (other.source, other.updates, other.user_updates) == ("user", 0, taught)

    # Ignored hits teach the other way, in that workspace alone.
    async with d.client(workspace=WS) as rc:
        await teach(rc, "ignored", 8)
        lowered, _ = await top_relevance(rc)
    assert lowered < after

    # Reset of the workspace only (as recallctl does it): the user's calibration ranks it;
    # reset of all: the prior.
    shown_out = ctl(d, "--workspace", WS, "relevance", "show")
    assert "ranked by the workspace's calibration" in shown_out.stdout, shown_out.stderr
    one = ctl(d, "--workspace", WS, "relevance", "reset", "--workspace")
    assert one.returncode == 0 and "cleared 1 of this workspace's" in one.stdout, one.stderr
    assert (await shown(d)).source == "user"
    async with admin(d) as rc:
        rest = await rc.call(p.RelevanceReset(), p.RelevanceCleared)
    assert rest.cleared == 1
    async with d.client(workspace=WS) as rc:
        again, calibration = await top_relevance(rc)
    assert calibration["source"] == "prior" and again == pytest.approx(before, abs=1e-3)


async def test_a_token_teaches_once_and_one_without_evidence_records_its_outcome_only(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    async with d.client(workspace=WS) as rc:
        kept = await store(rc, NOTES[0])
        await settled(d)
        hit = (await search(rc, QUERY, min_score=0.0)).hits[0]
        assert hit.use_token is not None
        for outcome in ("used", "ignored"):
            await rc.call(
                p.MemoryRecordUse(use_token=hit.use_token, outcome=outcome), p.UseRecorded
            )
        assert (await shown(d)).updates == 1
        # A token as an older recalld issued it: signed, with no evidence in it.
        (key,) = d.sql("SELECT key FROM daemon_keys WHERE name = 'use_token'")[0]
        old = use_tokens.issue(bytes(key), kept.record_id, time.time())
        reply = await rc.call(
            p.MemoryRecordUse(use_token=old, outcome="contradicted"), p.UseRecorded
        )
    assert [(u.id, u.outcome) for u in reply.recorded] == [(kept.record_id, "contradicted")]
    assert (await shown(d)).updates == 1
