"""The embedding graph written straight to ONNX: the same graph as ``onnx_model.export``,
without torch, transformers or sentence-transformers.

The daemon only ever runs one small BERT (all-MiniLM-L6-v2) forward pass, mean pooling and
L2 normalisation. Tracing that through torch needs a ~1 GB install for a one-time step, so
this module reads the folder's ``model.safetensors`` and ``config.json`` and lays the same
computation out node by node with plain ONNX ops, serialised by ``onnx_proto`` (not the
``onnx`` package). Inputs (``input_ids``, ``attention_mask``,
``token_type_ids``: int64 [batch, tokens]) and output (``embedding``: float32 [batch, hidden])
are those of the torch export, so :class:`~recalld.pipeline.onnx_model.OnnxEmbedder` runs
either file unchanged. Nothing is downloaded: only the local folder is read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from . import onnx_proto as pb

__all__ = ["OPSET", "build"]

# 17: the first opset with LayerNormalization; onnxruntime >= 1.17 (our floor) runs it.
OPSET = 17
# The IR version that goes with opset 17: an older onnxruntime refuses a newer one even
# though every op here is old.
_IR_VERSION = 8


def build(model_dir: Path, out: Path) -> None:
    """Write the sentence-embedding graph of the BERT folder ``model_dir`` to ``out``.

    Raises:
        FileNotFoundError: ``model_dir`` has no ``config.json`` or ``model.safetensors``.
        ValueError: the model is not a BERT this graph reproduces exactly.
    """
    from safetensors.numpy import load_file

    cfg: dict[str, Any] = json.loads((model_dir / "config.json").read_text())
    # A wrong activation or position scheme would still run and give plausible, wrong vectors.
    if (
        cfg.get("model_type") != "bert"
        or cfg.get("hidden_act", "gelu") != "gelu"
        or cfg.get("position_embedding_type", "absolute") != "absolute"
    ):
        raise ValueError(f"{model_dir}: not a BERT with gelu and absolute positions")
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    head_dim, eps = hidden // heads, float(cfg.get("layer_norm_eps", 1e-12))
    # Checkpoints saved from a task head prefix every name with "bert."; the one integer
    # tensor (the position_ids buffer, 0..511) is recomputed in the graph instead.
    weights = {
        k.removeprefix("bert."): v.astype(np.float32, copy=False)
        for k, v in load_file(str(model_dir / "model.safetensors")).items()
        if v.dtype.kind == "f"
    }

    nodes: list[pb.Message] = []
    inits: list[pb.Message] = []
    # onnxruntime takes a repeated name silently (the last one wins); refuse it here.
    names: set[str] = {"input_ids", "attention_mask", "token_type_ids"}

    def fresh(name: str) -> str:
        if name in names:
            raise ValueError(f"two values named {name!r} in the graph")
        names.add(name)
        return name

    def const(name: str, value: Any, dtype: type[np.generic] = np.float32) -> str:
        inits.append(pb.tensor(fresh(name), np.ascontiguousarray(value, dtype=dtype)))
        return name

    def op(kind: str, *inputs: str, **attrs: Any) -> str:
        name = fresh(f"{kind}_{len(nodes)}")
        nodes.append(pb.node(kind, inputs, [name], name, **attrs))
        return name

    def param(name: str) -> str:
        return const(name, weights[name])

    def linear(x: str, prefix: str) -> str:
        # torch Linear stores [out, in]; MatMul wants [in, out].
        w = const(f"{prefix}.weight", weights.pop(f"{prefix}.weight").T)
        return op("Add", op("MatMul", x, w), param(f"{prefix}.bias"))

    def layer_norm(x: str, prefix: str) -> str:
        scale, shift = param(f"{prefix}.weight"), param(f"{prefix}.bias")
        return op("LayerNormalization", x, scale, shift, axis=-1, epsilon=eps)

    # Embeddings: word + position (0..tokens-1, as BertModel makes them) + token type.
    tokens = op("Shape", "input_ids", start=1, end=2)
    zero = const("zero", [0], np.int64)
    positions = op("Slice", param("embeddings.position_embeddings.weight"), zero, tokens, zero)
    words = op("Gather", param("embeddings.word_embeddings.weight"), "input_ids")
    types = op("Gather", param("embeddings.token_type_embeddings.weight"), "token_type_ids")
    x = layer_norm(op("Add", op("Add", words, positions), types), "embeddings.LayerNorm")

    # Padding keys get the most negative float added to their scores, as transformers does,
    # so softmax gives them exactly zero weight: [batch, 1, 1, tokens], broadcast over heads.
    mask = op("Cast", "attention_mask", to=pb.FLOAT)
    keep = op("Unsqueeze", mask, const("axes12", [1, 2], np.int64))
    one = const("one", 1.0)
    bias = op("Mul", op("Sub", one, keep), const("min", np.finfo(np.float32).min))
    split_heads = const("split_heads", [0, 0, heads, head_dim], np.int64)
    merge_heads = const("merge_heads", [0, 0, hidden], np.int64)
    scale = const("scale", head_dim**-0.5)
    sqrt2, half = const("sqrt2", np.sqrt(2.0)), const("half", 0.5)

    for i in range(int(cfg["num_hidden_layers"])):
        p = f"encoder.layer.{i}"

        def heads_of(name: str, perm: list[int], x: str = x, p: str = p) -> str:
            proj = linear(x, f"{p}.attention.self.{name}")
            return op("Transpose", op("Reshape", proj, split_heads), perm=perm)

        q = heads_of("query", [0, 2, 1, 3])  # [batch, heads, tokens, head_dim]
        k = heads_of("key", [0, 2, 3, 1])  # [batch, heads, head_dim, tokens]
        v = heads_of("value", [0, 2, 1, 3])
        scores = op("Add", op("Mul", op("MatMul", q, k), scale), bias)
        context = op("MatMul", op("Softmax", scores, axis=-1), v)
        context = op("Reshape", op("Transpose", context, perm=[0, 2, 1, 3]), merge_heads)
        attended = linear(context, f"{p}.attention.output.dense")
        x = layer_norm(op("Add", attended, x), f"{p}.attention.output.LayerNorm")
        # HF's "gelu" is the exact erf form, not the tanh approximation.
        h = linear(x, f"{p}.intermediate.dense")
        erf = op("Erf", op("Div", h, sqrt2))
        h = op("Mul", op("Mul", h, op("Add", erf, one)), half)
        x = layer_norm(op("Add", linear(h, f"{p}.output.dense"), x), f"{p}.output.LayerNorm")

    # Mean over the real tokens, then x / max(|x|, 1e-12): sentence-transformers' Pooling
    # and Normalize (the count clamp keeps an all-padding row finite, as export() does).
    weight = op("Unsqueeze", mask, const("axis_last", [-1], np.int64))
    axis1 = const("axis1", [1], np.int64)
    summed = op("ReduceSum", op("Mul", x, weight), axis1, keepdims=0)
    count = op("Max", op("ReduceSum", weight, axis1, keepdims=0), const("tiny", 1e-9))
    pooled = op("Div", summed, count)
    norm = op("Max", op("ReduceL2", pooled, axes=[1], keepdims=1), const("eps", 1e-12))
    nodes.append(pb.node("Div", [pooled, norm], [fresh("embedding")], "normalize"))

    ids = [
        pb.value_info(name, pb.INT64, ["batch", "tokens"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    embedding = pb.value_info("embedding", pb.FLOAT, ["batch", hidden])
    proto = pb.model(
        graph_name="sentence_embedding",
        nodes=nodes,
        initializers=inits,
        inputs=ids,
        outputs=[embedding],
        ir_version=_IR_VERSION,
        opset=OPSET,
        producer="recalld",
    )
    proto.write(out)
