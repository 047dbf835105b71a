"""Rolling a session's captured episodes up into an experience, through a real daemon."""

from __future__ import annotations

from typing import Any

import pytest
from recall_client import protocol as p
from recall_client.client import RecallClient, RemoteError
from recalld.handlers.rollup import session_status
from recalld.store.port import SessionEpisode

from tests.support.daemon import DaemonProcess

pytestmark = pytest.mark.both_backends

AGENT = "claude-code"
WS = "/ws/shop"
T0 = 1_700_000_000.0


@pytest.fixture
async def running_daemon(running_daemon: DaemonProcess) -> DaemonProcess:
    report = await running_daemon.status(wait_model_s=30)
    assert report.model.state == "ready", report.model.reason
    return running_daemon


async def capture(rc: RecallClient, summary: str, at: float, **fields: Any) -> str:
    fields.setdefault("session_id", "s1")
    reply = await rc.call(
        p.CaptureEpisode(summary=summary, ts=T0 + at, **fields), p.EpisodeCaptured
    )
    return reply.record_id


async def a_session(rc: RecallClient, session: str = "s1") -> list[str]:
    """A prompt, five tool calls (one failed) over ten minutes, and the end of the turn."""
    s = {"session_id": session}
    return [
        await capture(
            rc,
            "prompt: The nightly export job fails on staging, fix it",
            0,
            episode_type="prompt",
            source="user",
            **s,
        ),
        await capture(
            rc,
            "Read: /ws/shop/jobs/export.py -> ok",
            30,
            tool="Read",
            files=["/ws/shop/jobs/export.py"],
            **s,
        ),
        await capture(
            rc,
            "Read: /usr/lib/python3.11/csv.py -> ok",
            60,
            tool="Read",
            files=["/usr/lib/python3.11/csv.py"],
            **s,
        ),
        await capture(
            rc,
            "Bash: python -m jobs.export -> failed: UnicodeEncodeError",
            120,
            tool="Bash",
            status="error",
            error_code="exit_1",
            **s,
        ),
        await capture(
            rc,
            "Edit: /ws/shop/jobs/export.py -> ok",
            300,
            tool="Edit",
            files=["/ws/shop/jobs/export.py"],
            **s,
        ),
        await capture(
            rc,
            "Write: tests/test_export.py -> ok",
            420,
            tool="Write",
            files=["tests/test_export.py"],
            **s,
        ),
        await capture(rc, "turn ended", 600, episode_type="turn_end", **s),
    ]


async def roll_up(rc: RecallClient, session: str = "s1", **fields: Any) -> p.ExperienceRolledUp:
    return await rc.call(p.RollUpExperience(session=session, **fields), p.ExperienceRolledUp)


async def search(rc: RecallClient, query: str) -> p.ExperienceSearchResult:
    return await rc.call(p.SearchExperience(query=query), p.ExperienceSearchResult)


