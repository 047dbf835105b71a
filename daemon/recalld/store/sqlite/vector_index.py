"""The FAISS vector index: a cache of the vectors table, snapshotted to disk.

SQLite holds every vector; this index only makes searching them fast. On start the snapshot
is loaded and checked against the vectors table (same ids, same model, same dimension); any
difference, a missing file or a corrupt one, and the index is rebuilt from SQLite.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import faiss
import msgspec
import numpy as np

from ..sql.filters import marks
from .graph_index import DEAD_SHARE_MAX, EF_SEARCH, GraphIndex, M

__all__ = ["VectorIndex", "latest_change"]

log = logging.getLogger(__name__)

SNAPSHOT = "index.faiss"
SNAPSHOT_META = "index.meta.json"
SNAPSHOT_LABELS = "index.labels.npz"  # a graph's record ids and alive bits

# FAISS's default switches to BLAS only for large query batches; small batches are far faster
# with BLAS too (measured ~10x on this class of machine).
faiss.cvar.distance_compute_blas_threshold = 20
# One query at a time gains nothing from OpenMP on 2 cores and loses to thread wake-ups.
faiss.omp_set_num_threads(1)

# Below this many vectors an exact flat scan is fast enough (~3 ms at 50k). From it on, an
# HNSW graph (graph_index.py): ~0.8 ms at a million vectors, recall@10 ~0.99, where the
# inverted file it replaced scanned an eighth of them (~20 ms). It takes twice as long to build
# (about 5 minutes at a million on two cores, hence reconciling snapshots: RECONCILE_MAX) and
# adds a vector in ~1 ms (hence GRAPH_ADD_CHUNK).
GRAPH_MIN = 50_000
# Vectors added to a graph under one hold of the write lock: searches wait a few ms at most.
GRAPH_ADD_CHUNK = 4
# A snapshot that differs from SQLite by at most this many vectors (or a twentieth of them) is
# brought up to date rather than rebuilt: after a kill -9 it lacks only what was embedded since
# it was written, and rebuilding a graph of a million takes minutes.
RECONCILE_MAX = 1_000


class _ReadWriteLock:
    """Many searching threads or one mutating thread: FAISS is not safe to search while it
    is being changed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writing:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._readers:
                self._cond.wait()
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class _Meta(msgspec.Struct):
    model: str
    dim: int
    ntotal: int
    saved_at: float
    # blake2b of the snapshot file: a damaged byte inside a vector passes every other check
    # (faiss reads it, the ids match) and would silently skew semantic search.
    checksum: str = ""
    # Every vector change (vector_changes.seq) up to this one is in the snapshot; those after
    # it are read again at start. 0 in snapshots from before the table (it starts empty).
    changes_in: int = 0


def _file_digest(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, lambda: hashlib.blake2b(digest_size=16)).hexdigest()


