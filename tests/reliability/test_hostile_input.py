"""Hostile frames: the daemon stays up, answers with typed errors, and a connection that is
open alongside never notices.

Each test sends generated frames on fresh connections while a bystander connection, opened
before the first of them, must keep answering pings. Example counts are bounded so the whole
file runs in well under a minute.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator, Iterator
from typing import Any, get_args

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recall_client import protocol as p

from tests.support.daemon import DaemonFactory, DaemonProcess

from .harness import FIGURES, RawConnection

ERROR_CODES = set(get_args(p.ErrorCode))
# Every request the protocol knows: its op tag and its field names.
OPS: dict[str, tuple[str, ...]] = {
    cls.__struct_config__.tag: tuple(f.name for f in msgspec.structs.fields(cls))
    for cls in get_args(p.Requests)
}


def examples(n: int) -> settings:
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )


class Bystander:
    """A plain blocking connection, opened before the hostile ones, that must keep working."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.ids = 1
        self._call(
            p.Hello(id=1, version=p.PROTOCOL_VERSION, agent="bystander", workspace="/ws/bystander"),
            p.Welcome,
        )

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the daemon closed the bystander's connection"
            data += chunk
        return data

    def _call(self, req: p.Request, reply_type: type[p.Reply]) -> None:
        self.sock.sendall(p.frame(req))
        (size,) = p.HEADER.unpack(self._exactly(4))
        reply = p.decode_reply(self._exactly(size))
        assert isinstance(reply, reply_type) and reply.id == req.id, reply

    def ping(self) -> None:
        self.ids += 1
        self._call(p.Ping(id=self.ids), p.Pong)


@pytest.fixture
async def hostile_daemon(daemon_factory: DaemonFactory) -> AsyncIterator[DaemonProcess]:
    # A short frame timeout: a frame cut short is given up on quickly.
    d = daemon_factory(extra_env={"RECALLD_FRAME_TIMEOUT_S": "1"})
    await d.start()
    yield d
    assert d.proc is not None and d.proc.poll() is None, f"the daemon died:\n{d.log()}"
    # Any exception that reached a handler's catch-all is logged with a traceback.
    assert "Traceback" not in d.log(), d.log()[-4000:]
    assert await d.stop() == 0


@pytest.fixture
def bystander(hostile_daemon: DaemonProcess) -> Iterator[Bystander]:
    b = Bystander(str(hostile_daemon.socket))
    yield b
    b.ping()
    b.sock.close()


def check_typed(reply: p.Reply | None) -> None:
    """A reply to hostile input is a typed error (never ``internal``) or a normal answer."""
    if isinstance(reply, p.Error):
        assert reply.code in ERROR_CODES and reply.code != "internal", reply
        assert len(reply.message) < 2_000, "a hostile frame was echoed back at length"


async def send_and_read(d: DaemonProcess, data: bytes, *, hello: bool = True) -> list[p.Reply]:
    """Send ``data`` then end the stream; return every reply until the daemon hangs up."""
    FIGURES["hostile: frames tried"] += 1
    async with await RawConnection.open(d, hello=hello) as conn:
        await conn.send(data)
        await conn.stream.send_eof()
        replies = []
        while (reply := await conn.reply()) is not None:
            check_typed(reply)
            replies.append(reply)
    return replies


def framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=50)
    | st.binary(max_size=50),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def requests_with_wrong_fields(draw: st.DrawFn) -> tuple[int, bytes]:
    """A known op whose fields hold anything at all (often the wrong type)."""
    op = draw(st.sampled_from(sorted(OPS)))
    rid = draw(st.integers(0, 2**53))
    fields = draw(
        st.dictionaries(st.sampled_from(OPS[op]) | st.text(max_size=12), msgpack_values, max_size=5)
    )
    fields = {k: v for k, v in fields.items() if k not in ("op", "id")}
    return rid, msgspec.msgpack.encode({"op": op, "id": rid, **fields})


valid_requests = st.one_of(
    st.builds(p.Ping, id=st.integers(0, 1000)),
    st.builds(p.MemoryStore, id=st.integers(0, 1000), text=st.text(min_size=1, max_size=300)),
    st.builds(p.MemorySearch, id=st.integers(0, 1000), query=st.text(min_size=1, max_size=100)),
)


@examples(150)
@given(data=st.binary(min_size=1, max_size=4096))
async def test_random_bytes_get_typed_errors(
    hostile_daemon: DaemonProcess, bystander: Bystander, data: bytes
) -> None:
    await send_and_read(hostile_daemon, data)
    bystander.ping()


@examples(150)
@given(body=st.binary(max_size=4096))
async def test_framed_garbage_is_refused_and_only_unparseable_frames_close_the_connection(
    hostile_daemon: DaemonProcess, bystander: Bystander, body: bytes
) -> None:
    FIGURES["hostile: frames tried"] += 1
    async with await RawConnection.open(hostile_daemon) as conn:
        await conn.send(framed(body) + p.frame(p.Ping(id=99)))
        reply = await conn.reply()
        check_typed(reply)
        assert isinstance(reply, p.Error) and reply.code == "invalid_request", reply
        after = await conn.reply()
        if "not valid msgpack" in reply.message:
            assert after is None, "an unparseable frame must end its connection"
        else:
            assert isinstance(after, p.Pong) and after.id == 99, after
    bystander.ping()


@examples(80)
@given(req=valid_requests, cut=st.floats(0, 1, exclude_max=True))
async def test_a_truncated_frame_ends_only_its_own_connection(
    hostile_daemon: DaemonProcess, bystander: Bystander, req: p.Request, cut: float
) -> None:
    data = p.frame(req)
    replies = await send_and_read(hostile_daemon, data[: int(len(data) * cut)])
    assert replies == []
    bystander.ping()


