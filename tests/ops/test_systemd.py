"""systemd integration: the units as installed, socket activation, sd_notify and the watchdog.

No systemd runs as PID 1 here; each piece is exercised with the tool systemd ships for it:
``systemd-analyze --user verify`` on the installed units, ``systemd-socket-activate`` for the
passed socket, and a datagram socket of the test's own as NOTIFY_SOCKET.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from recall_client import protocol as p
from recall_client import running
from recall_client.client import connect
from recall_client.launch import start_daemon
from recall_client.spool import Spool, SpooledCapture

from tests.support.daemon import BIN, REPO, DaemonFactory, DaemonProcess
from tests.support.sdnotify import NotifyListener, start_with_notify

INSTALLER = REPO / "scripts" / "install-user-service"


def install(home: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installer for a user whose home is ``home`` (units under its ~/.config)."""
    env = dict(
        os.environ,
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
    )
    env.pop("XDG_CACHE_HOME", None)
    env.pop("XDG_STATE_HOME", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([str(INSTALLER)], env=env, capture_output=True, text=True, timeout=120)


def test_the_installer_fills_in_paths_and_says_what_to_do_without_systemd(tmp_path: Path) -> None:
    out = install(tmp_path)
    assert out.returncode == 0, out.stderr
    unit_dir = tmp_path / ".config" / "systemd" / "user"
    service = (unit_dir / "recalld.service").read_text()
    socket_unit = (unit_dir / "recalld.socket").read_text()
    assert "@RECALLD_" not in service + socket_unit
    assert f'ExecStart="{REPO}/.venv/bin/recalld"' in service
    data_dir = tmp_path / ".local" / "share" / "recalld"
    cache_dir = tmp_path / ".cache" / "recalld" / "models"
    spool_dir = tmp_path / ".local" / "state" / "recalld" / "spool"
    token_dir = tmp_path / ".config" / "recalld"
    assert f'ReadWritePaths="{data_dir}" "{cache_dir}" "{spool_dir}" "{token_dir}"' in service
    assert token_dir.stat().st_mode & 0o777 == 0o700
    assert data_dir.stat().st_mode & 0o777 == 0o700
    # No user manager answers in this environment: the installer says what to run.
    assert "systemctl --user enable --now recalld.socket" in out.stdout


def read_write_paths(service: str) -> list[Path]:
    """The unit's ReadWritePaths= entries, as systemd splits them (quoted, space-separated)."""
    [line] = [line for line in service.splitlines() if line.startswith("ReadWritePaths=")]
    return [Path(entry) for entry in shlex.split(line.split("=", 1)[1])]


def files_under(root: Path) -> dict[Path, tuple[int, int]]:
    """Every path under ``root`` (symlinks not followed) with its inode and mtime."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            st = path.lstat()
            found[path] = (st.st_ino, st.st_mtime_ns)
    return found


async def test_every_path_the_daemon_writes_is_one_the_unit_lets_it_write(tmp_path: Path) -> None:
    """No systemd manager runs here (systemd-run --user has no bus to talk to), so the unit's
    sandbox is checked by what it would let through: the daemon runs as the unit would run
    it, doing what it does at a first start (the admin token, the store, its lock and record,
    a spool replay that sets a file aside), and every path it created or changed under HOME
    must lie under one of the unit's ReadWritePaths (ProtectSystem=strict makes the rest
    read-only)."""
    home = tmp_path / "home"
    assert install(home).returncode == 0
    writable = read_write_paths(
        (home / ".config" / "systemd" / "user" / "recalld.service").read_text()
    )
    spool = Spool(home / ".local" / "state" / "recalld" / "spool")
    spool.add(
        SpooledCapture(
            agent="hook",
            workspace="/ws/unit",
            admin=False,
            agent_token_file=None,
            episodes=[p.CaptureEpisode(summary="spooled before the service started")],
        )
    )
    os.mkfifo(spool.directory / "00000000000000000000-1-planted.json", 0o600)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    # What the user manager gives a unit: HOME and XDG_RUNTIME_DIR, not the other XDG dirs.
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(runtime),
        "RECALLD_EMBEDDER": "hash",
        "PYTHONUNBUFFERED": "1",
    }
    before = files_under(home)
    with (tmp_path / "daemon.log").open("ab") as log:
        started = await start_daemon([str(BIN / "recalld")], env, stderr=log.fileno(), timeout=30)
    try:
        admin = (home / ".config" / "recalld" / "admin.token").read_text().strip()
        sock = runtime / "recalld" / "recalld.sock"
        async with connect(agent="unit", workspace="/ws/unit", path=sock, admin_token=admin) as rc:
            await rc.call(p.MemoryStore(text="the unit lets the daemon write this"), p.Stored)
            report = (
                await rc.call(p.Status(wait_model_s=30, wait_settled_s=30), p.StatusResult)
            ).report
    finally:
        started.proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await anyio.to_thread.run_sync(started.proc.wait) == 0
    assert report.settled and report.admin_token_problem is None
    assert report.spool is not None and report.spool.rejected == 1
    after = files_under(home)
    written = sorted(path for path, seen in after.items() if before.get(path) != seen)
    assert any(path.name == "admin.token" for path in written)
    assert any(path.name == running.LOCK_NAME for path in written)
    outside = [
        str(path) for path in written if not any(path == w or w in path.parents for w in writable)
    ]
    assert not outside, f"the unit would refuse these writes: {outside}"


def test_the_installer_reloads_and_enables_the_socket_when_systemd_answers(tmp_path: Path) -> None:
    # A systemctl that answers like a running user manager and records what it was asked.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    calls = tmp_path / "systemctl-calls"
    (fake_bin / "systemctl").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in *is-active*) exit 3 ;; esac\nexit 0\n'
    )
    (fake_bin / "systemctl").chmod(0o755)
    out = install(tmp_path, path=f"{fake_bin}:{os.environ['PATH']}")
    assert out.returncode == 0, out.stderr
    assert calls.read_text().splitlines() == [
        "--user show-environment",
        "--user daemon-reload",
        "--user enable --now recalld.socket",
        "--user is-active --quiet recalld.service",
    ]
    assert "enabled recalld.socket" in out.stdout


def test_the_installed_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip(
            "systemd-analyze is not installed (Debian/Ubuntu: apt-get install systemd; "
            ".ci/run installs it)"
        )
    assert install(tmp_path).returncode == 0
    unit_dir = tmp_path / ".config" / "systemd" / "user"
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = dict(
        os.environ,
        HOME=str(tmp_path),
        XDG_CONFIG_HOME=str(tmp_path / ".config"),
        XDG_RUNTIME_DIR=str(runtime),
        SYSTEMD_LOG_LEVEL="notice",
    )
    out = subprocess.run(
        [
            analyze,
            "--user",
            "verify",
            str(unit_dir / "recalld.socket"),
            str(unit_dir / "recalld.service"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # verify exits 0 on warnings too (an unknown key, a directive a user unit cannot use):
    # the units must produce none.
    assert out.stdout + out.stderr == ""


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a misspelled key and a missing binary are reported."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    (unit_dir / "broken.service").write_text(
        "[Service]\nType=notify\nExecStart=/nonexistent/recalld\nRestartt=on-failure\n"
    )
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    out = subprocess.run(
        [analyze, "--user", "verify", str(unit_dir / "broken.service")],
        env=dict(os.environ, XDG_RUNTIME_DIR=str(runtime)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Restartt" in out.stderr
    assert "/nonexistent/recalld" in out.stderr


async def test_socket_activation_starts_the_daemon_on_the_first_connection(
    daemon_factory: DaemonFactory,
) -> None:
    activate = shutil.which("systemd-socket-activate")
    if activate is None:
        pytest.skip("systemd-socket-activate is not installed (package systemd)")
    d: DaemonProcess = daemon_factory()
    d.socket.parent.mkdir(mode=0o700)
    notify = await NotifyListener.open(d.root / "notify.sock")
    passed_env = {
        "RECALLD_DATA_DIR": str(d.data_dir),
        "RECALLD_EMBEDDER": "hash",
        "NOTIFY_SOCKET": str(notify.path),
        "PYTHONUNBUFFERED": "1",
        "XDG_CONFIG_HOME": os.environ["XDG_CONFIG_HOME"],
        "XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"],
    }
    args = [activate, "-l", str(d.socket)]
    for key, value in passed_env.items():
        args += ["-E", f"{key}={value}"]
    # The activator execs recalld in its own place: d.proc ends up being the daemon. A Popen,
    # not anyio.open_process: DaemonProcess signals, waits for and kills d.proc.
    d.proc = subprocess.Popen(  # noqa: ASYNC220
        [*args, str(BIN / "recalld")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert d.proc.stderr is not None
    stderr = d.proc.stderr.fileno()
    os.set_blocking(stderr, False)
    try:
        async with anyio.create_task_group() as tg:
            # The activator says when it listens; recalld does not exist yet.
            seen = b""
            with anyio.fail_after(10):
                while b"Listening on" not in seen:
                    await anyio.wait_readable(stderr)
                    seen += os.read(stderr, 65536)
            tg.start_soon(_copy_to_log, stderr, seen, d.log_path)
            assert notify.messages == []
            async with connect(agent="first", workspace="/ws/sa", path=d.socket) as rc:
                stored = await rc.call(p.MemoryStore(text="socket activation works"), p.Stored)
                status = (await rc.call(p.Status(), p.StatusResult)).report
            assert status.pid == d.proc.pid
            await notify.until("READY=1")
            assert status.socket == str(d.socket)
            # Clients whose environment differs find systemd's socket in the data dir.
            record = running.running(d.data_dir)
            assert record is not None and record.socket == str(d.socket)
            assert stored.record_id
            d.signal(signal.SIGTERM)
            assert await d.wait() == 0
        assert "using the socket passed by systemd" in d.log()
        # The socket is systemd's: the daemon leaves it in place for the next activation.
        assert d.socket.exists()
    finally:
        await notify.aclose()
        d.proc.stderr.close()


async def _copy_to_log(fd: int, first: bytes, log: Path) -> None:
    async with await anyio.open_file(log, "ab") as out:
        await out.write(first)
        while True:
            await anyio.wait_readable(fd)
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            await out.write(chunk)
            await out.flush()


async def test_sd_notify_ready_status_watchdog_and_stopping(daemon_factory: DaemonFactory) -> None:
    d: DaemonProcess = daemon_factory()
    # WatchdogSec=0.3s: pings every 0.1 s, each after a probe through the writer.
    notify = await start_with_notify(d, WATCHDOG_USEC="300000")
    try:
        await notify.until("STATUS=ready; 0 vectors indexed", within_s=10)
        await notify.until("WATCHDOG=1", within_s=10)
        await notify.until("WATCHDOG=1", within_s=10)
        d.signal(signal.SIGTERM)
        await notify.until("STOPPING=1")
        assert await d.wait() == 0
    finally:
        await notify.aclose()
    lines = notify.lines()
    # READY comes first, with MAINPID, as soon as the socket accepts; the model's progress
    # follows as STATUS lines.
    assert lines[0] == "READY=1"
    assert f"MAINPID={d.proc.pid}" in lines  # type: ignore[union-attr]
    assert "STATUS=accepting; loading the embedding model" in lines
    assert lines.index("STATUS=accepting; loading the embedding model") < lines.index(
        "STATUS=ready; 0 vectors indexed"
    )
    assert lines.index("STOPPING=1") > lines.index("WATCHDOG=1")


async def test_without_watchdog_usec_no_pings_are_sent(daemon_factory: DaemonFactory) -> None:
    d: DaemonProcess = daemon_factory()
    notify = await start_with_notify(d)
    try:
        await notify.until("STATUS=ready; 0 vectors indexed", within_s=10)
        d.signal(signal.SIGTERM)
        await notify.until("STOPPING=1")
        assert await d.wait() == 0
    finally:
        await notify.aclose()
    assert "WATCHDOG=1" not in notify.lines()


async def test_a_stuck_writer_stops_the_watchdog_pings_until_it_recovers(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory()
    notify = await start_with_notify(d, WATCHDOG_USEC="300000")
    try:
        await notify.until("WATCHDOG=1", within_s=10)
        # Another process takes the database's write lock: the writer's next probe blocks.
        blocker = sqlite3.connect(d.data_dir / "recalld.db", isolation_level=None, timeout=10)
        blocker.execute("BEGIN EXCLUSIVE")
        locked_at = time.monotonic()
        with anyio.move_on_after(1.5):
            while True:
                await notify.receive()
        blocker.execute("ROLLBACK")
        blocker.close()
        pings = [t - locked_at for t, m in notify.messages if m == "WATCHDOG=1" and t > locked_at]
        # A probe already committed when the lock was taken may still be reported at once;
        # none after that, so systemd (WatchdogSec) would restart a daemon stuck like this.
        assert [t for t in pings if t > 0.35] == []
        # The writer gets the lock back; the pings resume.
        await notify.until("WATCHDOG=1", within_s=10)
        assert "watchdog: the writer did not commit a probe" in d.log()
        d.signal(signal.SIGTERM)
        assert await d.wait() == 0
    finally:
        await notify.aclose()
