"""Experiences and lessons (seed 000).

An experience is a ``records`` row of kind 'experience' (its text the task description) plus
an ``experiences`` row (class, strategy, status, tool_calls, minutes, files). A lesson is a
``records`` row of kind 'lesson', stored once per workspace and linked through
``lesson_support`` to every experience behind it. Support and confidence are never stored:
they are counted from the live links, so forgetting an experience takes its support away
with no bookkeeping to drift.

Lessons are merged as they are written, inside the experience's own transaction, by the
policy's rule (same words, or a vector within its cosine of a surfacing lesson of the
workspace): the reply can say which stored lesson a new one joined, and two experiences
bringing the same new lesson in one group commit cannot both create it. The nearest stored
lessons come from the engine (:class:`NearLessons`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec
import numpy as np
from recall_client import protocol as p

from ...domain.dedup import experience_digest, lesson_digest, rollup_digest
from ...domain.ids import new_id
from ...domain.policy import LESSON_MERGE_COSINE, Assessment, confidence
from ...domain.principal import Principal
from ...errors import RecallError
from ..port import (
    ExperienceRow,
    ExperienceWrite,
    ExperienceWritten,
    Filter,
    LessonRow,
    RollupWrite,
    SessionRollup,
)
from .db import Db
from .filters import marks, where
from .records import NewRecord, insert_record, remember_key, replayed

__all__ = ["NearLessons", "SqlExperienceReads", "SqlExperienceWrites"]

# A session's rolled-up experience supports at most this many lessons.
MAX_LESSONS = 20

_json = msgspec.json.Encoder()
_strings = msgspec.json.Decoder(list[str])


class NearLessons(Protocol):
    """The engine's nearest-neighbour view of lesson vectors, for the merge check."""

    def near(self, vec: np.ndarray, threshold: float) -> dict[int, tuple[str | None, float]]:
        """rowid -> (record id, when known; cosine) of lesson vectors at least ``threshold``
        near ``vec``, of any workspace, including those this transaction wrote."""
        ...

    def written(self, rowid: int, record_id: str, vec: np.ndarray) -> None:
        """A lesson vector this transaction wrote."""
        ...


def lesson_stats(conn: Db, lesson_rowids: Sequence[int]) -> dict[int, tuple[int, float]]:
    """(support, confidence) of each lesson, counting only experiences that still surface
    (not forgotten, eligible). A lesson with no such experience is absent from the result."""
    if not lesson_rowids:
        return {}
    out: dict[int, tuple[int, float]] = {}
    for rowid, n, successes, failures in conn.execute(
        "SELECT ls.lesson_rowid, count(*),"
        " sum(CASE WHEN e.status = 'success' THEN 1 ELSE 0 END),"
        " sum(CASE WHEN e.status = 'failure' THEN 1 ELSE 0 END)"
        " FROM lesson_support ls"
        " JOIN records x ON x.rowid = ls.experience_rowid"
        " JOIN experiences e ON e.rowid = ls.experience_rowid"
        f" WHERE ls.lesson_rowid IN ({marks(lesson_rowids)})"
        " AND x.tombstoned_at IS NULL AND x.eligibility = 'eligible'"
        " GROUP BY ls.lesson_rowid",
        tuple(lesson_rowids),
    ):
        s, f = int(successes), int(failures)
        out[rowid] = (int(n), confidence(s, f, int(n) - s - f))
    return out


def experience_rows(conn: Db, rowids: Sequence[int]) -> dict[int, ExperienceRow]:
    if not rowids:
        return {}
    return {
        row[0]: ExperienceRow(*[*row[:11], _strings.decode(row[11])])
        for row in conn.execute(
            "SELECT r.rowid, r.id, r.text, r.agent, r.ts, r.session, e.task_class, e.strategy,"
            " e.status, e.tool_calls, e.minutes, e.files"
            " FROM records r JOIN experiences e ON e.rowid = r.rowid"
            f" WHERE r.rowid IN ({marks(rowids)})",
            list(rowids),
        )
    }


