"""With the real bundled all-MiniLM-L6-v2: meaning, not words."""

from __future__ import annotations

import pytest
from recall_client import protocol as p

from tests.support.daemon import DaemonFactory, DaemonProcess

pytestmark = pytest.mark.real_model

MEMORIES = [
    "Alice prefers squash merges and short commit subjects.",
    "The deploy script lives in tools/deploy.sh and needs the VPN up.",
    "Our cat Whiskers hates the vacuum cleaner.",
]
PARAPHRASE = "which pet animal is scared of household appliances"


async def _wait_embedded(d: DaemonProcess, n: int) -> None:
    report = await d.settled(120)
    assert report.index.size >= n and report.index.embedding_backlog == 0, report.index


async def test_a_paraphrase_sharing_no_word_finds_the_memory_and_survives_restart(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(embedder="minilm")
    await d.start(within_s=60)
    report = await d.status(wait_model_s=120)
    assert report.model.state == "ready", report.model.reason
    assert report.model.dim == 384
    assert report.model.backend == "onnxruntime"
    async with d.client() as rc:
        ids = [(await rc.call(p.MemoryStore(text=t), p.Stored)).record_id for t in MEMORIES]
    await _wait_embedded(d, 3)

    async with d.client() as rc:
        lexical = await rc.call(p.MemorySearch(query=PARAPHRASE, mode="bm25"), p.MemorySearchResult)
        hybrid = await rc.call(p.MemorySearch(query=PARAPHRASE), p.MemorySearchResult)
    assert lexical.hits == [], "the paraphrase must share no word with the memory"
    assert hybrid.semantic_used
    assert hybrid.hits[0].id == ids[2]

    assert await d.stop() == 0
    await d.start(within_s=60)
    await d.status(wait_model_s=120)
    async with d.client() as rc:
        again = await rc.call(p.MemorySearch(query=PARAPHRASE), p.MemorySearchResult)
    assert again.semantic_used
    assert again.hits[0].id == ids[2]
    assert await d.stop() == 0


def test_the_onnx_export_matches_sentence_transformers() -> None:
    pytest.importorskip("sentence_transformers")  # the torch extra: compared live where it is
    from recalld.pipeline.bundled_model import bundled_model_path
    from recalld.pipeline.model import SentenceTransformerEmbedder
    from recalld.pipeline.onnx_model import OnnxEmbedder, ensure_export

    path = bundled_model_path()
    texts = [
        "x",
        "The deploy script lives in tools/deploy.sh and needs the VPN up.",
        "a much longer sentence " * 40,
        "Ünïcödé and emoji 🚀 survive tokenisation",
    ]
    onnx = OnnxEmbedder(ensure_export(path), path)
    reference = SentenceTransformerEmbedder(path).encode(texts)
    got = onnx.encode(texts)
    assert got.shape == reference.shape == (4, 384)
    assert float(abs(got - reference).max()) < 1e-4
