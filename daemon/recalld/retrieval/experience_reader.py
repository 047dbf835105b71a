"""Reading experiences and lessons: search behind a relevance floor, explain, execution context.

Every read runs on a search worker (:meth:`SearchActor.run_read`) and sees experiences and lessons
under one visibility clause that both retrieval channels share (the reader contract): the
caller's workspace, not forgotten, not expired, eligible.

The relevance floor. Fusion ranks by position, so it always has a "best" candidate however
poor, and FAISS always has nearest neighbours. Whether anything is similar enough must rest on
absolute evidence that a candidate is about the query, from either channel:

- meaning: its cosine to the query reaches ``SEMANTIC_FLOOR`` (0.30). all-MiniLM-L6-v2 put
  rewordings of a task description at 0.45-0.51 and unrelated tasks at -0.03-0.13;
- words: it contains ``min(3, ceil(n / 2))`` of the query's n content words (stop words
  dropped, FTS5's porter stemming): half of a short query, three words of a long one.

A candidate with neither is dropped, so a query about something the workspace never did
returns two empty lists: an agent is told "no precedent" rather than handed noise.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
from recall_client import protocol as p

from ..pipeline.writer import Principal
from ..errors import RecallError
from ..handlers.experiences import lesson_infos
from ..domain.scopes import ADMIN
from .search import CHANNEL_DEPTH, Candidate, fts_query, query_terms, retrieve
from ..store.vector_index import VectorIndex

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = [
    "SEMANTIC_FLOOR",
    "execution_context",
    "experience_infos",
    "explain",
    "lexical_needed",
    "search",
]

SEMANTIC_FLOOR = 0.30
# Query words checked for the lexical floor (one FTS lookup each); a long task description
# passes or fails on its first words as surely as on all of them.
MAX_FLOOR_TERMS = 32
# Compactness: files shown per experience in search results, lessons per answer, and the
# execution context's descriptions and total size.
FILES_SHOWN = 10
MAX_LESSONS = 20
CONTEXT_LESSONS = 8
CONTEXT_DESCRIPTION_CHARS = 240
CONTEXT_CHARS = 2_000
EPISODES_SHOWN = 50

_files = msgspec.json.Decoder(list[str])


def lexical_needed(n_terms: int) -> int:
    """Content words of an n-word query a text must contain to count as lexically similar."""
    return min(3, math.ceil(n_terms / 2))


@dataclass(slots=True)
class Verdict:
    """One retrieved candidate and what the floor made of it."""

    candidate: Candidate
    matched: list[str] = field(default_factory=list)
    passed: bool = False
    reason: str = ""


def _visible(kind: str, workspace: str, now: float) -> tuple[str, list[Any]]:
    return (
        f" r.workspace = ? AND r.kind = '{kind}' AND r.tombstoned_at IS NULL"
        " AND (r.expires_at IS NULL OR r.expires_at > ?) AND r.eligibility = 'eligible'",
        [workspace, now],
    )


def _matched_terms(
    conn: sqlite3.Connection, terms: Sequence[str], rowids: Sequence[int]
) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {rowid: [] for rowid in rowids}
    if not rowids:
        return out
    marks = ",".join("?" * len(rowids))
    for term in terms[:MAX_FLOOR_TERMS]:
        for (rowid,) in conn.execute(
            f"SELECT rowid FROM records_fts WHERE records_fts MATCH ? AND rowid IN ({marks})",
            (fts_query([term]), *rowids),
        ):
            out[rowid].append(term)
    return out


def _judge(cosine: float | None, matched: list[str], terms: Sequence[str]) -> tuple[bool, str]:
    needed = lexical_needed(len(terms))
    words = f"{len(matched)} of {len(terms)} query words (needs {needed})"
    if cosine is not None and cosine >= SEMANTIC_FLOOR:
        return True, f"similar in meaning: cosine {cosine:.3f} >= {SEMANTIC_FLOOR}; shares {words}"
    if terms and len(matched) >= needed:
        return True, f"shares {words}: {', '.join(matched)}"
    meaning = (
        "no vector to compare" if cosine is None else f"cosine {cosine:.3f} < {SEMANTIC_FLOOR}"
    )
    return False, f"below the relevance floor: {meaning}; shares {words}"


def _floor(
    conn: sqlite3.Connection, terms: Sequence[str], candidates: list[Candidate]
) -> list[Verdict]:
    matched = _matched_terms(conn, terms, [c.rowid for c in candidates])
    verdicts = []
    for c in candidates:
        passed, reason = _judge(c.cosine, matched[c.rowid], terms)
        verdicts.append(Verdict(c, matched[c.rowid], passed, reason))
    return verdicts


def _retrieve(
    conn: sqlite3.Connection, index: VectorIndex | None, kind: str, workspace: str,
    terms: list[str], qvec: np.ndarray | None, *, want: int | None = None,
) -> list[Verdict]:
    """Candidates of ``kind`` either channel finds, best first, judged by the floor.

    With ``want``, only the first ``want`` that pass: candidates are judged in fused order a
    few at a time (the word check costs one FTS lookup per query word), stopping when enough
    have passed. Without it, every candidate, passed or not (for explain).
    """
    visible, params = _visible(kind, workspace, time.time())
    candidates = retrieve(conn, terms, qvec, index, visible, params, limit=CHANNEL_DEPTH)
    if want is None:
        return _floor(conn, terms, candidates)
    kept: list[Verdict] = []
    step = max(10, 2 * want)
    for start in range(0, len(candidates), step):
        kept += [v for v in _floor(conn, terms, candidates[start:start + step]) if v.passed]
        if len(kept) >= want:
            break
    return kept[:want]


def experience_infos(
    conn: sqlite3.Connection, scored: Sequence[tuple[int, float]], *, files_shown: int | None
) -> list[p.ExperienceInfo]:
    """Experience rows in the order of ``scored`` (rowid, score)."""
    if not scored:
        return []
    marks = ",".join("?" * len(scored))
    rows = {
        row[0]: row[1:]
        for row in conn.execute(
            "SELECT r.rowid, r.id, r.text, r.agent, r.ts, r.session, e.task_class, e.strategy,"
            " e.status, e.tool_calls, e.minutes, e.files"
            f" FROM records r JOIN experiences e ON e.rowid = r.rowid WHERE r.rowid IN ({marks})",
            [rowid for rowid, _ in scored],
        )
    }
    out = []
    for rowid, score in scored:
        if rowid not in rows:
            continue
        (rid, text, agent, ts, session, task_class, strategy, status, tool_calls, minutes,
         files) = rows[rowid]
        paths = _files.decode(files)
        out.append(p.ExperienceInfo(
            id=rid, score=round(score, 4), description=text, task_class=task_class, agent=agent,
            strategy=strategy, status=status, tool_calls=tool_calls, minutes=minutes,
            files=paths if files_shown is None else paths[:files_shown], ts=ts, session=session,
        ))
    return out


def _lessons_of(conn: sqlite3.Connection, experience_rowids: Sequence[int]) -> list[p.LessonInfo]:
    """The surfacing lessons of these experiences: those of the first experience first, then by
    confidence; each once."""
    if not experience_rowids:
        return []
    position = {rowid: i for i, rowid in enumerate(experience_rowids)}
    marks = ",".join("?" * len(experience_rowids))
    first: dict[int, int] = {}
    for lesson, exp in conn.execute(
        "SELECT lesson_rowid, experience_rowid FROM lesson_support"
        f" WHERE experience_rowid IN ({marks})",
        tuple(experience_rowids),
    ):
        first[lesson] = min(first.get(lesson, len(position)), position[exp])
    infos = lesson_infos(conn, list(first))
    ordered = sorted(infos, key=lambda r: (first[r], -infos[r].confidence, -infos[r].support))
    return [infos[r] for r in ordered[:MAX_LESSONS]]


# --------------------------------------------------------------------------- worker thread


def _search_sync(
    index: VectorIndex | None, workspace: str, query: str, qvec: np.ndarray | None, limit: int,
    conn: sqlite3.Connection,
) -> tuple[list[p.ExperienceInfo], list[p.LessonInfo]]:
    terms = query_terms(query)
    kept = _retrieve(conn, index, "experience", workspace, terms, qvec, want=limit)
    scored = [(v.candidate.rowid, v.candidate.score) for v in kept]
    experiences = experience_infos(conn, scored, files_shown=FILES_SHOWN)
    return experiences, _lessons_of(conn, [rowid for rowid, _ in scored])


def _explain_sync(
    index: VectorIndex | None, workspace: str, agent: str | None, record_id: str,
    query: str | None, qvec: np.ndarray | None, conn: sqlite3.Connection,
) -> p.NodeExplained:
    visible, params = _visible("experience", workspace, time.time())
    row = conn.execute(
        f"SELECT r.rowid, r.session FROM records r WHERE r.id = ? AND {visible}",
        (record_id, *params),
    ).fetchone()
    if row is None:
        raise RecallError(
            "not_found",
            f"no experience {record_id} in workspace {workspace} (unknown id, or forgotten)",
        )
    rowid, session = row
    ranking = _ranking(conn, index, workspace, rowid, query, qvec) if query is not None else None
    (experience,) = experience_infos(
        conn, [(rowid, ranking.score if ranking else 0.0)], files_shown=None
    )
    # The episodes of the session that did the task, when one was named: under
    # work_search's reader contract (the caller's own agent unless admin, eligible or
    # pending, never a blocked or ineligible one).
    episodes = []
    if session is not None:
        partition = "" if agent is None else " AND agent = ?"
        episodes = [
            p.EpisodeRef(id=rid, ts=ts, text=text)
            for rid, ts, text in conn.execute(
                "SELECT id, ts, text FROM records WHERE workspace = ? AND session = ?"
                " AND kind = 'episode' AND tombstoned_at IS NULL"
                " AND eligibility IN ('eligible', 'pending')"
                " AND (expires_at IS NULL OR expires_at > ?)"
                f"{partition} ORDER BY ts LIMIT ?",
                (workspace, session, time.time(), *([] if agent is None else [agent]),
                 EPISODES_SHOWN),
            )
        ]
    return p.NodeExplained(
        id=0, experience=experience, episodes=episodes, lessons=_lessons_of(conn, [rowid]),
        ranking=ranking,
    )


def _ranking(
    conn: sqlite3.Connection, index: VectorIndex | None, workspace: str, rowid: int, query: str,
    qvec: np.ndarray | None,
) -> p.Ranking:
    terms = query_terms(query)
    verdicts = _retrieve(conn, index, "experience", workspace, terms, qvec)
    passed = [v.candidate.rowid for v in verdicts if v.passed]
    mine = next((v for v in verdicts if v.candidate.rowid == rowid), None)
    if mine is None:
        # Neither channel reached it: judge it on its own evidence all the same.
        cosine = _cosine(conn, index, rowid, qvec)
        matched = _matched_terms(conn, terms, [rowid])[rowid]
        ok, reason = _judge(cosine, matched, terms)
        mine = Verdict(Candidate(rowid=rowid, score=0.0, cosine=cosine), matched, ok,
                       f"not among either channel's top {CHANNEL_DEPTH}; {reason}")
    c = mine.candidate
    return p.Ranking(
        query=query, rank=passed.index(rowid) + 1 if rowid in passed else None,
        score=round(c.score, 4),
        lexical_rank=None if c.lexical_rank is None else c.lexical_rank + 1,
        semantic_rank=None if c.semantic_rank is None else c.semantic_rank + 1,
        cosine=None if c.cosine is None else round(c.cosine, 4),
        matched_terms=mine.matched, query_terms=terms, passed_floor=mine.passed,
        reason=mine.reason,
    )


def _cosine(
    conn: sqlite3.Connection, index: VectorIndex | None, rowid: int, qvec: np.ndarray | None
) -> float | None:
    if index is None or qvec is None:
        return None
    row = conn.execute(
        "SELECT vec FROM vectors WHERE rowid = ? AND model = ?", (rowid, index.model)
    ).fetchone()
    if row is None or len(row[0]) != qvec.nbytes:
        return None
    return float(np.frombuffer(row[0], dtype=np.float32) @ qvec)


def _context_sync(
    index: VectorIndex | None, workspace: str, task: str, qvec: np.ndarray | None, limit: int,
    conn: sqlite3.Connection,
) -> tuple[list[p.LessonInfo], list[p.ExperienceInfo]]:
    terms = query_terms(task)
    kept = _retrieve(conn, index, "experience", workspace, terms, qvec, want=limit)
    scored = [(v.candidate.rowid, v.candidate.score) for v in kept]
    experiences = [
        msgspec.structs.replace(
            e, description=_clip(e.description, CONTEXT_DESCRIPTION_CHARS),
            files=e.files[:5], strategy=None if e.strategy is None else _clip(e.strategy, 160),
        )
        for e in experience_infos(conn, scored, files_shown=None)
    ]
    # The lessons of similar tasks, and lessons that match the task themselves: a general
    # lesson may apply although the task it came from was described differently.
    lessons = {lesson.id: lesson for lesson in _lessons_of(conn, [rowid for rowid, _ in scored])}
    near = _retrieve(conn, index, "lesson", workspace, terms, qvec, want=CONTEXT_LESSONS)
    direct = [v.candidate.rowid for v in near]
    for lesson in lesson_infos(conn, direct).values():
        lessons.setdefault(lesson.id, lesson)
    ranked = sorted(lessons.values(), key=lambda lesson: (-lesson.confidence, -lesson.support))
    return ranked[:CONTEXT_LESSONS], experiences


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def render_context(lessons: Sequence[p.LessonInfo], experiences: Sequence[p.ExperienceInfo]) -> str:
    """A short plain-text block for a planning prompt; "" when nothing applies."""
    lines: list[str] = []
    if lessons:
        lines.append("Lessons from past tasks in this project (confidence, supporting tasks):")
        lines += [f"- {x.text} ({x.confidence:.2f}, {x.support})" for x in lessons]
    if experiences:
        lines.append("Similar past tasks:")
        for e in experiences:
            how = f"; strategy: {e.strategy}" if e.strategy else ""
            lines.append(
                f"- [{e.status}] {e.description}{how} ({e.tool_calls} tool calls,"
                f" {e.minutes:g} min; {e.id})"
            )
    out = ""
    for line in lines:
        if len(out) + len(line) + 1 > CONTEXT_CHARS:
            break
        out += line + "\n"
    return out.rstrip("\n")


# --------------------------------------------------------------------------- handlers


async def _embed(daemon: Daemon, text: str) -> tuple[VectorIndex | None, np.ndarray | None]:
    """The index and the query's vector, or (None, None) when semantic search is not up."""
    index = daemon.search.index
    if index is None:
        return None, None
    qvec = await daemon.model.embed_query(text)
    return (index, qvec) if qvec is not None else (None, None)


