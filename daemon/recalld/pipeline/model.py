"""The embedding model: loading it, and its priority lane.

The model loads in a worker thread after the socket accepts. It runs on ONNX Runtime (see
onnx_model.py: no torch in the daemon, sub-second load), falling back to sentence-transformers
(the optional torch extra) when no graph can be built. Until it is ready, or if it fails,
search runs lexical only and status says why. One model serves everyone. The backlog's
batches run on a thread of the lowest CPU priority (where the model is also built, so the
runtime's own threads inherit that priority) and start only while no query waits; queries
(and texts a caller waits for) run one at a time on normal threads beside any batch, so
searches stay fast while captures embed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import anyio
import numpy as np

from .bundled_model import bundled_model_path
from .low_priority import LowPriorityThread
from .onnx_model import OnnxEmbedder, ensure_export

__all__ = [
    "Embedder",
    "HashEmbedder",
    "Model",
    "SentenceTransformerEmbedder",
]

log = logging.getLogger(__name__)


class Embedder(Protocol):
    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded from a local folder; never from a hub."""

    def __init__(self, path: Path) -> None:
        # Belt and braces: the folder is local, and nothing may try the network.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise RuntimeError(
                f"the sentence-transformers backend needs the torch extra ({exc.name} is not"
                " installed): pip install 'recalld[torch]'"
            ) from exc

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
        # The priority lane: queries take the lock one at a time (never waiting behind a
        # batch, which would make a query wait on a thread of the lowest priority); a batch
        # starts only while no query waits, on the background thread.
        self._lock = anyio.Lock()
        self._lane = anyio.Condition()
        self._background = LowPriorityThread("recalld-embed")
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
                await self._background.run(self.embedder.encode, ["warm up"])
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
        embedder: Embedder
        if self._backend in ("auto", "onnx"):
            try:
                onnx = await anyio.to_thread.run_sync(ensure_export, path, abandon_on_cancel=True)
                # Built on the background thread: the runtime's pool threads inherit its
                # priority (a query's own thread runs at normal priority beside them).
                embedder = await self._background.run(OnnxEmbedder, onnx, path)
                return embedder, "onnxruntime"
            except Exception as exc:
                if self._backend == "onnx":
                    raise
                log.warning("ONNX backend unavailable (%s); trying sentence-transformers", exc)
        embedder = await self._background.run(SentenceTransformerEmbedder, path)
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
        row: np.ndarray = vec[0]
        self._cache[text] = row
        if len(self._cache) > 1024:
            self._cache.popitem(last=False)
        return row

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
        return await self._background.run(embedder.encode, list(texts))

    def close(self) -> None:
        """At the stop: drop a batch that has not started (one that has finishes)."""
        self._background.close()