class VectorIndex:
    """An inner-product index (vectors are L2-normalised, so the inner product is the cosine):
    ``IndexIDMap2(IndexFlatIP)`` while small, an HNSW :class:`GraphIndex` from
    :data:`GRAPH_MIN` vectors (chosen when the index is built at start; a flat index that grows
    past it is rebuilt as a graph at the next start). Ids are ``records.rowid``.

    Searches run in worker threads side by side; mutation holds the write lock. Methods
    ending in ``_sync`` block and belong in worker threads.
    """

    def __init__(self, data_dir: Path, dim: int, model: str) -> None:
        self._dir = data_dir
        self.dim = dim
        self.model = model
        self._index: faiss.IndexIDMap2 | GraphIndex = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._lock = _ReadWriteLock()
        # Highest id ever added: a batch of newer ids cannot be in the index yet, so adding it
        # needs no removal pass first.
        self._max_id = 0
        self.dirty = False
        self.rebuilt_reason: str | None = None
        # vector_changes.seq: every change up to ``_changes_in`` is in the index for sure;
        # the latest read at the last snapshot is in it by the next one (see snapshot_sync).
        self._changes_in = 0
        self._changes_next = 0

    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    @property
    def graph(self) -> bool:
        return isinstance(self._index, GraphIndex)

    @property
    def kind(self) -> str:
        if isinstance(self._index, GraphIndex):
            return f"IndexHNSWSQ(fp16, M={M}, efSearch={EF_SEARCH}, dead={self._index.dead})"
        return "IndexIDMap2(IndexFlatIP)"

    # ------------------------------------------------------------------ start-up

    def open(self, conn: sqlite3.Connection) -> None:
        """Load the snapshot if it matches SQLite, else rebuild from the vectors table.

        Runs in a worker thread at start-up.
        """
        started = time.perf_counter()
        # Read first: everything committed until now is in what is loaded or rebuilt below.
        latest = latest_change(conn)
        ids = np.array(
            [
                r[0]
                for r in conn.execute(
                    "SELECT v.rowid FROM vectors v JOIN records r ON r.rowid = v.rowid"
                    " WHERE v.model = ? AND r.tombstoned_at IS NULL ORDER BY v.rowid",
                    (self.model,),
                )
            ],
            dtype=np.int64,
        )
        self._changes_in = self._changes_next = latest
        reason = self._try_snapshot(conn, ids)
        if reason is None:
            log.info("vector index: snapshot loaded, %d vectors", self.ntotal)
            return
        self.rebuilt_reason = reason
        log.warning("vector index: rebuilding from SQLite (%s)", reason)
        self._index = self._new_index(len(ids))
        # A graph's build spreads each batch over the cores (OpenMP's count is per thread:
        # this worker's, put back after).
        faiss.omp_set_num_threads(os.cpu_count() or 1)
        batch: list[int] = []
        blobs: list[bytes] = []
        for rowid, blob in conn.execute(
            "SELECT v.rowid, v.vec FROM vectors v JOIN records r ON r.rowid = v.rowid"
            " WHERE v.model = ? AND r.tombstoned_at IS NULL",
            (self.model,),
        ):
            if len(blob) != self.dim * 4:
                continue
            batch.append(rowid)
            blobs.append(blob)
            if len(batch) >= 50_000:
                self._add_blobs(batch, blobs)
                batch, blobs = [], []
        if batch:
            self._add_blobs(batch, blobs)
        faiss.omp_set_num_threads(1)
        _trim_heap()
        self.dirty = True
        log.info(
            "vector index: rebuilt %d vectors in %.2fs", self.ntotal, time.perf_counter() - started
        )

    def _add_blobs(self, ids: list[int], blobs: list[bytes]) -> None:
        self._index.add_with_ids(self._matrix(blobs), np.array(ids, dtype=np.int64))
        self._max_id = max(self._max_id, max(ids))

    def _matrix(self, blobs: list[bytes]) -> np.ndarray:
        """Stored vectors (each ``vectors.vec``, of this model's size) as one float32 matrix."""
        return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), self.dim)

    def _new_index(self, expected: int) -> faiss.IndexIDMap2 | GraphIndex:
        if expected < GRAPH_MIN:
            return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        return GraphIndex(self.dim)

    def _try_snapshot(self, conn: sqlite3.Connection, expected_ids: np.ndarray) -> str | None:
        path, meta_path = self._dir / SNAPSHOT, self._dir / SNAPSHOT_META
        if not path.exists() or not meta_path.exists():
            return "no snapshot"
        try:
            meta = msgspec.json.decode(meta_path.read_bytes(), type=_Meta)
            if meta.model != self.model or meta.dim != self.dim:
                return f"snapshot is for {meta.model}/{meta.dim}, model is {self.model}/{self.dim}"
            graph = len(expected_ids) >= GRAPH_MIN
            if meta.checksum != _snapshot_digest(self._dir, graph):
                return "snapshot does not match its checksum"
            index: faiss.Index | GraphIndex
            if graph:
                index = GraphIndex.read(path, self._dir / SNAPSHOT_LABELS)
            else:
                index = faiss.read_index(str(path))
        except Exception as exc:  # corrupt files raise all sorts of things
            return f"snapshot unreadable: {type(exc).__name__}: {exc}"
        if not isinstance(index, (faiss.IndexIDMap2, GraphIndex)) or index.d != self.dim:
            return "snapshot has the wrong index type"
        if isinstance(index, GraphIndex) and index.dead_share > DEAD_SHARE_MAX:
            return f"the graph's removed vectors are {index.dead_share:.0%} of it"
        have = np.sort(_index_ids(index))
        missing = np.setdiff1d(expected_ids, have, assume_unique=True)
        extra = np.setdiff1d(have, expected_ids, assume_unique=True)
        # Records in both whose vector was replaced after the snapshot was written: their
        # ids match, their vectors do not.
        changed = np.array(
            [
                r[0]
                for r in conn.execute(
                    "SELECT record FROM vector_changes WHERE seq > ?", (meta.changes_in,)
                )
            ],
            dtype=np.int64,
        )
        stale = np.intersect1d(np.intersect1d(changed, expected_ids), have)
        if len(missing) + len(extra) + len(stale) > max(RECONCILE_MAX, len(expected_ids) // 20):
            return f"snapshot has {len(have)} vectors, SQLite {len(expected_ids)}" + (
                f", {len(stale)} of them re-embedded since" if len(stale) else ""
            )
        self._index = index
        self._max_id = int(have[-1]) if len(have) else 0
        if len(extra):
            self.remove_sync(extra)
        if len(missing) or len(stale):
            self._add_rows(conn, np.union1d(missing, stale))  # a stale one's vector replaced
        if len(missing) or len(extra) or len(stale):
            log.info(
                "vector index: snapshot brought up to date: %d added, %d removed, %d replaced",
                len(missing),
                len(extra),
                len(stale),
            )
        return None

    def _add_rows(self, conn: sqlite3.Connection, rowids: np.ndarray) -> None:
        for start in range(0, len(rowids), 500):
            part = [int(r) for r in rowids[start : start + 500]]
            rows = [
                (rowid, blob)
                for rowid, blob in conn.execute(
                    f"SELECT rowid, vec FROM vectors WHERE model = ? AND rowid IN ({marks(part)})",
                    (self.model, *part),
                )
                if len(blob) == self.dim * 4
            ]
            if rows:
                ids = np.array([r for r, _ in rows], dtype=np.int64)
                self.add_sync(ids, self._matrix([b for _, b in rows]))

    # ------------------------------------------------------------------ mutation

    def add_sync(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        chunk = GRAPH_ADD_CHUNK if isinstance(self._index, GraphIndex) else max(1, len(ids))
        if len(ids) and int(ids.min()) <= self._max_id:
            # A re-embedded record replaces its old vector rather than doubling it.
            self.remove_sync(ids)
        # One vector at a time gains nothing from OpenMP (see search_sync).
        faiss.omp_set_num_threads(1)
        for start in range(0, len(ids), chunk):
            with self._lock.write():
                part = ids[start : start + chunk]
                self._index.add_with_ids(vecs[start : start + chunk], part)
                self._max_id = max(self._max_id, int(part.max()))
                self.dirty = True

    def remove_sync(self, ids: np.ndarray) -> None:
        with self._lock.write():
            self._index.remove_ids(ids)  # type: ignore[arg-type]  # the SWIG wrapper takes ids
            self.dirty = True

    # ------------------------------------------------------------------ search

    def search_sync(self, vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (ids, cosine scores), best first."""
        with self._lock.read():
            k = min(k, int(self._index.ntotal))
            if k <= 0:
                return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
            query = vec.reshape(1, -1).astype(np.float32, copy=False)
            # OpenMP's thread count is per calling thread: the module-level setting covers
            # only the thread that imported faiss, not the search workers (2-3x slower alone,
            # far worse next to the model's threads).
            faiss.omp_set_num_threads(1)
            scores, ids = self._index.search(query, k)
        keep = ids[0] >= 0
        return ids[0][keep], scores[0][keep]

    def ids_sync(self) -> np.ndarray:
        """Every id in the index, sorted (doctor compares them with the vectors table)."""
        with self._lock.read():
            ids = _index_ids(self._index)
        return np.sort(ids)

    def range_search_sync(self, vec: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """Every (id, cosine) with a cosine above ``threshold``, in no particular order.

        Exact on a flat index; a graph walks only part of itself, so it may miss a match.
        """
        with self._lock.read():
            query = vec.reshape(1, -1).astype(np.float32, copy=False)
            lims, scores, ids = self._index.range_search(query, threshold)
        return ids[lims[0] : lims[1]], scores[lims[0] : lims[1]]

    # ------------------------------------------------------------------ snapshot

    def snapshot_sync(self, latest: int) -> None:
        """Write the index atomically (temp file + rename) if it changed since the last one.

        ``latest`` is the newest vector change SQLite holds now (:func:`latest_change`). A
        change reaches the index a moment after its commit, so what this snapshot vouches for
        is what the previous one read: a snapshot interval (minutes) later, it is in.
        """
        self._changes_in = max(self._changes_in, self._changes_next)
        self._changes_next = latest
        if not self.dirty:
            return
        path, meta_path = self._dir / SNAPSHOT, self._dir / SNAPSHOT_META
        labels = self._dir / SNAPSHOT_LABELS
        tmp = path.with_suffix(".tmp")
        tmp_meta = meta_path.with_suffix(".tmp")
        tmp_labels = labels.with_suffix(".tmp")
        try:
            # Readers may go on searching; only mutation must wait for the copy.
            with self._lock.read():
                index = self._index
                if isinstance(index, GraphIndex):
                    index.write(tmp, tmp_labels)
                else:
                    faiss.write_index(index, str(tmp))
                ntotal = int(index.ntotal)
                self.dirty = False
            graph = isinstance(index, GraphIndex)
            for written in (tmp, tmp_labels) if graph else (tmp,):
                with open(written, "rb+") as fh:
                    os.fsync(fh.fileno())
            meta = _Meta(
                model=self.model,
                dim=self.dim,
                ntotal=ntotal,
                saved_at=time.time(),
                checksum=_digest(tmp, tmp_labels if graph else None),
                changes_in=self._changes_in,
            )
            tmp_meta.write_bytes(msgspec.json.encode(meta))
            # The labels first: the meta, renamed last, is what makes the new pair count (its
            # checksum covers both files, so a crash between renames reads as damage).
            if graph:
                os.replace(tmp_labels, labels)
            os.replace(tmp, path)
            os.replace(tmp_meta, meta_path)
        except BaseException:
            # A failed write (disk full) must not leave a half file taking the room that is
            # short, nor count as saved.
            self.dirty = True
            for left in (tmp, tmp_meta, tmp_labels):
                left.unlink(missing_ok=True)
            raise
        log.info("vector index: snapshot of %d vectors written", meta.ntotal)


def latest_change(conn: sqlite3.Connection) -> int:
    """The number of the newest vector change (vector_changes.seq), 0 if none."""
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM vector_changes").fetchone()[0])


def _trim_heap() -> None:
    """Give the heap's free pages back to the OS (glibc's malloc_trim; elsewhere nothing). A
    rebuild reads every vector as a small blob, and glibc kept what was freed mapped: 66 MB
    of the daemon's RSS at 100k records, for good."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def _digest(graph: Path, labels: Path | None) -> str:
    return _file_digest(graph) + (":" + _file_digest(labels) if labels is not None else "")


def _snapshot_digest(data_dir: Path, graph: bool) -> str:
    return _digest(data_dir / SNAPSHOT, data_dir / SNAPSHOT_LABELS if graph else None)


def _index_ids(index: faiss.Index | GraphIndex) -> np.ndarray:
    """Every id held by a flat ``IndexIDMap2`` or a graph."""
    if isinstance(index, GraphIndex):
        return index.ids()
    assert isinstance(index, faiss.IndexIDMap2)
    return faiss.vector_to_array(index.id_map).astype(np.int64)
