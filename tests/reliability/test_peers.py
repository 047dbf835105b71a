"""No one else gets in: the socket and data are private, and another uid is refused.

Three layers stand in another user's way: the socket directory (0700), the socket (0600) and
SO_PEERCRED in the daemon. Each is tested alone, with a second local user: to reach the
third, the test loosens the first two on its own daemon for a moment, as a misconfigured
system might, and puts them back.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from recall_client import protocol as p

from tests.support.daemon import DaemonProcess

from .harness import FIGURES

# Runs as the other user, with nothing but the standard library. The daemon judges a peer
# at accept, before any frame: the peer reads what it is told, then tries a hello anyway.
PEER = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("EACCES")
    raise SystemExit(0)
data = b""
try:
    while chunk := s.recv(65536):
        data += chunk
    s.sendall(bytes.fromhex(sys.argv[2]))
    extra = s.recv(65536)
except (BrokenPipeError, ConnectionResetError):
    extra = b""
print(data.hex(), extra.hex() or "-")
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def reachable_root() -> Iterator[Path]:
    """A daemon root other users may traverse (not list): pytest's own tmp dir is 0700."""
    root = Path(tempfile.mkdtemp(prefix="recalld-peer-", dir="/tmp"))
    root.chmod(0o711)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def peer_daemon(reachable_root: Path) -> AsyncIterator[DaemonProcess]:
    d = DaemonProcess(root=reachable_root)
    await d.start()
    try:
        yield d
    finally:
        d.kill()


def connect_as(user: tuple[int, int], python: str, socket: Path) -> list[p.Reply] | str:
    """Connect to ``socket`` as ``user`` and say hello: the replies, or "EACCES"."""
    uid, gid = user
    hello = p.frame(p.Hello(id=1, version=p.PROTOCOL_VERSION, agent="intruder", workspace="/"))
    out = subprocess.run(
        [python, "-I", "-c", PEER, str(socket), hello.hex()],
        user=uid,
        group=gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    FIGURES["peers: connections tried as another uid"] += 1
    if out.stdout.strip() == "EACCES":
        return "EACCES"
    told, extra = out.stdout.split()
    assert extra == "-", "the daemon answered a hello after refusing the peer"
    data = bytes.fromhex(told)
    replies = []
    while data:
        (size,) = p.HEADER.unpack(data[:4])
        replies.append(p.decode_reply(data[4 : 4 + size]))
        data = data[4 + size :]
    return replies


async def test_socket_and_data_are_private(peer_daemon: DaemonProcess) -> None:
    d = peer_daemon
    async with d.client() as rc:
        await rc.call(p.MemoryStore(text="private by default"), p.Stored)
    assert mode(d.socket.parent) == 0o700
    assert mode(d.socket) == 0o600
    assert mode(d.data_dir) == 0o700
    for name in ("recalld.db", "recalld.db-wal", "recalld.db-shm"):
        assert mode(d.data_dir / name) == 0o600, name
    await d.status(wait_model_s=10)
    assert await d.stop() == 0
    for name in ("index.faiss", "index.meta.json"):
        assert mode(d.data_dir / name) == 0o600, name


async def test_a_loose_socket_directory_is_tightened_at_start(reachable_root: Path) -> None:
    d = DaemonProcess(root=reachable_root)
    d.socket.parent.mkdir(mode=0o755)
    d.socket.parent.chmod(0o755)
    await d.start()
    try:
        assert mode(d.socket.parent) == 0o700
    finally:
        d.kill()


async def test_another_user_is_stopped_by_each_layer_alone(
    peer_daemon: DaemonProcess, other_user: tuple[int, int], peer_python: str
) -> None:
    d = peer_daemon
    sock_dir = d.socket.parent
    # 1. As shipped: the 0700 directory stops the peer before the socket.
    assert connect_as(other_user, peer_python, d.socket) == "EACCES"
    try:
        # 2. A traversable directory: the 0600 socket still says no.
        sock_dir.chmod(0o711)
        assert connect_as(other_user, peer_python, d.socket) == "EACCES"
        # 3. A world-writable socket too: the daemon itself refuses the uid it is shown.
        d.socket.chmod(0o666)
        replies = connect_as(other_user, peer_python, d.socket)
    finally:
        d.socket.chmod(0o600)
        sock_dir.chmod(0o700)
    assert isinstance(replies, list) and len(replies) == 1, replies
    refusal = replies[0]
    assert isinstance(refusal, p.Error) and refusal.code == "forbidden", refusal
    assert f"refused a connection from uid {other_user[0]}" in d.log()

    # The daemon's own user is served as before, and the intruder is nowhere in status.
    report = await d.status()
    assert report.state == "running"
    assert all(a.agent != "intruder" for a in report.agents)
    assert await d.stop() == 0