@examples(30)
@given(size=st.integers(p.MAX_FRAME + 1, 2**32 - 1), tail=st.binary(max_size=64))
async def test_an_oversize_frame_is_refused_before_it_is_read(
    hostile_daemon: DaemonProcess, bystander: Bystander, size: int, tail: bytes
) -> None:
    replies = await send_and_read(hostile_daemon, struct.pack(">I", size) + tail)
    assert len(replies) == 1 and isinstance(replies[0], p.Error)
    assert "limit" in replies[0].message
    bystander.ping()


@examples(250)
@given(case=requests_with_wrong_fields())
async def test_wrong_types_and_unknown_fields_get_invalid_request_with_the_id(
    hostile_daemon: DaemonProcess, bystander: Bystander, case: tuple[int, bytes]
) -> None:
    rid, body = case
    replies = await send_and_read(hostile_daemon, framed(body))
    assert len(replies) == 1
    reply = replies[0]
    assert reply.id == rid
    if isinstance(reply, p.Error) and reply.code not in ("invalid_request", "busy", "unavailable"):
        # Any other error is one a well-formed request may earn (an unknown id is not_found):
        # the generated fields happened to be valid, so the body must decode as a request.
        assert isinstance(p.decode_request(body), p.Request), reply
    bystander.ping()


@examples(60)
@given(op=st.text(max_size=200).filter(lambda s: s not in OPS), rid=st.integers(0, 2**53))
async def test_unknown_ops_get_invalid_request(
    hostile_daemon: DaemonProcess, bystander: Bystander, op: str, rid: int
) -> None:
    body = msgspec.msgpack.encode({"op": op, "id": rid})
    replies = await send_and_read(hostile_daemon, framed(body))
    assert len(replies) == 1 and isinstance(replies[0], p.Error)
    assert replies[0].code == "invalid_request" and replies[0].id == rid
    bystander.ping()


@examples(12)
@given(
    where=st.sampled_from(["text", "query", "agent", "tags", "idempotency_key", "op", "key"]),
    size=st.integers(100_001, 1_400_000),
)
async def test_huge_strings_are_refused_without_being_echoed(
    hostile_daemon: DaemonProcess, bystander: Bystander, where: str, size: int
) -> None:
    huge = "x" * size
    msg: dict[str, Any] = {"op": "memory_store", "id": 5, "text": "ok"}
    if where == "query":
        msg = {"op": "memory_search", "id": 5, "query": huge}
    elif where == "agent":
        msg = {"op": "hello", "id": 5, "version": p.PROTOCOL_VERSION, "agent": huge}
    elif where == "tags":
        msg["tags"] = [huge]
    elif where == "op":
        msg["op"] = huge
    elif where == "key":
        msg[huge] = 1
    else:
        msg[where] = huge
    replies = await send_and_read(hostile_daemon, framed(msgspec.msgpack.encode(msg)))
    assert len(replies) == 1 and isinstance(replies[0], p.Error)
    assert replies[0].code == "invalid_request"
    bystander.ping()


@examples(40)
@given(
    depth=st.integers(1, 300_000),
    kind=st.sampled_from([b"\x91", b"\x81\xa1k"]),
    first=st.booleans(),
)
async def test_deep_nesting_is_refused_not_recursed_into(
    hostile_daemon: DaemonProcess, bystander: Bystander, depth: int, kind: bytes, first: bool
) -> None:
    # depth nested one-element arrays (or one-key maps) around a nil.
    deep = kind * depth + b"\xc0"
    op = msgspec.msgpack.encode("op") + msgspec.msgpack.encode("memory_store")
    rid = msgspec.msgpack.encode("id") + msgspec.msgpack.encode(7)
    value = msgspec.msgpack.encode("text") + deep
    body = b"\x83" + (value + op + rid if first else op + rid + value)
    replies = await send_and_read(hostile_daemon, framed(body))
    assert len(replies) == 1 and isinstance(replies[0], p.Error)
    assert replies[0].code == "invalid_request"
    bystander.ping()


@examples(60)
@given(
    bad=st.binary(min_size=1, max_size=30).filter(lambda b: not _is_utf8(b)),
    where=st.sampled_from(["op", "text", "key"]),
)
async def test_invalid_utf8_is_refused(
    hostile_daemon: DaemonProcess, bystander: Bystander, bad: bytes, where: str
) -> None:
    raw_str = b"\xd9" + bytes([len(bad)]) + bad  # msgpack str8 holding the bad bytes
    enc = msgspec.msgpack.encode
    parts = {
        "op": enc("op") + raw_str + enc("id") + enc(3) + enc("text") + enc("t"),
        "text": enc("op") + enc("memory_store") + enc("id") + enc(3) + enc("text") + raw_str,
        "key": enc("op") + enc("memory_store") + enc("id") + enc(3) + raw_str + enc("t"),
    }
    replies = await send_and_read(hostile_daemon, framed(b"\x83" + parts[where]))
    assert len(replies) == 1 and isinstance(replies[0], p.Error)
    assert replies[0].code == "invalid_request"
    bystander.ping()


@examples(60)
@given(case=requests_with_wrong_fields())
async def test_a_hostile_first_frame_is_refused_and_closes_the_connection(
    hostile_daemon: DaemonProcess, bystander: Bystander, case: tuple[int, bytes]
) -> None:
    _rid, body = case
    replies = await send_and_read(hostile_daemon, framed(body), hello=False)
    assert len(replies) <= 1
    bystander.ping()


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