async def test_a_session_rolls_up_into_one_experience_computed_from_its_episodes(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client(agent=AGENT, workspace=WS) as rc:
        episode_ids = await a_session(rc)
        rolled = await roll_up(rc)
        found = await search(rc, "nightly export job fails")
        explained = await rc.call(p.ExplainNode(record_id=rolled.record_id), p.NodeExplained)

    assert rolled.created and not rolled.forgotten and rolled.episodes == 7
    e = rolled.experience
    assert e is not None and e.id == rolled.record_id
    assert e.description == "The nightly export job fails on staging, fix it"
    assert (e.agent, e.session, e.task_class, e.strategy) == (AGENT, "s1", "general", None)
    assert e.tool_calls == 5
    assert e.minutes == 10.0  # (T0 + 600 - T0) / 60
    assert e.ts == T0 + 600
    assert e.files == ["jobs/export.py", "tests/test_export.py"]  # /usr/lib is not the project's
    assert e.status == "success"
    assert rolled.why == "no verdict; the last tool call succeeded (1 of 5 tool calls failed)"
    assert [x.id for x in found.experiences] == [rolled.record_id]
    assert found.experiences[0].tool_calls == 5
    assert [ep.id for ep in explained.episodes] == episode_ids


async def test_rolling_up_again_updates_the_same_experience(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(agent=AGENT, workspace=WS) as rc:
        await a_session(rc)
        first = await roll_up(rc)
        again = await roll_up(rc)
        # The session goes on: another turn, a failed test run.
        await capture(rc, "Bash: pytest -q -> failed", 900, tool="Bash", status="error")
        later = await roll_up(rc)
        found = await search(rc, "nightly export job fails")
    assert first.created and not again.created and not later.created
    assert first.record_id == again.record_id == later.record_id
    assert first.experience == again.experience
    assert later.experience is not None
    assert (later.experience.tool_calls, later.experience.minutes) == (6, 15.0)
    assert later.experience.status == "failure"
    assert later.why == "no verdict; the last tool call failed (2 of 6 tool calls failed)"
    assert [x.id for x in found.experiences] == [first.record_id]


async def test_given_fields_win_and_are_kept_by_later_roll_ups(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client(agent=AGENT, workspace=WS) as rc:
        await a_session(rc)
        await roll_up(rc)
        given = await roll_up(
            rc,
            description="Fixed the export job's encoding on staging",
            status="failure",
            strategy="reproduce locally, then force utf-8",
            task_class="bugfix",
            lessons=["Open CSV exports with encoding='utf-8'.", "Reproduce with staging data."],
        )
        hook = await roll_up(rc)  # a later hook gives nothing
        more = await roll_up(
            rc,
            lessons=["open csv exports with encoding = 'utf-8'", "Check the locale of cron jobs."],
        )
        found = await search(rc, "export job encoding")
    for reply in (given, hook, more):
        e = reply.experience
        assert e is not None
        assert e.description == "Fixed the export job's encoding on staging"
        assert (e.status, e.task_class) == ("failure", "bugfix")
        assert e.strategy == "reproduce locally, then force utf-8"
        assert reply.why == "given by the caller"
    assert [(x.text, x.merged) for x in given.lessons] == [
        ("Open CSV exports with encoding='utf-8'.", False),
        ("Reproduce with staging data.", False),
    ]
    assert {x.text for x in hook.lessons} == {x.text for x in given.lessons}
    # The repeated lesson merged into the stored one; each lesson is supported once.
    assert [(x.text, x.merged, x.support) for x in more.lessons] == [
        ("Open CSV exports with encoding='utf-8'.", True, 1),
        ("Check the locale of cron jobs.", False, 1),
        ("Reproduce with staging data.", True, 1),
    ]
    assert [x.id for x in found.experiences] == [given.record_id]
    assert len(found.lessons) == 3


async def test_the_sessions_verdict_decides_the_status(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(agent=AGENT, workspace=WS) as rc:
        await a_session(rc)
        await rc.call(p.WorkResult(session_id="s1", task_result=0.2), p.VerdictSet)
        failed = await roll_up(rc)
        await rc.call(p.WorkResult(session_id="s1", task_result=1.0), p.VerdictSet)
        succeeded = await roll_up(rc)
    assert failed.experience is not None and failed.experience.status == "failure"
    assert failed.why == "the session's verdict task_result 0.2"
    assert succeeded.experience is not None and succeeded.experience.status == "success"


def _ep(
    tool: str | None = "Bash",
    status: str = "ok",
    episode_type: str = "tool_call",
    task_result: float | None = None,
    verdict_at: float | None = None,
) -> SessionEpisode:
    return SessionEpisode(
        ts=0.0,
        agent="a",
        text="t",
        eligibility="eligible",
        episode_type=episode_type,
        tool=tool,
        status=status,
        task_result=task_result,
        verdict_at=verdict_at,
        files=[],
    )


@pytest.mark.parametrize(
    ("episodes", "status"),
    [
        ([_ep(tool=None, episode_type="prompt")], "unknown"),
        ([_ep(), _ep(status="started")], "success"),  # an intent is not a finished call
        ([_ep(), _ep(status="error")], "failure"),
        ([_ep(status="error"), _ep(status="timeout"), _ep()], "unknown"),
        ([_ep(status="error"), _ep()], "success"),  # half failed, the last succeeded
        ([_ep(), _ep(tool=None, episode_type="turn_end", status="error")], "failure"),
        (
            [
                _ep(status="error", task_result=0.9, verdict_at=1),
                _ep(task_result=0.1, verdict_at=2),
            ],
            "failure",
        ),  # the latest verdict counts
        ([_ep(status="error", task_result=0.5)], "success"),
    ],
)
def test_the_status_rule(episodes: list[SessionEpisode], status: str) -> None:
    assert session_status(episodes)[0] == status


async def test_a_session_without_episodes_is_not_found(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(agent=AGENT, workspace=WS) as rc:
        await a_session(rc)
        with pytest.raises(RemoteError) as unknown:
            await roll_up(rc, session="no-such-session")
    async with running_daemon.client(agent="someone-else", workspace=WS) as other:
        with pytest.raises(RemoteError) as not_theirs:
            await roll_up(other)
    async with running_daemon.client(agent=AGENT, workspace="/ws/elsewhere") as elsewhere:
        with pytest.raises(RemoteError) as other_workspace:
            await roll_up(elsewhere)
    assert unknown.value.code == not_theirs.value.code == other_workspace.value.code == "not_found"
    assert "no captured episodes of session no-such-session in workspace /ws/shop" in (
        unknown.value.message
    )
    assert "by agent 'someone-else'" in not_theirs.value.message


async def test_a_forgotten_roll_up_is_not_recorded_again(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(agent=AGENT, workspace=WS) as rc:
        await a_session(rc)
        rolled = await roll_up(rc, lessons=["Open CSV exports with encoding='utf-8'."])
        await rc.call(p.ForgetExperience(record_id=rolled.record_id), p.ExperienceForgotten)
        again = await roll_up(rc)
        found = await search(rc, "nightly export job fails")
    assert again.forgotten and not again.created
    assert again.record_id == rolled.record_id and again.experience is None
    assert (found.experiences, found.lessons) == ([], [])


async def test_secrets_never_reach_the_experience(running_daemon: DaemonProcess) -> None:
    secret = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    async with running_daemon.client(agent=AGENT, workspace=WS) as rc:
        await capture(rc, f"prompt: push with token {secret} to the fork", 0, episode_type="prompt")
        await capture(rc, "Bash: git push -> ok", 60, tool="Bash")
        derived = await roll_up(rc)
        given = await roll_up(
            rc, description=f"Pushed using {secret}", strategy=f"GITHUB_TOKEN={secret} git push"
        )
    for reply in (derived, given):
        assert reply.experience is not None
        assert secret not in reply.experience.description
        assert secret not in (reply.experience.strategy or "")
    assert given.experience is not None and "Pushed using" in given.experience.description


async def test_more_than_twenty_lessons_in_all_are_refused(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(agent=AGENT, workspace=WS) as rc:
        await a_session(rc)
        first = await roll_up(rc, lessons=[f"Lesson number {i} about exports" for i in range(15)])
        with pytest.raises(RemoteError) as info:
            await roll_up(rc, lessons=[f"Another lesson {i} about cron" for i in range(6)])
        after = await rc.call(p.ExplainNode(record_id=first.record_id), p.NodeExplained)
    assert info.value.code == "invalid_request"
    assert "21 lessons" in info.value.message
    assert len(after.lessons) == 15
