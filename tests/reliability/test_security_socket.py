"""Finding 3: another local user must not be able to take the socket over or catch a token.

The reviewer's attack: another user pre-creates the socket's directory (world-writable), the
daemon binds there, the other user swaps the socket for a listener of their own and reads
the admin token from recallctl's hello. Now the daemon refuses such a directory, every
client checks who serves the socket (SO_PEERCRED) before it sends anything, and files made
next to the socket are never opened through a planted symlink.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import anyio
import pytest
from recall_client.autostart import ensure_daemon
from recall_client.client import UntrustedSocket, connect
from recall_client.paths import data_dir

from tests.support.daemon import BIN, DaemonProcess

# Listens on a unix socket as the other user, and prints what each client sent it.
LISTENER = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(4)
print("ready", flush=True)
while True:
    conn, _ = s.accept()
    conn.settimeout(3)
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    print(data.hex() or "-", flush=True)
"""


def start_refused(d: DaemonProcess) -> tuple[int, str]:
    """Run the daemon expecting it to refuse to start: (exit code, its log)."""
    proc = subprocess.run(
        [str(BIN / "recalld")], env=d.env(), capture_output=True, text=True, timeout=60
    )
    return proc.returncode, proc.stderr


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A directory under /tmp that another user may enter (pytest's tmp dirs are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="recalld-sock-", dir="/tmp"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_socket_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    d = DaemonProcess(root=tmp_path)
    d.socket.parent.mkdir()
    d.socket.parent.chmod(0o777)
    code, log = start_refused(d)
    assert code == 1
    assert "writable by group or others" in log
    assert not d.socket.exists()


def test_a_socket_directory_of_another_user_is_refused(
    shared_root: Path, other_user: tuple[int, int]
) -> None:
    d = DaemonProcess(root=shared_root)
    d.socket.parent.mkdir()
    # Pre-created by the other user, as in the review (mode 0700 or 0777 alike).
    os.chown(d.socket.parent, *other_user)
    code, log = start_refused(d)
    assert code == 1 and f"belongs to uid {other_user[0]}" in log
    assert not d.socket.exists()


def test_a_socket_directory_inside_another_users_directory_is_refused(
    shared_root: Path, other_user: tuple[int, int]
) -> None:
    # Like /tmp/recalld-UID pre-created by someone else: they could swap the directory.
    theirs = shared_root / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, *other_user)
    d = DaemonProcess(root=theirs)
    code, log = start_refused(d)
    assert code == 1 and "could swap the socket directory" in log


async def test_clients_send_nothing_to_another_users_socket(
    shared_root: Path,
    other_user: tuple[int, int],
    peer_python: str,
) -> None:
    uid, gid = other_user
    planted = shared_root / "planted"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    sock = planted / "recalld.sock"
    # A Popen: the test reads the listener's report line by line, as it comes.
    listener = subprocess.Popen(  # noqa: ASYNC220
        [peer_python, "-I", "-c", LISTENER, str(sock)],
        user=uid,
        group=gid,
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    try:
        assert listener.stdout is not None
        assert listener.stdout.readline().strip() == "ready"
        with pytest.raises(UntrustedSocket) as refused:
            async with connect(
                agent="recallctl", workspace="/", path=sock, admin_token="the-admin-token"
            ):
                pass
        assert f"served by uid {uid}" in str(refused.value)
        received = [await anyio.to_thread.run_sync(listener.stdout.readline)]
        # recallctl says so and exits non-zero, with the admin token it could read unsent.
        out = await anyio.to_thread.run_sync(
            partial(
                subprocess.run,
                [str(BIN / "recallctl"), "--socket", str(sock), "status"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        )
        received.append(await anyio.to_thread.run_sync(listener.stdout.readline))
    finally:
        listener.kill()
        listener.wait()
        if listener.stdout is not None:
            listener.stdout.close()
    assert [r.strip() for r in received] == ["-", "-"], f"the clients sent {received!r}"
    assert out.returncode != 0 and "served by uid" in out.stderr


async def test_the_autostart_lock_is_never_opened_through_a_symlink(tmp_path: Path) -> None:
    # The lock lives in the data dir (where two shims of different environments meet).
    store = data_dir()
    store.mkdir(parents=True, mode=0o700)
    target = tmp_path / "victim-file"
    target.write_text("untouched\n")
    (store / ".autostart-lock").symlink_to(target)
    with pytest.raises(OSError):
        await ensure_daemon(tmp_path / "sock" / "recalld.sock")
    assert target.read_text() == "untouched\n"
