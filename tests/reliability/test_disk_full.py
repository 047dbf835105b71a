"""Disk full: captures fail as ``unavailable`` (retryable), nothing is corrupted, reads go on,
and writes resume once there is room again.

Two ways to run out of room: a small tmpfs the test mounts (needs root), and a file-size limit
(RLIMIT_FSIZE) set on the running daemon, which works for any user.
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from recall_client import protocol as p
from recall_client.client import RecallClient, RemoteError

from tests.support.daemon import DaemonFactory, DaemonProcess

from .harness import FIGURES, Attempt, Ledger, check_ledger, integrity, wait_index_agrees
from .writes import SOCKET_WRITES

WRITE = SOCKET_WRITES[0]


@dataclass
class SmallDisk:
    """Where the data dir goes, and how to take the room away and give it back."""

    data_dir: Path
    how: str
    ballast: Path | None = None
    pid: int | None = None

    def fill(self) -> None:
        if self.how == "tmpfs":
            assert self.ballast is not None
            with open(self.ballast, "wb") as fh:
                try:
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
        else:
            # No file of the daemon may grow past the biggest one it has now.
            assert self.pid is not None
            limit = max(f.stat().st_size for f in self.data_dir.iterdir())
            resource.prlimit(self.pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    def free(self) -> None:
        if self.how == "tmpfs":
            assert self.ballast is not None
            self.ballast.unlink()
        else:
            assert self.pid is not None
            try:
                resource.prlimit(
                    self.pid,
                    resource.RLIMIT_FSIZE,
                    (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
                )
            except ProcessLookupError:
                pass  # it has exited; the limit went with it


@pytest.fixture(params=["tmpfs", "fsize"])
def small_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SmallDisk]:
    if request.param == "fsize":
        yield SmallDisk(tmp_path / "data", "fsize")
        return
    mount = tmp_path / "small"
    mount.mkdir()
    if os.getuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the fsize variant still runs)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield SmallDisk(mount / "data", "tmpfs", ballast=mount / "ballast")
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], capture_output=True, timeout=30)


async def test_a_full_disk_fails_captures_as_unavailable_and_corrupts_nothing(
    daemon_factory: DaemonFactory,
    small_disk: SmallDisk,
) -> None:
    d: DaemonProcess = daemon_factory(extra_env={"RECALLD_DATA_DIR": str(small_disk.data_dir)})
    await d.start()
    assert d.proc is not None
    small_disk.pid = d.proc.pid
    ledger = Ledger()
    n = iter(range(10**6))

    async def capture(rc: RecallClient) -> Attempt:
        i = next(n)
        text = f"disk note {i}: the runner cache is pruned weekly"
        attempt = Attempt(WRITE, "filler", text, f"k{i}")
        reply = await rc.call(WRITE.request(attempt.text, attempt.key), WRITE.reply)
        ledger.answered(attempt, WRITE.record_id(reply))
        return attempt

    async with d.client(agent="filler", workspace="/ws/disk") as rc:
        for _ in range(30):
            await capture(rc)
        small_disk.fill()

        refused: list[RemoteError] = []
        with anyio.fail_after(60):
            while len(refused) < 3:
                try:
                    await capture(rc)
                except RemoteError as exc:
                    refused.append(exc)
        assert all(e.code == "unavailable" and e.retryable for e in refused), refused
        FIGURES[f"disk full ({small_disk.how}): writes before the refusals"] = len(ledger.acked)

        # Reads and status go on while the disk is full.
        found = await rc.call(
            p.MemorySearch(query="runner cache", mode="bm25"), p.MemorySearchResult
        )
        assert found.hits
        assert (await d.status()).state == "running"

        small_disk.free()
        for _ in range(30):
            await capture(rc)

    assert d.proc.poll() is None, d.log()
    check_ledger(small_disk.data_dir, ledger)
    assert integrity(small_disk.data_dir) == "ok"
    await wait_index_agrees(d, data_dir=small_disk.data_dir)
    assert await d.stop() == 0, d.log()
    assert integrity(small_disk.data_dir) == "ok"
    assert "Traceback" not in d.log(), d.log()[-4000:]


async def test_a_daemon_stopped_on_a_full_disk_exits_cleanly_and_rebuilds_its_index(
    daemon_factory: DaemonFactory,
    small_disk: SmallDisk,
) -> None:
    d: DaemonProcess = daemon_factory(extra_env={"RECALLD_DATA_DIR": str(small_disk.data_dir)})
    await d.start()
    assert d.proc is not None
    small_disk.pid = d.proc.pid
    async with d.client(agent="filler", workspace="/ws/disk") as rc:
        for i in range(20):
            await rc.call(p.MemoryStore(text=f"kept note {i} on the scheduler queue"), p.Stored)
    size = await wait_index_agrees(d, data_dir=small_disk.data_dir)
    small_disk.fill()
    # The shutdown snapshot cannot be written: the daemon says so and still exits cleanly.
    assert await d.stop() == 0, d.log()[-4000:]
    small_disk.free()
    assert not list(small_disk.data_dir.glob("*.tmp")), "a failed snapshot left its temp file"
    assert integrity(small_disk.data_dir) == "ok"

    await d.start()
    report = await d.status(wait_model_s=30)
    assert report.index.size == size
    assert await d.stop() == 0
