"""Shared fixtures: a real daemon process on a temp socket and data dir.

Readiness is the daemon's own sd_notify READY=1 (recall_client.launch, as recall-mcp's
autostart and the benchmarks start daemons): no sleeping, no polling, and the systemd
notification is exercised by every test.
"""

from __future__ import annotations

import os
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import pytest
from _pytest.tmpdir import tmppath_result_key
from pgserver import PgServer
from recalld.store.postgres.schema import init_database
from recalld.store.sqlite.engine import SqliteStore

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.team import ROLE_PASSWORDS, TeamDb


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """tmp_path's finalizer reads what pytest records in its report hook; after a Ctrl-C
    during a test's setup there is no report, and the session's last teardown failed with a
    KeyError. An empty record is what a test without a report has."""
    item.stash.setdefault(tmppath_result_key, {})


def pytest_unconfigure(config: pytest.Config) -> None:
    """Let anyio's idle worker threads of a loop a Ctrl-C interrupted end.

    Each waits on its queue for work or for its loop's stop, which an interrupted loop never
    sends; they are not daemon threads, so the interpreter waited for them at exit (ten
    minutes, until a second Ctrl-C). A ``None`` is anyio's own stop for a worker.
    """
    for thread in threading.enumerate():
        work = getattr(thread, "queue", None)
        if thread.name == "AnyIO worker thread" and isinstance(work, queue.Queue):
            try:
                work.put_nowait(None)
            except queue.Full:
                pass  # busy: it returns to its queue and finds the stop next time


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


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    """A real SQLite store in process, for use cases run by jobs of a test's own
    (tests/support/store.py): no daemon, no socket."""
    made = SqliteStore(tmp_path, durability="normal")
    yield made
    made.close()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    """One real PostgreSQL 18 with pgvector for the session (scripts/pgserver.py)."""
    with PgServer(tmp_path_factory.mktemp("pg")) as server:
        yield server


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
