"""Reading experiences and lessons: search behind a relevance floor, explain, execution context.

Every read runs on a search worker (:meth:`SearchActor.read`) and sees experiences and lessons
under one clause that both retrieval channels share (the reader contract): the
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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
from recall_client import protocol as p

from ..errors import RecallError
from ..store.port import ExperienceRow, Filter, Reader
from .fusion import CHANNEL_DEPTH, Candidate, QueryVector, retrieve, vector_of
from .terms import query_terms

__all__ = [
    "SEMANTIC_FLOOR",
    "context",
    "experience_info",
    "experience_infos",
    "explain",
    "has_lessons",
    "lesson_infos",
    "lexical_needed",
    "render_context",
    "search",
]

SEMANTIC_FLOOR = 0.30
# Query words checked for the lexical floor (one lookup each); a long task description
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


def _visible(kind: str, workspace: str, now: float) -> Filter:
    return Filter(kind=kind, now=now, workspace=workspace)


def has_lessons(reader: Reader, workspace: str) -> bool:
    """Whether the workspace has a lesson at all (one indexed look-up): where it has none, the
    semantic channel would widen through every other vector looking for one."""
    return bool(reader.search.newest(_visible("lesson", workspace, time.time()), 1))


def _matched_terms(
    reader: Reader, terms: Sequence[str], rowids: Sequence[int]
) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {rowid: [] for rowid in rowids}
    if not rowids:
        return out
    for term in terms[:MAX_FLOOR_TERMS]:
        for rowid in reader.search.matching(term, rowids):
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


def _floor(reader: Reader, terms: Sequence[str], candidates: list[Candidate]) -> list[Verdict]:
    matched = _matched_terms(reader, terms, [c.rowid for c in candidates])
    verdicts = []
    for c in candidates:
        passed, reason = _judge(c.cosine, matched[c.rowid], terms)
        verdicts.append(Verdict(c, matched[c.rowid], passed, reason))
    return verdicts


def _retrieve(
    reader: Reader,
    kind: str,
    workspace: str,
    terms: list[str],
    qvec: QueryVector,
    *,
    want: int | None = None,
) -> list[Verdict]:
    """Candidates of ``kind`` either channel finds, best first, judged by the floor.

    With ``want``, only the first ``want`` that pass: candidates are judged in fused order a
    few at a time (the word check costs one lookup per query word), stopping when enough
    have passed. Without it, every candidate, passed or not (for explain).
    """
    candidates = retrieve(
        reader, terms, qvec, _visible(kind, workspace, time.time()), limit=CHANNEL_DEPTH
    )
    if want is None:
        return _floor(reader, terms, candidates)
    kept: list[Verdict] = []
    step = max(10, 2 * want)
    for start in range(0, len(candidates), step):
        kept += [v for v in _floor(reader, terms, candidates[start : start + step]) if v.passed]
        if len(kept) >= want:
            break
    return kept[:want]


def experience_info(row: ExperienceRow, score: float, files_shown: int | None) -> p.ExperienceInfo:
    """An experience as search, explain, context, experience_list and a roll-up return it."""
    own = row.fields
    return p.ExperienceInfo(
        id=row.id,
        score=round(score, 4),
        description=row.text,
        task_class=own.task_class,
        agent=row.agent,
        strategy=own.strategy,
        status=own.status,
        tool_calls=own.tool_calls,
        minutes=own.minutes,
        files=own.files if files_shown is None else own.files[:files_shown],
        ts=row.ts,
        session=row.session,
    )


def experience_infos(
    reader: Reader, scored: Sequence[tuple[int, float]], *, files_shown: int | None
) -> list[p.ExperienceInfo]:
    """Experience rows in the order of ``scored`` (rowid, score)."""
    rows = reader.experiences.rows([rowid for rowid, _ in scored])
    return [
        experience_info(rows[rowid], score, files_shown) for rowid, score in scored if rowid in rows
    ]


def lesson_infos(reader: Reader, lesson_rowids: Sequence[int]) -> dict[int, p.LessonInfo]:
    """The lessons among ``lesson_rowids`` that surface (eligible, live, support >= 1)."""
    return {
        rowid: p.LessonInfo(
            id=row.id, text=row.text, support=row.support, confidence=row.confidence
        )
        for rowid, row in reader.experiences.lessons(lesson_rowids).items()
    }


def _lessons_of(reader: Reader, experience_rowids: Sequence[int]) -> list[p.LessonInfo]:
    """The surfacing lessons of these experiences: those of the first experience first, then by
    confidence; each once."""
    if not experience_rowids:
        return []
    position = {rowid: i for i, rowid in enumerate(experience_rowids)}
    first: dict[int, int] = {}
    for lesson, exp in reader.experiences.links(experience_rowids):
        first[lesson] = min(first.get(lesson, len(position)), position[exp])
    infos = lesson_infos(reader, list(first))
    ordered = sorted(infos, key=lambda r: (first[r], -infos[r].confidence, -infos[r].support))
    return [infos[r] for r in ordered[:MAX_LESSONS]]


# --------------------------------------------------------------------------- on a search worker


def search(
    reader: Reader, workspace: str, query: str, qvec: QueryVector, limit: int
) -> tuple[list[p.ExperienceInfo], list[p.LessonInfo]]:
    """search_experience: experiences similar to the query, best first, and their lessons."""
    terms = query_terms(query)
    kept = _retrieve(reader, "experience", workspace, terms, qvec, want=limit)
    scored = [(v.candidate.rowid, v.candidate.score) for v in kept]
    experiences = experience_infos(reader, scored, files_shown=FILES_SHOWN)
    return experiences, _lessons_of(reader, [rowid for rowid, _ in scored])


def explain(
    reader: Reader,
    workspace: str,
    agent: str | None,
    record_id: str,
    query: str | None,
    qvec: QueryVector,
    model: str | None,
) -> p.NodeExplained:
    """explain_node: one experience in full; with a query, why it ranked for it. The
    session's episodes are those work_search's contract shows: of ``agent`` (None: any)."""
    now = time.time()
    found = reader.experiences.find(record_id, _visible("experience", workspace, now))
    if found is None:
        raise RecallError(
            "not_found",
            f"no experience {record_id} in workspace {workspace} (unknown id, or forgotten)",
        )
    rowid, session = found
    ranking = _ranking(reader, workspace, rowid, query, qvec, model) if query is not None else None
    (experience,) = experience_infos(
        reader, [(rowid, ranking.score if ranking else 0.0)], files_shown=None
    )
    episodes = []
    if session is not None:
        episodes = [
            p.EpisodeRef(id=rid, ts=ts, text=text)
            for rid, ts, text in reader.episodes.refs(
                workspace, session, agent, now, EPISODES_SHOWN
            )
        ]
    return p.NodeExplained(
        experience=experience,
        episodes=episodes,
        lessons=_lessons_of(reader, [rowid]),
        ranking=ranking,
    )


def _ranking(
    reader: Reader,
    workspace: str,
    rowid: int,
    query: str,
    qvec: QueryVector,
    model: str | None,
) -> p.Ranking:
    terms = query_terms(query)
    verdicts = _retrieve(reader, "experience", workspace, terms, qvec)
    passed = [v.candidate.rowid for v in verdicts if v.passed]
    mine = next((v for v in verdicts if v.candidate.rowid == rowid), None)
    if mine is None:
        # Neither channel reached it: judge it on its own evidence all the same.
        cosine = _cosine(reader, rowid, qvec, model)
        matched = _matched_terms(reader, terms, [rowid])[rowid]
        ok, reason = _judge(cosine, matched, terms)
        mine = Verdict(
            Candidate(rowid=rowid, score=0.0, cosine=cosine),
            matched,
            ok,
            f"not among either channel's top {CHANNEL_DEPTH}; {reason}",
        )
    c = mine.candidate
    return p.Ranking(
        query=query,
        rank=passed.index(rowid) + 1 if rowid in passed else None,
        score=round(c.score, 4),
        lexical_rank=None if c.lexical_rank is None else c.lexical_rank + 1,
        semantic_rank=None if c.semantic_rank is None else c.semantic_rank + 1,
        cosine=None if c.cosine is None else round(c.cosine, 4),
        matched_terms=mine.matched,
        query_terms=terms,
        passed_floor=mine.passed,
        reason=mine.reason,
    )


def _cosine(reader: Reader, rowid: int, qvec: QueryVector, model: str | None) -> float | None:
    query = vector_of(qvec) if model is not None else None
    if query is None or model is None:
        return None
    vec = reader.experiences.vector(rowid, model)
    if vec is None or vec.shape != query.shape:
        return None
    return float(vec @ query)


def context(
    reader: Reader, workspace: str, task: str, qvec: QueryVector, limit: int
) -> tuple[list[p.LessonInfo], list[p.ExperienceInfo]]:
    """get_execution_context: the lessons and similar past experiences that apply."""
    terms = query_terms(task)
    kept = _retrieve(reader, "experience", workspace, terms, qvec, want=limit)
    scored = [(v.candidate.rowid, v.candidate.score) for v in kept]
    experiences = [
        msgspec.structs.replace(
            e,
            description=_clip(e.description, CONTEXT_DESCRIPTION_CHARS),
            files=e.files[:5],
            strategy=None if e.strategy is None else _clip(e.strategy, 160),
        )
        for e in experience_infos(reader, scored, files_shown=None)
    ]
    # The lessons of similar tasks, and lessons that match the task themselves: a general
    # lesson may apply although the task it came from was described differently.
    lessons = {lesson.id: lesson for lesson in _lessons_of(reader, [rowid for rowid, _ in scored])}
    near = _retrieve(reader, "lesson", workspace, terms, qvec, want=CONTEXT_LESSONS)
    for lesson in lesson_infos(reader, [v.candidate.rowid for v in near]).values():
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
