"""Finding 2: authorization. Every request type, sent by a plain agent of another workspace,
gets nothing of the victim's and changes nothing of it; agent names can be made real
credentials; status and explain_node show a plain agent only what it may read.
"""

from __future__ import annotations

import typing
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec
import pytest
from mcp import Client
from recall_client import protocol as p
from recall_client.client import RecallClient, RemoteError, connect
from recall_client.paths import read_admin_token

from tests.support.daemon import DaemonProcess
from tests.support.episodes import HIJACK, database_bytes, settled

from .writes import ctl, shim_params

pytestmark = pytest.mark.both_backends

VICTIM_WS, MALLORY_WS = "/ws/victim", "/ws/mallory"
# The attacks search for MARK; only the victim's stored texts hold TELL, so a reply with
# TELL in it carries the victim's text, whatever the reply echoes of the request.
MARK = "zebraquartz"
TELL = "offlinevault"
REFUSALS = {"forbidden", "not_found", "invalid_request"}


@dataclass
class Victim:
    memory: str
    fact: str
    episode: str
    blocked_episode: str
    experience: str
    lesson: str
    use_token: str

    def ids(self) -> list[str]:
        return [
            self.memory,
            self.fact,
            self.episode,
            self.blocked_episode,
            self.experience,
            self.lesson,
        ]


def admin(
    d: DaemonProcess, workspace: str = VICTIM_WS, agent: str = "victim"
) -> AbstractAsyncContextManager[RecallClient]:
    return connect(agent=agent, workspace=workspace, path=d.socket, admin_token=read_admin_token())


async def plant(d: DaemonProcess) -> Victim:
    async with d.client(agent="victim", workspace=VICTIM_WS) as rc:
        memory = await rc.call(
            p.MemoryStore(text=f"the {MARK} launch phrase is kept {TELL}"), p.MemoryStored
        )
        fact = await rc.call(
            p.MemoryStore(
                text=f"the {MARK} release train leaves Friday {TELL}",
                kind="fact",
                subject="release train",
            ),
            p.MemoryStored,
        )
        episode = await rc.call(
            p.CaptureEpisode(
                summary=f"ran the {MARK} migration {TELL}", session_id="victim-session", tool="Bash"
            ),
            p.EpisodeCaptured,
        )
        blocked = await rc.call(
            p.CaptureEpisode(summary=f"{MARK} {HIJACK}", session_id="victim-session", tool="Bash"),
            p.EpisodeCaptured,
        )
        experience = await rc.call(
            p.RecordExperience(
                description=f"rolled out {MARK} to production {TELL}",
                status="success",
                session="victim-session",
                lessons=[f"{MARK} needs a canary first {TELL}"],
            ),
            p.ExperienceRecorded,
        )
        await settled(d, episode.record_id, blocked.record_id)
        hits = await rc.call(p.MemorySearch(query=f"{MARK} launch phrase"), p.MemorySearchResult)
    return Victim(
        memory=memory.record_id,
        fact=fact.record_id,
        episode=episode.record_id,
        blocked_episode=blocked.record_id,
        experience=experience.record_id,
        lesson=experience.lessons[0].id,
        use_token=hits.hits[0].use_token,
    )


