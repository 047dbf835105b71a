"""Experiences and lessons (seed 000): recording them, merging lessons, forgetting.

An experience is one finished task: a ``records`` row of kind 'experience' whose text is the
redacted task description, plus a row in ``experiences`` (class, strategy, status, tool_calls,
minutes, files). A lesson is a ``records`` row of kind 'lesson', stored once per workspace and
linked through ``lesson_support`` to every experience that supports it. Support and confidence
are never stored: they are counted from the live links (see :func:`lesson_stats`), so
forgetting an experience takes its support away without any bookkeeping to drift.

Lessons are merged as they are written, on the writer thread inside the experience's own
transaction: the reply can say which stored lesson a new one joined, and two experiences
carrying the same new lesson in one group commit cannot both create it. A new lesson joins a
stored one when

- their normalised texts are equal (case, spacing and punctuation ignored), or
- the daemon's embedding model puts them at a cosine of at least ``LESSON_MERGE_COSINE``.

0.85 comes from measuring all-MiniLM-L6-v2 on lesson pairs: rewordings of one lesson scored
0.74-0.93, different lessons on one topic 0.29-0.82. The threshold errs high because the two
mistakes are not alike: a missed merge leaves a duplicate that still surfaces, a wrong merge
silently swallows a different lesson. With no model loaded only the text rule applies.

The experience's description and lessons are embedded before the write (when the model and
the vector index are up) and their vectors written in the same transaction, so an experience
is searchable by meaning the moment it is acknowledged. The nearest stored lessons are found
with a FAISS range search (reading every lesson vector from SQLite on the one writer thread
cost 350 ms per lesson at 3,000 lessons), plus the few lessons committed but not yet in
FAISS (see :class:`_Unindexed`). Without a model, records wait for the embedding actor.
"""

from __future__ import annotations

import posixpath
import re
import sqlite3
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
import numpy as np
from recall_client import protocol as p

from ..pipeline.writer import Principal, WriteJob, content_hash, new_id
from ..errors import RecallError
from ..store.sqlite_schema import remember_key, replayed_record
from ..ingest.trust import DEFAULT_TRUST_FLOOR, assess
from ..store.vector_index import VectorIndex

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = [
    "LESSON_MERGE_COSINE",
    "RecordExperienceJob",
    "clean_lessons",
    "confidence",
    "embed",
    "forget",
    "lesson_infos",
    "lesson_stats",
    "project_file",
    "project_files",
    "record",
    "recorded_lessons",
    "run_job",
    "settled_eligibility",
]


LESSON_MERGE_COSINE = 0.85

_WORDS = re.compile(r"\w+")
_json = msgspec.json.Encoder()


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


def lesson_stats(
    conn: sqlite3.Connection, lesson_rowids: Sequence[int]
) -> dict[int, tuple[int, float]]:
    """(support, confidence) of each lesson, counting only experiences that still surface
    (not forgotten, eligible). A lesson with no such experience is absent from the result."""
    if not lesson_rowids:
        return {}
    marks = ",".join("?" * len(lesson_rowids))
    out: dict[int, tuple[int, float]] = {}
    for rowid, n, successes, failures in conn.execute(
        "SELECT ls.lesson_rowid, count(*), total(e.status = 'success'), total(e.status = 'failure')"
        " FROM lesson_support ls"
        " JOIN records x ON x.rowid = ls.experience_rowid"
        " JOIN experiences e ON e.rowid = ls.experience_rowid"
        f" WHERE ls.lesson_rowid IN ({marks})"
        " AND x.tombstoned_at IS NULL AND x.eligibility = 'eligible'"
        " GROUP BY ls.lesson_rowid",
        tuple(lesson_rowids),
    ):
        s, f = int(successes), int(failures)
        out[rowid] = (int(n), confidence(s, f, int(n) - s - f))
    return out


def lesson_infos(conn: sqlite3.Connection, lesson_rowids: Sequence[int]) -> dict[int, p.LessonInfo]:
    """The lessons among ``lesson_rowids`` that surface (eligible, not retired, support >= 1)."""
    stats = lesson_stats(conn, lesson_rowids)
    if not stats:
        return {}
    marks = ",".join("?" * len(stats))
    return {
        rowid: p.LessonInfo(id=rid, text=text, support=stats[rowid][0], confidence=stats[rowid][1])
        for rowid, rid, text in conn.execute(
            f"SELECT rowid, id, text FROM records WHERE rowid IN ({marks})"
            " AND tombstoned_at IS NULL AND eligibility = 'eligible'",
            tuple(stats),
        )
    }


