"""Writes on a real store in-process, by jobs of the test's own (no daemon, no socket)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from recall_client import protocol as p
from recalld.domain.policy import Assessment
from recalld.domain.principal import Principal
from recalld.handlers.memory_writes import store_memory
from recalld.store.port import WriteTx
from recalld.store.sqlite.engine import SqliteStore


class Job:
    """A write job of the test's own: ``fn(tx, now)`` in the store's next batch."""

    def __init__(self, fn: Callable[[WriteTx, float], Any]) -> None:
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def apply(self, tx: WriteTx, now: float) -> Any:
        return self.fn(tx, now)

    def rolled_back(self) -> None:
        pass


def write(store: SqliteStore, *fns: Callable[[WriteTx, float], Any]) -> list[Any]:
    jobs = [Job(fn) for fn in fns]
    store.apply_batch(jobs, time.time())
    for job in jobs:
        assert job.error is None, job.error
    return [job.result for job in jobs]


def run(store: SqliteStore, fn: Callable[[WriteTx, float], Any]) -> Any:
    """``fn``'s result in a batch of its own; the error it raised (its batch rolled back)."""
    job = Job(fn)
    store.apply_batch([job], time.time())
    if job.error is not None:
        raise job.error
    return job.result


def memory(
    workspace: str, text: str, session: str | None, ts: float
) -> Callable[[WriteTx, float], int]:
    who = Principal(agent="t", workspace=workspace, uid=0, pid=0)

    def store_it(tx: WriteTx, now: float) -> int:
        _reply, rowid = store_memory(
            tx,
            who,
            p.MemoryStore(text=text, workspace=workspace, session=session, ts=ts),
            repo=None,
            commit=None,
            trust=Assessment(1.0, False),
            now=now,
        )
        assert rowid is not None
        return rowid

    return store_it
