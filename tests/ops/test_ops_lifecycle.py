"""Lifecycle: SIGTERM drains, a second signal forces, SIGHUP reloads the config."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import anyio
import pytest
from recall_client import protocol as p
from recall_client.client import DaemonUnavailable, RecallClient, RemoteError, connect

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.sdnotify import start_with_notify


def config_file() -> Path:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "recalld" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


async def test_sigterm_finishes_in_flight_requests_and_open_batches(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory()
    notify = await start_with_notify(d)
    # With the database locked by another process, the writes stay in flight: one batch
    # waiting for the lock, the rest queued behind it.
    blocker = _lock_the_database(d)
    stored: list[str] = []
    try:
        async with connect(agent="held", workspace="/ws/drain", path=d.socket) as rc:

            async def one(i: int) -> None:
                stored.append(
                    (await rc.call(p.MemoryStore(text=f"in flight {i}"), p.Stored)).record_id
                )

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(one, i)
                await _until_inflight(d, "held", 20)
                d.signal(signal.SIGTERM)
                await notify.until("STOPPING=1")
                started = time.monotonic()
                blocker.execute("ROLLBACK")  # the writer goes on; the drain waits for it
        code = await d.wait()
        took = time.monotonic() - started
    finally:
        blocker.close()
        await notify.aclose()
    assert code == 0, d.log()
    assert len(stored) == 20
    assert set(stored) == _ids_in(d)
    assert "draining 20 in-flight requests" in d.log()
    assert took < 10, "the stop should take well under TimeoutStopSec (30 s)"
    # The daemon removed its own socket: the next client fails at once (and may start one).
    assert not d.socket.exists()
    assert "recalld stopped" in d.log()


async def test_a_burst_cut_by_sigterm_loses_no_acknowledged_write(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory()
    notify = await start_with_notify(d)
    stored: list[str] = []
    refused: list[Exception] = []
    first = anyio.Event()

    async def writer(n: int) -> None:
        async with connect(agent=f"w{n}", workspace="/ws/drain", path=d.socket) as rc:
            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(one, rc, n, i)

    async def one(rc: RecallClient, n: int, i: int) -> None:
        try:
            reply = await rc.call(p.MemoryStore(text=f"burst {n} note {i}"), p.Stored)
        except (RemoteError, DaemonUnavailable) as exc:
            refused.append(exc)
            return
        stored.append(reply.record_id)
        first.set()

    try:
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(writer, n)
            await first.wait()
            d.signal(signal.SIGTERM)
        code = await d.wait()
    finally:
        await notify.aclose()
    assert code == 0, d.log()
    # Every request was answered: stored; refused as retryable once draining began; or,
    # sent after the drain ended, met a closed connection (a client retries both).
    assert len(stored) + len(refused) == 300
    assert all(
        e.code == "unavailable" and e.retryable for e in refused if isinstance(e, RemoteError)
    )
    assert stored and set(stored) <= _ids_in(d)


async def test_new_connections_are_refused_once_stopping(daemon_factory: DaemonFactory) -> None:
    d: DaemonProcess = daemon_factory(extra_env={"RECALLD_DRAIN_TIMEOUT_S": "5"})
    notify = await start_with_notify(d)
    blocker = _lock_the_database(d)
    try:
        async with connect(agent="held", workspace="/ws/x", path=d.socket) as rc:
            async with anyio.create_task_group() as tg:
                # In flight until the lock goes: the drain waits for it.
                tg.start_soon(_store_ignoring_errors, rc, "held while stopping")
                await _until_inflight(d, "held")
                d.signal(signal.SIGTERM)
                await notify.until("STOPPING=1")
                with pytest.raises(DaemonUnavailable):
                    async with connect(agent="late", path=d.socket, timeout=2):
                        pass
                # A new request on an open connection is refused, retryable.
                with pytest.raises(RemoteError) as err:
                    await rc.call(p.Ping())
                assert err.value.code == "unavailable" and err.value.retryable
                blocker.execute("ROLLBACK")
        assert await d.wait() == 0
    finally:
        blocker.close()
        await notify.aclose()


async def test_the_drain_deadline_bounds_a_stuck_request(daemon_factory: DaemonFactory) -> None:
    d: DaemonProcess = daemon_factory(extra_env={"RECALLD_DRAIN_TIMEOUT_S": "1"})
    notify = await start_with_notify(d)
    blocker = _lock_the_database(d)
    try:
        async with connect(agent="stuck", workspace="/ws/x", path=d.socket) as rc:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_store_ignoring_errors, rc, "written while the drain gave up")
                await _until_inflight(d, "stuck")
                d.signal(signal.SIGTERM)
                await notify.until("STOPPING=1")
                # The drain gives up on the request after 1 s and closes its connection.
                with anyio.fail_after(10):
                    # The log is a plain file: nothing to wait on but its growth.
                    while "drain deadline" not in d.log():  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                blocker.execute("ROLLBACK")
        assert await d.wait(within_s=15) == 0
    finally:
        blocker.close()
        await notify.aclose()
    # The write was in the writer's batch: it committed even though its client was cut off.
    db = sqlite3.connect(d.data_dir / "recalld.db")
    texts = [row[0] for row in db.execute("SELECT text FROM records")]
    db.close()
    assert texts == ["written while the drain gave up"]


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
async def test_a_second_signal_forces_the_stop(daemon_factory: DaemonFactory, second: int) -> None:
    d: DaemonProcess = daemon_factory()  # drain deadline: the default 10 s
    notify = await start_with_notify(d)
    blocker = _lock_the_database(d)
    try:
        async with connect(agent="stuck", workspace="/ws/x", path=d.socket) as rc:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_store_ignoring_errors, rc, "never acknowledged")
                await _until_inflight(d, "stuck")
                d.signal(signal.SIGTERM)
                await notify.until("STOPPING=1")
                started = time.monotonic()
                d.signal(second)
                # The writer is stuck in a commit that cannot be interrupted; the daemon
                # still exits within the force grace period, not the drain deadline.
                code = await d.wait(within_s=8)
                took = time.monotonic() - started
    finally:
        blocker.close()
        await notify.aclose()
    assert code == 1
    assert took < 6
    assert f"second {signal.Signals(second).name}: stopping now" in d.log()


async def test_sighup_reloads_require_approval_and_keeps_a_bad_config_out(
    daemon_factory: DaemonFactory,
) -> None:
    config_file().write_text("require_approval = false\n")
    d: DaemonProcess = daemon_factory()
    notify = await start_with_notify(d)
    try:
        async with d.client(workspace="/ws/hup") as rc:
            await rc.call(p.MemoryStore(text="allowed before the reload"), p.Stored)

        config_file().write_text("require_approval = true\nsearch_workers = 4\n")
        d.signal(signal.SIGHUP)
        await notify.until("RELOADING=1")
        await notify.until("READY=1")
        async with d.client(workspace="/ws/hup") as rc:
            with pytest.raises(RemoteError) as err:
                await rc.call(p.MemoryStore(text="refused after the reload"), p.Stored)
        assert err.value.code == "forbidden"
        assert "search_workers apply at the next start" in d.log()

        config_file().write_text("require_approval = maybe\n")
        d.signal(signal.SIGHUP)
        await notify.until("READY=1")
        assert "config not reloaded" in d.log()
        # Still running, on the last good config.
        async with d.client(workspace="/ws/hup") as rc:
            with pytest.raises(RemoteError):
                await rc.call(p.MemoryStore(text="still refused"), p.Stored)
        assert await d.stop() == 0
    finally:
        await notify.aclose()


def test_a_bad_config_stops_the_daemon_at_start_with_the_reason(
    daemon_factory: DaemonFactory,
) -> None:
    import subprocess

    from tests.support.daemon import BIN

    config_file().write_text("drain_timeout_s = -1\n")
    d: DaemonProcess = daemon_factory()
    out = subprocess.run(
        [str(BIN / "recalld")], env=d.env(), capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 2
    assert "drain_timeout_s" in out.stderr
    assert out.stdout == ""


async def test_the_daemon_prints_nothing_on_stdout(daemon_factory: DaemonFactory) -> None:
    d: DaemonProcess = daemon_factory()
    stdout = d.root / "stdout"
    async with await anyio.open_file(stdout, "wb") as out:
        notify = await start_with_notify(d, stdout=out.wrapped)
    try:
        async with d.client() as rc:
            await rc.call(p.MemoryStore(text="quiet please"), p.Stored)
            await rc.call(p.MemorySearch(query="quiet"), p.MemorySearchResult)
        d.signal(signal.SIGHUP)
        await notify.until("READY=1")
        assert await d.stop() == 0
    finally:
        await notify.aclose()
    assert stdout.read_bytes() == b""
    assert "accepting on" in d.log()


# --------------------------------------------------------------------------- helpers


def _lock_the_database(d: DaemonProcess) -> sqlite3.Connection:
    """Hold the database's write lock from another connection: the writer blocks on it."""
    blocker = sqlite3.connect(d.data_dir / "recalld.db", isolation_level=None, timeout=10)
    blocker.execute("BEGIN EXCLUSIVE")
    return blocker