def project_file(workspace: str, name: str) -> str | None:
    """``name`` as a normalised project-relative path; None when it is outside the workspace
    or is the workspace itself."""
    path = posixpath.normpath(name)
    if posixpath.isabs(path):
        rel = posixpath.relpath(path, posixpath.normpath(workspace))
        path = path if rel == ".." or rel.startswith("../") else rel
    if posixpath.isabs(path) or path in (".", "..") or path.startswith("../"):
        return None
    return path


def project_files(workspace: str, files: Sequence[str]) -> list[str]:
    """``files`` as normalised project-relative paths, deduplicated, in their order.

    Raises:
        RecallError: ``invalid_request`` for a path outside the workspace.
    """
    out: dict[str, None] = {}
    for name in files:
        path = project_file(workspace, name)
        if path is None:
            itself = posixpath.normpath(name) in (".", posixpath.normpath(workspace))
            where = "names the workspace itself" if itself else (
                f"is outside the workspace {workspace}; give paths inside it")
            raise RecallError("invalid_request", f"file {name!r} {where}")
        out[path] = None
    return list(out)


def clean_lessons(lessons: Sequence[str]) -> list[str]:
    """Each lesson once (the first spelling wins); the ingest stage redacted them already."""
    unique: dict[str, str] = {}
    for text in lessons:
        unique.setdefault(_lesson_key(text), text)
    return list(unique.values())


def _lesson_key(text: str) -> str:
    """What makes two lesson texts 'the same' without a model: their words, casefolded."""
    words = _WORDS.findall(text.casefold())
    return " ".join(words) if words else " ".join(text.casefold().split())


def settled_eligibility(text: str) -> tuple[float, str]:
    """(trust, eligibility) an experience or lesson with this text is written with."""
    # The evaluation actor's policy, decided here because these records are written settled:
    # an experience is searchable (and its lessons mergeable) as soon as it is acknowledged.
    trust, blocked, _reasons = assess(text)
    if blocked:
        return trust, "blocked"
    return trust, "eligible" if trust >= DEFAULT_TRUST_FLOOR else "ineligible"


