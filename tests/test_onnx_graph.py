"""The torch-free ONNX graph (recalld.pipeline.onnx_graph) gives sentence-transformers' vectors.

tests/fixtures/minilm_reference.npz holds ``texts`` (40 strings: empty and one-character
strings, prose, code, SQL, JSON, a traceback, accented, Cyrillic, CJK, Korean, Arabic, emoji,
a 300-character single word, and four texts of more than 256 tokens, so truncation at the
model's max_seq_length of 256 is covered) and ``vectors``: float32 [40, 384], made once with
sentence-transformers 6.2.0 (transformers 5.24, torch 2.13 CPU) on the bundled model::

    model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    vectors = model.encode(texts, normalize_embeddings=True).astype(np.float32)
    np.savez_compressed("tests/fixtures/minilm_reference.npz",
                        texts=np.array(texts, dtype=np.str_), vectors=vectors)

So the first test needs neither torch nor sentence-transformers; the second compares live
when sentence-transformers is installed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from recalld.pipeline.bundled_model import bundled_model_path
from recalld.pipeline.onnx_graph import build
from recalld.pipeline.onnx_model import OnnxEmbedder

pytestmark = pytest.mark.real_model

FIXTURE = Path(__file__).parent / "fixtures" / "minilm_reference.npz"
MIN_COSINE = 1 - 1e-5


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.asarray((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> OnnxEmbedder:
    import onnx

    out = tmp_path_factory.mktemp("onnx") / "minilm.onnx"
    build(bundled_model_path(), out)
    # Catches what onnxruntime silently accepts (e.g. duplicate initializer names).
    onnx.checker.check_model(str(out))
    return OnnxEmbedder(out, bundled_model_path())


def test_graph_matches_reference_vectors(embedder: OnnxEmbedder) -> None:
    ref = np.load(FIXTURE)
    texts, expected = [str(t) for t in ref["texts"]], ref["vectors"]
    assert embedder.dim == expected.shape[1] == 384
    # One padded batch (masking must hide the padding) and one text at a time (no padding).
    batched = embedder.encode(texts)
    single = np.vstack([embedder.encode([t]) for t in texts])
    for got in (batched, single):
        assert got.dtype == np.float32 and got.shape == expected.shape
        cosines = _cosines(got, expected)
        worst = int(cosines.argmin())
        assert cosines.min() >= MIN_COSINE, (texts[worst][:60], float(cosines[worst]))
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_graph_matches_live_sentence_transformers(embedder: OnnxEmbedder) -> None:
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers not installed")

    texts = [str(t) for t in np.load(FIXTURE)["texts"]]
    texts += ["a sentence the fixture does not have", "def f():\n    return None " * 80]
    model = st.SentenceTransformer(str(bundled_model_path()), device="cpu", local_files_only=True)
    expected = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    cosines = _cosines(embedder.encode(texts), np.asarray(expected))
    worst = int(cosines.argmin())
    assert cosines.min() >= MIN_COSINE, (texts[worst][:60], float(cosines[worst]))
