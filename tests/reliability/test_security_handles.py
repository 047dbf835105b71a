"""Every request that names a handle (a record id, a session, an idempotency key, a subject,
a filter value) reaches only the caller's own: an agent of another workspace, with the very
same agent name, and another agent of the same workspace, get for the victim's handle the
answer a handle that exists nowhere gets, and change nothing of the victim's.

One test per request type. Each probe is sent twice by the attacker, once naming the
victim's handle and once a handle never used; the two answers, with the handle written out
of them, must be equal (a refusal that differed would tell that the target exists).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count

import msgspec
import pytest
from recall_client import protocol as p
from recall_client.client import RecallClient, RemoteError, connect
from recall_client.paths import read_admin_token

from tests.support.daemon import DaemonProcess
from tests.support.episodes import settled

pytestmark = pytest.mark.both_backends

VICTIM_WS, EVIL_WS = "/ws/victim", "/ws/evil"
AGENT = "claude"  # the victim's agent name, which the attacker in /ws/evil uses as well
SESSION = "deploy-session"
TELL = "offlinevault"


@dataclass
class Victim:
    memory: str
    fact: str
    episodes: list[str]
    experience: str
    lessons: list[str]
    # Each handle's name -> the victim's value.
    handles: dict[str, str] = field(default_factory=dict)

    def ids(self) -> list[str]:
        return [self.memory, self.fact, *self.episodes, self.experience, *self.lessons]


async def plant(d: DaemonProcess) -> Victim:
    async with d.client(agent=AGENT, workspace=VICTIM_WS) as rc:
        memory = await rc.call(
            p.MemoryStore(text=f"the vault phrase is {TELL}", idempotency_key="key-memory"),
            p.MemoryStored,
        )
        fact = await rc.call(
            p.MemoryStore(
                text=f"the release train leaves Friday {TELL}", kind="fact", subject="release train"
            ),
            p.MemoryStored,
        )
        episodes = [
            await rc.call(
                p.CaptureEpisode(
                    summary=f"step {n} of the deploy {TELL}",
                    session_id=SESSION,
                    tool="Bash",
                    idempotency_key=f"key-episode-{n}",
                ),
                p.EpisodeCaptured,
            )
            for n in range(2)
        ]
        experience = await rc.call(
            p.RecordExperience(
                description=f"deployed the service {TELL}",
                status="success",
                task_class="deploys",
                session=SESSION,
                lessons=[f"canary first {TELL}"],
                idempotency_key="key-experience",
            ),
            p.ExperienceRecorded,
        )
        await settled(d, *(e.record_id for e in episodes))
    return Victim(
        memory=memory.record_id,
        fact=fact.record_id,
        episodes=[e.record_id for e in episodes],
        experience=experience.record_id,
        lessons=[x.id for x in experience.lessons],
        handles={
            "session": SESSION,
            "episode": episodes[0].record_id,
            "memory": memory.record_id,
            "fact": fact.record_id,
            "experience": experience.record_id,
            "lesson": experience.lessons[0].id,
            "subject": "release train",
            "class": "deploys",
            "key-memory": "key-memory",
            "key-episode": "key-episode-0",
            "key-experience": "key-experience",
        },
    )


# A handle of each kind that names nothing anywhere (ids shaped as the daemon makes them).
NOWHERE = {
    "session": "never-a-session",
    "episode": "ep_0000000000000000000000",
    "memory": "mem_000000000000000000000",
    "fact": "mem_000000000000000000000",
    "experience": "exp_000000000000000000000",
    "lesson": "les_000000000000000000000",
    "subject": "never a subject",
    "class": "neverclass",
    "key-memory": "never-a-key-m",
    "key-episode": "never-a-key-e",
    "key-experience": "never-a-key-x",
}

_unique = count()


def fresh_text() -> str:
    return f"the attacker's own words number {next(_unique)}"


@dataclass(frozen=True)
class Probe:
    handle: str  # which of the victim's handles it names
    make: Callable[[str], p.Request]


PROBES: dict[type[p.Request], list[Probe]] = {
    p.MemoryStore: [
        Probe("key-memory", lambda h: p.MemoryStore(text=fresh_text(), idempotency_key=h)),
        Probe("memory", lambda h: p.MemoryStore(text=fresh_text(), supersedes=[h])),
        Probe("fact", lambda h: p.MemoryStore(text=fresh_text(), depends_on=[p.DependsOn(id=h)])),
        Probe("subject", lambda h: p.MemoryStore(text=fresh_text(), kind="fact", subject=h)),
    ],
    p.MemoryList: [
        Probe("subject", lambda h: p.MemoryList(subject=h)),
        Probe("subject", lambda h: p.MemoryList(subject=h, all_workspaces=False, kind="fact")),
    ],
    p.MemorySearch: [Probe("subject", lambda h: p.MemorySearch(query=h, mode="keyword"))],
    p.MemoryUpdate: [Probe("memory", lambda h: p.MemoryUpdate(memory_id=h, text=fresh_text()))],
    p.MemoryVerify: [Probe("memory", lambda h: p.MemoryVerify(memory_id=h))],
    p.MemoryShow: [Probe("fact", lambda h: p.MemoryShow(memory_id=h))],
    p.MemoryRecordUse: [
        Probe("memory", lambda h: p.MemoryRecordUse(memory_ids=[h], outcome="contradicted"))
    ],
    p.MemoryFactResolve: [Probe("subject", lambda h: p.MemoryFactResolve(subject=h, accept=True))],
    p.MemoryShare: [
        Probe("memory", lambda h: p.MemoryShare(record_id=h, confirm=True)),
        Probe("lesson", lambda h: p.MemoryShare(record_id=h, confirm=True)),
        Probe("episode", lambda h: p.MemoryShare(record_id=h)),
    ],
    p.CaptureEpisode: [
        Probe("session", lambda h: p.CaptureEpisode(summary=fresh_text(), session_id=h)),
        Probe("key-episode", lambda h: p.CaptureEpisode(summary=fresh_text(), idempotency_key=h)),
    ],
    p.WorkSearch: [
        Probe("session", lambda h: p.WorkSearch(session_id=h, include_pending=True, min_trust=0)),
    ],
    p.WorkResult: [
        Probe("session", lambda h: p.WorkResult(session_id=h, task_result=0.0)),
        Probe("episode", lambda h: p.WorkResult(episode_id=h, task_result=0.0)),
    ],
    p.Forget: [
        Probe("memory", lambda h: p.Forget(record_id=h)),
        Probe("episode", lambda h: p.Forget(record_id=h)),
        Probe("experience", lambda h: p.Forget(record_id=h)),
    ],
    p.RecordExperience: [
        Probe(
            "key-experience",
            lambda h: p.RecordExperience(description=fresh_text(), idempotency_key=h),
        )
    ],
    p.ExperienceList: [Probe("class", lambda h: p.ExperienceList(task_class=h))],
    p.ExplainNode: [Probe("experience", lambda h: p.ExplainNode(record_id=h))],
    p.ForgetExperience: [Probe("experience", lambda h: p.ForgetExperience(record_id=h))],
    p.RollUpExperience: [Probe("session", lambda h: p.RollUpExperience(session=h))],
    # What a session was given is its workspace's: another's session id starts afresh.
    p.ContextBlock: [
        Probe(
            "session",
            lambda h: p.ContextBlock(event="prompt", session_id=h, prompt="zebra quilting"),
        )
    ],
    # The log is the caller's own: another's session or memory finds no injection.
    p.ContextLog: [
        Probe("session", lambda h: p.ContextLog(session_id=h)),
        Probe("memory", lambda h: p.ContextLog(memory_id=h)),
    ],
}
# The request types that name no handle of a workspace's (or only ones tested elsewhere).
NO_HANDLE = {
    p.Ping,
    p.Status,  # its own connections only: test_security_authorization
    p.Hello,  # an enrolled name needs its token: test_security_authorization
    p.SearchExperience,  # a query of the caller's workspace, no handle
    p.GetExecutionContext,  # likewise
    p.RelevanceShow,  # the caller's own calibration, of its own workspace
    # The daemon as a whole: admin:workspace only (test_security_authorization).
    p.Export,
    p.Import,
    p.Reindex,
    p.Doctor,
    p.RelevanceReset,
    p.WorkspaceApprove,
    p.WorkspaceRevoke,
    p.WorkspaceList,
    p.AgentEnroll,
    p.AgentRevoke,
    p.AgentList,
}


def test_every_request_type_is_probed_or_names_no_handle() -> None:
    assert set(PROBES) | NO_HANDLE == set(typing.get_args(p.Requests))
    assert not set(PROBES) & NO_HANDLE


def answer(reply: p.Reply | RemoteError, handle: str, victim: Victim) -> str:
    """What the attacker learns from an answer, with the handle named written out of it and
    what differs between any two calls (new ids, times) left out."""
    if isinstance(reply, RemoteError):
        text = f"{reply.code}: {reply.message}"
    else:
        shown = msgspec.to_builtins(reply)
        for volatile in ("id", "record_id", "took_ms", "ts", "verdict_at", "trust", "next_before"):
            shown.pop(volatile, None)
        if isinstance(reply, p.MemoryStored):
            shown.pop("cited_paths", None)
        if isinstance(reply, p.MemoryListResult):
            shown = {"items": [i["text"] for i in shown["items"]]}
        text = msgspec.json.encode(shown).decode()
    for value in {*victim.ids(), handle}:
        text = text.replace(value, "<handle>")
    return re.sub(r"\b(mem|ep|exp|les)_\w+", r"\1_<new>", text)


async def ask(rc: RecallClient, req: p.Request) -> p.Reply | RemoteError:
    try:
        return await rc.call(req)
    except RemoteError as exc:
        return exc


async def victim_state(d: DaemonProcess, v: Victim) -> str:
    """Everything of the victim's a probe could have changed, as the victim's admin sees it."""
    async with connect(
        agent=AGENT, workspace=VICTIM_WS, path=d.socket, admin_token=read_admin_token()
    ) as rc:
        shown = [
            (await rc.call(p.MemoryShow(memory_id=i), p.MemoryShown)).memory
            for i in (v.memory, v.fact)
        ]
        episodes = await rc.call(
            p.WorkSearch(
                include_pending=True,
                min_trust=0,
                any_caller=True,
                k=200,
                response_format="detailed",
            ),
            p.WorkSearchResult,
        )
        explained = await rc.call(p.ExplainNode(record_id=v.experience), p.NodeExplained)
        facts = await rc.call(
            p.MemoryList(kind="fact", include_superseded=False), p.MemoryListResult
        )
    return msgspec.json.encode(
        {
            "memories": [
                (m.text, m.superseded, m.outcomes, m.depended_on_by, m.subject, m.visibility)
                for m in shown
            ],
            "episodes": sorted(
                msgspec.to_builtins([e.id, e.task_result, e.summary, e.prev_id])
                for e in episodes.results
                if e.id in v.episodes
            ),
            "experience": (explained.experience.description, [x.text for x in explained.lessons]),
            "facts": [i.id for i in facts.items],
        }
    ).decode()


@pytest.mark.parametrize("request_type", list(PROBES), ids=lambda t: t.__name__)
async def test_a_handle_of_another_workspace_or_agent_is_answered_as_one_of_nowhere(
    running_daemon: DaemonProcess, request_type: type[p.Request]
) -> None:
    d = running_daemon
    v = await plant(d)
    before = await victim_state(d, v)
    differ: list[str] = []
    # The same agent name in another workspace; another agent in the victim's workspace.
    for agent, workspace in ((AGENT, EVIL_WS), ("helper", VICTIM_WS)):
        async with d.client(agent=agent, workspace=workspace) as rc:
            for probe in PROBES[request_type]:
                if workspace == VICTIM_WS and probe.handle in {
                    "memory",
                    "fact",
                    "experience",
                    "lesson",
                }:
                    continue  # a workspace's memories and experiences are all its agents'
                if workspace == VICTIM_WS and probe.handle in {"subject", "class"}:
                    continue  # likewise its facts and experience classes
                real = probe.make(v.handles[probe.handle])
                heard = answer(await ask(rc, real), v.handles[probe.handle], v)
                none = probe.make(NOWHERE[probe.handle])
                heard_none = answer(await ask(rc, none), NOWHERE[probe.handle], v)
                if heard != heard_none:
                    differ.append(
                        f"{agent}@{workspace} {type(real).__name__}({probe.handle}):\n"
                        f"  victim's: {heard}\n  nowhere:  {heard_none}"
                    )
                elif TELL in heard:
                    differ.append(f"{agent}@{workspace} {real}: the victim's text in {heard}")
    assert not differ, "\n".join(differ)
    assert await victim_state(d, v) == before, "a probe changed the victim's records"
    # The victim's own session goes on as one chain of its own.
    async with d.client(agent=AGENT, workspace=VICTIM_WS) as rc:
        nxt = await rc.call(
            p.CaptureEpisode(summary="the victim's next step", session_id=SESSION),
            p.EpisodeCaptured,
        )
        assert nxt.prev_id == v.episodes[-1]
        verdict = await rc.call(p.WorkResult(session_id=SESSION, task_result=1.0), p.VerdictSet)
        assert verdict.matched == 3