def recorded_lessons(conn: Db, merged: dict[int, bool]) -> list[p.RecordedLesson]:
    """The lessons linked to an experience, in its order, with their live support."""
    stats = lesson_stats(conn, list(merged))
    out = []
    for rowid, was_merged in merged.items():
        rid, text = conn.execute(
            "SELECT id, text FROM records WHERE rowid = ?", (rowid,)
        ).fetchone()
        support, conf = stats.get(rowid, (0, confidence(0, 0, 0)))
        out.append(
            p.RecordedLesson(id=rid, text=text, support=support, confidence=conf, merged=was_merged)
        )
    return out


class SqlExperienceReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def rows(self, rowids: Sequence[int]) -> dict[int, ExperienceRow]:
        return experience_rows(self._conn, rowids)

    def links(self, experience_rowids: Sequence[int]) -> list[tuple[int, int]]:
        """(lesson rowid, experience rowid) of the experiences' lessons."""
        if not experience_rowids:
            return []
        return [
            tuple(row)
            for row in self._conn.execute(
                "SELECT lesson_rowid, experience_rowid FROM lesson_support"
                f" WHERE experience_rowid IN ({marks(experience_rowids)})",
                tuple(experience_rowids),
            )
        ]

    def lessons(self, lesson_rowids: Sequence[int]) -> dict[int, LessonRow]:
        """The lessons among ``lesson_rowids`` that surface (eligible, live, support >= 1)."""
        stats = lesson_stats(self._conn, lesson_rowids)
        if not stats:
            return {}
        return {
            rowid: LessonRow(rowid, rid, text, stats[rowid][0], stats[rowid][1])
            for rowid, rid, text in self._conn.execute(
                f"SELECT rowid, id, text FROM records WHERE rowid IN ({marks(list(stats))})"
                " AND tombstoned_at IS NULL AND eligibility = 'eligible'",
                tuple(stats),
            )
        }

    def find(self, record_id: str, f: Filter) -> tuple[int, str | None] | None:
        """(rowid, session) of the experience ``record_id`` if ``f`` lets it through."""
        clause, params = where(self._conn, f)
        row = self._conn.execute(
            f"SELECT r.rowid, r.session FROM records r WHERE r.id = ? AND {clause}",
            (record_id, *params),
        ).fetchone()
        return None if row is None else (int(row[0]), row[1])

    def vector(self, rowid: int, model: str) -> np.ndarray | None:
        row = self._conn.execute(
            "SELECT vec FROM vectors WHERE rowid = ? AND model = ?", (rowid, model)
        ).fetchone()
        return None if row is None else self._conn.vector_of(row[0])

    def newest_page(
        self,
        f: Filter,
        *,
        before: tuple[float, str] | None,
        limit: int,
        status: str | None = None,
        task_class: str | None = None,
    ) -> list[int]:
        clause, params = where(self._conn, f)
        for column, value in (("status", status), ("task_class", task_class)):
            if value is not None:
                clause += f" AND r.rowid IN (SELECT rowid FROM experiences WHERE {column} = ?)"
                params.append(value)
        if before is not None:
            clause += " AND (r.ts < ? OR (r.ts = ? AND r.id < ?))"
            params += [before[0], before[0], before[1]]
        return [
            int(row[0])
            for row in self._conn.execute(
                f"SELECT r.rowid FROM records r WHERE {clause}"
                " ORDER BY r.ts DESC, r.id DESC LIMIT ?",
                (*params, limit),
            )
        ]

    def rollup_of(self, workspace: str, session: str) -> SessionRollup | None:
        row = self._conn.execute(
            "SELECT u.rowid, r.id, r.tombstoned_at, u.given, r.text, x.strategy, x.task_class,"
            " x.status FROM experience_rollups u JOIN records r ON r.rowid = u.rowid"
            " JOIN experiences x ON x.rowid = u.rowid WHERE u.workspace = ? AND u.session = ?",
            (workspace, session),
        ).fetchone()
        if row is None:
            return None
        return SessionRollup(
            rowid=row[0],
            record_id=row[1],
            forgotten=row[2] is not None,
            given=frozenset(_strings.decode(row[3])),
            description=row[4],
            strategy=row[5],
            task_class=row[6],
            status=row[7],
        )


