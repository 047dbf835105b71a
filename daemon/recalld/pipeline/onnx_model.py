"""The embedding model on ONNX Runtime: the same all-MiniLM-L6-v2, without torch at run time.

torch costs seconds of import, hundreds of MB of RSS and a 1 GB install for what is, at
inference, one small transformer. So the graph of the local sentence-transformers folder is
built once from its weights (``onnx_graph``: mean pooling and L2 normalisation inside the
graph; outputs match sentence-transformers to ~1e-7) into a cache keyed by the model files,
and the daemon runs it with onnxruntime and the `tokenizers` library. Nothing is downloaded:
the build reads only the local folder.

    python -m recalld.pipeline.onnx_model [MODEL_DIR]   # export now (scripts/setup does this)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["OnnxEmbedder", "cached_export", "ensure_export", "export"]

log = logging.getLogger(__name__)

EXPORT_TIMEOUT = 900.0


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "recalld" / "models"


def cached_export(model_dir: Path) -> Path:
    """Where the export of ``model_dir`` lives: keyed by the model's files, so a changed
    model never reuses a stale export."""
    digest = hashlib.blake2b(digest_size=10)
    for name in ("config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json"):
        f = model_dir / name
        if f.exists():
            digest.update(f.read_bytes())
    for weights in sorted(model_dir.glob("*.safetensors")) + sorted(model_dir.glob("*.bin")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    name = model_dir.name if model_dir.name != "model" else "all-MiniLM-L6-v2"
    return cache_dir() / f"{name}-{digest.hexdigest()}.onnx"


def export(model_dir: Path, out: Path) -> None:
    """Write the ONNX graph of a sentence-transformers (BERT, mean-pooled) folder to ``out``:
    built from its weights (:mod:`recalld.pipeline.onnx_graph`), no torch involved. The
    build peaks near 0.4 GB, so :func:`ensure_export` runs it in a subprocess."""
    from .onnx_graph import build

    out.parent.mkdir(parents=True, exist_ok=True)
    build(model_dir, out)  # written aside and renamed: a crash leaves no half graph


def ensure_export(model_dir: Path) -> Path:
    """The cached ONNX export of ``model_dir``, exporting it (in a subprocess) if missing.

    Raises:
        FileNotFoundError: ``model_dir`` holds no model.
        RuntimeError: the export failed (the message carries its stderr tail).
    """
    if not (model_dir / "config.json").exists():
        raise FileNotFoundError(f"no model files under {model_dir}")
    out = cached_export(model_dir)
    if out.exists():
        return out
    log.info("building the ONNX graph of %s (once; cached at %s)", model_dir, out)
    done = subprocess.run(
        [sys.executable, "-m", "recalld.pipeline.onnx_model", str(model_dir)],
        capture_output=True,
        text=True,
        timeout=EXPORT_TIMEOUT,
    )
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"ONNX export failed: {done.stderr.strip()[-500:]}")
    return out


class OnnxEmbedder:
    """Sentence embeddings from the exported graph: L2-normalised float32 rows."""

    def __init__(self, onnx_path: Path, model_dir: Path, *, threads: int = 2) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]
        from tokenizers import Tokenizer

        # Tokenize on the calling thread: the tokenizer's own pool would be started from the
        # low-priority thread the model is built on, and a query's tokens would wait on it.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        max_len = 256
        config = model_dir / "sentence_bert_config.json"
        if config.exists():
            max_len = int(json.loads(config.read_text()).get("max_seq_length", max_len))
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_len)
        self._tokenizer.enable_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # ORT's pool threads spin for a while after each run by default: on 2 cores that
        # steals the CPU the search right after a query embedding needs (FAISS took 7x
        # longer in the daemon than alone). Sleep instead; a batch costs the same.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            str(onnx_path), options, providers=["CPUExecutionProvider"]
        )
        self.name = model_dir.name if model_dir.name != "model" else "all-MiniLM-L6-v2"
        self.dim = int(self.encode(["dimension probe"]).shape[1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        batch = self._tokenizer.encode_batch(list(texts))
        feeds = {
            "input_ids": np.array([e.ids for e in batch], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in batch], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in batch], dtype=np.int64),
        }
        (vecs,) = self._session.run(None, feeds)
        return np.ascontiguousarray(vecs, dtype=np.float32)


def _main(argv: list[str]) -> None:
    if argv:
        model_dir = Path(argv[0])
    else:
        from .bundled_model import bundled_model_path

        model_dir = bundled_model_path()
    out = cached_export(model_dir)
    if out.exists():
        print(out)
        return
    export(model_dir, out)
    print(out)


if __name__ == "__main__":
    _main(sys.argv[1:])
