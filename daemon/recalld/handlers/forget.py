"""Forget: tombstone one record by id, whatever its kind.

A tombstoned record never surfaces again: every reader contract excludes it, its vector row
is deleted in the same transaction, and its entry leaves the vector index right after the
COMMIT (the writer hands the removal to the index keeper). Purging the row itself is left to
maintenance. Who may forget what is the authorization table's: a record of the caller's
workspace (an episode also of its agent), or a global memory; ``admin:workspace`` crosses
both. A record the caller may not touch is reported ``not_found``, as if it did not exist.
"""

from __future__ import annotations

from recall_client import protocol as p

from ..domain.principal import Principal
from ..pipeline.intake import RequestJob
from ..store.port import WriteTx
from .services import Services

__all__ = ["forget"]


class _Forget(RequestJob[p.Forgotten]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.Forgotten:
        record_id = self.clean.request.record_id
        gone = tx.records.forget(record_id, now)
        if gone.rowid is not None:
            self.index_removals.append(gone.rowid)
        return p.Forgotten(
            record_id=record_id,
            kind=gone.kind,
            tombstoned_at=gone.tombstoned_at,
            already=gone.rowid is None,
        )


async def forget(services: Services, who: Principal, req: p.Forget) -> p.Forgotten:
    """Tombstone ``req.record_id``; forgetting it again is a no-op (``already``).

    Raises:
        RecallError: ``not_found`` when no record of that id is the caller's.
    """
    return await services.write(_Forget(who, req))
