"""The policy: what a record may become, in one place.

Write jobs (memories, experiences and lessons are written settled) and the evaluation actor
(episodes, and whatever was captured pending) both decide with these functions; no rule is
written twice.

- **Eligibility.** Text that gives its reader orders scores low trust; below the readers'
  floor (0.3) a record is kept but not served (``ineligible``); one that tries to take its
  reader over is ``blocked``.
- **Episodes** (seed 001) settle once they can: blocked when unsafe; ineligible below the
  hard floor (0.1: no reader's ``min_trust`` reaches it); eligible on a success status or a
  known verdict; otherwise (a failed step with no verdict yet) they wait for ``work_result``.
- **Facts** on one subject (per origin): a fact about a later time supersedes the current one
  when its authority is not lower (first-party outranks quoted); one about an earlier time is
  history at once; one about the same time, or of lower authority, is contested until
  ``memory_fact_resolve``. The incumbent of a contest is the earliest stored.
- **Held for a person.** A memory nobody of this user wrote with their own hand (an
  imported one, or one whose ``source`` is outside the agent's own: a web page, a tool's
  output, an email) carries the :data:`HELD` label: the context hooks never inject it until
  a person verifies it (memory_verify on a connection holding ``admin:workspace``, which
  drops the label). Searches find it as any other.
- **Lessons** are stored once per workspace: one whose words equal a stored lesson's, or whose
  vector is within ``LESSON_MERGE_COSINE`` of one that surfaces, joins it. Confidence is the
  Laplace-smoothed success rate of the experiences behind it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from recall_client.protocol import SETTLED_STATUSES, SUCCESS_STATUSES, UNKNOWN_STATUS
from recall_client.vocabulary import Visibility

__all__ = [
    "HARD_TRUST_FLOOR",
    "HELD",
    "IMPORTED",
    "LESSON_MERGE_COSINE",
    "OUTSIDE_SOURCES",
    "SETTLED_STATUSES",
    "SUCCESS_STATUSES",
    "TRUST_FLOOR",
    "UNKNOWN_STATUS",
    "Assessment",
    "FactDecision",
    "FactView",
    "confidence",
    "decide_fact",
    "eligibility",
    "held_for",
    "lesson_key",
    "record_visibility",
    "settle_episode",
    "subject_key",
]

TRUST_FLOOR = 0.3
HARD_TRUST_FLOOR = 0.1
# The memory label kind (memory_labels) of a memory held for a person's check, its value why:
# IMPORTED, or the source it came from (one of OUTSIDE_SOURCES).
HELD = "held"
IMPORTED = "import"
OUTSIDE_SOURCES = frozenset({"web", "external", "email", "tool_output"})
# 0.85 comes from measuring all-MiniLM-L6-v2 on lesson pairs: rewordings of one lesson
# scored 0.74-0.93, different lessons on one topic 0.29-0.82. It errs high because the two
# mistakes are not alike: a missed merge leaves a duplicate that still surfaces, a wrong
# merge silently swallows a different lesson.
LESSON_MERGE_COSINE = 0.85

_AUTHORITY_RANK = {"quoted": 0, "first-party": 1}
_SEPARATORS = re.compile(r"[\s_\-.:/]+")
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Assessment:
    """What trust scoring (the ingest stage's) made of a text."""

    trust: float
    blocked: bool
    reasons: tuple[str, ...] = ()

    @property
    def eligibility(self) -> str:
        return eligibility(self.trust, self.blocked)


def eligibility(trust: float, blocked: bool) -> str:
    """What a record written settled (a memory, an experience, a lesson) becomes."""
    if blocked:
        return "blocked"
    return "eligible" if trust >= TRUST_FLOOR else "ineligible"


def settle_episode(
    trust: float, blocked: bool, status: str, task_result: float | None
) -> str | None:
    """The eligibility a pending episode settles to, or None while it waits for a verdict."""
    if blocked:
        return "blocked"
    if trust < HARD_TRUST_FLOOR:
        return "ineligible"
    if status in SETTLED_STATUSES or task_result is not None:
        return "eligible"
    return None


def held_for(source: str | None) -> str | None:
    """Why a memory from ``source`` is held for a person (the :data:`HELD` label's value):
    ``source`` when it names text from outside the agent's own hand, else None."""
    return source if source is not None and source.lower() in OUTSIDE_SOURCES else None


def record_visibility(chosen: Visibility | None) -> Visibility:
    """What a record is stored with: the handlers fill in the configured default, so None
    comes only from the daemon's own writes, which stay private."""
    return chosen or "private"


def subject_key(subject: str) -> str:
    """A subject as compared: case, spacing and separators do not make a new subject."""
    return _SEPARATORS.sub(" ", subject.casefold()).strip()


@dataclass(frozen=True, slots=True)
class FactView:
    """A current fact on the subject, as the decision needs it."""

    id: str
    authority: str
    ts: float


@dataclass(frozen=True, slots=True)
class FactDecision:
    # inserted | superseded | contested | historical
    action: str
    # Current facts the new one replaces.
    supersedes: tuple[str, ...] = ()
    contested_with: tuple[str, ...] = ()
    # The newer current fact the new one is history under (action "historical").
    history_of: str | None = None


def decide_fact(
    authority: str, ts: float, others: Sequence[FactView], *, explicit: bool
) -> FactDecision:
    """What a new fact does to the current facts of its subject (``others``, oldest stored
    first, the new one not among them); ``explicit``: it named memories it supersedes."""
    if not others:
        return FactDecision("superseded" if explicit else "inserted")
    rank = _AUTHORITY_RANK[authority]
    contested = tuple(f.id for f in others if _AUTHORITY_RANK[f.authority] > rank or f.ts == ts)
    if contested:
        return FactDecision("contested", contested_with=contested)
    newer = [f for f in others if f.ts > ts]
    if newer:
        return FactDecision("historical", history_of=newer[-1].id)
    return FactDecision("superseded", supersedes=tuple(f.id for f in others))


def lesson_key(text: str) -> str:
    """What makes two lesson texts 'the same' without a model: their words, casefolded."""
    words = _WORDS.findall(text.casefold())
    return " ".join(words) if words else " ".join(text.casefold().split())


def confidence(successes: int, failures: int, unknowns: int) -> float:
    """Confidence in a lesson, from the outcomes of the experiences that support it.

    The posterior mean success rate of the tasks that carried the lesson, under a uniform
    Beta(1, 1) prior (Laplace's rule of succession), an unknown outcome counting half:

        confidence = (successes + unknowns / 2 + 1) / (support + 2)

    where support = successes + failures + unknowns. The prior shrinks a thin record toward
    0.5, so support matters as much as the outcomes: one success gives 0.67, three give 0.8,
    only many approach 1; one failure gives 0.33, and a lesson learned from a failure rises
    once later successful tasks carry it too.
    """
    support = successes + failures + unknowns
    return round((successes + unknowns / 2 + 1) / (support + 2), 4)
