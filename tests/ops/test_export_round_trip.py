"""Export, import into an empty daemon, export again: the two exports are equal, and the same
searches answer the same ids in the same order. Random stores of every kind, built through
the daemon's own requests, on the embedded SQLite and on a real PostgreSQL.

Equal byte for byte, not modulo anything: what is the install's own (rowids, the uid and
owner, vectors and embed_state, use-token nonces, idempotency keys; see
``export_format.NOT_EXPORTED``) is not in a row at all, and what is made from the rest (content
hashes, subject keys) is made again and checked equal here too.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from dataclasses import dataclass, field
from typing import Any, get_args

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from recall_client import protocol as p

from tests.support.daemon import BIN, DaemonFactory, DaemonProcess
from tests.support.team import make_db

pytestmark = pytest.mark.both_backends

WORKSPACES = ("/ws/a", "/ws/b")
AGENTS = ("alice", "bob")
SUBJECTS = ("the database host", "the deploy day")
WORDS = "deploy database cache retry queue schema index release token parser".split()
LESSONS = (
    "Run the migrations on a copy first.",
    "Pin the dependency versions.",
    "Check the cache before the retry.",
)
SESSIONS = ("s-1", "s-2")
# Examples share the test's tmp dir: each one's daemons get names of their own.
_examples = itertools.count()


def ctl(d: DaemonProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )


def words(n: int) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(WORDS), min_size=1, max_size=n).map(" ".join)


@dataclass
class Plan:
    """One random store: what each agent writes, in order."""

    entries: list[tuple[int, int, str, list[str], bool]] = field(default_factory=list)
    facts: list[tuple[int, int, str, str, bool, float]] = field(default_factory=list)
    uses: list[tuple[int, p.Outcome]] = field(default_factory=list)
    episodes: list[tuple[int, int, str, bool, str]] = field(default_factory=list)
    verdict: float = 1.0
    experiences: list[tuple[int, str, p.ExperienceStatus, list[int]]] = field(default_factory=list)
    forget: int = 0


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    plan = Plan()
    for i in range(draw(st.integers(2, 5))):
        plan.entries.append(
            (
                draw(st.integers(0, 1)),  # agent
                draw(st.integers(0, 1)),  # workspace
                f"note {i}: {draw(words(6))} in src/mod_{i}.py",
                draw(st.lists(st.sampled_from(["ops", "db", "ci"]), max_size=2, unique=True)),
                draw(st.booleans()),  # depends on the first entry
            )
        )
    # Facts on two shared subjects, in random order of ts and authority: supersession,
    # history and contest all happen; the first two always supersede.
    plan.facts.append((0, 0, SUBJECTS[0], "value a", False, 1_700_000_000.0))
    plan.facts.append((1, 0, SUBJECTS[0], "value b", False, 1_700_000_500.0))
    for i in range(draw(st.integers(1, 4))):
        plan.facts.append(
            (
                draw(st.integers(0, 1)),
                draw(st.integers(0, 1)),
                draw(st.sampled_from(SUBJECTS)),
                f"value {i} {draw(words(3))}",
                draw(st.booleans()),  # quoted authority
                draw(st.floats(1_700_000_000, 1_700_100_000)),
            )
        )
    outcome: st.SearchStrategy[p.Outcome] = st.sampled_from(get_args(p.Outcome))
    plan.uses = draw(st.lists(st.tuples(st.integers(0, 20), outcome), min_size=1, max_size=4))
    for i in range(draw(st.integers(2, 5))):
        plan.episodes.append(
            (
                draw(st.integers(0, 1)),
                draw(st.integers(0, 1)),  # session
                f"step {i}: {draw(words(4))}",
                draw(st.booleans()),  # failed
                draw(st.sampled_from(["Edit", "Bash", "Read"])),
            )
        )
    statuses: st.SearchStrategy[p.ExperienceStatus] = st.sampled_from(get_args(p.ExperienceStatus))
    plan.verdict = draw(st.sampled_from([0.0, 0.5, 1.0]))
    for i in range(draw(st.integers(1, 3))):
        plan.experiences.append(
            (
                draw(st.integers(0, 1)),
                f"task {i}: {draw(words(5))}",
                draw(statuses),
                draw(st.lists(st.integers(0, len(LESSONS) - 1), max_size=2, unique=True)),
            )
        )
    plan.forget = draw(st.integers(0, 20))
    return plan


async def build(d: DaemonProcess, plan: Plan) -> None:
    """Make ``plan``'s store through the daemon's own requests."""
    memories: list[str] = []
    home: dict[str, str] = {}  # memory -> its workspace
    last: dict[int, str] = {}  # the workspace's last entry
    for agent, ws, text, tags, depends in plan.entries:
        async with d.client(agent=AGENTS[agent], workspace=WORKSPACES[ws]) as rc:
            links = [p.DependsOn(id=last[ws], note="on it")] if depends and ws in last else []
            r = await rc.call(
                p.MemoryStore(text=text, tags=tags, source="user", scopes=tags, depends_on=links),
                p.MemoryStored,
            )
            memories.append(r.record_id)
            home[r.record_id] = WORKSPACES[ws]
            last[ws] = r.record_id
    for agent, ws, subject, value, quoted, ts in plan.facts:
        async with d.client(agent=AGENTS[agent], workspace=WORKSPACES[ws]) as rc:
            r = await rc.call(
                p.MemoryStore(
                    text=f"{subject} is {value}",
                    kind="fact",
                    subject=subject,
                    authority="quoted" if quoted else "first-party",
                    ts=ts,
                ),
                p.MemoryStored,
            )
            memories.append(r.record_id)
            home[r.record_id] = WORKSPACES[ws]
    for pick, outcome in plan.uses:
        used = memories[pick % len(memories)]
        async with d.client(agent="alice", workspace=home[used]) as rc:
            await rc.call(p.MemoryRecordUse(memory_ids=[used], outcome=outcome), p.UseRecorded)
            await rc.call(p.MemoryVerify(memory_id=used), p.MemoryChanged)
    for agent, session, summary, failed, tool in plan.episodes:
        async with d.client(agent=AGENTS[agent], workspace=WORKSPACES[0]) as rc:
            await rc.call(
                p.CaptureEpisode(
                    summary=summary,
                    session_id=SESSIONS[session],
                    tool=tool,
                    status="error" if failed else "ok",
                    files=["src/app.py"],
                ),
                p.EpisodeCaptured,
            )
    async with d.client(agent=AGENTS[plan.episodes[0][0]], workspace=WORKSPACES[0]) as rc:
        await rc.call(
            p.WorkResult(task_result=plan.verdict, session_id=SESSIONS[plan.episodes[0][1]]),
            p.VerdictSet,
        )
        await rc.call(
            p.RollUpExperience(session=SESSIONS[plan.episodes[0][1]], lessons=[LESSONS[0]]),
            p.ExperienceRolledUp,
        )
    experiences = []
    for agent, description, status, lessons in plan.experiences:
        async with d.client(agent=AGENTS[agent], workspace=WORKSPACES[0]) as rc:
            x = await rc.call(
                p.RecordExperience(
                    description=description,
                    status=status,
                    task_class="migration",
                    tool_calls=3,
                    minutes=1.5,
                    lessons=[LESSONS[i] for i in lessons],
                ),
                p.ExperienceRecorded,
            )
            experiences.append(x.record_id)
    async with d.client(agent="alice", workspace=WORKSPACES[0]) as rc:
        if plan.forget % 2:
            # Its lessons lose its support; the links stay.
            await rc.call(p.ForgetExperience(record_id=experiences[0]), p.ExperienceForgotten)
        await rc.call(p.MemoryStore(text="a short-lived note", ttl_s=3600), p.MemoryStored)
    gone = memories[plan.forget % len(memories)]
    async with d.client(agent="alice", workspace=home[gone]) as rc:
        # A forgotten record is not exported (nor imported).
        await rc.call(p.Forget(record_id=gone), p.Forgotten)


def derived(d: DaemonProcess) -> list[tuple[Any, ...]]:
    """What the store makes of each record's fields: its content hash, a fact's subject key."""
    return [
        (rid, bytes(digest), key)
        for rid, digest, key in d.sql(
            "SELECT r.id, r.content_hash, m.subject_key FROM records r"
            " LEFT JOIN memory_meta m ON m.rowid = r.rowid ORDER BY r.id"
        )
    ]


def export(d: DaemonProcess) -> list[dict[str, Any]]:
    out = ctl(d, "export", "--kind", "all")
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


async def answers(d: DaemonProcess) -> list[list[str]]:
    """The ids a fixed set of searches answer, in order, in each workspace."""
    found: list[list[str]] = []
    for ws in WORKSPACES:
        async with d.client(agent="alice", workspace=ws) as rc:
            for query in ("database host", "deploy retry", "the deploy day"):
                r = await rc.call(p.MemorySearch(query=query, limit=10), p.MemorySearchResult)
                found.append([h.id for h in r.hits])
                listed = await rc.call(p.MemoryList(include_superseded=False), p.MemoryListResult)
                found.append([m.id for m in listed.items])
            w = await rc.call(p.WorkSearch(query="step", include_pending=True), p.WorkSearchResult)
            found.append([e.id for e in w.results])
            x = await rc.call(p.SearchExperience(query="task migration"), p.ExperienceSearchResult)
            found.append([e.id for e in x.experiences] + [les.id for les in x.lessons])
    return found


def examples(n: int) -> settings:
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        # Each example starts daemons: shrinking would start many more.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@examples(3)
@given(plan=plans())
async def test_export_import_export_is_lossless(
    daemon_factory: DaemonFactory, backend: str, request: pytest.FixtureRequest, plan: Plan
) -> None:
    started = next(_examples)

    def make(name: str) -> DaemonProcess:
        env = {}
        if backend == "postgres":
            db = make_db(request.getfixturevalue("team_db"))
            env["RECALLD_DATABASE_URL"] = db.url("alice")
        return daemon_factory(f"{name}-{started}", extra_env=env)

    source, target = make("source"), make("target")
    await source.start()
    await build(source, plan)
    await source.settled()
    first = export(source)
    kinds = {r["kind"] for r in first}
    assert kinds == {"memory", "episode", "experience", "lesson"}, kinds
    assert any(r["memory"]["superseded_by"] for r in first if r["kind"] == "memory")
    before = await answers(source)
    assert await source.stop() == 0

    await target.start()
    dump = "\n".join(json.dumps(r) for r in first)
    out = ctl(target, "import", "-", stdin=dump)
    assert out.returncode == 0, out.stderr
    assert f"{len(first)} new" in out.stderr, out.stderr
    await target.settled()
    second = export(target)
    assert second == first
    # Not exported, made again: later writes dedup against them, and facts meet, the same.
    assert derived(target) == derived(source)
    assert await answers(target) == before
    # Importing again stores nothing new.
    again = ctl(target, "import", "-", stdin=dump)
    assert f"{len(first)} already there" in again.stderr, again.stderr
    assert export(target) == first
    assert await target.stop() == 0