async def search(
    daemon: Daemon, who: Principal, req: p.SearchExperience
) -> p.ExperienceSearchResult:
    """Experiences similar to the query, best first, and the lessons they support.

    Raises:
        RecallError: ``busy`` or ``unavailable`` from the search actor.
    """
    started = time.perf_counter()
    index, qvec = await _embed(daemon, req.query)
    experiences, lessons = await daemon.search.run_read(
        partial(_search_sync, index, who.workspace, req.query, qvec, req.limit)
    )
    return p.ExperienceSearchResult(
        id=0, query=req.query, experiences=experiences, lessons=lessons,
        semantic_used=qvec is not None, took_ms=round((time.perf_counter() - started) * 1000, 3),
    )


async def explain(daemon: Daemon, who: Principal, req: p.ExplainNode) -> p.NodeExplained:
    """One experience in full; with a query, why it ranked for it.

    Raises:
        RecallError: ``not_found`` when the workspace has no such (surfacing) experience.
    """
    index, qvec = await _embed(daemon, req.query) if req.query is not None else (None, None)
    agent = None if ADMIN in who.scopes else who.agent
    result: p.NodeExplained = await daemon.search.run_read(
        partial(_explain_sync, index, who.workspace, agent, req.record_id, req.query, qvec)
    )
    return result


async def execution_context(
    daemon: Daemon, who: Principal, req: p.GetExecutionContext
) -> p.ExecutionContext:
    """What past work says about a new task: applicable lessons and similar experiences."""
    index, qvec = await _embed(daemon, req.task)
    lessons, experiences = await daemon.search.run_read(
        partial(_context_sync, index, who.workspace, req.task, qvec, req.limit)
    )
    return p.ExecutionContext(
        id=0, task=req.task, lessons=lessons, experiences=experiences,
        context=render_context(lessons, experiences), semantic_used=qvec is not None,
    )
