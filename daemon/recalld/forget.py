"""Forget: tombstone one record by id, whatever its kind.

A tombstoned record never surfaces again: every reader contract excludes
``tombstoned_at IS NOT NULL``, its vector row is deleted in the same transaction, and its
FAISS entry is removed right after the COMMIT (a restart rebuilds the index from the
vectors table anyway). Purging the row itself is left to maintenance.

Who may forget what: the caller may forget a record it could read. Every record belongs to
the daemon's uid; an episode belongs to its agent's partition, which only
``admin:workspace`` crosses. A record the caller may not see is reported ``not_found``, as
if it did not exist, so ids cannot be probed across the partition.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import numpy as np
from recall_client import protocol as p

from .capture import Principal, WriteJob
from .errors import RecallError
from .scopes import ADMIN

if TYPE_CHECKING:
    from .app import Daemon

__all__ = ["forget"]

# Kinds whose records are partitioned by agent (the rest are shared within the uid).
_PARTITIONED = frozenset({"episode"})


class _ForgetJob(WriteJob):
    __slots__ = ("principal", "record_id", "rowid")

    def __init__(self, principal: Principal, record_id: str) -> None:
        super().__init__()
        self.principal = principal
        self.record_id = record_id
        self.rowid: int | None = None

    def apply(self, conn: sqlite3.Connection, now: float) -> p.Forgotten:
        who = self.principal
        row = conn.execute(
            "SELECT rowid, kind, agent, uid, tombstoned_at FROM records WHERE id = ?",
            (self.record_id,),
        ).fetchone()
        if row is None or not _may_see(who, kind=row[1], agent=row[2], uid=row[3]):
            raise RecallError("not_found", f"no record {self.record_id} that {who.agent!r} may see")
        rowid, kind, _agent, _uid, tombstoned_at = row
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


def _may_see(who: Principal, *, kind: str, agent: str, uid: int) -> bool:
    if uid != who.uid:
        return False
    return kind not in _PARTITIONED or agent == who.agent or ADMIN in who.scopes


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
