"""Slow and silent clients: they cost the others nothing, and the daemon lets go of them."""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from recall_client import protocol as p
from recall_client.client import Session

from tests.support.daemon import DaemonFactory, DaemonProcess

from .harness import FIGURES, RawConnection

IDLE_S = 2.0
FRAME_S = 1.5
SEND_S = 6.0
# What one request of a well-behaved client may take while the slow ones hang on (a client
# queued behind the hog would wait SEND_S).
FAST_S = SEND_S / 2


@pytest.fixture
async def impatient_daemon(daemon_factory: DaemonFactory) -> AsyncIterator[DaemonProcess]:
    d = daemon_factory(
        extra_env={
            "RECALLD_IDLE_TIMEOUT_S": str(IDLE_S),
            "RECALLD_FRAME_TIMEOUT_S": str(FRAME_S),
            "RECALLD_SEND_TIMEOUT_S": str(SEND_S),
        }
    )
    await d.start()
    yield d
    assert "Traceback" not in d.log(), d.log()[-4000:]
    assert await d.stop() == 0


async def others_stay_fast(d: DaemonProcess, rounds: int = 10) -> float:
    """A well-behaved client stores and searches; returns its slowest request in seconds."""
    slowest = 0.0
    async with d.client(agent="polite", workspace="/ws/polite") as rc:
        for i in range(rounds):
            for req in (
                p.MemoryStore(text=f"polite note {i} about the release train"),
                p.MemorySearch(query="release train"),
            ):
                started = time.perf_counter()
                with anyio.fail_after(FAST_S * 5):
                    await rc.call(req)
                slowest = max(slowest, time.perf_counter() - started)
    return slowest


async def test_a_client_that_never_reads_its_replies_slows_no_one_and_is_cut_off(
    impatient_daemon: DaemonProcess,
) -> None:
    d = impatient_daemon
    bulky = "bulk " + "lorem ipsum dolor sit amet " * 700  # ~19 kB a record
    async with d.client(workspace="/ws/bulk") as rc:
        for i in range(20):
            await rc.call(p.MemoryStore(text=f"{i} {bulky}"), p.Stored)

    # A blocking socket with a tiny receive buffer that asks for megabytes and reads nothing.
    hog = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.connect(str(d.socket))
    hog.sendall(
        p.frame(p.Hello(id=1, version=p.PROTOCOL_VERSION, agent="hog", workspace="/ws/bulk"))
    )
    hog.sendall(
        b"".join(
            p.frame(p.MemorySearch(id=i, query="bulk lorem", limit=50, mode="bm25"))
            for i in range(2, 300)
        )
    )
    started = time.monotonic()
    slowest = await others_stay_fast(d)
    assert time.monotonic() - started < SEND_S, "the others finished only once the hog was cut"
    assert slowest < FAST_S, f"a polite request took {slowest:.2f}s while a client did not read"

    # Still not reading: the daemon gives up on the hog once a reply has waited SEND_S.
    # (Only status can tell, so it is asked until it does.)
    with anyio.fail_after(SEND_S + 15):
        while True:
            if all(a.agent != "hog" for a in (await d.status()).agents):
                break
            await anyio.sleep(0.2)
    assert time.monotonic() - started >= SEND_S * 0.9
    hog.settimeout(10)
    try:
        while await anyio.to_thread.run_sync(hog.recv, 1 << 20):
            pass  # what was buffered before the cut, then EOF
    except ConnectionResetError:
        pass  # or a reset: its unread requests were still queued when the daemon closed
    hog.close()
    FIGURES["slow clients: slowest polite request (ms)"] = round(slowest * 1000)


async def test_half_a_frame_slows_no_one_and_is_dropped_after_the_frame_timeout(
    impatient_daemon: DaemonProcess,
) -> None:
    d = impatient_daemon
    async with await RawConnection.open(d) as half:
        await half.send(p.HEADER.pack(1000) + b"\x85\xa2op")
        started = time.monotonic()
        slowest = await others_stay_fast(d, rounds=5)
        assert slowest < FAST_S
        assert await half.closed_by_peer(FRAME_S + 5)
        waited = time.monotonic() - started
    assert waited >= FRAME_S * 0.9, f"dropped after {waited:.2f}s, before the frame timeout"


async def test_idle_and_silent_connections_time_out(impatient_daemon: DaemonProcess) -> None:
    d = impatient_daemon
    idle = await RawConnection.open(d)
    mute = await RawConnection.open(d, hello=False)
    async with idle, mute:
        started = time.monotonic()
        # A connection that never says hello gets the (shorter) frame timeout.
        assert await mute.closed_by_peer(FRAME_S + 5)
        assert time.monotonic() - started >= FRAME_S * 0.9
        assert await idle.closed_by_peer(IDLE_S + 5)
        assert time.monotonic() - started >= IDLE_S * 0.9


async def test_a_reconnecting_session_outlives_the_idle_timeout(
    impatient_daemon: DaemonProcess,
) -> None:
    async with anyio.create_task_group() as tg:
        session = Session(tg, agent="shim-like", workspace="/ws/idle", path=impatient_daemon.socket)
        await session.call(p.MemoryStore(text="before the idle hang-up"), p.Stored)
        await anyio.sleep(IDLE_S + 1)
        result = await session.call(
            p.MemorySearch(query="idle hang-up", mode="bm25"), p.MemorySearchResult
        )
        assert result.hits
        await session.aclose()
        tg.cancel_scope.cancel()


async def test_a_client_waiting_on_a_slow_reply_is_not_idle(
    impatient_daemon: DaemonProcess,
) -> None:
    """The idle clock runs only while nothing is in flight: a store held up longer than the
    idle timeout (here by another process holding SQLite's write lock) is answered, and the
    connection it came on goes on serving."""
    d = impatient_daemon
    async with d.client(workspace="/ws/slow") as rc:
        await rc.call(p.MemoryStore(text="before the lock"), p.Stored)
        blocker = sqlite3.connect(d.data_dir / "recalld.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            async with anyio.create_task_group() as tg:
                started = time.monotonic()
                tg.start_soon(rc.call, p.MemoryStore(text="held behind the lock"), p.Stored)
                await anyio.sleep(IDLE_S * 1.75)
                blocker.execute("COMMIT")
        finally:
            blocker.close()
        assert time.monotonic() - started > IDLE_S
        # The same connection, past the idle timeout measured from the request: still open.
        found = await rc.call(
            p.MemorySearch(query="held behind the lock", mode="bm25"), p.MemorySearchResult
        )
        assert any("held behind" in h.text for h in found.hits)