async def _store_ignoring_errors(rc: RecallClient, text: str) -> None:
    try:
        await rc.call(p.MemoryStore(text=text), p.Stored)
    except (RemoteError, DaemonUnavailable):
        pass


async def _until_inflight(d: DaemonProcess, agent: str, n: int = 1) -> None:
    """Wait until the daemon has read ``n`` requests of ``agent``'s connection, by asking
    its status (the hello is one more request)."""
    with anyio.fail_after(10):
        while True:
            report = await d.status()
            if any(a.agent == agent and a.requests >= n + 1 for a in report.agents):
                return
            await anyio.sleep(0.02)


def _ids_in(d: DaemonProcess) -> set[str]:
    db = sqlite3.connect(d.data_dir / "recalld.db")
    try:
        return {row[0] for row in db.execute("SELECT id FROM records")}
    finally:
        db.close()


async def test_a_daemon_given_config_takes_nothing_from_the_default_config_file(
    tmp_path: Path,
) -> None:
    """``recalld --config other.toml``: the default file's ``socket`` and ``data_dir`` are
    another configuration's, so the daemon listens and stores where other.toml (or, when it
    says nothing, the built-in default) says."""
    from recall_client import paths
    from recall_client.launch import start_daemon

    from tests.support.daemon import BIN

    elsewhere = tmp_path / "elsewhere"
    config_file().write_text(
        f'socket = "{elsewhere / "recalld.sock"}"\ndata_dir = "{elsewhere / "data"}"\n'
    )
    other = tmp_path / "other.toml"
    other.write_text("embedder = 'hash'\n")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with (tmp_path / "daemon.log").open("ab") as log:
        started = await start_daemon(
            [str(BIN / "recalld"), "--config", str(other)], env, stderr=log.fileno(), timeout=30
        )
    try:
        assert paths.default_socket_path().is_socket()
        assert (paths.default_data_dir() / "recalld.db").exists()
        async with connect(
            agent="t", workspace="/ws/config", path=paths.default_socket_path()
        ) as rc:
            await rc.call(p.MemoryStore(text="stored where other.toml says"), p.Stored)
        assert not elsewhere.exists()
    finally:
        started.proc.terminate()
        assert started.proc.wait(timeout=30) == 0