class _Unindexed:
    """Lesson vectors written but not yet in the FAISS index, so the merge check sees them.

    A lesson joins FAISS only after its transaction commits; until then (and for lessons
    written earlier in the same group commit) its vector waits here. Entries carry the record
    id because a rolled-back insert frees its rowid for the next one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._vecs: dict[int, tuple[str, np.ndarray]] = {}

    def add(self, rowid: int, record_id: str, vec: np.ndarray) -> None:
        with self._lock:
            self._vecs[rowid] = (record_id, vec)

    def discard(self, rowids: Sequence[int]) -> None:
        with self._lock:
            for rowid in rowids:
                self._vecs.pop(rowid, None)

    def near(self, vec: np.ndarray, threshold: float) -> dict[int, tuple[str, float]]:
        with self._lock:
            entries = list(self._vecs.items())
        return {
            rowid: (record_id, sim)
            for rowid, (record_id, other) in entries
            if (sim := float(other @ vec)) >= threshold
        }


# One daemon per process, one writer: the registry is the process's.
_UNINDEXED = _Unindexed()


class RecordExperienceJob(WriteJob):
    """Insert one experience, merge or insert its lessons, link them; all in one savepoint."""

    __slots__ = ("description", "files", "index", "lessons", "new_vectors", "principal",
                 "req", "strategy", "unindexed", "vectors")

    # records.source of what this job writes (the experience and any new lesson).
    SOURCE = "record_experience"

    def __init__(
        self,
        principal: Principal,
        req: p.RecordExperience,
        *,
        description: str,
        strategy: str | None,
        files: list[str],
        lessons: list[str],
        vectors: np.ndarray | None,
        index: VectorIndex | None,
    ) -> None:
        super().__init__()
        self.principal = principal
        self.req = req
        self.description = description
        self.strategy = strategy
        self.files = files
        self.lessons = lessons
        # Row 0 is the description's vector, row i + 1 lesson i's; None without a model.
        self.vectors = vectors
        self.index = index
        # (rowid, vector) written by this job, for the FAISS index once committed.
        self.new_vectors: list[tuple[int, np.ndarray]] = []
        # Its lessons' rowids in _UNINDEXED, to discard once in FAISS (or rolled back).
        self.unindexed: list[int] = []

    def apply(self, conn: sqlite3.Connection, now: float) -> p.Reply:
        try:
            return self._apply(conn, now)
        except BaseException:
            _UNINDEXED.discard(self.unindexed)  # rolled back: these lessons never existed
            raise

    def _apply(self, conn: sqlite3.Connection, now: float) -> p.Reply:
        req, who = self.req, self.principal
        replayed = replayed_record(conn, who.agent, req.idempotency_key)
        if replayed is not None:
            return self._existing(conn, replayed, replayed=True)
        digest = content_hash(
            "experience",
            "\0".join((self.description, req.status, self.strategy or "", req.session or "")),
        )
        row = conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND kind = 'experience'"
            " AND content_hash = ? AND tombstoned_at IS NULL",
            (who.workspace, digest),
        ).fetchone()
        if row is not None:
            result = self._existing(conn, row[0], duplicate=True)
        else:
            result = self._insert(conn, now, digest)
        remember_key(conn, who.agent, req.idempotency_key, result.record_id, now)
        return result

    def _insert(self, conn: sqlite3.Connection, now: float, digest: bytes) -> p.ExperienceRecorded:
        req = self.req
        text = self.description
        trust, eligibility = settled_eligibility(f"{text}\n{self.strategy or ''}")
        record_id = new_id("exp")
        exp_rowid = self._insert_record(
            conn, now, record_id, "experience", text, digest, trust, eligibility, self._vector(0)
        )
        conn.execute(
            "INSERT INTO experiences (rowid, task_class, strategy, status, tool_calls, minutes,"
            " files) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (exp_rowid, req.task_class, self.strategy, req.status, req.tool_calls, req.minutes,
             _json.encode(self.files).decode()),
        )
        merged = self._link_lessons(conn, now, exp_rowid)
        return p.ExperienceRecorded(
            id=0, record_id=record_id, lessons=recorded_lessons(conn, merged)
        )

    def _link_lessons(
        self, conn: sqlite3.Connection, now: float, exp_rowid: int
    ) -> dict[int, bool]:
        """Merge or insert each lesson and link it to the experience: {lesson rowid: merged}."""
        merged: dict[int, bool] = {}
        for i, lesson in enumerate(self.lessons):
            rowid, was_merged = self._lesson(conn, now, lesson, self._vector(i + 1))
            conn.execute(
                "INSERT OR IGNORE INTO lesson_support (lesson_rowid, experience_rowid, created_at)"
                " VALUES (?, ?, ?)",
                (rowid, exp_rowid, now),
            )
            conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, rowid))
            merged.setdefault(rowid, was_merged)
        return merged

    def _lesson(
        self, conn: sqlite3.Connection, now: float, text: str, vec: np.ndarray | None
    ) -> tuple[int, bool]:
        """The rowid of the stored lesson ``text`` says the same as, else of a new one."""
        workspace = self.principal.workspace
        digest = content_hash("lesson", _lesson_key(text))
        row = conn.execute(
            "SELECT rowid FROM records WHERE workspace = ? AND kind = 'lesson'"
            " AND content_hash = ? AND tombstoned_at IS NULL",
            (workspace, digest),
        ).fetchone()
        if row is not None:
            return int(row[0]), True
        trust, eligibility = settled_eligibility(text)
        # Only a lesson that may surface is merged by meaning, and only into one that
        # surfaces: an injected text must not borrow (or lend) a real lesson's support.
        if vec is not None and eligibility == "eligible":
            near = self._nearest_lesson(conn, vec)
            if near is not None:
                return near, True
        rowid = self._insert_record(
            conn, now, new_id("les"), "lesson", text, digest, trust, eligibility, vec
        )
        return rowid, False

    def _nearest_lesson(self, conn: sqlite3.Connection, vec: np.ndarray) -> int | None:
        """The surfacing lesson of this workspace nearest in meaning, if near enough."""
        assert self.index is not None
        # FAISS holds every kind and workspace: it proposes, SQL keeps this workspace's live
        # lessons. FAISS's range is exclusive; the merge rule is "at least".
        ids, sims = self.index.range_search_sync(vec, LESSON_MERGE_COSINE - 1e-6)
        near: dict[int, tuple[str | None, float]] = {
            int(i): (None, float(sim)) for i, sim in zip(ids, sims, strict=True)
        }
        near.update(_UNINDEXED.near(vec, LESSON_MERGE_COSINE))
        if not near:
            return None
        live = [
            rowid
            for rowid, record_id in conn.execute(
                f"SELECT rowid, id FROM records WHERE rowid IN ({','.join('?' * len(near))})"
                " AND workspace = ? AND kind = 'lesson' AND tombstoned_at IS NULL"
                " AND eligibility = 'eligible'",
                (*near, self.principal.workspace),
            )
            if near[rowid][0] in (None, record_id)
        ]
        return max(live, key=lambda rowid: near[rowid][1]) if live else None

    def _insert_record(
        self, conn: sqlite3.Connection, now: float, record_id: str, kind: str, text: str,
        digest: bytes, trust: float, eligibility: str, vec: np.ndarray | None,
    ) -> int:
        who = self.principal
        cur = conn.execute(
            "INSERT INTO records (id, kind, ts, created_at, updated_at, workspace, agent, uid,"
            " session, source, text, trust, eligibility, content_hash, embed_state)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (record_id, kind, now if self.req.ts is None else self.req.ts, now, now,
             who.workspace, who.agent, who.uid, self.req.session, self.SOURCE, text, trust,
             eligibility, digest, 0 if vec is None else 1),
        )
        rowid = cur.lastrowid
        assert rowid is not None
        if vec is not None:
            assert self.index is not None
            conn.execute(
                "INSERT INTO vectors (rowid, model, vec) VALUES (?, ?, ?)",
                (rowid, self.index.model, vec.tobytes()),
            )
            self.new_vectors.append((rowid, vec))
            if kind == "lesson":
                _UNINDEXED.add(rowid, record_id, vec)
                self.unindexed.append(rowid)
        self.new_rowids.append(rowid)
        return rowid

    def _vector(self, i: int) -> np.ndarray | None:
        return None if self.vectors is None else self.vectors[i]

    def _existing(
        self, conn: sqlite3.Connection, record_id: str, *, duplicate: bool = False,
        replayed: bool = False,
    ) -> p.ExperienceRecorded:
        row = conn.execute("SELECT rowid FROM records WHERE id = ?", (record_id,)).fetchone()
        lessons: dict[int, bool] = {}
        if row is not None:
            lessons = {
                lesson: True
                for (lesson,) in conn.execute(
                    "SELECT lesson_rowid FROM lesson_support WHERE experience_rowid = ?", (row[0],)
                )
            }
        return p.ExperienceRecorded(
            id=0, record_id=record_id, duplicate=duplicate, replayed=replayed,
            lessons=recorded_lessons(conn, lessons),
        )


def recorded_lessons(conn: sqlite3.Connection, merged: dict[int, bool]) -> list[p.RecordedLesson]:
    """The lessons linked to an experience, in its order, with their live support."""
    stats = lesson_stats(conn, list(merged))
    out = []
    for rowid, was_merged in merged.items():
        rid, text = conn.execute(
            "SELECT id, text FROM records WHERE rowid = ?", (rowid,)
        ).fetchone()
        support, conf = stats.get(rowid, (0, confidence(0, 0, 0)))
        out.append(p.RecordedLesson(id=rid, text=text, support=support, confidence=conf,
                                    merged=was_merged))
    return out


class ForgetExperienceJob(WriteJob):
    """Tombstone an experience; retire the lessons it leaves with no support at all."""

    __slots__ = ("record_id", "removed", "workspace")

    def __init__(self, workspace: str, record_id: str) -> None:
        super().__init__()
        self.workspace = workspace
        self.record_id = record_id
        # Rowids tombstoned here, for removal from the FAISS index once committed.
        self.removed: list[int] = []

    def apply(self, conn: sqlite3.Connection, now: float) -> p.ExperienceForgotten:
        row = conn.execute(
            "SELECT rowid, tombstoned_at FROM records WHERE id = ? AND kind = 'experience'"
            " AND workspace = ?",
            (self.record_id, self.workspace),
        ).fetchone()
        if row is None:
            raise RecallError(
                "not_found", f"no experience {self.record_id} in workspace {self.workspace}"
            )
        rowid, tombstoned_at = row
        if tombstoned_at is not None:
            return p.ExperienceForgotten(id=0, record_id=self.record_id, already_forgotten=True)
        conn.execute(
            "UPDATE records SET tombstoned_at = ?, updated_at = ? WHERE rowid = ?",
            (now, now, rowid),
        )
        conn.execute("DELETE FROM vectors WHERE rowid = ?", (rowid,))  # as forget does
        self.removed.append(rowid)
        weakened = retired = 0
        for (lesson,) in conn.execute(
            "SELECT lesson_rowid FROM lesson_support WHERE experience_rowid = ?", (rowid,)
        ).fetchall():
            left = conn.execute(
                "SELECT count(*) FROM lesson_support ls JOIN records x"
                " ON x.rowid = ls.experience_rowid AND x.tombstoned_at IS NULL"
                " WHERE ls.lesson_rowid = ?",
                (lesson,),
            ).fetchone()[0]
            if left:
                weakened += 1
                conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, lesson))
                continue
            cur = conn.execute(
                "UPDATE records SET tombstoned_at = ?, updated_at = ? WHERE rowid = ?"
                " AND tombstoned_at IS NULL",
                (now, now, lesson),
            )
            if cur.rowcount:
                retired += 1
                conn.execute("DELETE FROM vectors WHERE rowid = ?", (lesson,))
                self.removed.append(lesson)
        return p.ExperienceForgotten(
            id=0, record_id=self.record_id, lessons_weakened=weakened, lessons_retired=retired
        )


# --------------------------------------------------------------------------- handlers


async def record(daemon: Daemon, who: Principal, req: p.RecordExperience) -> p.ExperienceRecorded:
    """Record one experience and its lessons; durable when it returns.

    Raises:
        RecallError: ``invalid_request`` for a file outside the workspace; ``busy`` or
            ``unavailable`` from the writer.
    """
    files = project_files(who.workspace, req.files)
    # The ingest stage redacted every free-text field before this handler ran: no secret
    # reaches the database, its WAL or an embedding.
    description, strategy = req.description, req.strategy
    lessons = clean_lessons(req.lessons)
    vectors, index = await embed(daemon, [description, *lessons])
    job = RecordExperienceJob(
        who, req, description=description, strategy=strategy, files=files, lessons=lessons,
        vectors=vectors, index=index,
    )
    result: p.ExperienceRecorded = await run_job(daemon, job)
    return result


async def embed(daemon: Daemon, texts: list[str]) -> tuple[np.ndarray | None, VectorIndex | None]:
    """Vectors of ``texts`` for a :class:`RecordExperienceJob`, and the index they go to;
    (None, None) when semantic search is not up (the embedding actor embeds them later)."""
    index = daemon.index
    # The caller is waiting: the priority lane, not behind the backlog's batches. A model
    # failure (None) costs the merge-by-meaning, not the write; the embedding actor embeds
    # the records later.
    vectors = await daemon.model.embed_now(texts) if index is not None else None
    return vectors, index if vectors is not None else None


async def run_job(daemon: Daemon, job: RecordExperienceJob) -> Any:
    """Run an experience job on the writer; once committed, add its vectors to FAISS."""
    try:
        await daemon.submit(job)
        result = await job.wait()
        if job.new_vectors and job.index is not None:
            ids = np.array([rowid for rowid, _ in job.new_vectors], dtype=np.int64)
            vecs = np.stack([vec for _, vec in job.new_vectors])
            # Committed already: the index must follow even if the caller has gone away.
            with anyio.CancelScope(shield=True):
                await job.index.add(ids, vecs)
    finally:
        _UNINDEXED.discard(job.unindexed)
    return result


async def forget(daemon: Daemon, who: Principal, req: p.ForgetExperience) -> p.ExperienceForgotten:
    """Tombstone one experience of the caller's workspace.

    Raises:
        RecallError: ``not_found`` when the workspace has no such experience.
    """
    job = ForgetExperienceJob(who.workspace, req.record_id)
    await daemon.submit(job)
    result: p.ExperienceForgotten = await job.wait()
    index = daemon.index
    if job.removed and index is not None:
        with anyio.CancelScope(shield=True):
            await index.remove(np.array(job.removed, dtype=np.int64))
    return result
