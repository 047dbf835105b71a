"""Shared fixtures: a real daemon process on a temp socket and data dir.

Readiness is the daemon's own sd_notify READY=1 (recall_client.launch, as recall-mcp's
autostart and the benchmarks start daemons): no sleeping, no polling, and the systemd
notification is exercised by every test.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import psycopg
import pytest
from pgserver import PgServer
from psycopg.conninfo import make_conninfo
from recall_client import protocol as p
from recall_client.client import RecallClient, connect
from recall_client.launch import start_daemon
from recall_client.paths import read_admin_token
from recalld.store.postgres.schema import init_database

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every test away from the user's real socket, data and config."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))
    for var in (
        "RECALLD_SOCKET",
        "RECALLD_DATA_DIR",
        "RECALLD_EMBEDDER",
        "RECALLD_DATABASE_URL",
        "RECALLD_VISIBILITY",
        "NOTIFY_SOCKET",
        "RECALL_AGENT",
        "LISTEN_FDS",
        "LISTEN_PID",
        "RECALLD_AUTOSTART",
        "RECALLD_REQUIRE_APPROVAL",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
    ):
        monkeypatch.delenv(var, raising=False)


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


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[DaemonFactory]:
    """Make daemons under this test's tmp dir; all are killed at the end."""
    made: list[DaemonProcess] = []

    def make(
        name: str = "d",
        *,
        embedder: str = "hash",
        extra_env: Mapping[str, str] | None = None,
    ) -> DaemonProcess:
        root = tmp_path / name
        root.mkdir(exist_ok=True)
        d = DaemonProcess(root=root, embedder=embedder, extra_env=dict(extra_env or {}))
        made.append(d)
        return d

    yield make
    for d in made:
        d.kill()


BACKENDS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``backend``: the store a test's daemon uses. Tests marked ``both_backends`` (whole
    modules, by ``pytestmark``) run once on each, but those marked ``sqlite_only`` (they
    look at the SQLite file itself); the others on the embedded SQLite, or on PostgreSQL
    alone when RECALLD_TEST_BACKEND says so (to try a module before marking it)."""
    if "backend" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("sqlite_only") is not None:
        chosen: tuple[str, ...] = ("sqlite",)
    elif metafunc.definition.get_closest_marker("both_backends") is not None:
        chosen = BACKENDS
    else:
        chosen = (os.environ.get("RECALLD_TEST_BACKEND", "sqlite"),)
    metafunc.parametrize("backend", chosen)


@pytest.fixture
async def running_daemon(
    daemon_factory: DaemonFactory, backend: str, request: pytest.FixtureRequest
) -> AsyncIterator[DaemonProcess]:
    """A real daemon (hash embedder) on a temp socket and data dir, on the ``backend`` store
    (a fresh database of the session's PostgreSQL, as role alice, for "postgres")."""
    extra: dict[str, str] = {}
    if backend == "postgres":
        db: TeamDb = request.getfixturevalue("team_db")
        extra["RECALLD_DATABASE_URL"] = db.url("alice")
    d = daemon_factory(extra_env=extra)
    await d.start()
    try:
        yield d
    finally:
        if d.proc is not None and d.proc.poll() is None:
            code = await d.stop()
            assert code == 0, f"daemon exited {code}:\n{d.log()}"


# ---------------------------------------------------------------- team memory (PostgreSQL)

# Database roles the team-memory tests use: one per person (each daemon connects as one).
ROLE_PASSWORDS = {"alice": "alice-secret-1", "bob": "bob-secret-2"}


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    """One real PostgreSQL 18 with pgvector for the session (scripts/pgserver.py)."""
    with PgServer(tmp_path_factory.mktemp("pg")) as server:
        yield server


@dataclass
class TeamDb:
    """A fresh database on the shared server, migrated, with a login role per person."""

    server: PgServer
    name: str

    @property
    def admin_url(self) -> str:
        return make_conninfo(self.server.superuser_url, dbname=self.name)

    def url(self, role: str) -> str:
        return self.server.url_for(role, ROLE_PASSWORDS[role], self.name)


@pytest.fixture
def team_db(pg_server: PgServer) -> Iterator[TeamDb]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg_server.create_database(name)
    db = TeamDb(pg_server, name)
    init_database(db.admin_url, ROLE_PASSWORDS)
    yield db
    # Dropped at once: a session of hundreds of databases made the server's data dir so
    # large that removing it at the end outlasted the last test's timeout on a busy machine.
    pg_server.drop_database(name)
