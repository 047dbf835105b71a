"""Rolling a session's captured episodes up into one experience.

An agent host's end-of-session hook runs ``recallctl experience rollup``; the daemon reads the
session's episodes and records the experience through the path ``record_experience`` takes
(:class:`~recalld.experience.RecordExperienceJob`: redaction, trust, lesson merging, vectors
in the same transaction). What it computes from the episodes:

- ``tool_calls``: the session's finished tool calls, episodes with a tool whose status is not
  ``started`` (a PreToolUse intent and the PostToolUse of the same call are one call).
- ``minutes``: the session's wall-clock span, (last episode's ts - first episode's ts) / 60,
  rounded to 0.01. Time between turns counts: an episode has one timestamp, and the span is
  what the episodes measure without guessing which gaps were idle.
- ``status``, by the first rule that applies:
  1. the session's verdict (``work_result``): the latest ``task_result``, success at >= 0.5,
     else failure;
  2. the session's last episode is a failed turn (Claude Code's ``StopFailure``): failure;
  3. its tool calls: none, unknown; the last one failed, failure; more than half of them
     failed although the last succeeded, unknown (a struggle whose end does not say how it
     went); otherwise success.
- ``files``: the files the tool calls named (``tool_input.file_path``), made project-relative;
  files outside the workspace are left out; the first 100 touched, as record_experience caps.
- ``description`` unless given: the session's first prompt (and the next two, if any), else
  its first and last tool-call summaries. Summaries were redacted at capture; an episode that
  is blocked or ineligible (trust) is never quoted.
- ``agent``: the caller of most of the session's episodes; ``ts``: its last episode's.

Which episodes: those of the caller's workspace and uid, not forgotten, not expired, of any
eligibility; of the calling agent only unless the caller holds ``admin:workspace`` (recallctl
presents the admin token), the same partition as ``work_search``.

One session, one experience (``experience_rollups``). Rolling up again updates it in place
and keeps its id: computed fields are computed afresh; a field a caller gave (description,
status, strategy, class) at any roll-up is kept until another value is given; lessons add
up (20 at most). A forgotten roll-up stays forgotten: the next hook writes nothing and the
reply says so. explain_node shows the experience with its session's episodes.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
from recall_client import protocol as p

from ..pipeline.writer import Principal, content_hash
from .episodes import SUCCESS_STATUSES
from ..errors import RecallError
from .experiences import (
    RecordExperienceJob,
    clean_lessons,
    embed,
    project_file,
    recorded_lessons,
    run_job,
    settled_eligibility,
)
from ..retrieval.experience_reader import experience_infos
from ..domain.scopes import ADMIN
from ..store.vector_index import VectorIndex

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = ["roll_up", "session_status"]

MAX_LESSONS = 20
MAX_MINUTES = 525_600.0  # RecordExperience's bound: a year
DESCRIPTION_CHARS = 1_000
PROMPTS_QUOTED = 3
# How episode_input labels a prompt's summary; the label is not part of the task.
_PROMPT_LABEL = "prompt: "
_UNQUOTABLE = frozenset({"blocked", "ineligible"})

_json = msgspec.json.Encoder()
_strings = msgspec.json.Decoder(list[str])


@dataclass(frozen=True, slots=True)
class _Episode:
    ts: float
    agent: str
    text: str
    eligibility: str
    episode_type: str
    tool: str | None
    status: str
    task_result: float | None
    verdict_at: float | None
    files: str


@dataclass(frozen=True, slots=True)
class _Stored:
    """The session's earlier roll-up."""

    record_id: str
    forgotten: bool
    given: frozenset[str]
    description: str
    strategy: str | None
    task_class: str
    status: str


