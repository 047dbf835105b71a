"""Reading length-prefixed frames off a connection, as many per system call as have arrived.

A client that pipelines requests sends many frames at once; reading each header and each
body with its own ``recv`` (and its own timeout scope) cost more than decoding them. The
reader takes what the socket has (at most CHUNK bytes beyond the frame it waits for), and
the server waits, under its timeouts, only when a frame is not whole in the buffer yet.
"""

from __future__ import annotations

from anyio.abc import ByteReceiveStream
from recall_client import protocol as p

__all__ = ["CHUNK", "FrameReader"]

# One receive takes at most this much: what a connection buffers beyond the frame the server
# waits for is bounded by it (the byte budget counts frames, not this read-ahead).
CHUNK = 64 * 1024


class FrameReader:
    def __init__(self, stream: ByteReceiveStream) -> None:
        self._stream = stream
        self._buf = bytearray()

    def next_size(self) -> int | None:
        """The declared body size of the next frame, if its header has arrived."""
        if len(self._buf) < p.HEADER.size:
            return None
        (size,) = p.HEADER.unpack_from(self._buf)
        return int(size)

    def has_body(self, size: int) -> bool:
        return len(self._buf) >= p.HEADER.size + size

    async def fill(self, wanted: int) -> None:
        """Receive until the buffer holds ``wanted`` bytes.

        Raises:
            anyio.EndOfStream: the peer closed first.
        """
        while len(self._buf) < wanted:
            self._buf += await self._stream.receive(max(CHUNK, wanted - len(self._buf)))

    def take_body(self, size: int) -> bytes:
        """The next frame's body (its header and body leave the buffer)."""
        end = p.HEADER.size + size
        body = bytes(self._buf[p.HEADER.size : end])
        del self._buf[:end]
        return body
