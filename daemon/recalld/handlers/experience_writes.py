"""record_experience, a session's roll-up and forget_experience as use cases over the port:
replay, dedup, which stored lesson a new one joins, the roll-up's cap on lessons, which
lessons a forgotten experience retires, decided here; the store only reads and writes rows.
Each runs inside the writer's transaction (a job's ``apply``) and answers the reply, with
what it wrote for after the COMMIT.

Lessons are merged as they are written, in the experience's own transaction: the reply can
say which stored lesson a new one joined, and two experiences bringing the same new lesson
in one group commit cannot both create it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from recall_client import protocol as p

from ..domain.dedup import experience_digest, lesson_digest, rollup_digest
from ..domain.ids import new_id
from ..domain.policy import Assessment, record_visibility
from ..domain.principal import Principal
from ..errors import RecallError
from ..retrieval.experience_reader import experience_info
from ..store.port import ExperienceFields, ExperienceRecord, NewRecord, WriteTx

__all__ = [
    "MAX_LESSONS",
    "ExperienceWrite",
    "RollupWrite",
    "Written",
    "forget_experience",
    "record_experience",
    "roll_up_experience",
]

# A session's rolled-up experience supports at most this many lessons.
MAX_LESSONS = 20

# (rowid, vector) of each record a write added or rewrote; None: written without one (the
# embedding actor embeds it), else for the vector index.
Written = list[tuple[int, np.ndarray | None]]


@dataclass(slots=True)
class ExperienceWrite:
    """An experience as the ingest stage and the pipeline prepared it for the write."""

    description: str
    strategy: str | None
    files: list[str]
    lessons: list[str]
    # Trust of the description (with the strategy), and of each lesson.
    trust: Assessment
    lesson_trust: list[Assessment]
    # records.source of what is written (record_experience, experience_rollup).
    source: str
    # Row 0 the description's vector, row i + 1 lesson i's; None when no model is up (the
    # embedding actor embeds them later).
    vectors: np.ndarray | None = None
    model: str | None = None

    def vector(self, i: int) -> np.ndarray | None:
        return None if self.vectors is None else self.vectors[i]


@dataclass(frozen=True, slots=True)
class RollupWrite:
    """What a roll-up adds to an experience write."""

    session: str
    # The fields a caller gave, at this roll-up or an earlier one.
    given: frozenset[str]
    episodes: int
    why: str


class _Write:
    """One experience write: the request (its status, class, counts, session, ts), its plan,
    and the records it wrote."""

    def __init__(
        self,
        tx: WriteTx,
        who: Principal,
        req: p.RecordExperience,
        plan: ExperienceWrite,
        now: float,
    ) -> None:
        self.tx, self.who, self.req, self.plan, self.now = tx, who, req, plan, now
        self.written: Written = []

    def insert(self, digest: bytes) -> tuple[str, int]:
        """A new experience of content hash ``digest``: its id and rowid."""
        record_id = new_id("exp")
        rowid = self.tx.experiences.insert(
            self._record(
                "experience", record_id, self.plan.description, digest, self.plan.trust, 0
            ),
            self._fields(),
        )
        self.written.append((rowid, self.plan.vector(0)))
        return record_id, rowid

    def rewrite(self, rowid: int, record_id: str, digest: bytes) -> None:
        """The stored experience ``rowid`` as this request now says it."""
        record = self._record(
            "experience", record_id, self.plan.description, digest, self.plan.trust, 0
        )
        self.tx.experiences.rewrite(rowid, record, self._fields(), self.now)
        self.written.append((rowid, record.vector))

    def link_lessons(self, experience_rowid: int) -> dict[int, bool]:
        """Join or insert each lesson and link it to the experience: {lesson rowid: merged}."""
        merged: dict[int, bool] = {}
        for i, text in enumerate(self.plan.lessons):
            rowid, was_merged = self._lesson(text, self.plan.lesson_trust[i], i + 1)
            self.tx.experiences.link(rowid, experience_rowid, self.now)
            merged.setdefault(rowid, was_merged)
        return merged

    def _lesson(self, text: str, trust: Assessment, row: int) -> tuple[int, bool]:
        """The rowid of the stored lesson ``text`` says the same as (True), else of a new one."""
        digest = lesson_digest(text)
        same = self.tx.experiences.find_lesson(self.who.workspace, digest)
        if same is not None:
            return same, True
        vec = self.plan.vector(row)
        # Only a lesson that may surface is merged by meaning, and only into one that
        # surfaces: an injected text must not borrow (or lend) a real lesson's support.
        if vec is not None and trust.eligibility == "eligible":
            near = self.tx.experiences.nearest_lesson(self.who.workspace, vec)
            if near is not None:
                return near, True
        rowid = self.tx.experiences.insert_lesson(
            self._record("lesson", new_id("les"), text, digest, trust, row)
        )
        self.written.append((rowid, vec))
        return rowid, False

    def _record(
        self, kind: str, record_id: str, text: str, digest: bytes, trust: Assessment, row: int
    ) -> ExperienceRecord:
        req, who = self.req, self.who
        vector = self.plan.vector(row)
        return ExperienceRecord(
            NewRecord(
                id=record_id,
                kind=kind,
                ts=self.now if req.ts is None else req.ts,
                created_at=self.now,
                workspace=who.workspace,
                agent=who.agent,
                uid=who.uid,
                session=req.session,
                source=self.plan.source,
                text=text,
                content_hash=digest,
                trust=trust.trust,
                eligibility=trust.eligibility,
                embed_state=0 if vector is None else 1,
                visibility=record_visibility(req.visibility),
            ),
            vector=vector,
            model=self.plan.model,
        )

    def _fields(self) -> ExperienceFields:
        req = self.req
        return ExperienceFields(
            task_class=req.task_class,
            strategy=self.plan.strategy,
            status=req.status,
            tool_calls=req.tool_calls,
            minutes=req.minutes,
            files=self.plan.files,
        )


def _lessons(tx: WriteTx, merged: dict[int, bool]) -> list[p.RecordedLesson]:
    """The lessons ``merged`` names, in its order, with their live support."""
    rows = tx.experiences.recorded(list(merged))
    return [
        p.RecordedLesson(
            id=row.id,
            text=row.text,
            support=row.support,
            confidence=row.confidence,
            merged=merged[rowid],
        )
        for rowid, row in rows.items()
    ]


def record_experience(
    tx: WriteTx, who: Principal, req: p.RecordExperience, plan: ExperienceWrite, now: float
) -> tuple[p.ExperienceRecorded, Written]:
    """Record one experience with its lessons, or answer with the stored one for a replayed
    key or the same experience (description, status, strategy, session)."""
    earlier = tx.records.replayed(who, req.idempotency_key)
    if earlier is not None:
        return _existing(tx, earlier, replayed=True), []
    write = _Write(tx, who, req, plan, now)
    digest = experience_digest(plan.description, req.status, plan.strategy, req.session)
    same = tx.experiences.find_duplicate(who.workspace, digest)
    if same is not None:
        reply = _existing(tx, same, duplicate=True)
    else:
        record_id, rowid = write.insert(digest)
        reply = p.ExperienceRecorded(
            record_id=record_id, lessons=_lessons(tx, write.link_lessons(rowid))
        )
    tx.records.remember_key(who, req.idempotency_key, reply.record_id, now)
    return reply, write.written


def _existing(
    tx: WriteTx, record_id: str, *, duplicate: bool = False, replayed: bool = False
) -> p.ExperienceRecorded:
    return p.ExperienceRecorded(
        record_id=record_id,
        duplicate=duplicate,
        replayed=replayed,
        lessons=_lessons(tx, dict.fromkeys(tx.experiences.linked(record_id), True)),
    )


def roll_up_experience(
    tx: WriteTx,
    who: Principal,
    req: p.RecordExperience,
    plan: ExperienceWrite,
    rollup: RollupWrite,
    now: float,
) -> tuple[p.ExperienceRolledUp, Written]:
    """Write the session's experience, or update the one an earlier roll-up wrote (its
    lessons add up, to :data:`MAX_LESSONS`); a forgotten one stays forgotten.

    Raises:
        RecallError: ``invalid_request`` past :data:`MAX_LESSONS` lessons.
    """
    stored = tx.read.experiences.rollup_of(who.workspace, rollup.session)
    if stored is not None and stored.forgotten:
        why = "the session's experience was forgotten"
        return _rolled(rollup, stored.record_id, why=why, forgotten=True), []
    write = _Write(tx, who, req, plan, now)
    # The session names the experience: a record_experience of the same words is another
    # experience, and an update does not change what identifies this one.
    digest = rollup_digest(rollup.session)
    if stored is None:
        record_id, rowid = write.insert(digest)
        lessons = _lessons(tx, write.link_lessons(rowid))
    else:
        record_id, rowid = stored.record_id, stored.rowid
        write.rewrite(rowid, record_id, digest)
        merged = write.link_lessons(rowid)
        linked = tx.experiences.linked(record_id)
        if len(linked) > MAX_LESSONS:
            raise RecallError(
                "invalid_request",
                f"the experience of session {rollup.session} would support {len(linked)}"
                f" lessons; at most {MAX_LESSONS}",
            )
        earlier = {lesson: True for lesson in linked if lesson not in merged}
        lessons = _lessons(tx, merged) + _lessons(tx, earlier)
    tx.experiences.note_rollup(
        rowid, who.workspace, rollup.session, rollup.given, rollup.episodes, now
    )
    experience = experience_info(tx.read.experiences.rows([rowid])[rowid], 0.0, None)
    return _rolled(
        rollup,
        record_id,
        why=rollup.why,
        created=stored is None,
        experience=experience,
        lessons=lessons,
    ), write.written


def _rolled(
    rollup: RollupWrite,
    record_id: str,
    *,
    why: str,
    created: bool = False,
    forgotten: bool = False,
    experience: p.ExperienceInfo | None = None,
    lessons: list[p.RecordedLesson] | None = None,
) -> p.ExperienceRolledUp:
    return p.ExperienceRolledUp(
        record_id=record_id,
        session=rollup.session,
        episodes=rollup.episodes,
        created=created,
        forgotten=forgotten,
        why=why,
        experience=experience,
        lessons=lessons or [],
    )


def forget_experience(
    tx: WriteTx, workspace: str, record_id: str, now: float
) -> tuple[p.ExperienceForgotten, list[int]]:
    """Tombstone an experience: its lessons lose its support, and one it leaves with none
    from an experience not forgotten is retired. Returns the reply and the rowids to take
    out of the vector index.

    Raises:
        RecallError: ``not_found`` when the workspace has no such experience.
    """
    found = tx.experiences.find(workspace, record_id)
    if found is None:
        raise RecallError("not_found", f"no experience {record_id} in workspace {workspace}")
    rowid, forgotten = found
    if forgotten:
        return p.ExperienceForgotten(record_id=record_id, already_forgotten=True), []
    tx.experiences.tombstone(rowid, now)
    removed = [rowid]
    weakened = retired = 0
    for lesson in tx.experiences.linked(record_id):
        if tx.experiences.live_support(lesson):
            weakened += 1
            tx.experiences.touch(lesson, now)
        elif tx.experiences.tombstone(lesson, now):
            retired += 1
            removed.append(lesson)
    return p.ExperienceForgotten(
        record_id=record_id, lessons_weakened=weakened, lessons_retired=retired
    ), removed
