"""A real daemon process under test, on a temp socket and data dir, and the processes around it.

Readiness is the daemon's own sd_notify READY=1 (recall_client.launch, as recall-mcp's
autostart and the benchmarks start daemons): no sleeping, no polling.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import psycopg
from recall_client import protocol as p
from recall_client.client import RecallClient, connect
from recall_client.launch import start_daemon
from recall_client.paths import read_admin_token

REPO = Path(__file__).resolve().parents[2]


BIN = Path(sys.executable).parent


@dataclass
class DaemonProcess:
    """A recalld process under test, with its socket, data dir and captured log."""

    root: Path
    embedder: str = "hash"
    extra_env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    notifications: list[str] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return self.root / "sock" / "recalld.sock"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "daemon.log"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            RECALLD_SOCKET=str(self.socket),
            RECALLD_DATA_DIR=str(self.data_dir),
            RECALLD_EMBEDDER=self.embedder,
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    async def start(self, within_s: float = 30.0) -> None:
        """Start the daemon and return once it has reported READY=1 (within ``within_s``)."""
        async with await anyio.open_file(self.log_path, "ab") as log:
            started = await start_daemon(
                [str(BIN / "recalld")], self.env(), stderr=log.wrapped.fileno(), timeout=within_s
            )
        self.proc = started.proc
        self.notifications.extend(started.notifications)

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    async def wait(self, within_s: float = 30.0) -> int:
        assert self.proc is not None
        proc = self.proc
        with anyio.fail_after(within_s):
            return await anyio.to_thread.run_sync(proc.wait)

    async def stop(self) -> int:
        """SIGTERM and wait for a clean exit."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.signal(signal.SIGTERM)
        return await self.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def database_url(self) -> str | None:
        return self.extra_env.get("RECALLD_DATABASE_URL")

    def sql(self, statement: str, *params: object) -> list[tuple[Any, ...]]:
        """Rows of a read-only query (``?`` placeholders) on this daemon's store, whichever
        engine it is: what a test checks of the stored state, as the daemon's own role."""
        url = self.database_url
        if url is not None:
            with psycopg.connect(url) as conn:
                return list(conn.execute(statement.replace("?", "%s"), params).fetchall())
        db = sqlite3.connect(f"file:{self.data_dir / 'recalld.db'}?mode=ro", uri=True)
        try:
            return list(db.execute(statement, params).fetchall())
        finally:
            db.close()

    @asynccontextmanager
    async def client(
        self, agent: str = "tester", workspace: str = "/ws/test"
    ) -> AsyncIterator[RecallClient]:
        async with connect(agent=agent, workspace=workspace, path=self.socket) as rc:
            yield rc

    async def status(
        self, wait_model_s: float = 0.0, wait_settled_s: float = 0.0
    ) -> p.StatusReport:
        """The report as the operator sees it (with the admin token: every agent's
        connection; a plain agent sees only its own)."""
        async with connect(
            agent="tester",
            workspace="/ws/test",
            path=self.socket,
            admin_token=read_admin_token(),
            timeout=wait_settled_s + 30,
        ) as rc:
            reply = await rc.call(
                p.Status(wait_model_s=wait_model_s, wait_settled_s=wait_settled_s), p.StatusResult
            )
        return reply.report

    async def settled(self, within_s: float = 30.0) -> p.StatusReport:
        """The report once the model is up (or failed) and the pipeline has settled: every
        write evaluated, every vector embedded and indexed. The daemon waits; no polling."""
        report = await self.status(wait_model_s=within_s, wait_settled_s=within_s)
        assert report.settled, f"the pipeline did not settle within {within_s}s: {report}"
        return report


class DaemonFactory(Protocol):
    """What the `daemon_factory` fixture hands a test: make a daemon under the test's tmp dir."""

    def __call__(
        self,
        name: str = "d",
        *,
        embedder: str = "hash",
        extra_env: Mapping[str, str] | None = None,
    ) -> DaemonProcess: ...


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


async def wait_pid_exit(pid: int, within_s: float = 30.0) -> None:
    """Wait for a process that is not our child to exit (pidfd: no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with anyio.fail_after(within_s):
            await anyio.wait_readable(fd)
    finally:
        os.close(fd)


async def stop_daemon(sock: Path) -> None:
    """SIGTERM the daemon on ``sock`` (a shim's child, not ours) and wait for it to go."""
    async with connect(agent="cleanup", path=sock) as rc:
        pid = (await rc.call(p.Status(), p.StatusResult)).report.pid
    os.kill(pid, signal.SIGTERM)
    await wait_pid_exit(pid)


async def unchecked_call(
    d: DaemonProcess, request: dict[str, Any], workspace: str = "/ws/unchecked"
) -> p.Reply:
    """Send ``request`` (an ``op`` and its fields) as a client that builds no protocol
    Structs, and so checks nothing, would (one written in another language, say); the reply
    it gets."""
    import msgspec
    from anyio.streams.buffered import BufferedByteReceiveStream

    hello = p.Hello(id=1, version=p.PROTOCOL_VERSION, agent="unchecked", workspace=workspace)
    body = msgspec.msgpack.encode({"id": 2, **request})
    async with await anyio.connect_unix(d.socket) as stream:
        await stream.send(p.frame(hello) + p.HEADER.pack(len(body)) + body)
        reader = BufferedByteReceiveStream(stream)
        with anyio.fail_after(30):
            while True:
                (size,) = p.HEADER.unpack(await reader.receive_exactly(4))
                reply = p.decode_reply(await reader.receive_exactly(size))
                if reply.id == 2:
                    return reply