def attacks(v: Victim) -> list[p.Request]:
    """One or more requests of every type, aimed at the victim's records and workspace."""
    return [
        p.Hello(version=p.PROTOCOL_VERSION, agent="victim", workspace=VICTIM_WS),
        p.Ping(),
        p.Status(),
        p.MemoryStore(text="replaces it", supersedes=[v.memory]),
        p.MemoryStore(text="leans on it", depends_on=[p.DependsOn(id=v.fact, note="x")]),
        p.MemoryStore(text="planted in the victim's workspace", workspace=VICTIM_WS),
        p.MemorySearch(query=f"{MARK} launch phrase"),
        p.MemorySearch(query=f"{MARK} launch phrase", workspace=VICTIM_WS),
        p.ContextBlock(event="prompt", session_id="m-1", prompt=f"{MARK} launch phrase"),
        p.ContextBlock(event="session_start", session_id="m-1"),
        p.ContextBlock(
            event="prompt", session_id="m-2", prompt=f"{MARK} launch phrase", workspace=VICTIM_WS
        ),
        p.ContextBlock(event="session_start", session_id="m-2", workspace=VICTIM_WS),
        p.ContextLog(),
        p.ContextLog(session_id="victim-session", memory_id=v.memory),
        p.ContextLog(workspace=VICTIM_WS),
        p.ContextLog(all_workspaces=True),
        p.ContextLog(any_caller=True),
        p.MemoryList(),
        p.MemoryList(workspace=VICTIM_WS),
        p.MemoryList(workspace=VICTIM_WS, kind="fact", include_superseded=False),
        p.MemoryUpdate(memory_id=v.memory, text="rewritten by mallory"),
        p.MemoryUpdate(memory_id=v.fact, subject="mallory's now"),
        p.MemoryVerify(memory_id=v.memory),
        p.MemoryShow(memory_id=v.memory),
        p.MemoryShow(memory_id=v.fact),
        p.MemoryRecordUse(memory_ids=[v.memory], outcome="contradicted"),
        p.MemoryRecordUse(use_token=v.use_token, outcome="contradicted"),
        p.MemoryFactResolve(subject="release train", accept=True),
        p.MemoryShare(record_id=v.memory, confirm=True),
        p.MemoryShare(record_id=v.lesson, confirm=True),
        p.CaptureEpisode(summary="planted episode", workspace=VICTIM_WS),
        p.WorkSearch(query=f"{MARK} migration", include_pending=True, min_trust=0.0),
        p.WorkSearch(query=f"{MARK} migration", any_caller=True),
        p.WorkResult(task_result=0.0, session_id="victim-session"),
        p.WorkResult(task_result=0.0, episode_id=v.episode),
        p.WorkResult(task_result=0.0, session_id="victim-session", any_caller=True),
        *[p.Forget(record_id=i) for i in v.ids()],
        p.RecordExperience(
            description="mallory's task", lessons=[f"{MARK} needs a canary first"], status="failure"
        ),
        p.SearchExperience(query=f"rolled out {MARK}"),
        p.ExperienceList(),
        p.ExperienceList(status="success"),
        p.ExplainNode(record_id=v.experience, query=MARK),
        p.ForgetExperience(record_id=v.experience),
        p.GetExecutionContext(task=f"roll out {MARK}"),
        p.RollUpExperience(session="victim-session"),
        p.Export(),
        p.Export(kind="episode"),
        # A row claiming the victim's workspace and name: import is the admin's alone.
        p.Import(
            records=[
                p.ExportedRecord(
                    id="mem_planted",
                    kind="memory",
                    text=f"{MARK} is cancelled",
                    workspace=VICTIM_WS,
                    agent="victim",
                    ts=1.0,
                    created_at=1.0,
                    updated_at=1.0,
                    trust=1.0,
                    eligibility="eligible",
                )
            ]
        ),
        p.Reindex(),
        p.Doctor(),
        p.RelevanceShow(),
        p.RelevanceReset(),
        p.RelevanceReset(workspace_only=True),
        p.WorkspaceApprove(workspace=MALLORY_WS),
        p.WorkspaceRevoke(workspace=VICTIM_WS),
        p.WorkspaceList(),
        p.AgentEnroll(agent="victim"),
        p.AgentRevoke(agent="victim"),
        p.AgentList(),
    ]


def request_types() -> set[type]:
    return set(typing.get_args(p.Requests))


def leaks(reply: p.Reply, v: Victim) -> list[str]:
    text = msgspec.json.encode(reply).decode()
    return [x for x in (TELL, *v.ids(), '"victim-session"', '"victim"') if x in text]


