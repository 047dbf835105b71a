"""The embedding model on ONNX Runtime: the same all-MiniLM-L6-v2, without torch at run time.

torch costs the daemon seconds of import and hundreds of MB of RSS for what is, at inference,
one small transformer. So the local sentence-transformers folder is exported once to ONNX
(mean pooling and L2 normalisation inside the graph; outputs match sentence-transformers to
~1e-7) into a cache keyed by the model files, and the daemon runs it with onnxruntime and the
`tokenizers` library. The export runs in a subprocess so the daemon never imports torch;
nothing is downloaded, the export reads only the local folder.

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
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


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
    """Export a sentence-transformers (BERT-style, mean-pooled) folder to ONNX at ``out``.

    Imports torch; run it in a subprocess (see :func:`ensure_export`).
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    # Eager attention: the traced graph must not bake in sdpa's shape-dependent shortcuts.
    model = AutoModel.from_pretrained(
        str(model_dir), local_files_only=True, attn_implementation="eager"
    ).eval()

    class Pooled(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            token_type_ids: torch.Tensor,
        ) -> torch.Tensor:
            hidden = self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    sample = tokenizer(["an example sentence", "another"], padding=True, return_tensors="pt")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    dynamic = {name: {0: "batch", 1: "tokens"} for name in _INPUTS}
    dynamic["embedding"] = {0: "batch"}
    with torch.no_grad():
        torch.onnx.export(
            Pooled(model),
            tuple(sample[name] for name in _INPUTS),
            str(tmp),
            input_names=list(_INPUTS),
            output_names=["embedding"],
            dynamic_axes=dynamic,
            opset_version=17,
            dynamo=False,
        )
    os.replace(tmp, out)


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
    log.info("exporting %s to ONNX (once; cached at %s)", model_dir, out)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-m", "recalld.pipeline.onnx_model", str(model_dir)],
        capture_output=True,
        text=True,
        timeout=EXPORT_TIMEOUT,
        env=env,
    )
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"ONNX export failed: {done.stderr.strip()[-500:]}")
    return out


class OnnxEmbedder:
    """Sentence embeddings from the exported graph: L2-normalised float32 rows."""

    def __init__(self, onnx_path: Path, model_dir: Path, *, threads: int = 2) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]
        from tokenizers import Tokenizer

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
