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
when sentence-transformers is installed. The graph is serialised by ``onnx_proto`` (not the
``onnx`` package): a small wire-format reader here checks what ``onnx.checker`` would have
(each value defined once, before it is used).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from recalld.pipeline import onnx_proto as pb
from recalld.pipeline.bundled_model import bundled_model_path
from recalld.pipeline.onnx_graph import OPSET, build
from recalld.pipeline.onnx_model import OnnxEmbedder

pytestmark = pytest.mark.real_model

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "minilm_reference.npz"
MIN_COSINE = 1 - 1e-5


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.asarray((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """A protobuf message's fields in order: varints as ints, length-delimited ones as bytes."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while pos < len(buf):
        key = varint()
        match key & 7:
            case 0:
                yield key >> 3, varint()
            case 2:
                size = varint()
                yield key >> 3, buf[pos : pos + size]
                pos += size
            case 5:
                yield key >> 3, buf[pos : pos + 4]
                pos += 4
            case wire:
                raise AssertionError(f"wire type {wire} at byte {pos}")


def _strings(buf: bytes, field: int) -> list[str]:
    return [bytes(v).decode() for f, v in _fields(buf) if f == field and isinstance(v, bytes)]


def _messages(buf: bytes, field: int) -> list[bytes]:
    return [v for f, v in _fields(buf) if f == field and isinstance(v, bytes)]


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("onnx") / "minilm.onnx"
    build(bundled_model_path(), out)
    return out


@pytest.fixture(scope="module")
def embedder(graph: Path) -> OnnxEmbedder:
    return OnnxEmbedder(graph, bundled_model_path())


def test_wire_format_is_protobufs() -> None:
    # The examples of protobuf's encoding guide, and a negative int64 (ten bytes).
    assert pb.Message().varint(1, 150).chunks == [b"\x08\x96\x01"]
    assert pb.Message().string(2, "testing").chunks == [b"\x12\x07", b"testing"]
    assert b"".join(pb.Message().varint(3, -1).chunks) == b"\x18" + b"\xff" * 9 + b"\x01"
    assert b"".join(pb.Message().float32(2, 1.0).chunks) == b"\x15\x00\x00\x80\x3f"


def test_graph_defines_each_value_once_before_use(graph: Path) -> None:
    # What onnx.checker would catch and onnxruntime silently accepts (a repeated
    # initializer name: the last one wins).
    model = graph.read_bytes()
    assert next(v for f, v in _fields(model) if f == 1) == 8  # ir_version
    (opset,) = _messages(model, 8)
    assert list(_fields(opset)) == [(1, b""), (2, OPSET)]
    (body,) = _messages(model, 7)
    defined = [_strings(v, 1)[0] for v in _messages(body, 11)]  # graph inputs
    defined += [_strings(t, 8)[0] for t in _messages(body, 5)]  # initializers
    assert len(set(defined)) == len(defined)
    for node in _messages(body, 1):
        missing = set(_strings(node, 1)) - set(defined)
        assert not missing, (_strings(node, 3), missing)
        outputs = _strings(node, 2)
        assert not set(outputs) & set(defined), outputs
        defined += outputs
    assert [_strings(v, 1)[0] for v in _messages(body, 12)] == ["embedding"]
    assert "embedding" in defined


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