def session_status(episodes: list[_Episode]) -> tuple[str, str]:
    """(status, why) of a session by the rules in the module docstring."""
    verdicts = [e for e in episodes if e.task_result is not None]
    if verdicts:
        last = max(verdicts, key=lambda e: (e.verdict_at or 0.0, e.ts))
        assert last.task_result is not None
        status = "success" if last.task_result >= 0.5 else "failure"
        return status, f"the session's verdict task_result {last.task_result:g}"
    final = episodes[-1]
    if final.episode_type == "turn_end" and final.status not in SUCCESS_STATUSES:
        return "failure", f"its last turn ended with status {final.status}"
    calls = [e for e in episodes if _is_call(e)]
    if not calls:
        return "unknown", "no verdict and no tool calls"
    failed = sum(e.status not in SUCCESS_STATUSES for e in calls)
    counted = f"{failed} of {len(calls)} tool calls failed"
    if calls[-1].status not in SUCCESS_STATUSES:
        return "failure", f"no verdict; the last tool call failed ({counted})"
    if failed * 2 > len(calls):
        return "unknown", f"no verdict; the last tool call succeeded but {counted}"
    return "success", f"no verdict; the last tool call succeeded ({counted})"


def _is_call(e: _Episode) -> bool:
    return e.tool is not None and e.status != "started"


def _describe(session: str, episodes: list[_Episode]) -> str:
    quotable = [e for e in episodes if e.eligibility not in _UNQUOTABLE]
    prompts = [
        e.text.removeprefix(_PROMPT_LABEL) for e in quotable if e.episode_type == "prompt"
    ]
    if prompts:
        text = prompts[0]
        if len(prompts) > 1:
            text += " (then: " + " / ".join(prompts[1:PROMPTS_QUOTED]) + ")"
        return _clip(text)
    calls = [e for e in episodes if _is_call(e)]
    tools = Counter(e.tool for e in calls).most_common(3)
    text = f"Session {session}: {len(calls)} tool calls"
    if tools:
        text += " (" + ", ".join(f"{tool} {n}" for tool, n in tools) + ")"
    steps = [e for e in calls if e.eligibility not in _UNQUOTABLE] or quotable
    if steps:
        text += f"; first: {steps[0].text}"
        if len(steps) > 1:
            text += f"; last: {steps[-1].text}"
    return _clip(text)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= DESCRIPTION_CHARS else text[: DESCRIPTION_CHARS - 1] + "…"


def _files(workspace: str, episodes: list[_Episode]) -> list[str]:
    out: dict[str, None] = {}
    for e in episodes:
        for name in _strings.decode(e.files):
            path = project_file(workspace, name)
            if path is not None:
                out[path] = None
                if len(out) == p.MAX_EXPERIENCE_FILES:
                    return list(out)
    return list(out)


# --------------------------------------------------------------------------- reading


def _read_session(
    who: Principal, session: str, admin: bool, conn: sqlite3.Connection
) -> tuple[list[_Episode], _Stored | None]:
    where = ("r.kind = 'episode' AND r.workspace = ? AND r.session = ? AND r.uid = ?"
             " AND r.tombstoned_at IS NULL AND (r.expires_at IS NULL OR r.expires_at > ?)")
    params: list[Any] = [who.workspace, session, who.uid, time.time()]
    if not admin:
        where += " AND r.agent = ?"
        params.append(who.agent)
    episodes = [
        _Episode(*row)
        for row in conn.execute(
            "SELECT r.ts, r.agent, r.text, r.eligibility, e.episode_type, e.tool, e.status,"
            " e.task_result, e.verdict_at, e.files FROM records r"
            f" JOIN episodes e ON e.rowid = r.rowid WHERE {where} ORDER BY r.ts, r.rowid",
            params,
        )
    ]
    row = conn.execute(
        "SELECT r.id, r.tombstoned_at, u.given, r.text, x.strategy, x.task_class, x.status"
        " FROM experience_rollups u JOIN records r ON r.rowid = u.rowid"
        " JOIN experiences x ON x.rowid = u.rowid WHERE u.workspace = ? AND u.session = ?",
        (who.workspace, session),
    ).fetchone()
    stored = None
    if row is not None:
        stored = _Stored(
            record_id=row[0], forgotten=row[1] is not None,
            given=frozenset(_strings.decode(row[2])), description=row[3], strategy=row[4],
            task_class=row[5], status=row[6],
        )
    if not episodes and (stored is None or not stored.forgotten):
        whose = "" if admin else (
            f" by agent {who.agent!r} (pass the agent's name, or let recallctl present the"
            " admin token to read every agent's)"
        )
        raise RecallError(
            "not_found",
            f"no captured episodes of session {session} in workspace {who.workspace}{whose};"
            " capture them first (recallctl capture from the agent's hooks)",
        )
    return episodes, stored


