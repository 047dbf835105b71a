"""Rolling a session's captured episodes up into one experience.

An agent host's end-of-session hook runs ``recallctl experience rollup``; the daemon reads the
session's episodes and records the experience through the path ``record_experience`` takes
(:class:`~recalld.handlers.experiences.ExperienceJob`: the ingest stage, lesson merging,
vectors in the same transaction). What it computes from the episodes:

- ``tool_calls``: the session's finished tool calls, episodes with a tool whose status is not
  ``started`` (a PreToolUse intent and the PostToolUse of the same call are one call).
- ``minutes``: the session's wall-clock span, (last episode's ts - first episode's ts) / 60,
  rounded to 0.01. Time between turns counts: an episode has one timestamp, and the span is
  what the episodes measure without guessing which gaps were idle.
- ``status``, by the first rule that applies:
  1. the session's verdict (``work_result``): the latest ``task_result``, success at >= 0.5,
     else failure;
  2. the session's last episode is a failed turn (Claude Code's ``StopFailure``): failure;
  3. its tool calls whose outcome is known (a call of status ``unknown``, as Codex's are,
     counts neither way): none, unknown; the last one failed, failure; more than half of
     them failed although the last succeeded, unknown (a struggle whose end does not say how
     it went); otherwise success.
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
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from recall_client import protocol as p

from ..domain.policy import SUCCESS_STATUSES, UNKNOWN_STATUS
from ..domain.principal import Principal
from ..domain.scopes import ADMIN
from ..errors import RecallError
from ..ingest.trust import score
from ..store.port import Reader, SessionEpisode, SessionRollup, WriteTx
from .experience_writes import ExperienceWrite, RollupWrite, roll_up_experience
from .experiences import ExperienceJob, project_file, unique_lessons
from .services import Services

__all__ = ["roll_up", "session_status"]

MAX_MINUTES = 525_600.0  # RecordExperience's bound: a year
DESCRIPTION_CHARS = 1_000
PROMPTS_QUOTED = 3
# How episode_input labels a prompt's summary; the label is not part of the task.
_PROMPT_LABEL = "prompt: "
_UNQUOTABLE = frozenset({"blocked", "ineligible"})


def session_status(episodes: Sequence[SessionEpisode]) -> tuple[str, str]:
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
    calls = [e for e in episodes if _is_call(e) and e.status != UNKNOWN_STATUS]
    if not calls:
        return "unknown", "no verdict and no tool call whose outcome is known"
    failed = sum(e.status not in SUCCESS_STATUSES for e in calls)
    counted = f"{failed} of {len(calls)} tool calls failed"
    if calls[-1].status not in SUCCESS_STATUSES:
        return "failure", f"no verdict; the last tool call failed ({counted})"
    if failed * 2 > len(calls):
        return "unknown", f"no verdict; the last tool call succeeded but {counted}"
    return "success", f"no verdict; the last tool call succeeded ({counted})"


def _is_call(e: SessionEpisode) -> bool:
    return e.tool is not None and e.status != "started"


def _describe(session: str, episodes: Sequence[SessionEpisode]) -> str:
    quotable = [e for e in episodes if e.eligibility not in _UNQUOTABLE]
    prompts = [e.text.removeprefix(_PROMPT_LABEL) for e in quotable if e.episode_type == "prompt"]
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


def _files(workspace: str, episodes: Sequence[SessionEpisode]) -> list[str]:
    out: dict[str, None] = {}
    for e in episodes:
        for name in e.files:
            path = project_file(workspace, name)
            if path is not None:
                out[path] = None
                if len(out) == p.MAX_EXPERIENCE_FILES:
                    return list(out)
    return list(out)


# --------------------------------------------------------------------------- reading


def _read_session(
    reader: Reader, who: Principal, session: str, admin: bool
) -> tuple[list[SessionEpisode], SessionRollup | None]:
    episodes = reader.episodes.of_session(
        who.workspace, session, who.uid, None if admin else who.agent, time.time()
    )
    stored = reader.experiences.rollup_of(who.workspace, session)
    if not episodes and (stored is None or not stored.forgotten):
        whose = (
            ""
            if admin
            else (
                f" by agent {who.agent!r} (pass the agent's name, or let recallctl present the"
                " admin token to read every agent's)"
            )
        )
        raise RecallError(
            "not_found",
            f"no captured episodes of session {session} in workspace {who.workspace}{whose};"
            " capture them first (recallctl capture from the agent's hooks)",
        )
    return episodes, stored


# --------------------------------------------------------------------------- writing


class _RollUp(ExperienceJob[p.ExperienceRolledUp]):
    """Writes the session's experience, or updates the one an earlier roll-up wrote."""

    __slots__ = ("episodes", "record", "rollup", "stored")

    SOURCE = "experience_rollup"

    def __init__(
        self,
        who: Principal,
        req: p.RollUpExperience,
        episodes: list[SessionEpisode],
        stored: SessionRollup | None,
    ) -> None:
        super().__init__(who, req)
        self.episodes = episodes
        self.stored = stored
        self.record: p.RecordExperience | None = None
        self.rollup: RollupWrite | None = None

    def prepare(self) -> None:
        """The experience, computed from the episodes and what the (ingested) request gave."""
        req: p.RollUpExperience = self.clean.request
        episodes, stored = self.episodes, self.stored
        kept = stored.given if stored is not None else frozenset()
        given_now = {
            name
            for name, value in (
                ("description", req.description),
                ("status", req.status),
                ("strategy", req.strategy),
                ("class", req.task_class),
            )
            if value is not None
        }

        def choose(name: str, now: Any, derived: Any, earlier: Any) -> Any:
            if name in given_now:
                return now
            return earlier if name in kept else derived

        status, why = session_status(episodes)
        if "status" in given_now | kept:
            why = "given by the caller"
        # The request's free text went through the ingest stage; the episodes were redacted
        # when they were captured.
        description = choose(
            "description",
            req.description,
            _describe(req.session, episodes),
            stored and stored.description,
        )
        strategy = choose("strategy", req.strategy, None, stored and stored.strategy)
        lessons, lesson_trust = unique_lessons(req.lessons, self.clean.lesson_trust)
        self.record = p.RecordExperience(
            description=description,
            session=req.session,
            ts=episodes[-1].ts,
            status=choose("status", req.status, status, stored and stored.status),
            task_class=choose("class", req.task_class, "general", stored and stored.task_class),
            tool_calls=sum(_is_call(e) for e in episodes),
            minutes=min(MAX_MINUTES, round((episodes[-1].ts - episodes[0].ts) / 60, 2)),
        )
        self.principal = dataclasses.replace(
            self.principal, agent=Counter(e.agent for e in episodes).most_common(1)[0][0]
        )
        self.plan = ExperienceWrite(
            description=description,
            strategy=strategy,
            files=_files(self.principal.path, episodes),
            lessons=lessons,
            trust=score(f"{description}\n{strategy or ''}"),
            lesson_trust=lesson_trust,
            source=self.SOURCE,
        )
        self.rollup = RollupWrite(
            session=req.session, given=frozenset(given_now | kept), episodes=len(episodes), why=why
        )

    def apply(self, tx: WriteTx, now: float) -> p.ExperienceRolledUp:
        assert self.record is not None and self.rollup is not None
        reply, written = roll_up_experience(
            tx, self.principal, self.record, self._plan(), self.rollup, now
        )
        self._after(written)
        return reply


# --------------------------------------------------------------------------- handler


async def roll_up(
    services: Services, who: Principal, req: p.RollUpExperience
) -> p.ExperienceRolledUp:
    """Record or update the experience of session ``req.session`` from its episodes.

    Raises:
        RecallError: ``not_found`` when the session has no episodes the caller may read;
            ``invalid_request`` past 20 lessons; ``busy`` or ``unavailable``.
    """
    admin = ADMIN in who.scopes
    episodes, stored = await services.read(
        lambda reader: _read_session(reader, who, req.session, admin)
    )
    if stored is not None and stored.forgotten:
        return p.ExperienceRolledUp(
            record_id=stored.record_id,
            session=req.session,
            episodes=len(episodes),
            created=False,
            forgotten=True,
            why="the session's experience was forgotten",
        )
    return await services.write(_RollUp(who, req, episodes, stored))
