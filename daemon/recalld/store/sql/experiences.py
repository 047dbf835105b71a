"""Experiences and lessons (seed 000).

An experience is a ``records`` row of kind 'experience' (its text the task description) plus
an ``experiences`` row (class, strategy, status, tool_calls, minutes, files). A lesson is a
``records`` row of kind 'lesson', stored once per workspace and linked through
``lesson_support`` to every experience behind it. Support and confidence are never stored:
they are counted from the live links, so forgetting an experience takes its support away
with no bookkeeping to drift.

Which stored lesson a new one joins is decided above the port
(:mod:`recalld.handlers.experience_writes`), inside the experience's own transaction, over
the rows these statements read and write; the nearest stored lessons come from the engine
(:class:`NearLessons`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple
from dataclasses import fields as dataclass_fields
from typing import Any, Protocol

import msgspec
import numpy as np

from ...domain.policy import LESSON_MERGE_COSINE, confidence
from ..port import (
    ExperienceFields,
    ExperienceRecord,
    ExperienceRow,
    Filter,
    LessonRow,
    SessionRollup,
)
from .db import Db
from .filters import marks, where
from .records import insert_record

__all__ = ["NearLessons", "SqlExperienceReads", "SqlExperienceWrites"]

_json = msgspec.json.Encoder()
_strings = msgspec.json.Decoder(list[str])
# The experiences columns after rowid: ExperienceFields', in its order (files last, as JSON).
_COLUMNS = tuple(f.name for f in dataclass_fields(ExperienceFields))
assert _COLUMNS[-1] == "files"


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


def _experience_row(row: Sequence[Any]) -> ExperienceRow:
    """A row of :func:`experience_rows`' query: the record's six columns, then :data:`_COLUMNS`
    (bound by name)."""
    rowid, id_, text, agent, ts, session = row[:6]
    own = dict(zip(_COLUMNS, row[6:], strict=True))
    own["files"] = _strings.decode(own["files"])
    return ExperienceRow(rowid, id_, text, agent, ts, session, ExperienceFields(**own))


def experience_rows(conn: Db, rowids: Sequence[int]) -> dict[int, ExperienceRow]:
    if not rowids:
        return {}
    return {
        row[0]: _experience_row(row)
        for row in conn.execute(
            "SELECT r.rowid, r.id, r.text, r.agent, r.ts, r.session,"
            f" {', '.join(f'e.{c}' for c in _COLUMNS)}"
            " FROM records r JOIN experiences e ON e.rowid = r.rowid"
            f" WHERE r.rowid IN ({marks(rowids)})",
            list(rowids),
        )
    }


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
    """The rows of experiences, their lessons, the links between them and roll-ups."""

    def __init__(self, conn: Db, lessons: NearLessons) -> None:
        self._conn = conn
        self._lessons = lessons

    def find_duplicate(self, workspace: str, content_hash: bytes) -> str | None:
        row = self._conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND kind = 'experience'"
            " AND content_hash = ? AND tombstoned_at IS NULL",
            (workspace, content_hash),
        ).fetchone()
        return None if row is None else str(row[0])

    def insert(self, record: ExperienceRecord, fields: ExperienceFields) -> int:
        rowid = self._insert_record(record)
        self._conn.execute(
            f"INSERT INTO experiences (rowid, {', '.join(_COLUMNS)}) VALUES (?, {marks(_COLUMNS)})",
            (rowid, *self._fields(fields)),
        )
        return rowid

    def rewrite(
        self, rowid: int, record: ExperienceRecord, fields: ExperienceFields, now: float
    ) -> None:
        vec, row = record.vector, record.record
        self._conn.execute(
            "UPDATE records SET text = ?, ts = ?, updated_at = ?, agent = ?, trust = ?,"
            " eligibility = ?, embed_state = ? WHERE rowid = ?",
            (row.text, row.ts, now, row.agent, row.trust, row.eligibility, row.embed_state, rowid),
        )
        if vec is not None:
            assert record.model is not None
            self._conn.execute(
                "INSERT INTO vectors (rowid, model, vec) VALUES (?, ?, ?)"
                " ON CONFLICT (rowid) DO UPDATE SET model = excluded.model, vec = excluded.vec",
                (rowid, record.model, self._conn.vector(vec)),
            )
        self._conn.execute(
            f"UPDATE experiences SET {', '.join(f'{c} = ?' for c in _COLUMNS)} WHERE rowid = ?",
            (*self._fields(fields), rowid),
        )

    def find_lesson(self, workspace: str, content_hash: bytes) -> int | None:
        row = self._conn.execute(
            "SELECT rowid FROM records WHERE workspace = ? AND kind = 'lesson'"
            " AND content_hash = ? AND tombstoned_at IS NULL",
            (workspace, content_hash),
        ).fetchone()
        return None if row is None else int(row[0])

    def nearest_lesson(self, workspace: str, vec: np.ndarray) -> int | None:
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

    def insert_lesson(self, record: ExperienceRecord) -> int:
        rowid = self._insert_record(record)
        if record.vector is not None:
            self._lessons.written(rowid, record.record.id, record.vector)
        return rowid

    def link(self, lesson_rowid: int, experience_rowid: int, now: float) -> None:
        self._conn.execute(
            "INSERT INTO lesson_support (lesson_rowid, experience_rowid, created_at)"
            " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            (lesson_rowid, experience_rowid, now),
        )
        self.touch(lesson_rowid, now)

    def linked(self, record_id: str) -> list[int]:
        return [
            int(lesson)
            for (lesson,) in self._conn.execute(
                "SELECT ls.lesson_rowid FROM lesson_support ls"
                " JOIN records r ON r.rowid = ls.experience_rowid WHERE r.id = ?"
                " ORDER BY ls.created_at, ls.lesson_rowid",
                (record_id,),
            ).fetchall()
        ]

    def recorded(self, lesson_rowids: Sequence[int]) -> dict[int, LessonRow]:
        stats = lesson_stats(self._conn, lesson_rowids)
        out: dict[int, LessonRow] = {}
        for rowid in lesson_rowids:
            rid, text = self._conn.execute(
                "SELECT id, text FROM records WHERE rowid = ?", (rowid,)
            ).fetchone()
            support, conf = stats.get(rowid, (0, confidence(0, 0, 0)))
            out[rowid] = LessonRow(rowid, rid, text, support, conf)
        return out

    def note_rollup(
        self,
        rowid: int,
        workspace: str,
        session: str,
        given: frozenset[str],
        episodes: int,
        now: float,
    ) -> None:
        fields = _json.encode(sorted(given)).decode()
        cur = self._conn.execute(
            "UPDATE experience_rollups SET given = ?, episodes = ?, rolled_up_at = ?"
            " WHERE rowid = ?",
            (fields, episodes, now, rowid),
        )
        if not cur.rowcount:
            self._conn.execute(
                "INSERT INTO experience_rollups (rowid, workspace, session, given, episodes,"
                " rolled_up_at) VALUES (?, ?, ?, ?, ?, ?)",
                (rowid, workspace, session, fields, episodes, now),
            )

    def find(self, workspace: str, record_id: str) -> tuple[int, bool] | None:
        row = self._conn.execute(
            "SELECT rowid, tombstoned_at FROM records WHERE id = ? AND kind = 'experience'"
            " AND workspace = ?",
            (record_id, workspace),
        ).fetchone()
        return None if row is None else (int(row[0]), row[1] is not None)

    def tombstone(self, rowid: int, now: float) -> bool:
        cur = self._conn.execute(
            "UPDATE records SET tombstoned_at = ?, updated_at = ? WHERE rowid = ?"
            " AND tombstoned_at IS NULL",
            (now, now, rowid),
        )
        if not cur.rowcount:
            return False
        self._conn.execute("DELETE FROM vectors WHERE rowid = ?", (rowid,))
        return True

    def live_support(self, lesson_rowid: int) -> int:
        return int(
            self._conn.execute(
                "SELECT count(*) FROM lesson_support ls JOIN records x"
                " ON x.rowid = ls.experience_rowid AND x.tombstoned_at IS NULL"
                " WHERE ls.lesson_rowid = ?",
                (lesson_rowid,),
            ).fetchone()[0]
        )

    def touch(self, rowid: int, now: float) -> None:
        self._conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, rowid))

    def _insert_record(self, record: ExperienceRecord) -> int:
        rowid = insert_record(self._conn, record.record)
        if record.vector is not None:
            assert record.model is not None
            self._conn.execute(
                "INSERT INTO vectors (rowid, model, vec) VALUES (?, ?, ?)",
                (rowid, record.model, self._conn.vector(record.vector)),
            )
        return rowid

    @staticmethod
    def _fields(fields: ExperienceFields) -> tuple[object, ...]:
        """The experiences columns after rowid, in :data:`_COLUMNS`' order."""
        return (*astuple(fields)[:-1], _json.encode(fields.files).decode())
