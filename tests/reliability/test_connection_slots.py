"""Idle sockets must not lock the other clients out.

The reviewer's attack: 1,030 sockets that never say hello (or say it and then idle) took
every one of the 1,024 slots, for 30 s or 15 min, and every client was refused. Now one
process holds at most its share of the slots, and when they run short all the same a
newcomer gets one by closing a connection that has not said hello within a second or two,
else the longest idle one, of the process holding the most. Here the limits are small and
the floods are real sockets held by separate processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, contextmanager

import anyio
import pytest
from recall_client import protocol as p

from tests.support.daemon import DaemonFactory, DaemonProcess

# Opens COUNT sockets to PATH and holds them; with "hello" each says hello and reads its
# reply. Prints the replies' kinds, then, for every line read on stdin, which sockets
# (by index) the daemon has closed since.
FLOODER = r"""
import json, socket, struct, sys
import msgspec
from recall_client import protocol as p

path, count, hello = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "hello"

def reply(s):
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
        chunk = s.recv(65536)
        if not chunk:
            return "closed"
        data += chunk
    r = msgspec.msgpack.decode(data[4:], type=p.Replies)
    return f"error:{r.code}" if isinstance(r, p.Error) else type(r).__name__

def closed(s):
    s.setblocking(False)  # with a timeout set, recv would wait for data
    try:
        while True:
            if not s.recv(65536, socket.MSG_DONTWAIT):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True

socks, kinds = [], []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(20)
    if hello:
        try:
            s.sendall(p.frame(p.Hello(id=1, version=p.PROTOCOL_VERSION, agent="flood")))
        except OSError:
            pass  # refused at once: its reply is read below all the same
        kinds.append(reply(s))
    socks.append(s)
print(json.dumps(kinds), flush=True)
for _ in sys.stdin:
    print(json.dumps([i for i, s in enumerate(socks) if closed(s)]), flush=True)
"""

# Connects as a client of its own (another process), pings, and prints what it got.
NEWCOMER = r"""
import sys, anyio
from recall_client import protocol as p
from recall_client.client import RemoteError, connect

async def main():
    try:
        async with connect(agent="newcomer", workspace="/ws/new", path=sys.argv[1]) as rc:
            print(type(await rc.call(p.Ping())).__name__)
    except RemoteError as exc:
        print(f"error:{exc.code}")

anyio.run(main)
"""


class Flooder:
    """A separate process holding sockets to the daemon."""

    def __init__(self, d: DaemonProcess, count: int, *, hello: bool) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FLOODER, str(d.socket), str(count), "hello" if hello else ""],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.kinds: list[str] = []

    async def started(self) -> list[str]:
        """Once every socket is open (and has its reply, with hello): the replies' kinds."""
        self.kinds = json.loads(await self._line())
        return self.kinds

    async def closed(self, expected: list[int], within_s: float = 10.0) -> list[int]:
        """Indexes of the sockets the daemon has closed, once they are ``expected`` (a
        connection closed to make room is closed by its own task, a moment after the
        newcomer is let in), or as they are after ``within_s``."""
        assert self.proc.stdin is not None
        until = anyio.current_time() + within_s
        while True:
            self.proc.stdin.write("check\n")
            self.proc.stdin.flush()
            found: list[int] = json.loads(await self._line())
            if found == expected or anyio.current_time() >= until:
                return found
            await anyio.sleep(0.1)

    async def _line(self) -> str:
        assert self.proc.stdout is not None
        with anyio.fail_after(60):
            line = await anyio.to_thread.run_sync(self.proc.stdout.readline)
        assert line, f"the flooder died (exit {self.proc.poll()})"
        return line

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@contextmanager
def flooding(d: DaemonProcess, count: int, *, hello: bool) -> Iterator[Flooder]:
    flooder = Flooder(d, count, hello=hello)
    try:
        yield flooder
    finally:
        flooder.stop()


async def newcomer(d: DaemonProcess) -> str:
    """What a client in a process of its own gets for a ping."""
    out = await anyio.run_process([sys.executable, "-c", NEWCOMER, str(d.socket)], check=False)
    return out.stdout.decode().strip() or out.stderr.decode()[-2000:]


async def slotted_daemon(
    daemon_factory: DaemonFactory, total: int, per_process: int
) -> DaemonProcess:
    d = daemon_factory(
        extra_env={
            "RECALLD_MAX_CONNECTIONS": str(total),
            "RECALLD_MAX_CONNECTIONS_PER_PROCESS": str(per_process),
            "RECALLD_HELLO_GRACE_S": str(GRACE_S),
        }
    )
    await d.start()
    return d


GRACE_S = 0.5


@pytest.fixture
async def exits() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as stack:
        yield stack


async def test_one_process_flooding_gets_its_share_and_the_others_get_in(
    daemon_factory: DaemonFactory,
) -> None:
    d = await slotted_daemon(daemon_factory, total=8, per_process=4)
    with flooding(d, 12, hello=True) as flood:
        kinds = await flood.started()
        # Its share, then its own excess refused (busy, and closed).
        assert kinds == ["Welcome"] * 4 + ["error:busy"] * 8, kinds
        assert await newcomer(d) == "Pong"
        async with d.client(agent="polite", workspace="/ws/polite") as rc:
            await rc.call(p.MemoryStore(text="the polite client got in"), p.Stored)
            found = await rc.call(p.MemorySearch(query="polite client"), p.MemorySearchResult)
            assert found.hits
        # The flooder's sockets the daemon closed are its excess ones, and only those.
        assert await flood.closed(excess := list(range(4, 12))) == excess
    assert "Traceback" not in d.log()
    assert await d.stop() == 0


async def test_when_slots_run_short_the_silent_then_the_longest_idle_make_room(
    daemon_factory: DaemonFactory, exits: AsyncExitStack
) -> None:
    d = await slotted_daemon(daemon_factory, total=6, per_process=3)
    first = await exits.enter_async_context(d.client(agent="first", workspace="/ws/first"))
    await first.call(p.MemoryStore(text="the first client holds a connection"), p.Stored)
    mute = exits.enter_context(flooding(d, 2, hello=False))
    assert await mute.started() == []
    idle = exits.enter_context(flooding(d, 3, hello=True))
    assert await idle.started() == ["Welcome"] * 3
    # Every slot is taken. Past the grace, the sockets that never said hello go first...
    await anyio.sleep(GRACE_S * 3)
    await first.call(p.MemorySearch(query="first client"), p.MemorySearchResult)
    second = await exits.enter_async_context(d.client(agent="second", workspace="/ws/2"))
    third = await exits.enter_async_context(d.client(agent="third", workspace="/ws/3"))
    assert await mute.closed([0, 1]) == [0, 1]
    assert await idle.closed([], within_s=0) == []
    # ...then the longest idle of the process holding the most: the flooder's first.
    assert await newcomer(d) == "Pong"
    assert await idle.closed([0]) == [0]
    for rc in (first, second, third):
        await rc.call(p.Ping(), p.Pong)
    await exits.aclose()
    assert "Traceback" not in d.log()
    assert await d.stop() == 0
