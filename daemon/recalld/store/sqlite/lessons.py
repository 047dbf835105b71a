"""Lesson vectors near a new lesson, for the merge check: FAISS, plus what it lacks yet.

FAISS holds every kind and workspace (the shared SQL keeps this workspace's live lessons of
what it proposes), and a lesson joins it only after its transaction commits: until then (and
for lessons written earlier in the same group commit) its vector waits in :class:`Unindexed`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from .vector_index import VectorIndex

__all__ = ["FaissLessons", "Unindexed"]


class Unindexed:
    """Lesson vectors written but not yet in the FAISS index, so the merge check sees them.

    A lesson joins FAISS only after its transaction commits; until then (and for lessons
    written earlier in the same group commit) its vector waits here. Entries carry the record
    id because a rolled-back insert frees its rowid for the next one; the store rolls back
    what a failed savepoint added (:meth:`mark`, :meth:`rollback`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._vecs: dict[int, tuple[str, np.ndarray]] = {}
        self._added: list[int] = []

    def add(self, rowid: int, record_id: str, vec: np.ndarray) -> None:
        with self._lock:
            self._vecs[rowid] = (record_id, vec)
            self._added.append(rowid)

    def mark(self) -> int:
        """Where the writer is in what was added (the writer thread's alone)."""
        return len(self._added)

    def rollback(self, mark: int) -> None:
        """Forget what was added since ``mark``: its savepoint was rolled back."""
        with self._lock:
            for rowid in self._added[mark:]:
                self._vecs.pop(rowid, None)
            del self._added[mark:]

    def committed(self) -> None:
        """The batch committed: what it added stays until the index has it."""
        self._added.clear()

    def discard(self, rowids: Sequence[int]) -> None:
        with self._lock:
            for rowid in rowids:
                self._vecs.pop(rowid, None)

    def near(self, vec: np.ndarray, threshold: float) -> dict[int, tuple[str | None, float]]:
        with self._lock:
            entries = list(self._vecs.items())
        return {
            rowid: (record_id, sim)
            for rowid, (record_id, other) in entries
            if (sim := float(other @ vec)) >= threshold
        }


class FaissLessons:
    """:class:`~recalld.store.sql.experiences.NearLessons` over FAISS and :class:`Unindexed`."""

    def __init__(self, index: Callable[[], VectorIndex | None], unindexed: Unindexed) -> None:
        self._index = index
        self._unindexed = unindexed

    def near(self, vec: np.ndarray, threshold: float) -> dict[int, tuple[str | None, float]]:
        found: dict[int, tuple[str | None, float]] = {}
        index = self._index()
        if index is not None:
            # FAISS's range is exclusive; the merge rule is "at least".
            ids, sims = index.range_search_sync(vec, threshold - 1e-6)
            found = {int(i): (None, float(sim)) for i, sim in zip(ids, sims, strict=True)}
        found.update(self._unindexed.near(vec, threshold))
        return found

    def written(self, rowid: int, record_id: str, vec: np.ndarray) -> None:
        self._unindexed.add(rowid, record_id, vec)
