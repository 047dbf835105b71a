"""memory_share: the reviewed step that makes one of your private memories or lessons team
memory.

A preview (``confirm`` false) changes nothing: it shows what every member would read, with
its provenance (whose, which agent and client, when, the paths it cites) and what the
ingest stage's redaction finds in it now, rules having grown since it was stored. A share
(``confirm`` true) is refused while redaction finds anything, so nothing a rule knows as
secret leaves this machine; otherwise it shares the text that was reviewed, and only that
(the write checks the text is unchanged), and logs who shared it and when.

The route lets only the record's owner name it (:mod:`recalld.edge.authorization`). Sharing
needs a team database: a local store is one person's, with no team to share with, so there
memory_share is refused rather than marking records for a team that may never read them.
"""

from __future__ import annotations

from recall_client import protocol as p

from ..domain.principal import Principal
from ..errors import RecallError
from ..ingest.sanitize import sanitize
from ..pipeline.intake import RequestJob
from ..retrieval.memory_rows import owner_of
from ..store.port import Reader, ShareRow, WriteTx
from .services import Services

__all__ = ["share"]


class _Share(RequestJob[float]):
    __slots__ = ("reviewed",)

    def __init__(self, principal: Principal, request: p.MemoryShare, reviewed: str) -> None:
        super().__init__(principal, request)
        self.reviewed = reviewed

    def apply(self, tx: WriteTx, now: float) -> float:
        tx.records.share(self.principal, self.clean.request.record_id, self.reviewed, now)
        return now


def _review(reader: Reader, record_id: str) -> tuple[ShareRow, p.SharePreview]:
    """The record and its preview, redaction run again over it (on a worker: CPU work).

    Raises:
        RecallError: ``not_found`` when it is gone; ``invalid_request`` when it is team
            memory already, or an identifier of it (a tag) holds a secret.
    """
    row = reader.records.shareable(record_id)
    if row is None:
        raise RecallError("not_found", f"no memory or lesson {record_id}")
    if row.visibility == "team":
        raise RecallError("invalid_request", f"{record_id} is team memory already")
    # The write a memory with these fields would be: the same ingest marks, the same rules.
    again = sanitize(
        p.MemoryStore(
            text=row.text,
            kind=row.memory_kind,
            subject=row.subject,
            source=row.source,
            tags=row.tags,
        )
    )
    return row, p.SharePreview(
        id=row.id,
        kind="lesson" if row.kind == "lesson" else "memory",
        text=row.text,
        subject=row.subject,
        source=row.source,
        tags=row.tags,
        workspace=row.workspace,
        owner=owner_of(row.owner),
        agent=row.agent,
        client=row.writer_client,
        model=row.writer_model,
        created_at=row.created_at,
        cited_paths=row.paths,
        redactions=again.redacted,
    )


async def share(services: Services, who: Principal, req: p.MemoryShare) -> p.MemoryShared:
    """memory_share: the preview, or (``confirm``) the share once committed.

    Raises:
        RecallError: ``invalid_request`` without a team database, for a record that is team
            memory already or changed since its review; ``forbidden`` when redaction finds a
            secret in it; ``not_found`` for a record that is not the caller's own.
    """
    if not services.settings().database_url:
        raise RecallError(
            "invalid_request",
            "memory_share shares with a team database, and this recalld keeps one person's "
            "memory (database_url is empty): there is no team to share with",
        )
    row, preview = await services.read(lambda reader: _review(reader, req.record_id))
    if not req.confirm:
        return p.MemoryShared(shared=False, record=preview)
    if preview.redactions:
        raise RecallError(
            "forbidden",
            f"{row.id} holds what redaction finds now ({', '.join(preview.redactions)}): "
            "nothing was shared; correct its text (memory_update), then share it",
        )
    shared_at = await services.write(_Share(who, req, row.text))
    return p.MemoryShared(shared=True, record=preview, shared_at=shared_at)