# --------------------------------------------------------------------------- writing


class RollUpJob(RecordExperienceJob):
    """Insert the session's experience, or update the one an earlier roll-up wrote."""

    __slots__ = ("episodes", "given", "session", "why")

    SOURCE = "experience_rollup"

    def __init__(
        self, principal: Principal, req: p.RecordExperience, *, session: str,
        given: frozenset[str], episodes: int, why: str, description: str,
        strategy: str | None, files: list[str], lessons: list[str],
        vectors: np.ndarray | None, index: VectorIndex | None,
    ) -> None:
        super().__init__(principal, req, description=description, strategy=strategy,
                         files=files, lessons=lessons, vectors=vectors, index=index)
        self.session = session
        self.given = given
        self.episodes = episodes
        self.why = why

    def _apply(self, conn: sqlite3.Connection, now: float) -> p.ExperienceRolledUp:
        workspace = self.principal.workspace
        row = conn.execute(
            "SELECT u.rowid, r.id, r.tombstoned_at FROM experience_rollups u"
            " JOIN records r ON r.rowid = u.rowid WHERE u.workspace = ? AND u.session = ?",
            (workspace, self.session),
        ).fetchone()
        if row is not None and row[2] is not None:
            self.why = "the session's experience was forgotten"
            return self._reply(row[1], created=False, forgotten=True)
        given = _json.encode(sorted(self.given)).decode()
        if row is None:
            # The session names the experience: a record_experience of the same words is
            # another experience, and an update does not change what identifies this one.
            digest = content_hash("experience", f"rollup\0{self.session}")
            recorded = self._insert(conn, now, digest)
            rowid = conn.execute(
                "SELECT rowid FROM records WHERE id = ?", (recorded.record_id,)
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO experience_rollups (rowid, workspace, session, given, episodes,"
                " rolled_up_at) VALUES (?, ?, ?, ?, ?, ?)",
                (rowid, workspace, self.session, given, self.episodes, now),
            )
            return self._reply(recorded.record_id, created=True, conn=conn, rowid=rowid,
                               lessons=recorded.lessons)
        rowid, record_id = row[0], row[1]
        self._update(conn, now, rowid)
        merged = self._link_lessons(conn, now, rowid)
        linked = [lesson for (lesson,) in conn.execute(
            "SELECT lesson_rowid FROM lesson_support WHERE experience_rowid = ?"
            " ORDER BY created_at", (rowid,))]
        if len(linked) > MAX_LESSONS:
            raise RecallError(
                "invalid_request",
                f"the experience of session {self.session} would support {len(linked)} lessons;"
                f" at most {MAX_LESSONS}",
            )
        conn.execute(
            "UPDATE experience_rollups SET given = ?, episodes = ?, rolled_up_at = ?"
            " WHERE rowid = ?",
            (given, self.episodes, now, rowid),
        )
        earlier = {lesson: True for lesson in linked if lesson not in merged}
        lessons = recorded_lessons(conn, merged) + recorded_lessons(conn, earlier)
        return self._reply(record_id, created=False, conn=conn, rowid=rowid, lessons=lessons)

    def _update(self, conn: sqlite3.Connection, now: float, rowid: int) -> None:
        req, text = self.req, self.description
        trust, eligibility = settled_eligibility(f"{text}\n{self.strategy or ''}")
        vec = self._vector(0)
        conn.execute(
            "UPDATE records SET text = ?, ts = ?, updated_at = ?, agent = ?, trust = ?,"
            " eligibility = ?, embed_state = ? WHERE rowid = ?",
            (text, req.ts if req.ts is not None else now, now, self.principal.agent, trust,
             eligibility, 0 if vec is None else 1, rowid),
        )
        if vec is None:
            # embed_state 0: the embedding actor re-embeds it and replaces the old vector.
            self.new_rowids.append(rowid)
        else:
            assert self.index is not None
            conn.execute(
                "INSERT OR REPLACE INTO vectors (rowid, model, vec) VALUES (?, ?, ?)",
                (rowid, self.index.model, vec.tobytes()),
            )
            self.new_vectors.append((rowid, vec))
        conn.execute(
            "UPDATE experiences SET task_class = ?, strategy = ?, status = ?, tool_calls = ?,"
            " minutes = ?, files = ? WHERE rowid = ?",
            (req.task_class, self.strategy, req.status, req.tool_calls, req.minutes,
             _json.encode(self.files).decode(), rowid),
        )

    def _reply(
        self, record_id: str, *, created: bool, forgotten: bool = False,
        conn: sqlite3.Connection | None = None, rowid: int | None = None,
        lessons: list[p.RecordedLesson] | None = None,
    ) -> p.ExperienceRolledUp:
        experience = None
        if conn is not None and rowid is not None:
            (experience,) = experience_infos(conn, [(rowid, 0.0)], files_shown=None)
        return p.ExperienceRolledUp(
            id=0, record_id=record_id, session=self.session, episodes=self.episodes,
            created=created, forgotten=forgotten, why=self.why, experience=experience,
            lessons=lessons or [],
        )


# --------------------------------------------------------------------------- handler


async def roll_up(daemon: Daemon, who: Principal, req: p.RollUpExperience) -> p.ExperienceRolledUp:
    """Record or update the experience of session ``req.session`` from its episodes.

    Raises:
        RecallError: ``not_found`` when the session has no episodes the caller may read;
            ``invalid_request`` past 20 lessons; ``busy`` or ``unavailable``.
    """
    admin = ADMIN in who.scopes
    episodes, stored = await daemon.search.run_read(
        partial(_read_session, who, req.session, admin)
    )
    if stored is not None and stored.forgotten:
        return p.ExperienceRolledUp(
            id=0, record_id=stored.record_id, session=req.session, episodes=len(episodes),
            created=False, forgotten=True, why="the session's experience was forgotten",
        )
    kept = stored.given if stored is not None else frozenset()
    given_now = {name for name, value in (
        ("description", req.description), ("status", req.status),
        ("strategy", req.strategy), ("class", req.task_class)) if value is not None}

    def choose(name: str, now: Any, derived: Any, earlier: Any) -> Any:
        if name in given_now:
            return now
        return earlier if name in kept else derived

    status, why = session_status(episodes)
    if "status" in given_now | kept:
        why = "given by the caller"
    # The ingest stage redacted the request's free text; the episodes were redacted when
    # they were captured.
    description = choose(
        "description", req.description, _describe(req.session, episodes),
        stored and stored.description,
    )
    strategy = choose("strategy", req.strategy, None, stored and stored.strategy)
    lessons = clean_lessons(req.lessons)
    record = p.RecordExperience(
        description=description, session=req.session, ts=episodes[-1].ts,
        status=choose("status", req.status, status, stored and stored.status),
        task_class=choose("class", req.task_class, "general", stored and stored.task_class),
        tool_calls=sum(_is_call(e) for e in episodes),
        minutes=min(MAX_MINUTES, round((episodes[-1].ts - episodes[0].ts) / 60, 2)),
    )
    agent = Counter(e.agent for e in episodes).most_common(1)[0][0]
    vectors, index = await embed(daemon, [description, *lessons])
    job = RollUpJob(
        dataclasses.replace(who, agent=agent), record, session=req.session,
        given=frozenset(given_now | kept), episodes=len(episodes), why=why,
        description=description, strategy=strategy, files=_files(who.workspace, episodes),
        lessons=lessons, vectors=vectors, index=index,
    )
    result: p.ExperienceRolledUp = await run_job(daemon, job)
    return result
