"""One store, one daemon: a second daemon on a data dir refuses to start, naming the first,
and every client finds the running one whatever its environment (issue 40, point 1)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from recall_client import protocol as p
from recall_client import running
from recall_client.autostart import ensure_daemon
from recall_client.client import connect
from recall_client.launch import start_daemon
from recall_client.paths import socket_path

from tests.support.daemon import BIN, DaemonFactory, DaemonProcess
from tests.support.mcp_client import call

# All Codex CLI passes to a stdio MCP server.
CODEX_ENV = ("HOME", "LANG", "PATH", "SHELL", "TERM")


async def test_a_second_daemon_on_the_same_data_dir_exits_naming_the_first(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    # Another socket, so only the data dir is shared: before, this one ran beside the first.
    env = dict(running_daemon.env(), RECALLD_SOCKET=str(tmp_path / "other" / "recalld.sock"))
    with anyio.fail_after(30):
        out = await anyio.run_process([str(BIN / "recalld")], env=env, check=False)
    assert out.returncode == 1
    said = out.stderr.decode()
    assert f"pid {running_daemon.proc.pid if running_daemon.proc else 0}" in said
    assert str(running_daemon.socket) in said
    assert str(running_daemon.data_dir) in said
    assert not (tmp_path / "other" / "recalld.sock").exists()


def user_env(home: Path) -> dict[str, str]:
    """A login shell's environment for a user whose home is ``home``: the data dir and
    config derive from HOME, the socket from XDG_RUNTIME_DIR."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "SHELL", "TERM")}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(home / "run"), PYTHONUNBUFFERED="1")
    return env


async def test_recall_mcp_with_only_codex_s_environment_reaches_the_one_daemon(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True, mode=0o700)
    config = home / ".config" / "recalld"
    config.mkdir(parents=True)
    # A daemon the shim might start by mistake would be a light one.
    (config / "config.toml").write_text('embedder = "hash"\n')
    with (tmp_path / "daemon.log").open("ab") as log:
        proc = (
            await start_daemon(
                [str(BIN / "recalld")], user_env(home), stderr=log.fileno(), timeout=30
            )
        ).proc
    data_dir = home / ".local" / "share" / "recalld"
    try:
        record = running.running(data_dir)
        assert record is not None and record.pid == proc.pid
        sock = Path(record.socket)
        assert sock == home / "run" / "recalld" / "recalld.sock"

        env = {k: v for k, v in user_env(home).items() if k in CODEX_ENV}
        params = StdioServerParameters(
            command=str(BIN / "recall-mcp"),
            args=["--agent", "codex", "--workspace", "/ws/codex"],
            env=env,
        )
        admin = (config / "admin.token").read_text().strip()
        with anyio.fail_after(60):
            async with Client(params) as client:
                stored = await call(
                    client, "memory_store", text="the release train leaves on Thursdays"
                )
                async with connect(agent="op", path=sock, admin_token=admin) as rc:
                    during = (await rc.call(p.Status(), p.StatusResult)).report
        assert ("codex", "recall-mcp") in {(a.agent, a.client) for a in during.agents}

        async with connect(agent="codex", workspace="/ws/codex", path=sock) as rc:
            report = (
                await rc.call(p.Status(wait_model_s=30, wait_settled_s=30), p.StatusResult)
            ).report
            found = await rc.call(
                p.MemorySearch(query="when does the release train leave"), p.MemorySearchResult
            )
        # The vector went into this daemon's index, so a search by meaning can find it.
        assert report.settled and report.index.size == 1
        assert found.semantic_used
        assert [h.id for h in found.hits][:1] == [stored["id"]]
        # Nothing else was started on the store: it is still this daemon's.
        assert running.running(data_dir) == record
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await anyio.to_thread.run_sync(proc.wait) == 0
        # Should a shim ever start a second daemon on the store again, it is not left running.
        stray = running.running(data_dir)
        if stray is not None:
            os.kill(stray.pid, signal.SIGTERM)
    assert stray is None
    assert not (data_dir / running.RECORD_NAME).exists()


async def test_a_record_left_by_a_killed_daemon_is_not_believed(
    daemon_factory: DaemonFactory,
) -> None:
    d = daemon_factory()
    await d.start()
    assert running.running(d.data_dir) is not None
    d.kill()  # kill -9: the record stays, the lock goes with the process
    assert (d.data_dir / running.RECORD_NAME).exists()
    assert running.running(d.data_dir) is None
    assert not running.held(d.data_dir)
    # The data dir is free again: a new daemon starts and records itself.
    await d.start()
    record = running.running(d.data_dir)
    assert record is not None and record.pid == (d.proc.pid if d.proc else 0)
    assert await d.stop() == 0


def test_a_client_finds_the_recorded_socket_before_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    monkeypatch.setenv("RECALLD_DATA_DIR", str(data_dir))
    default = socket_path()
    claim = running.claim(data_dir)
    try:
        claim.record(tmp_path / "elsewhere.sock")
        assert socket_path() == tmp_path / "elsewhere.sock"
        # An explicit RECALLD_SOCKET still wins.
        monkeypatch.setenv("RECALLD_SOCKET", str(tmp_path / "mine.sock"))
        assert socket_path() == tmp_path / "mine.sock"
        monkeypatch.delenv("RECALLD_SOCKET")
        # A second claim in this very process conflicts too (the lock is per open file).
        with pytest.raises(running.DataDirInUse) as err:
            running.claim(data_dir)
        assert f"pid {os.getpid()}" in str(err.value)
        assert "elsewhere.sock" in str(err.value)
    finally:
        claim.release()
    assert socket_path() == default


def test_a_record_that_is_not_a_private_regular_file_is_ignored_without_blocking(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    claim = running.claim(data_dir)
    record = data_dir / running.RECORD_NAME
    try:
        os.mkfifo(record)  # opening a FIFO for reading would block forever
        assert running.running(data_dir) is None
        record.unlink()
        target = tmp_path / "planted.json"
        target.write_text(f'{{"pid": {os.getpid()}, "socket": "/tmp/planted.sock"}}')
        record.symlink_to(target)
        assert running.running(data_dir) is None
        record.unlink()
        shutil.copy(target, record)
        record.chmod(0o622)  # others may write it
        assert running.running(data_dir) is None
        record.chmod(0o600)
        assert running.running(data_dir) == running.DaemonRecord(
            pid=os.getpid(), socket="/tmp/planted.sock"
        )
        record.write_bytes(b" " * 5000 + record.read_bytes())  # oversized
        assert running.running(data_dir) is None
    finally:
        claim.release()


async def test_the_autostart_lock_lives_in_the_data_dir_and_a_held_store_is_not_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    monkeypatch.setenv("RECALLD_DATA_DIR", str(data_dir))
    claim = running.claim(data_dir)  # a daemon starting: no socket answers yet
    try:
        # Nothing answers here, yet nothing is started: the store is held.
        assert await ensure_daemon(tmp_path / "nowhere" / "recalld.sock") is False
        assert (data_dir / ".autostart-lock").exists()
        assert not (tmp_path / "nowhere").exists()
    finally:
        claim.release()