async def test_every_request_type_as_a_plain_agent_of_another_workspace(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    v = await plant(d)
    tried = attacks(v)
    assert {type(r) for r in tried} == request_types(), "a request type has no attack here"
    outcomes: dict[str, str] = {}
    async with d.client(agent="victim", workspace=VICTIM_WS):  # the victim is connected
        async with d.client(agent="mallory", workspace=MALLORY_WS) as rc:
            for req in tried:
                name = f"{type(req).__name__}({msgspec.json.encode(req).decode()[:80]})"
                try:
                    reply: p.Reply = await rc.call(req)
                except RemoteError as exc:
                    assert exc.code in REFUSALS, f"{name}: {exc.code} {exc.message}"
                    outcomes[name] = exc.code
                    continue
                assert not leaks(reply, v), f"{name} returned the victim's {leaks(reply, v)}"
                outcomes[name] = type(reply).__name__
    # The crossings are refused, not merely empty.
    refused = {n for n, o in outcomes.items() if o in REFUSALS}
    for kind in (
        "Export",
        "Import",
        "Reindex",
        "Doctor",
        "RelevanceReset",
        "WorkspaceApprove",
        "AgentEnroll",
        "MemoryShow",
        "MemoryList",
        "ContextBlock",
        "ContextLog",
        "MemoryUpdate",
        "MemoryVerify",
        "Forget",
        "ForgetExperience",
        "ExplainNode",
        "MemoryShare",
    ):
        assert any(n.startswith(kind + "(") for n in refused), (kind, outcomes)

    # Nothing of the victim's changed.
    async with admin(d) as rc:
        shown = (await rc.call(p.MemoryShow(memory_id=v.memory), p.MemoryShown)).memory
        assert shown.text == f"the {MARK} launch phrase is kept {TELL}"
        assert not shown.superseded and shown.outcomes == {}
        assert shown.visibility == "private"
        fact = (await rc.call(p.MemoryShow(memory_id=v.fact), p.MemoryShown)).memory
        assert fact.subject == "release train" and not fact.depended_on_by
        episodes = await rc.call(p.WorkSearch(query=MARK, any_caller=True), p.WorkSearchResult)
        assert [(e.id, e.task_result) for e in episodes.results] == [(v.episode, None)]
        found = await rc.call(
            p.SearchExperience(query=f"rolled out {MARK}"), p.ExperienceSearchResult
        )
        assert [e.id for e in found.experiences] == [v.experience]
        assert [(x.id, x.support) for x in found.lessons] == [(v.lesson, 1)]
        approvals = await rc.call(p.WorkspaceList(), p.WorkspaceListResult)
        assert approvals.approved == []


async def test_an_enrolled_agent_name_needs_its_token(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    d = running_daemon
    async with admin(d) as rc:
        enrolled = await rc.call(p.AgentEnroll(agent="claude"), p.AgentEnrolled)
        with pytest.raises(RemoteError) as again:
            await rc.call(p.AgentEnroll(agent="claude"), p.AgentEnrolled)
        assert again.value.code == "invalid_request"

    async def hello(**kw: object) -> str:
        try:
            async with connect(agent="claude", workspace=VICTIM_WS, path=d.socket, **kw) as rc:  # type: ignore[arg-type]
                assert rc.welcome is not None
                return "welcome"
        except RemoteError as exc:
            return exc.code

    assert await hello() == "forbidden"
    assert await hello(agent_token="not-the-token") == "forbidden"
    assert await hello(agent_token=enrolled.token) == "welcome"
    assert await hello(admin_token=read_admin_token()) == "welcome"
    # A token for a name that has none is a mistake worth saying so.
    async with connect(agent="other", workspace=VICTIM_WS, path=d.socket) as rc:
        assert rc.welcome is not None
    with pytest.raises(RemoteError) as stray:
        async with connect(
            agent="other", workspace=VICTIM_WS, path=d.socket, agent_token=enrolled.token
        ):
            pass
    assert stray.value.code == "forbidden"

    # A rotated credential retires the old token; a restart keeps the new one.
    async with admin(d) as rc:
        rotated = await rc.call(p.AgentEnroll(agent="claude", rotate=True), p.AgentEnrolled)
        assert rotated.rotated and rotated.token != enrolled.token
    assert await hello(agent_token=enrolled.token) == "forbidden"
    assert await d.stop() == 0
    await d.start()
    assert await hello(agent_token=rotated.token) == "welcome"
    async with admin(d) as rc:
        listing = await rc.call(p.AgentList(), p.AgentListResult)
        assert [a.agent for a in listing.agents] == ["claude"]
        await rc.call(p.AgentRevoke(agent="claude"), p.AgentChanged)
    assert await hello() == "welcome"
    # The database holds a digest, never the token.
    db = database_bytes(d)
    assert rotated.token.encode() not in db and enrolled.token.encode() not in db


async def test_status_shows_a_plain_agent_only_its_own_connections(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    async with d.client(agent="victim", workspace=VICTIM_WS):
        async with d.client(agent="mallory", workspace=MALLORY_WS) as rc:
            report = (await rc.call(p.Status(), p.StatusResult)).report
            assert {a.agent for a in report.agents} == {"mallory"}
        async with admin(d, agent="recallctl") as rc:
            report = (await rc.call(p.Status(), p.StatusResult)).report
            assert {"victim", "recallctl"} <= {a.agent for a in report.agents}


async def test_explain_node_shows_only_the_callers_eligible_episodes(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    async with d.client(agent="helper", workspace=VICTIM_WS) as rc:
        other = await rc.call(
            p.CaptureEpisode(
                summary="the helper's step in the same session",
                session_id="victim-session",
                tool="Read",
            ),
            p.EpisodeCaptured,
        )
    v = await plant(d)
    await settled(d, other.record_id)

    def episode_ids(reply: p.NodeExplained) -> set[str]:
        return {e.id for e in reply.episodes}

    async with d.client(agent="victim", workspace=VICTIM_WS) as rc:
        mine = await rc.call(p.ExplainNode(record_id=v.experience), p.NodeExplained)
    assert episode_ids(mine) == {v.episode}  # not the blocked one, not the helper's
    async with admin(d, agent="recallctl") as rc:
        everyone = await rc.call(p.ExplainNode(record_id=v.experience), p.NodeExplained)
    assert episode_ids(everyone) == {v.episode, other.record_id}


async def test_recallctl_agent_add_writes_a_private_token_the_shim_presents(
    running_daemon: DaemonProcess,
    tmp_path: Path,
) -> None:
    d = running_daemon
    out = ctl(d, VICTIM_WS, "agent", "add", "codex")
    token_file = anyio.Path(out.split(" in ")[1].split(" (0600)")[0])
    assert (await token_file.stat()).st_mode & 0o777 == 0o600
    assert (await token_file.parent.stat()).st_mode & 0o777 == 0o700

    params = shim_params(d, VICTIM_WS, agent="codex")
    async with Client(params) as client:
        refused = await client.call_tool("memory_store", {"text": "no token presented"})
    assert refused.is_error and "forbidden" in str(refused.content)
    params.args = [*params.args, "--agent-token-file", str(token_file)]
    async with Client(params) as client:
        stored = await client.call_tool("memory_store", {"text": "with its own token"})
    assert not stored.is_error, stored.content
