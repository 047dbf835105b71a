"""memory_search's optional cross-encoder, with a real local model folder (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.daemon import DaemonFactory
from tests.support.memories import search, settled, store

pytestmark = pytest.mark.real_model


def make_cross_encoder(folder: Path) -> Path:
    """A small cross-encoder: the bundled MiniLM encoder with a one-logit head (seeded).
    Needs the torch extra (the reranker runs on sentence-transformers)."""
    pytest.importorskip("sentence_transformers")
    import torch
    from recalld.pipeline.bundled_model import bundled_model_path
    from transformers import AutoTokenizer, BertForSequenceClassification

    source = bundled_model_path()
    torch.manual_seed(7)
    model = BertForSequenceClassification.from_pretrained(str(source), num_labels=1)
    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(folder))
    return folder


async def test_a_configured_cross_encoder_reranks_and_says_so(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    model = make_cross_encoder(tmp_path / "ce")
    d = daemon_factory(extra_env={"RECALLD_RERANK_MODEL_PATH": str(model)})
    await d.start()
    async with d.client(workspace="/ws/ce") as rc:
        for text in (
            "The nightly backup job writes to the NAS share.",
            "Backups older than thirty days are pruned by the nightly job.",
            "The NAS share is mounted at /mnt/nas on every build agent.",
        ):
            await store(rc, text)
        await settled(d)
        reranked = await search(rc, "nightly backup job", rerank=True, explain=True, min_score=0.0)
        plain = await search(rc, "nightly backup job", explain=True, min_score=0.0)
    assert reranked.trace is not None
    info = reranked.trace["rerank"]
    assert info["requested"] and info["available"] and info["used"] and info["model"] == str(model)
    assert info["depth"] == len(reranked.hits) == 3
    for hit in reranked.hits:
        assert hit.trace is not None and 0.0 <= hit.trace["rerank"] <= 1.0
    assert plain.trace is not None and plain.trace["rerank"]["used"] is False
    assert all(h.trace is not None and h.trace["rerank"] is None for h in plain.hits)
    assert {h.id: h.score for h in reranked.hits} != {h.id: h.score for h in plain.hits}
    assert await d.stop() == 0


def _have_sentence_transformers() -> bool:
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(_have_sentence_transformers(), reason="the torch extra is installed")
async def test_without_the_torch_extra_the_reranker_says_what_is_missing(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    folder = tmp_path / "ce"
    folder.mkdir()
    d = daemon_factory(extra_env={"RECALLD_RERANK_MODEL_PATH": str(folder)})
    await d.start()
    async with d.client(workspace="/ws/ce") as rc:
        await store(rc, "The nightly backup job writes to the NAS share.")
        await settled(d)
        result = await search(rc, "nightly backup", rerank=True, explain=True, min_score=0.0)
    assert result.hits and result.trace is not None
    info = result.trace["rerank"]
    assert info["requested"] and not info["used"] and not info["available"]
    assert "recalld[torch]" in str(info), info
    assert await d.stop() == 0
