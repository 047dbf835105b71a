"""A FAISS HNSW graph over a large collection, with record ids and removals.

An HNSW graph finds neighbours in well under a millisecond at a million vectors, where an
inverted file must scan a share of them. Its vectors are kept as 16-bit floats
(``IndexHNSWSQ``, fp16): half the memory of float32 (768 bytes a vector of 384, where the
vectors are most of the daemon's RSS at 100k records and more), for scores within about 1e-3
of float32's on unit vectors, which moves a neighbour only past one that all but ties it.
But it numbers vectors 0, 1, 2... and cannot delete one. So this keeps, beside the graph,
each vector's ``records.rowid`` (``labels``) and whether it still counts (``alive``): a
removed or re-embedded record's old vector stays in the graph, still a stepping stone between
its neighbours, and every search passes FAISS a bitmap that leaves it out of the results.
Removals are rare (forget, a tombstone, a re-embed); a graph whose dead share passes
:data:`DEAD_SHARE_MAX` is built afresh at the next start.

Not thread-safe: :class:`~recalld.store.sqlite.vector_index.VectorIndex` serialises mutation
against searches.
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

__all__ = ["DEAD_SHARE_MAX", "EF_SEARCH", "GraphIndex", "M"]

# Neighbours per vector (the graph's bottom layer holds twice as many): 32 keeps recall@10
# ~0.99 at a million vectors with efSearch 128, at ~260 bytes a vector beside its 768.
M = 32
EF_CONSTRUCTION = 64
# Candidates a search keeps while it walks the graph; a search for more (k) keeps k.
EF_SEARCH = 128
DEAD_SHARE_MAX = 0.25


class GraphIndex:
    """The graph, its labels and its alive bits, with the FAISS calls the vector index makes
    (``add_with_ids``, ``remove_ids``, ``search``, ``range_search``) in record ids."""

    def __init__(
        self,
        dim: int,
        hnsw: faiss.IndexHNSWSQ | None = None,
        labels: np.ndarray | None = None,
        alive: np.ndarray | None = None,
    ) -> None:
        if hnsw is None:
            hnsw = faiss.IndexHNSWSQ(
                # The stubs name only one of SWIG's overloads: (d, qtype, M, metric) is real.
                dim,
                faiss.ScalarQuantizer.QT_fp16,  # type: ignore[arg-type]
                M,
                faiss.METRIC_INNER_PRODUCT,
            )
            hnsw.hnsw.efConstruction = EF_CONSTRUCTION
        hnsw.hnsw.efSearch = EF_SEARCH
        self.hnsw = hnsw
        self.d = dim
        n = int(hnsw.ntotal)
        # Arrays with room to grow (doubling): a copy per added chunk would cost O(n) each.
        self._labels = np.empty(max(1024, n), dtype=np.int64)
        self._alive = np.zeros(max(1024, n), dtype=bool)
        if n:
            assert labels is not None and alive is not None
            self._labels[:n] = labels
            self._alive[:n] = alive
        self.dead = int(n - np.count_nonzero(self._alive[:n]))
        self._bitmap: np.ndarray | None = None  # alive bits packed for FAISS, while unchanged

    @property
    def ntotal(self) -> int:
        """Vectors that count (the graph's own ntotal also counts the dead)."""
        return int(self.hnsw.ntotal) - self.dead

    @property
    def dead_share(self) -> float:
        return self.dead / max(1, int(self.hnsw.ntotal))

    def add_with_ids(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        start = int(self.hnsw.ntotal)
        end = start + len(ids)
        if end > len(self._labels):
            size = max(end, 2 * len(self._labels))
            self._labels = np.resize(self._labels, size)
            self._alive = np.concatenate([self._alive, np.zeros(size - len(self._alive), bool)])
        self.hnsw.add(np.ascontiguousarray(vecs, dtype=np.float32))
        self._labels[start:end] = ids
        self._alive[start:end] = True
        self._bitmap = None

    def remove_ids(self, ids: np.ndarray) -> int:
        n = int(self.hnsw.ntotal)
        hit = np.flatnonzero(np.isin(self._labels[:n], ids) & self._alive[:n])
        self._alive[hit] = False
        self.dead += len(hit)
        if len(hit):
            self._bitmap = None
        return len(hit)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        params, keep = self._params(k)
        scores, pos = self.hnsw.search(query, k, params=params)
        del keep
        return scores, self._labelled(pos)

    def range_search(
        self, query: np.ndarray, threshold: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        params, keep = self._params(EF_SEARCH)
        lims, scores, pos = self.hnsw.range_search(query, threshold, params=params)
        del keep
        return lims, scores, self._labelled(pos)

    def ids(self) -> np.ndarray:
        n = int(self.hnsw.ntotal)
        return self._labels[:n][self._alive[:n]]

    def _params(self, k: int) -> tuple[faiss.SearchParameters, object]:
        """Search parameters, and what must stay referenced while FAISS reads them (the
        selector holds a raw pointer into the bitmap)."""
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]  # not in its stubs
        params.efSearch = max(EF_SEARCH, k)
        if not self.dead:
            return params, None
        n = int(self.hnsw.ntotal)
        if self._bitmap is None:
            self._bitmap = np.packbits(self._alive[:n], bitorder="little")
        bitmap = self._bitmap
        selector = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bitmap))
        params.sel = selector
        return params, (selector, bitmap)

    def _labelled(self, pos: np.ndarray) -> np.ndarray:
        return np.where(pos >= 0, self._labels[np.maximum(pos, 0)], -1)

    # ------------------------------------------------------------------ files

    def write(self, graph: Path, labels: Path) -> None:
        n = int(self.hnsw.ntotal)
        faiss.write_index(self.hnsw, str(graph))
        with open(labels, "wb") as fh:
            np.savez(fh, labels=self._labels[:n], alive=self._alive[:n])

    @classmethod
    def read(cls, graph: Path, labels: Path) -> GraphIndex:
        hnsw = faiss.read_index(str(graph))
        # A float32 graph (an older snapshot) is not read: rebuilt, it takes half the memory.
        if not isinstance(hnsw, faiss.IndexHNSWSQ):
            raise ValueError(f"{type(hnsw).__name__} is not an fp16 HNSW graph")
        with np.load(labels, allow_pickle=False) as arrays:
            ids, alive = arrays["labels"], arrays["alive"]
        n = int(hnsw.ntotal)
        if ids.shape != (n,) or alive.shape != (n,) or ids.dtype != np.int64:
            raise ValueError(f"labels for {ids.shape} vectors, graph of {n}")
        return cls(int(hnsw.d), hnsw, ids, alive.astype(bool))
