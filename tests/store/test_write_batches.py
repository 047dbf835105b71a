"""A group commit on each engine: the jobs of a batch run back to back, and one that fails
(before it wrote, after it wrote, by a bug) is rolled back alone, with its error, while the
others commit."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from recall_client import protocol as p
from recalld.domain.policy import Assessment
from recalld.domain.principal import Principal
from recalld.errors import RecallError
from recalld.handlers.memory_writes import store_memory
from recalld.store.port import Store, WriteTx
from recalld.store.postgres import PgStore
from recalld.store.sql.sides import SqlReader, SqlWriteTx
from recalld.store.sqlite.engine import SqliteStore

from tests.support.team import TeamDb

pytestmark = pytest.mark.both_backends

WHO = Principal(agent="t", workspace="/ws/batch", uid=0, pid=0)


@pytest.fixture
def store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Store]:
    made: Store
    if backend == "postgres":
        db: TeamDb = request.getfixturevalue("team_db")
        made = PgStore(db.url("alice"), connections=4)
    else:
        made = SqliteStore(tmp_path / "data")
    yield made
    made.close()


class _Job:
    """``fn(tx, now)`` as a write job; counts how often it ran and was rolled back."""

    def __init__(self, fn: Callable[[WriteTx, float], Any]) -> None:
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.runs = 0
        self.rollbacks = 0

    def apply(self, tx: WriteTx, now: float) -> Any:
        self.runs += 1
        return self.fn(tx, now)

    def rolled_back(self) -> None:
        self.rollbacks += 1


def _store(text: str) -> Callable[[WriteTx, float], int]:
    def store_it(tx: WriteTx, now: float) -> int:
        _reply, rowid = store_memory(
            tx,
            WHO,
            p.MemoryStore(text=text),
            repo=None,
            commit=None,
            trust=Assessment(1.0, False),
            now=now,
        )
        assert rowid is not None
        return rowid

    return store_it


def _store_then_refuse(text: str) -> Callable[[WriteTx, float], int]:
    def refuse(tx: WriteTx, now: float) -> int:
        _store(text)(tx, now)
        raise RecallError("not_found", "refused after writing")

    return refuse


def _refuse(tx: WriteTx, now: float) -> int:
    raise RecallError("invalid_request", "refused before writing")


def _bug(tx: WriteTx, now: float) -> int:
    _store("written by a job with a bug")(tx, now)
    raise KeyError("a bug")


def _texts(store: Store) -> dict[int, str]:
    """The memories committed, by rowid."""
    reader = store.reader()
    try:
        assert isinstance(reader, SqlReader)
        rows = reader.db.execute("SELECT rowid, text FROM records WHERE kind = 'memory'")
        return {int(rowid): str(text) for rowid, text in rows.fetchall()}
    finally:
        store.close_reader(reader)


def test_a_batch_without_failures_runs_each_job_once(store: Store) -> None:
    jobs = [_Job(_store(f"memory {i}")) for i in range(5)]
    store.apply_batch(jobs, time.time())
    assert [(job.error, job.runs, job.rollbacks) for job in jobs] == [(None, 1, 0)] * 5
    assert _texts(store) == {job.result: f"memory {i}" for i, job in enumerate(jobs)}


def test_a_job_that_fails_after_writing_is_rolled_back_alone(store: Store) -> None:
    before = _Job(_store("before the failure"))
    failing = _Job(_store_then_refuse("never committed"))
    after = _Job(_store("after the failure"))
    store.apply_batch([before, failing, after], time.time())
    assert isinstance(failing.error, RecallError) and failing.error.code == "not_found"
    assert before.error is None and after.error is None
    # What the jobs answer is what was committed: the job before the failure ran again.
    assert _texts(store) == {before.result: "before the failure", after.result: "after the failure"}
    assert (before.runs, after.runs) == (2, 1)


def test_failures_first_last_and_side_by_side_cost_only_themselves(store: Store) -> None:
    plan: list[Callable[[WriteTx, float], int]] = [
        _refuse,
        _store("one"),
        _bug,
        _store_then_refuse("nor this"),
        _store("two"),
        _store("three"),
        _store_then_refuse("not this either"),
    ]
    jobs = [_Job(fn) for fn in plan]
    store.apply_batch(jobs, time.time())
    codes = [job.error.code if isinstance(job.error, RecallError) else job.error for job in jobs]
    assert codes == ["invalid_request", None, "internal", "not_found", None, None, "not_found"]
    assert _texts(store) == {jobs[1].result: "one", jobs[4].result: "two", jobs[5].result: "three"}
    # Each job runs at most twice: once back to back, once alone after a failure.
    assert max(job.runs for job in jobs) == 2


def _store_then_break_a_rule(text: str) -> Callable[[WriteTx, float], int]:
    """Store, then send a statement the database refuses (NOT NULL), never reading its
    answer: on PostgreSQL's pipeline the error comes back only with a later job's."""

    def break_it(tx: WriteTx, now: float) -> int:
        rowid = _store(text)(tx, now)
        assert isinstance(tx, SqlWriteTx)
        tx.read.db.execute("UPDATE records SET kind = NULL WHERE rowid = ?", (rowid,))
        return rowid

    return break_it


def test_a_statement_the_database_refuses_fails_only_its_own_job(store: Store) -> None:
    plan = [_store("first"), _store_then_break_a_rule("refused"), _store("third"), _store("4")]
    jobs = [_Job(fn) for fn in plan]
    store.apply_batch(jobs, time.time())
    assert [job.error is None for job in jobs] == [True, False, True, True]
    assert isinstance(jobs[1].error, RecallError) and jobs[1].error.code == "internal"
    assert _texts(store) == {jobs[0].result: "first", jobs[2].result: "third", jobs[3].result: "4"}


def test_batches_that_roll_back_again_and_again_fail_only_their_own_jobs(store: Store) -> None:
    """Many batches, each with a job the database refuses: every other job commits.

    On PostgreSQL the writer pipelines and rolls back to savepoints; with psycopg preparing
    the statements that repeat, a ROLLBACK's answer made it forget (and deallocate) what it
    had prepared while a named statement was still in flight, and a later job failed with
    SQLSTATE 26000 (seen as ``internal: write failed: 26000`` under concurrent writers).
    """
    rng = random.Random(7)
    unexpected: list[str] = []
    for batch in range(150):
        failing = rng.randrange(6)
        plan = [
            _store_then_break_a_rule(f"refused {batch}") if i == failing else _store(f"{batch}/{i}")
            for i in range(rng.randint(2, 6))
        ]
        jobs = [_Job(fn) for fn in plan]
        store.apply_batch(jobs, time.time())
        unexpected += [
            f"batch {batch} job {i}: {job.error}"
            for i, job in enumerate(jobs)
            if (job.error is not None) != (i == failing)
        ]
    assert unexpected == []
