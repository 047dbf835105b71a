"""The walking skeleton end to end: a real daemon, a real socket, real SQLite and FAISS."""

from __future__ import annotations

import os
import sqlite3
import struct
from pathlib import Path

import anyio
import msgspec
import pytest
from anyio.abc import ByteStream, SocketStream
from recall_client import protocol as p
from recall_client.client import DaemonUnavailable, RecallClient, RemoteError, connect

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.memories import wait_embedded

pytestmark = pytest.mark.both_backends

THREE = [
    "The deploy script lives in tools/deploy.sh and needs the VPN up.",
    "Production runs PostgreSQL 16 on port 5433, not the default.",
    "Alice prefers squash merges and short commit subjects.",
]


async def store_three(rc: RecallClient) -> list[str]:
    ids: list[str] = []
    for text in THREE:
        reply = await rc.call(p.MemoryStore(text=text, tags=["t"]), p.Stored)
        ids.append(reply.record_id)
    return ids


async def test_store_then_search_finds_the_right_memory_first(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        ids = await store_three(rc)
        result = await rc.call(
            p.MemorySearch(query="which postgres port in production?", verbose=True),
            p.MemorySearchResult,
        )
    assert result.hits, "search found nothing"
    top = result.hits[0]
    assert top.id == ids[1]
    assert top.text == THREE[1]
    assert top.snippet is not None and "PostgreSQL" in top.snippet
    assert top.tags == ["t"]
    assert 0 < top.score <= 1
    assert top.ts is not None and top.ts > 0


async def test_a_search_sees_only_its_own_workspace(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(workspace="/ws/a") as a:
        await a.call(p.MemoryStore(text="workspace A uses tabs"), p.Stored)
    async with running_daemon.client(workspace="/ws/b") as b:
        result = await b.call(p.MemorySearch(query="tabs", mode="bm25"), p.MemorySearchResult)
    assert result.hits == []


async def test_identical_text_is_stored_once_per_workspace(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        first = await rc.call(p.MemoryStore(text="use ruff, not flake8"), p.Stored)
        again = await rc.call(p.MemoryStore(text="use  ruff, not flake8 "), p.Stored)
    assert again.duplicate and again.record_id == first.record_id
    async with running_daemon.client(workspace="/ws/other") as rc:
        other = await rc.call(p.MemoryStore(text="use ruff, not flake8"), p.Stored)
    assert not other.duplicate and other.record_id != first.record_id


async def test_an_idempotency_key_makes_a_retry_return_the_first_result(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        first = await rc.call(p.MemoryStore(text="first text", idempotency_key="k1"), p.Stored)
        retry = await rc.call(p.MemoryStore(text="first text", idempotency_key="k1"), p.Stored)
    assert retry.replayed and retry.record_id == first.record_id
    assert not first.replayed


async def test_concurrent_writers_are_group_committed_and_all_acknowledged(
    running_daemon: DaemonProcess,
) -> None:
    ids: list[str] = []

    async def writer(n: int) -> None:
        async with running_daemon.client(agent=f"w{n}") as rc:
            async with anyio.create_task_group() as tg:
                for i in range(50):

                    async def one(i: int = i) -> None:
                        r = await rc.call(p.MemoryStore(text=f"writer {n} note {i}"), p.Stored)
                        ids.append(r.record_id)

                    tg.start_soon(one)

    async with anyio.create_task_group() as tg:
        for n in range(8):
            tg.start_soon(writer, n)
    assert len(set(ids)) == 400
    report = await running_daemon.status()
    capture = next(a for a in report.actors if a.name == "writer")
    assert capture.processed >= 400
    assert running_daemon.sql("SELECT count(*) FROM records") == [(400,)]


async def test_bad_parameters_get_a_typed_error_and_the_connection_goes_on(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        with pytest.raises(RemoteError) as err:
            await rc.call(p.MemorySearch(query="x", limit=0))
        assert err.value.code == "invalid_request"
        assert "limit" in err.value.message
        with pytest.raises(RemoteError) as err:
            await rc.call(p.MemoryStore(text=""))
        assert err.value.code == "invalid_request"
        # A session id is one shape wherever a request names one: never empty.
        with pytest.raises(RemoteError) as err:
            await rc.call(p.MemoryStore(text="a note", session=""))
        assert err.value.code == "invalid_request"
        assert "session" in err.value.message
        # Same connection still works.
        assert isinstance(await rc.call(p.Ping()), p.Pong)


async def _raw_connection(d: DaemonProcess) -> SocketStream:
    stream = await anyio.connect_unix(d.socket)
    hello = p.Hello(id=1, version=p.PROTOCOL_VERSION, agent="raw", workspace="/ws/raw")
    await stream.send(p.frame(hello))
    return stream


async def _read_reply(stream: ByteStream) -> p.Reply | None:
    from anyio.streams.buffered import BufferedByteReceiveStream

    reader = BufferedByteReceiveStream(stream)
    try:
        with anyio.fail_after(5):
            (size,) = p.HEADER.unpack(await reader.receive_exactly(4))
            return p.decode_reply(await reader.receive_exactly(size))
    except (anyio.EndOfStream, anyio.IncompleteRead):
        return None


async def test_unknown_ops_and_garbage_do_not_take_the_daemon_down(
    running_daemon: DaemonProcess,
) -> None:
    stream = await _raw_connection(running_daemon)
    assert isinstance(await _read_reply(stream), p.Welcome)
    unknown = msgspec.msgpack.encode({"op": "drop_tables", "id": 7})
    await stream.send(struct.pack(">I", len(unknown)) + unknown)
    reply = await _read_reply(stream)
    assert isinstance(reply, p.Error) and reply.code == "invalid_request" and reply.id == 7
    await stream.send(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")  # not msgpack
    reply = await _read_reply(stream)
    assert isinstance(reply, p.Error) and reply.code == "invalid_request"
    await stream.aclose()

    big = await _raw_connection(running_daemon)
    assert isinstance(await _read_reply(big), p.Welcome)
    await big.send(struct.pack(">I", p.MAX_FRAME + 1))
    reply = await _read_reply(big)
    assert isinstance(reply, p.Error) and "limit" in reply.message
    await big.aclose()

    async with running_daemon.client() as rc:
        assert isinstance(await rc.call(p.Ping()), p.Pong)


async def test_a_burst_of_writes_is_answered_whole_after_the_client_stops_sending(
    running_daemon: DaemonProcess,
) -> None:
    """Captures pipelined on one connection are answered by the writer after each COMMIT,
    several replies to a write: the connection stays open for them after the client's last
    frame, and a refused write gets its typed error beside the others."""
    from anyio.streams.buffered import BufferedByteReceiveStream

    stream = await _raw_connection(running_daemon)
    burst = [p.MemoryStore(id=10 + i, text=f"burst note {i}") for i in range(100)]
    for req in burst[::10]:
        req.supersedes = ["mem_nothing"]  # refused (not_found), among the writes beside it
    await stream.send(b"".join(p.frame(req) for req in burst))
    await stream.send_eof()
    reader = BufferedByteReceiveStream(stream)
    replies: dict[int, p.Reply] = {}
    with anyio.fail_after(30):
        while len(replies) < len(burst) + 1:
            (size,) = p.HEADER.unpack(await reader.receive_exactly(4))
            reply = p.decode_reply(await reader.receive_exactly(size))
            replies[reply.id] = reply
    await stream.aclose()
    assert isinstance(replies.pop(1), p.Welcome)
    for req in burst:
        reply = replies[req.id]
        if req.supersedes:
            assert isinstance(reply, p.Error) and reply.code == "not_found"
        else:
            assert isinstance(reply, p.Stored)
    assert running_daemon.sql("SELECT count(*) FROM records WHERE text LIKE ?", "burst note%") == [
        (90,)
    ]


async def test_the_first_frame_must_be_a_hello(running_daemon: DaemonProcess) -> None:
    stream = await anyio.connect_unix(running_daemon.socket)
    await stream.send(p.frame(p.Ping(id=3)))
    reply = await _read_reply(stream)
    assert isinstance(reply, p.Error) and "hello" in reply.message
    await stream.aclose()


async def test_a_wrong_protocol_version_is_refused_with_a_reason(
    running_daemon: DaemonProcess,
) -> None:
    stream = await anyio.connect_unix(running_daemon.socket)
    await stream.send(p.frame(p.Hello(id=1, version=999, agent="old")))
    reply = await _read_reply(stream)
    assert isinstance(reply, p.Error) and "version" in reply.message
    await stream.aclose()


async def test_the_welcome_carries_the_peer_credentials(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(agent="who") as rc:
        assert rc.welcome is not None
        assert rc.welcome.uid == os.getuid()
        assert rc.welcome.pid == os.getpid()
        assert rc.welcome.agent == "who"


@pytest.mark.sqlite_only
async def test_socket_and_data_are_private(running_daemon: DaemonProcess) -> None:
    assert running_daemon.socket.stat().st_mode & 0o777 == 0o600
    assert running_daemon.socket.parent.stat().st_mode & 0o777 == 0o700
    assert (running_daemon.data_dir / "recalld.db").stat().st_mode & 0o077 == 0


async def test_status_shows_the_four_actors_the_model_and_the_records(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        await store_three(rc)
        await rc.call(p.MemorySearch(query="deploy"), p.MemorySearchResult)
    report = await running_daemon.status(wait_model_s=10)
    assert report.state == "running"
    assert {a.name: a.state for a in report.actors} == {
        "writer": "running",
        "evaluation": "running",
        "embedding": "running",
        "search": "running",
    }
    assert report.model.state == "ready"
    assert report.semantic_search
    assert report.records["memory"]["total"] == 3
    assert report.search_latency_ms.p50 is not None
    assert report.uptime_s > 0
    assert any(a.agent == "tester" for a in report.agents)


async def test_sigterm_drains_snapshots_and_exits_zero(daemon_factory: DaemonFactory) -> None:
    d = daemon_factory()
    await d.start()
    async with d.client() as rc:
        await store_three(rc)
    await d.status(wait_model_s=10)
    assert await d.stop() == 0
    assert (d.data_dir / "index.faiss").exists()
    assert "recalld stopped" in d.log()


async def test_restart_keeps_records_and_the_vector_index(daemon_factory: DaemonFactory) -> None:
    d = daemon_factory()
    await d.start()
    async with d.client() as rc:
        ids = await store_three(rc)
    await wait_embedded(d, 3)
    assert await d.stop() == 0

    await d.start()
    report = await d.status(wait_model_s=10)
    assert report.index.size == 3
    assert report.index.rebuilt_reason is None, "snapshot should have been reused"
    async with d.client() as rc:
        result = await rc.call(p.MemorySearch(query="squash merges"), p.MemorySearchResult)
    assert result.semantic_used
    assert result.hits[0].id == ids[2]


async def test_after_kill_9_the_index_is_made_whole_from_sqlite(
    daemon_factory: DaemonFactory,
) -> None:
    d = daemon_factory()
    await d.start()
    async with d.client() as rc:
        await store_three(rc)
    await wait_embedded(d, 3)
    d.kill()  # no snapshot written

    await d.start()
    report = await d.status(wait_model_s=10)
    assert report.index.size == 3
    assert report.index.rebuilt_reason == "no snapshot"
    assert report.records["memory"]["total"] == 3


async def test_a_second_daemon_on_the_same_socket_refuses_to_start(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    from tests.support.daemon import BIN

    # Another data dir, so only the socket is shared (tests/daemon/test_one_daemon.py: the
    # data dir).
    env = dict(running_daemon.env(), RECALLD_DATA_DIR=str(tmp_path / "other-data"))
    with anyio.fail_after(30):
        out = await anyio.run_process([str(BIN / "recalld")], env=env, check=False)
    assert out.returncode == 1
    assert b"already answers" in out.stderr


async def test_without_a_daemon_the_client_says_so_clearly(tmp_path: Path) -> None:
    with pytest.raises(DaemonUnavailable) as err:
        async with connect(agent="x", path=tmp_path / "nothing.sock"):
            pass
    assert "not answering" in str(err.value)


async def test_without_a_model_search_is_lexical_and_says_why(
    daemon_factory: DaemonFactory,
) -> None:
    d = daemon_factory(extra_env={"RECALLD_MODEL_PATH": "/nonexistent/model"}, embedder="minilm")
    await d.start()
    report = await d.status(wait_model_s=60)
    assert report.model.state == "failed"
    assert report.model.reason
    assert not report.semantic_search
    async with d.client() as rc:
        await store_three(rc)
        result = await rc.call(p.MemorySearch(query="deploy script"), p.MemorySearchResult)
    assert not result.semantic_used
    assert result.hits[0].text == THREE[0]
    assert await d.stop() == 0


async def test_the_daemon_merges_the_text_index_s_segments_at_start(
    daemon_factory: DaemonFactory,
) -> None:
    animals = ["heron", "otter", "badger", "marten", "lynx", "stoat"]
    d = daemon_factory()
    await d.start()
    async with d.client() as rc:
        for animal in animals:  # one at a time: a batch, and so a segment, each
            await rc.call(p.MemoryStore(text=f"the {animal} came to the feeder"), p.Stored)
    assert await d.stop() == 0

    def segments() -> int:
        with sqlite3.connect(d.data_dir / "recalld.db") as conn:
            return int(
                conn.execute("SELECT count(DISTINCT segid) FROM records_fts_idx").fetchone()[0]
            )

    assert segments() > 1
    await d.start()
    with anyio.fail_after(20):
        while segments() > 1:  # noqa: ASYNC110  (another process's file: no event to wait on)
            await anyio.sleep(0.1)
    # Every record is still found by its own word.
    async with d.client() as rc:
        for animal in animals:
            found = await rc.call(
                p.MemorySearch(query=animal, mode="keyword", limit=10), p.MemorySearchResult
            )
            assert [h.text for h in found.hits] == [f"the {animal} came to the feeder"]
