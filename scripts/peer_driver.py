"""Drive mcp-memory-service's own storage API for `scripts/bench --peer`.

Runs with the peer's venv (``.peer-venv/bin/python``), never recalld's. Reads one JSON object
on stdin::

    {"db_dir": str, "model_path": str, "texts": [str], "queries": [str],
     "window": int, "limit": int, "batch": int}

and writes one JSON object on stdout: the figures, or ``{"error": str}`` with exit status 1.
Everything else the peer prints goes to stderr.

What it measures, on ``SqliteVecMemoryStorage`` exactly as the peer's memory service uses it:

- store: ``store()`` per record, ``window`` calls in flight (the bench offers recalld the same
  window); a record counts when its call returned success. Semantic dedup is skipped (the
  synthetic texts are near-duplicates by design, and recalld stores them all): that spares
  the peer one extra embedding and a full vector scan per record, so it favours the peer.
- store_batch: ``store_batch()`` in chunks of ``batch`` on a second database, the peer's
  fastest write path, for reference.
- search: ``retrieve(query, n_results=limit)`` (what the peer's memory search calls) over the
  first database, after ten warm-up queries that differ from the measured ones.

The model is the local all-MiniLM-L6-v2 folder, passed as the model name; the peer's ONNX path
(which would download) is off, the hub is offline, and its hash-embedding fallback is refused.
The driver checks the loaded model really is that sentence-transformers model at 384 dims.
"""

from __future__ import annotations

import os

# Before any import that might reach for the hub or pick an embedding backend.
os.environ.update(
    {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "MCP_MEMORY_USE_ONNX": "0",
        "MCP_MEMORY_ALLOW_HASH_EMBEDDINGS": "0",
        "MCP_EXTERNAL_EMBEDDING_URL": "",
        "TOKENIZERS_PARALLELISM": "false",
    }
)

import asyncio
import json
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

MINILM_DIM = 384


def pct(values: list[float], q: float) -> float:
    data = sorted(values)
    return data[min(len(data) - 1, int(q * len(data)))]


async def open_storage(db_path: Path, model_path: str) -> Any:
    # The peer's package is installed only in its own venv, not in the one mypy checks with.
    from mcp_memory_service.storage.sqlite_vec import SqliteVecMemoryStorage  # type: ignore[import-not-found]
    from sentence_transformers import SentenceTransformer

    storage = SqliteVecMemoryStorage(str(db_path), embedding_model=model_path)
    await storage.initialize()
    # Fail loudly unless the peer embeds with the real MiniLM: not its hash fallback, not an
    # ONNX or external model, not another dimension.
    model = storage.embedding_model
    if not isinstance(model, SentenceTransformer) or getattr(
        storage, "embedding_backend_degraded", False
    ):
        raise RuntimeError(
            f"peer embeds with {type(model).__name__}, not sentence-transformers MiniLM"
        )
    dim = len(storage._generate_embedding("dimension probe"))
    if storage.embedding_dimension != MINILM_DIM or dim != MINILM_DIM:
        raise RuntimeError(
            f"peer embedding dimension {dim}/{storage.embedding_dimension}, want {MINILM_DIM}"
        )
    return storage


def memory(text: str) -> Any:
    # Only in the peer's venv (see open_storage).
    from mcp_memory_service.models.memory import Memory  # type: ignore[import-not-found]
    from mcp_memory_service.utils.hashing import generate_content_hash  # type: ignore[import-not-found]

    return Memory(
        content=text, content_hash=generate_content_hash(text), tags=["bench"], memory_type="note"
    )


async def bench_store(storage: Any, texts: list[str], window: int) -> tuple[float, int]:
    sem = asyncio.Semaphore(window)
    failures: list[str] = []

    async def one(text: str) -> None:
        async with sem:
            ok, message = await storage.store(memory(text), skip_semantic_dedup=True)
            if not ok:
                failures.append(str(message))

    started = time.perf_counter()
    await asyncio.gather(*(one(t) for t in texts))
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"peer refused {len(failures)} of {len(texts)} stores: {failures[0]}")
    return len(texts) / elapsed, len(texts)


async def bench_store_batch(storage: Any, texts: list[str], batch: int) -> float:
    started = time.perf_counter()
    stored = 0
    for i in range(0, len(texts), batch):
        results = await storage.store_batch([memory(t) for t in texts[i : i + batch]])
        stored += sum(1 for ok, _ in results if ok)
    elapsed = time.perf_counter() - started
    if stored != len(texts):
        raise RuntimeError(f"peer store_batch stored {stored} of {len(texts)}")
    return len(texts) / elapsed


async def bench_search(storage: Any, queries: list[str], limit: int) -> tuple[float, float]:
    for q in queries[:10]:
        await storage.retrieve(q + " warm", n_results=limit)
    lat = []
    for q in queries:
        t = time.perf_counter()
        hits = await storage.retrieve(q, n_results=limit)
        lat.append((time.perf_counter() - t) * 1000)
        if not hits:
            raise RuntimeError(f"peer found nothing for {q!r}")
    return statistics.median(lat), pct(lat, 0.99)


async def run(job: dict[str, Any]) -> dict[str, Any]:
    db_dir = Path(job["db_dir"])
    texts, queries = job["texts"], job["queries"]
    started = time.perf_counter()
    storage = await open_storage(db_dir / "store.db", job["model_path"])
    model_load_s = time.perf_counter() - started
    store_per_s, stored = await bench_store(storage, texts, job["window"])
    search_p50, search_p99 = await bench_search(storage, queries, job["limit"])
    await storage.close()
    batch_storage = await open_storage(db_dir / "batch.db", job["model_path"])
    store_batch_per_s = await bench_store_batch(batch_storage, texts, job["batch"])
    await batch_storage.close()
    from importlib.metadata import version

    return {
        "peer": f"mcp-memory-service {version('mcp-memory-service')}",
        "embedder": type(storage.embedding_model).__name__,
        "dim": storage.embedding_dimension,
        "records": stored,
        "queries": len(queries),
        "model_load_s": model_load_s,
        "store_per_s": store_per_s,
        "store_batch_per_s": store_batch_per_s,
        "search_p50_ms": search_p50,
        "search_p99_ms": search_p99,
    }


def main() -> int:
    # The peer logs and prints freely; keep stdout for the one JSON answer.
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        result = asyncio.run(run(json.load(sys.stdin)))
    except Exception as exc:  # reported to the bench as a typed failure, with a traceback on stderr
        logging.exception("peer driver failed")
        answer.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        answer.flush()
        return 1
    answer.write(json.dumps(result) + "\n")
    answer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
