"""Forget: tombstone one record by id, whatever its kind.

A tombstoned record never surfaces again: every reader contract excludes
``tombstoned_at IS NOT NULL``, its vector row is deleted in the same transaction, and its
FAISS entry is removed right after the COMMIT (a restart rebuilds the index from the
vectors table anyway). Purging the row itself is left to maintenance.

Who may forget what is :mod:`recalld.authorization`'s: a record of the caller's workspace (an
episode also of its agent), or a global memory; ``admin:workspace`` crosses both. A record
the caller may not touch is reported ``not_found``, as if it did not exist.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import numpy as np
from recall_client import protocol as p

from ..pipeline.writer import Principal, WriteJob
from ..errors import RecallError

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = ["forget"]

class _ForgetJob(WriteJob):
    __slots__ = ("principal", "record_id", "rowid")

    def __init__(self, principal: Principal, record_id: str) -> None:
        super().__init__()
        self.principal = principal
        self.record_id = record_id
        self.rowid: int | None = None

    def apply(self, conn: sqlite3.Connection, now: float) -> p.Forgotten:
        # Authorization checked, before this job was built, that the record belongs to the
        # caller (recalld.authorization).
        row = conn.execute(
            "SELECT rowid, kind, tombstoned_at FROM records WHERE id = ?", (self.record_id,),
        ).fetchone()
        if row is None:
            raise RecallError("not_found", f"no record {self.record_id}")
        rowid, kind, tombstoned_at = row
        if tombstoned_at is not None:
            return p.Forgotten(id=0, record_id=self.record_id, kind=kind,
                               tombstoned_at=tombstoned_at, already=True)
        conn.execute(
            "UPDATE records SET tombstoned_at = ?, updated_at = ? WHERE rowid = ?",
            (now, now, rowid),
        )
        conn.execute("DELETE FROM vectors WHERE rowid = ?", (rowid,))
        self.rowid = rowid
        return p.Forgotten(id=0, record_id=self.record_id, kind=kind, tombstoned_at=now)


async def forget(daemon: Daemon, who: Principal, req: p.Forget) -> p.Forgotten:
    """Tombstone ``req.record_id``; forgetting it again is a no-op (``already``).

    Raises:
        RecallError: ``not_found`` when no record of that id is visible to the caller.
    """
    job = _ForgetJob(who, req.record_id)
    await daemon.submit(job)
    result: p.Forgotten = await job.wait()
    if job.rowid is not None and daemon.index is not None:
        await daemon.index.remove(np.array([job.rowid], dtype=np.int64))
    return result
