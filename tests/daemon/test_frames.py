"""The daemon's frame reader: whole frames out of whatever chunks the socket delivers."""

from __future__ import annotations

import anyio
import pytest
from anyio.abc import ByteReceiveStream
from recall_client import protocol as p
from recalld.edge.frames import CHUNK, FrameReader


class Chunks(ByteReceiveStream):
    """A peer that delivers exactly these chunks, then closes."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.asked: list[int] = []

    async def receive(self, max_bytes: int = 65536) -> bytes:
        self.asked.append(max_bytes)
        if not self.chunks:
            raise anyio.EndOfStream
        chunk = self.chunks.pop(0)
        assert len(chunk) <= max_bytes
        return chunk

    async def aclose(self) -> None:
        self.chunks = []


async def frames_of(reader: FrameReader) -> list[bytes]:
    out: list[bytes] = []
    while True:
        size = reader.next_size()
        if size is None:
            try:
                await reader.fill(p.HEADER.size)
            except anyio.EndOfStream:
                return out
            size = reader.next_size()
            assert size is not None
        if not reader.has_body(size):
            await reader.fill(p.HEADER.size + size)
        out.append(reader.take_body(size))


def framed(*bodies: bytes) -> bytes:
    return b"".join(p.HEADER.pack(len(b)) + b for b in bodies)


async def test_many_frames_in_one_chunk_take_one_receive() -> None:
    bodies = [f"frame {i}".encode() for i in range(50)]
    peer = Chunks([framed(*bodies)])
    assert await frames_of(FrameReader(peer)) == bodies
    # One receive for all fifty, one more that sees the end.
    assert len(peer.asked) == 2


async def test_frames_split_anywhere_come_out_whole() -> None:
    bodies = [b"a" * 10, b"", b"b" * 3000, b"c"]
    data = framed(*bodies)
    for cut in (1, 3, 4, 5, 13, 2000):
        chunks = [data[i : i + cut] for i in range(0, len(data), cut)]
        assert await frames_of(FrameReader(Chunks(chunks))) == bodies, cut


async def test_a_peer_closing_inside_a_frame_is_an_end_not_a_frame() -> None:
    data = framed(b"whole", b"cut short")[:-3]
    reader = FrameReader(Chunks([data]))
    await reader.fill(p.HEADER.size)
    assert reader.next_size() == 5 and reader.has_body(5)
    assert reader.take_body(5) == b"whole"
    size = reader.next_size()
    assert size == 9 and not reader.has_body(size)
    with pytest.raises(anyio.EndOfStream):
        await reader.fill(p.HEADER.size + size)


async def test_read_ahead_is_bounded_by_the_chunk_size() -> None:
    peer = Chunks([framed(b"x" * 10)])
    await FrameReader(peer).fill(p.HEADER.size)
    assert peer.asked == [CHUNK]
