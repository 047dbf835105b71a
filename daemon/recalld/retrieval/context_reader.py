"""What a context hook injects, gathered on a search worker and packed to a token budget.

At a session's start: the workspace's current facts, its last session's failed steps no
verdict has judged, the memories citing files that commits changed since that session, and
the lessons for the branch and those files. At
a prompt: the facts, memories and lessons relevant to it. Memories are ranked by
memory_search itself (:class:`MemoryReader`, the same reader contract and scores), lessons
by get_execution_context; :mod:`.context_pack` dedupes and fits them.

What is never injected: a superseded memory, one below the injection's trust bar (low
trust: text that instructs its reader, which a hook would put before the model unasked),
anything not eligible. A memory whose cited paths or commits drifted is injected with its
staleness verdict on its line; a contested fact says so.

:class:`SessionLog` is what each session was given (ids), so a prompt's block holds only
what is new to the session; a session start (a new session, or a host that cleared or
compacted its context) begins the log again.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

from recall_client import protocol as p

from ..domain import git_history, use_tokens
from ..domain.policy import TRUST_FLOOR
from ..domain.principal import Principal
from ..errors import RecallError
from ..store.port import EpisodeRow, MemoryRow, Reader
from . import experience_reader
from .context_pack import Candidate, Packed, Section, TokenCounter, pack
from .fusion import QueryVector
from .memory_reader import MemoryReader
from .memory_rows import LOW_TRUST, contested_slots, memory_filter
from .staleness import Checkouts, staleness
from .use_outcomes import use_outcomes

__all__ = ["Injection", "SessionLog", "gather"]

PREAMBLE = "recalld memory ([id]: memory_show has it whole; memory_record_use says if it helped):"
_SECTIONS: dict[str, p.ContextSection] = {s: s for s in get_args(p.ContextSection)}
_VERDICTS: dict[str, p.StalenessVerdict] = {v: v for v in get_args(p.StalenessVerdict)}
HEADINGS: dict[p.ContextSection, str] = {
    "facts": "Current facts:",
    "failures": "Unresolved failures of the last session:",
    "changed": "Memories citing files changed since the last session:",
    "lessons": "Lessons:",
    "memories": "Relevant memories:",
}
# Candidates each source offers a block at most (the budget keeps fewer).
PER_SECTION = 20
# A line carries at most this much of an item's text (memory_show has the rest).
LINE_CHARS = 300
# Lesson look-ups a session start makes at most (the branch, then changed files' names).
START_QUERIES = 6
SESSIONS = 4096
IDS_PER_SESSION = 4096


class SessionLog:
    """Ids each (workspace, session) was given, for the newest :data:`SESSIONS` sessions."""

    def __init__(self) -> None:
        self._given: OrderedDict[tuple[str, str], set[str]] = OrderedDict()

    def given(self, workspace: str, session: str, *, restart: bool) -> set[str]:
        """The session's ids (a copy); ``restart``: forget them first (a session start)."""
        key = (workspace, session)
        if restart:
            self._given.pop(key, None)
        found = self._given.get(key)
        if found is None:
            return set()
        self._given.move_to_end(key)
        return set(found)

    def add(self, workspace: str, session: str, ids: Sequence[str]) -> None:
        key = (workspace, session)
        mine = self._given.setdefault(key, set())
        self._given.move_to_end(key)
        if len(mine) + len(ids) <= IDS_PER_SESSION:
            mine.update(ids)
        while len(self._given) > SESSIONS:
            self._given.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Injection:
    """A packed block, and the use (memory id, token nonce) each injected memory is."""

    packed: Packed
    items: list[p.ContextItem]
    uses: list[tuple[str, str]]


