"""Team memory on PostgreSQL: a migrated database per test with a login role per person, and
daemons that share it."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import psycopg
from pgserver import PgServer
from psycopg.conninfo import make_conninfo
from recall_client import protocol as p
from recall_client.client import RecallClient
from recalld.store.postgres.schema import init_database

from .daemon import BIN, DaemonFactory, DaemonProcess

# Database roles the team-memory tests use: one per person (each daemon connects as one).
ROLE_PASSWORDS = {"alice": "alice-secret-1", "bob": "bob-secret-2"}


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


def make_db(like: TeamDb) -> TeamDb:
    """Another fresh, migrated database on the same server (roles are the server's)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    like.server.create_database(name)
    init_database(make_conninfo(like.server.superuser_url, dbname=name), ROLE_PASSWORDS)
    return TeamDb(like.server, name)


def team_daemon(factory: DaemonFactory, db: TeamDb, name: str, role: str) -> DaemonProcess:
    """A daemon (not started) on ``db``, connecting as ``role``."""
    return factory(name, extra_env={"RECALLD_DATABASE_URL": db.url(role)})


@asynccontextmanager
async def team(
    factory: DaemonFactory, db: TeamDb, *people: tuple[str, str]
) -> AsyncIterator[list[DaemonProcess]]:
    """Daemons on ``db``, one per (name, role), started in turn and stopped on exit."""
    daemons = [team_daemon(factory, db, name, role) for name, role in people]
    # One after the other: the daemons of one test share one config dir, and so one admin
    # token file, which the first creates and the others read.
    for d in daemons:
        await d.start()
    try:
        yield daemons
    finally:
        for d in daemons:
            await d.stop()


async def store(rc: RecallClient, text: str, **kw: object) -> p.MemoryStored:
    return await rc.call(p.MemoryStore(text=text, **kw), p.MemoryStored)  # type: ignore[arg-type]


async def search(rc: RecallClient, query: str, **kw: object) -> list[str]:
    """The texts of the hits, best first."""
    reply = await rc.call(
        p.MemorySearch(query=query, **kw),  # type: ignore[arg-type]
        p.MemorySearchResult,
    )
    return [h.text for h in reply.hits]


def raw_count(db: TeamDb, role: str, sql: str, *params: object) -> int:
    """A hand-written query as ``role``: what row-level security lets it see."""
    with psycopg.connect(db.url(role)) as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


def recallctl_on(d: DaemonProcess, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """recallctl with ``args`` on ``d``'s socket, in ``d``'s environment (its database)."""
    return subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=d.env(),
    )
