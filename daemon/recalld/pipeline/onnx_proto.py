"""The few ONNX protobuf messages the embedding graph needs, written as wire-format bytes.

``onnx_graph`` lays out one fixed graph: nodes with int, float and int-list attributes,
float32 and int64 initializers, and typed inputs and outputs. The ``onnx`` package (with
protobuf, ~35 MB installed) would be needed only to serialise that, once, so the messages
are encoded here instead, following ``onnx/onnx.proto``: every field is a varint, a 32-bit
float or a length-delimited run of bytes, and fields go out in field-number order, as
protobuf's own serialiser writes them (the result is byte for byte what ``onnx.save`` wrote).
A message is kept as a list of chunks, so the weights are never copied into one big buffer:
:meth:`Message.write` hands the arrays' memory straight to the file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

__all__ = ["FLOAT", "INT64", "Message", "model", "node", "tensor", "value_info"]

# TensorProto.DataType
FLOAT = 1
INT64 = 7
_DTYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.int64): INT64}

# AttributeProto.AttributeType
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7

# Wire types
_VARINT, _LEN, _FIXED32 = 0, 2, 5

_Attr = int | float | Sequence[int]


def _varint(value: int) -> bytes:
    # Negative int64s go out as their 64-bit two's complement (ten bytes), as protobuf does.
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Message:
    """One protobuf message being written: its encoded fields as chunks, joined only on write."""

    def __init__(self) -> None:
        self.chunks: list[bytes | memoryview] = []
        self.size = 0

    def _put(self, chunk: bytes | memoryview) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)

    def varint(self, field: int, value: int) -> Message:
        self._put(_varint(field << 3 | _VARINT) + _varint(value))
        return self

    def float32(self, field: int, value: float) -> Message:
        self._put(_varint(field << 3 | _FIXED32) + struct.pack("<f", value))
        return self

    def bytes(self, field: int, data: bytes | memoryview) -> Message:
        self._put(_varint(field << 3 | _LEN) + _varint(len(data)))
        self._put(data)
        return self

    def string(self, field: int, text: str) -> Message:
        return self.bytes(field, text.encode())

    def message(self, field: int, sub: Message) -> Message:
        self._put(_varint(field << 3 | _LEN) + _varint(sub.size))
        self.chunks.extend(sub.chunks)
        self.size += sub.size
        return self

    def messages(self, field: int, subs: Iterable[Message]) -> Message:
        for sub in subs:
            self.message(field, sub)
        return self

    def write(self, path: Path) -> None:
        """Write the message to ``path`` (aside, then renamed: a crash leaves no half file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        with tmp.open("wb") as f:
            f.writelines(self.chunks)
        os.replace(tmp, path)


def tensor(name: str, array: np.ndarray) -> Message:
    """A TensorProto holding ``array`` (float32 or int64) as raw little-endian data.

    Raises:
        ValueError: another dtype.
    """
    if array.dtype not in _DTYPES:
        raise ValueError(f"{name}: no ONNX type for {array.dtype}")
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    msg = Message()
    for dim in data.shape:
        msg.varint(1, dim)  # dims
    msg.varint(2, _DTYPES[array.dtype])  # data_type
    msg.string(8, name)
    return msg.bytes(9, data.data.cast("B"))  # raw_data


def _attribute(name: str, value: _Attr) -> Message:
    msg = Message().string(1, name)
    if isinstance(value, float):
        return msg.float32(2, value).varint(20, _ATTR_FLOAT)
    if isinstance(value, int):
        return msg.varint(3, value).varint(20, _ATTR_INT)
    for item in value:
        msg.varint(8, item)  # ints, unpacked as proto2 declares them
    return msg.varint(20, _ATTR_INTS)


def node(
    op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: str, **attrs: _Attr
) -> Message:
    """A NodeProto of the default domain; attributes in name order, as onnx.helper sorts them."""
    msg = Message()
    for i in inputs:
        msg.string(1, i)
    for o in outputs:
        msg.string(2, o)
    msg.string(3, name).string(4, op_type)
    return msg.messages(5, (_attribute(k, v) for k, v in sorted(attrs.items())))


def value_info(name: str, elem_type: int, shape: Sequence[int | str]) -> Message:
    """A ValueInfoProto for a tensor; a str dimension is symbolic (dim_param)."""
    dims = Message()
    for dim in shape:
        d = Message()
        dims.message(1, d.string(2, dim) if isinstance(dim, str) else d.varint(1, dim))
    tensor_type = Message().varint(1, elem_type).message(2, dims)
    return Message().string(1, name).message(2, Message().message(1, tensor_type))


def model(
    *,
    graph_name: str,
    nodes: Sequence[Message],
    initializers: Sequence[Message],
    inputs: Sequence[Message],
    outputs: Sequence[Message],
    ir_version: int,
    opset: int,
    producer: str,
) -> Message:
    """A ModelProto: one graph, the default domain's opset ``opset``."""
    graph = Message().messages(1, nodes).string(2, graph_name).messages(5, initializers)
    graph.messages(11, inputs).messages(12, outputs)
    opset_id = Message().string(1, "").varint(2, opset)
    msg = Message().varint(1, ir_version).string(2, producer).message(7, graph)
    return msg.message(8, opset_id)