def _clip(text: str, width: int = LINE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _flags(drift: str | None, contested: bool) -> str:
    notes = []
    if contested:
        notes.append("contested: memory_fact_resolve settles it")
    if drift is not None and drift != "fresh":
        notes.append(f"drifted since verified ({drift}): check the cited files first")
    return "".join(f" [{n}]" for n in notes)


def _memory_line(
    mid: str, text: str, subject: str | None, drift: str | None, contested: bool
) -> str:
    said = f"{subject}: {text}" if subject else text
    return f"- [{mid}] {_clip(said)}{_flags(drift, contested)}"


def _rows_as_candidates(
    reader: Reader, checkouts: Checkouts, rows: Sequence[MemoryRow], now: float
) -> list[Candidate]:
    """Memory rows (current facts, memories citing changed files), judged like hits are."""
    rows = [r for r in rows if r.superseded_by is None and r.trust >= LOW_TRUST]
    contested = contested_slots(reader, list(rows), now)
    outcomes = use_outcomes(reader, rows, now)
    budget = git_history.WalkBudget()
    out = []
    for row in rows:
        contradicted = outcomes[row.rowid].unresolved_contradiction
        verdict = staleness(
            row, now, checkouts, unresolved_contradiction=contradicted, budget=budget
        ).verdict
        disputed = (row.subject_key, row.origin) in contested
        out.append(
            Candidate(
                id=row.id,
                line=_memory_line(row.id, row.text, row.subject, verdict, disputed),
                drift=verdict,
                contested=disputed,
                memory_id=row.id,
            )
        )
    return out


def _facts(reader: Reader, workspace: str, now: float) -> list[MemoryRow]:
    """Current facts of the workspace: constraints first, then the newest."""
    rows = reader.memories.newest_facts(memory_filter(now, workspace), PER_SECTION)
    return sorted(rows, key=lambda r: not r.pinned)


def _cortex(
    reader: Reader, checkouts: Checkouts, result: p.MemorySearchResult, now: float
) -> list[Candidate]:
    """The current facts of a memory_search answer, in its order, judged as rows are."""
    rows = reader.memories.live([c.id for c in result.cortex])
    return _rows_as_candidates(
        reader, checkouts, [rows[c.id] for c in result.cortex if c.id in rows], now
    )


def _hits(result: p.MemorySearchResult) -> list[Candidate]:
    """The memories of a memory_search answer, in its order, without what a block never
    carries (superseded, low trust)."""
    memories = []
    for h in result.hits:
        if h.superseded or h.low_trust:
            continue
        drift = h.staleness_verdict or "fresh"
        memories.append(
            Candidate(
                id=h.id,
                line=_memory_line(h.id, h.text, h.subject, drift, h.contested),
                drift=drift,
                contested=h.contested,
                memory_id=h.id,
            )
        )
    return memories


def _lessons(lessons: Sequence[p.LessonInfo]) -> list[Candidate]:
    return [
        Candidate(
            id=x.id,
            line=f"- [{x.id}] {_clip(x.text)} (confidence {x.confidence:.2f}, {x.support} tasks)",
        )
        for x in lessons
    ]


def _failures(rows: Sequence[EpisodeRow]) -> list[Candidate]:
    return [
        Candidate(
            id=row.id,
            line=f"- [{row.id}] {_clip(row.text)}"
            + (f" ({row.error_code})" if row.error_code else ""),
        )
        for row in rows
    ]


def _changes(path: str, since_ts: float | None) -> tuple[str | None, git_history.Changes | None]:
    """The checkout's top level and what changed there since ``since_ts``; (None, None)
    outside a repository or where it is set aside (a block without them, not no block)."""
    try:
        top = git_history.top_level(path) if path else None
        return top, git_history.changes_since(top, since_ts) if top else None
    except RecallError:
        return None, None


def _start_queries(changes: git_history.Changes | None) -> list[str]:
    """What a session start looks lessons up by: the branch, and each changed file's name
    without its extension (``total`` for services/cart/total.py)."""
    if changes is None:
        return []
    names = [os.path.splitext(os.path.basename(path))[0] for path in changes.paths]
    queries = [changes.branch, *names] if changes.branch else names
    return list(dict.fromkeys(q for q in queries if q.strip()))[:START_QUERIES]


def gather(
    reader: Reader,
    *,
    memory: MemoryReader,
    who: Principal,
    req: p.ContextBlock,
    budget: int,
    given: set[str],
    count: TokenCounter,
    qvec: QueryVector,
) -> Injection:
    """The block for ``req`` within ``budget`` tokens, skipping ids in ``given``."""
    now = time.time()
    workspace = req.workspace or who.workspace
    sections: list[Section] = []
    checkouts = Checkouts(reader, who)

    def add(name: p.ContextSection, candidates: list[Candidate]) -> None:
        sections.append(Section(name, HEADINGS[name], candidates[:PER_SECTION]))

    def search(query: str, vec: QueryVector) -> p.MemorySearchResult:
        ask = p.MemorySearch(query=query, limit=PER_SECTION, workspace=workspace)
        return memory.search(reader, who, ask, vec)

    any_lessons = experience_reader.has_lessons(reader, workspace)

    def lessons(task: str, vec: QueryVector) -> list[Candidate]:
        if not any_lessons:
            return []
        found, _ = experience_reader.context(reader, workspace, task, vec, 3)
        return _lessons(found)

    if req.event == "session_start":
        facts = _rows_as_candidates(reader, checkouts, _facts(reader, workspace, now), now)
        last = reader.episodes.last_session(workspace, who.uid, who.agent, req.session_id)
        failures: list[Candidate] = []
        changed: list[Candidate] = []
        # The repository is read where this connection's checkout is (the workspace is its
        # identity, not a path).
        top, changes = _changes(who.path, last[1] if last else None)
        if last is not None:
            rows = reader.episodes.unresolved(
                workspace, who.uid, who.agent, last[0], TRUST_FLOOR, now, PER_SECTION
            )
            failures = _failures(rows)
        if changes is not None and changes.paths and top is not None:
            cited = [*changes.paths, *(os.path.join(top, path) for path in changes.paths)]
            rows_cited = reader.memories.citing(cited, memory_filter(now, workspace), PER_SECTION)
            changed = _rows_as_candidates(reader, checkouts, rows_cited, now)
        add("facts", facts)
        add("failures", failures)
        add("changed", changed)
        # One short query each (a long one would need three of its words in a lesson): the
        # branch, and the names of the files changed.
        applying: dict[str, Candidate] = {}
        for query in _start_queries(changes):
            for lesson in lessons(query, None):
                applying.setdefault(lesson.id, lesson)
        add("lessons", list(applying.values()))
    else:
        assert req.prompt is not None
        found = search(req.prompt, qvec)
        add("facts", _cortex(reader, checkouts, found, now))
        add("memories", _hits(found))
        add("lessons", lessons(req.prompt, qvec))
    packed = pack(PREAMBLE, sections, budget, given, count)
    key = reader.memories.use_token_key()
    items, uses = [], []
    for section, cand, tokens in packed.items:
        token = None
        if cand.memory_id is not None:
            token = use_tokens.issue(key, cand.memory_id, now)
            uses.append((cand.memory_id, use_tokens.read(key, token).nonce))
        items.append(
            p.ContextItem(
                id=cand.id,
                section=_SECTIONS[section],
                tokens=tokens,
                drift=None if cand.drift is None else _VERDICTS[cand.drift],
                contested=cand.contested,
                use_token=token,
            )
        )
    return Injection(packed, items, uses)