class SqlExperienceWrites:
    """Recording, rolling up and forgetting experiences, with their lessons."""

    def __init__(
        self,
        conn: Db,
        lessons: NearLessons,
    ) -> None:
        self._conn = conn
        self._lessons = lessons

    # ------------------------------------------------------------------ recording

    def record(
        self,
        who: Principal,
        req: p.RecordExperience,
        plan: ExperienceWrite,
        now: float,
        written: ExperienceWritten,
    ) -> p.ExperienceRecorded:
        """Insert one experience (or answer with the stored one for a duplicate or a
        replayed key), merge or insert its lessons and link them; what was written goes to
        ``written``, for after the COMMIT."""
        conn = self._conn
        earlier = replayed(conn, who, req.idempotency_key)
        if earlier is not None:
            return self._existing(earlier, replayed=True)
        digest = experience_digest(plan.description, req.status, plan.strategy, req.session)
        row = conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND kind = 'experience'"
            " AND content_hash = ? AND tombstoned_at IS NULL",
            (who.workspace, digest),
        ).fetchone()
        if row is not None:
            result = self._existing(row[0], duplicate=True)
        else:
            record_id, exp_rowid = self._insert(who, req, plan, now, digest, written)
            merged = self._link_lessons(who, req, plan, now, exp_rowid, written)
            result = p.ExperienceRecorded(
                record_id=record_id, lessons=recorded_lessons(conn, merged)
            )
        remember_key(conn, who, req.idempotency_key, result.record_id, now)
        return result

    def _insert(
        self,
        who: Principal,
        req: p.RecordExperience,
        plan: ExperienceWrite,
        now: float,
        digest: bytes,
        written: ExperienceWritten,
    ) -> tuple[str, int]:
        record_id = new_id("exp")
        exp_rowid = self._insert_record(
            who,
            req,
            plan,
            now,
            record_id,
            "experience",
            plan.description,
            digest,
            plan.trust,
            plan.vector(0),
            written,
        )
        self._conn.execute(
            "INSERT INTO experiences (rowid, task_class, strategy, status, tool_calls, minutes,"
            " files) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                exp_rowid,
                req.task_class,
                plan.strategy,
                req.status,
                req.tool_calls,
                req.minutes,
                _json.encode(plan.files).decode(),
            ),
        )
        return record_id, exp_rowid

    def _link_lessons(
        self,
        who: Principal,
        req: p.RecordExperience,
        plan: ExperienceWrite,
        now: float,
        exp_rowid: int,
        written: ExperienceWritten,
    ) -> dict[int, bool]:
        """Merge or insert each lesson and link it to the experience: {lesson rowid: merged}."""
        merged: dict[int, bool] = {}
        for i, lesson in enumerate(plan.lessons):
            rowid, was_merged = self._lesson(
                who, req, plan, now, lesson, plan.lesson_trust[i], plan.vector(i + 1), written
            )
            self._conn.execute(
                "INSERT INTO lesson_support (lesson_rowid, experience_rowid, created_at)"
                " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (rowid, exp_rowid, now),
            )
            self._conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, rowid))
            merged.setdefault(rowid, was_merged)
        return merged

    def _lesson(
        self,
        who: Principal,
        req: p.RecordExperience,
        plan: ExperienceWrite,
        now: float,
        text: str,
        trust: Assessment,
        vec: np.ndarray | None,
        written: ExperienceWritten,
    ) -> tuple[int, bool]:
        """The rowid of the stored lesson ``text`` says the same as, else of a new one."""
        digest = lesson_digest(text)
        row = self._conn.execute(
            "SELECT rowid FROM records WHERE workspace = ? AND kind = 'lesson'"
            " AND content_hash = ? AND tombstoned_at IS NULL",
            (who.workspace, digest),
        ).fetchone()
        if row is not None:
            return int(row[0]), True
        # Only a lesson that may surface is merged by meaning, and only into one that
        # surfaces: an injected text must not borrow (or lend) a real lesson's support.
        if vec is not None and trust.eligibility == "eligible":
            near = self._nearest_lesson(who.workspace, vec)
            if near is not None:
                return near, True
        rowid = self._insert_record(
            who, req, plan, now, new_id("les"), "lesson", text, digest, trust, vec, written
        )
        return rowid, False

    def _nearest_lesson(self, workspace: str, vec: np.ndarray) -> int | None:
        """The surfacing lesson of this workspace nearest in meaning, if near enough."""
        # The engine proposes, SQL keeps this workspace's live lessons.
        near = self._lessons.near(vec, LESSON_MERGE_COSINE)
        if not near:
            return None
        live = [
            rowid
            for rowid, record_id in self._conn.execute(
                f"SELECT rowid, id FROM records WHERE rowid IN ({marks(list(near))})"
                " AND workspace = ? AND kind = 'lesson' AND tombstoned_at IS NULL"
                " AND eligibility = 'eligible'",
                (*near, workspace),
            )
            if near[rowid][0] in (None, record_id)
        ]
        return max(live, key=lambda rowid: near[rowid][1]) if live else None

    def _insert_record(
        self,
        who: Principal,
        req: p.RecordExperience,
        plan: ExperienceWrite,
        now: float,
        record_id: str,
        kind: str,
        text: str,
        digest: bytes,
        trust: Assessment,
        vec: np.ndarray | None,
        written: ExperienceWritten,
    ) -> int:
        rowid = insert_record(
            self._conn,
            NewRecord(
                id=record_id,
                kind=kind,
                ts=now if req.ts is None else req.ts,
                created_at=now,
                workspace=who.workspace,
                agent=who.agent,
                uid=who.uid,
                session=req.session,
                source=plan.source,
                text=text,
                content_hash=digest,
                trust=trust.trust,
                eligibility=trust.eligibility,
                embed_state=0 if vec is None else 1,
                visibility=req.visibility,
            ),
        )
        if vec is not None:
            assert plan.model is not None
            self._conn.execute(
                "INSERT INTO vectors (rowid, model, vec) VALUES (?, ?, ?)",
                (rowid, plan.model, self._conn.vector(vec)),
            )
            written.vectors.append((rowid, vec))
            if kind == "lesson":
                self._lessons.written(rowid, record_id, vec)
        else:
            written.rowids.append(rowid)
        return rowid

    def _existing(
        self, record_id: str, *, duplicate: bool = False, replayed: bool = False
    ) -> p.ExperienceRecorded:
        row = self._conn.execute("SELECT rowid FROM records WHERE id = ?", (record_id,)).fetchone()
        lessons: dict[int, bool] = {}
        if row is not None:
            lessons = {
                lesson: True
                for (lesson,) in self._conn.execute(
                    "SELECT lesson_rowid FROM lesson_support WHERE experience_rowid = ?", (row[0],)
                )
            }
        return p.ExperienceRecorded(
            record_id=record_id,
            duplicate=duplicate,
            replayed=replayed,
            lessons=recorded_lessons(self._conn, lessons),
        )

    # ------------------------------------------------------------------ rolling up

    def roll_up(
        self,
        who: Principal,
        req: p.RecordExperience,
        plan: ExperienceWrite,
        rollup: RollupWrite,
        now: float,
        written: ExperienceWritten,
    ) -> p.ExperienceRolledUp:
        """Insert the session's experience, or update the one an earlier roll-up wrote."""
        conn = self._conn
        workspace = who.workspace
        row = conn.execute(
            "SELECT u.rowid, r.id, r.tombstoned_at FROM experience_rollups u"
            " JOIN records r ON r.rowid = u.rowid WHERE u.workspace = ? AND u.session = ?",
            (workspace, rollup.session),
        ).fetchone()
        if row is not None and row[2] is not None:
            rollup.why = "the session's experience was forgotten"
            return self._rolled(rollup, row[1], created=False, forgotten=True)
        given = _json.encode(sorted(rollup.given)).decode()
        if row is None:
            # The session names the experience: a record_experience of the same words is
            # another experience, and an update does not change what identifies this one.
            digest = rollup_digest(rollup.session)
            record_id, rowid = self._insert(who, req, plan, now, digest, written)
            merged = self._link_lessons(who, req, plan, now, rowid, written)
            conn.execute(
                "INSERT INTO experience_rollups (rowid, workspace, session, given, episodes,"
                " rolled_up_at) VALUES (?, ?, ?, ?, ?, ?)",
                (rowid, workspace, rollup.session, given, rollup.episodes, now),
            )
            return self._rolled(
                rollup, record_id, created=True, rowid=rowid, lessons=recorded_lessons(conn, merged)
            )
        rowid, record_id = row[0], row[1]
        self._update(who, req, plan, now, rowid, written)
        merged = self._link_lessons(who, req, plan, now, rowid, written)
        linked = [
            lesson
            for (lesson,) in conn.execute(
                "SELECT lesson_rowid FROM lesson_support WHERE experience_rowid = ?"
                " ORDER BY created_at",
                (rowid,),
            )
        ]
        if len(linked) > MAX_LESSONS:
            raise RecallError(
                "invalid_request",
                f"the experience of session {rollup.session} would support {len(linked)} lessons;"
                f" at most {MAX_LESSONS}",
            )
        conn.execute(
            "UPDATE experience_rollups SET given = ?, episodes = ?, rolled_up_at = ?"
            " WHERE rowid = ?",
            (given, rollup.episodes, now, rowid),
        )
        earlier = {lesson: True for lesson in linked if lesson not in merged}
        lessons = recorded_lessons(conn, merged) + recorded_lessons(conn, earlier)
        return self._rolled(rollup, record_id, created=False, rowid=rowid, lessons=lessons)

    def _update(
        self,
        who: Principal,
        req: p.RecordExperience,
        plan: ExperienceWrite,
        now: float,
        rowid: int,
        written: ExperienceWritten,
    ) -> None:
        vec = plan.vector(0)
        self._conn.execute(
            "UPDATE records SET text = ?, ts = ?, updated_at = ?, agent = ?, trust = ?,"
            " eligibility = ?, embed_state = ? WHERE rowid = ?",
            (
                plan.description,
                req.ts if req.ts is not None else now,
                now,
                who.agent,
                plan.trust.trust,
                plan.trust.eligibility,
                0 if vec is None else 1,
                rowid,
            ),
        )
        if vec is None:
            # embed_state 0: the embedding actor re-embeds it and replaces the old vector.
            written.rowids.append(rowid)
        else:
            assert plan.model is not None
            self._conn.execute(
                "INSERT INTO vectors (rowid, model, vec) VALUES (?, ?, ?)"
                " ON CONFLICT (rowid) DO UPDATE SET model = excluded.model, vec = excluded.vec",
                (rowid, plan.model, self._conn.vector(vec)),
            )
            written.vectors.append((rowid, vec))
        self._conn.execute(
            "UPDATE experiences SET task_class = ?, strategy = ?, status = ?, tool_calls = ?,"
            " minutes = ?, files = ? WHERE rowid = ?",
            (
                req.task_class,
                plan.strategy,
                req.status,
                req.tool_calls,
                req.minutes,
                _json.encode(plan.files).decode(),
                rowid,
            ),
        )

    def _rolled(
        self,
        rollup: RollupWrite,
        record_id: str,
        *,
        created: bool,
        forgotten: bool = False,
        rowid: int | None = None,
        lessons: list[p.RecordedLesson] | None = None,
    ) -> p.ExperienceRolledUp:
        experience = None
        if rowid is not None:
            experience = experience_rows(self._conn, [rowid])[rowid].info(0.0, None)
        return p.ExperienceRolledUp(
            record_id=record_id,
            session=rollup.session,
            episodes=rollup.episodes,
            created=created,
            forgotten=forgotten,
            why=rollup.why,
            experience=experience,
            lessons=lessons or [],
        )

    # ------------------------------------------------------------------ forgetting

    def forget(
        self, workspace: str, record_id: str, now: float
    ) -> tuple[p.ExperienceForgotten, list[int]]:
        """Tombstone an experience; retire the lessons it leaves with no support at all.
        Returns the reply and the rowids to take out of the vector index."""
        conn = self._conn
        row = conn.execute(
            "SELECT rowid, tombstoned_at FROM records WHERE id = ? AND kind = 'experience'"
            " AND workspace = ?",
            (record_id, workspace),
        ).fetchone()
        if row is None:
            raise RecallError("not_found", f"no experience {record_id} in workspace {workspace}")
        rowid, tombstoned_at = row
        if tombstoned_at is not None:
            return p.ExperienceForgotten(record_id=record_id, already_forgotten=True), []
        conn.execute(
            "UPDATE records SET tombstoned_at = ?, updated_at = ? WHERE rowid = ?",
            (now, now, rowid),
        )
        conn.execute("DELETE FROM vectors WHERE rowid = ?", (rowid,))
        removed = [rowid]
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
                removed.append(lesson)
        return p.ExperienceForgotten(
            record_id=record_id, lessons_weakened=weakened, lessons_retired=retired
        ), removed
