"""recallctl's team-memory commands: ``db init`` (set up a shared PostgreSQL) and ``migrate``
(move a local store into it).

Both talk to databases, never to the daemon, so they work with it down (or running: moving
in reads one snapshot of the local store). The daemon's PostgreSQL package is imported only
when one of them runs: every other recallctl command stays free of psycopg.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import msgspec

from .output import say
from .progress import Progress

__all__ = ["add_commands", "daemon_url"]


# --------------------------------------------------------------------------- db init


class _Refused(Exception):
    """A password that cannot be had: the message says what to give instead."""


def _read_password(name: str, spec: str) -> str:
    path = Path(spec).expanduser()
    if path.stat().st_mode & 0o077:
        say(f"recallctl db init: warning: {path} is readable by others (chmod 600 it)")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0]:
        raise _Refused(f"{path} holds no password for role {name} (its first line is empty)")
    return lines[0]


def _passwords(roles: list[str], files: list[str]) -> dict[str, str]:
    """Each role's password: from its ``NAME=FILE`` (first line), else asked for on the
    terminal. Never from the command line, where every user's ``ps`` could read it."""
    given: dict[str, str] = {}
    for spec in files:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise _Refused(f"--password-file {spec!r}: write it as NAME=FILE")
        if name not in roles:
            raise _Refused(f"--password-file names role {name!r}, which no --role gives")
        given[name] = _read_password(name, file)
    for name in roles:
        if name in given:
            continue
        if not sys.stdin.isatty():
            raise _Refused(f"no password for role {name}: give --password-file {name}=FILE")
        first = getpass.getpass(f"password for role {name}: ")
        if not first or getpass.getpass(f"password for role {name} (again): ") != first:
            raise _Refused(f"the passwords for role {name} were empty or did not match")
        given[name] = first
    return given


def daemon_url(admin_url: str, role: str, server: str | None = None) -> tuple[str, str]:
    """The URL a daemon logging in as ``role`` uses (the admin's database, on ``server``
    (``HOST[:PORT]``) or the admin's, no password), and its ``~/.pgpass`` line with a
    placeholder for the password."""
    from psycopg.conninfo import conninfo_to_dict

    info: dict[str, Any] = {k: str(v) for k, v in conninfo_to_dict(admin_url).items()}
    for key in ("user", "password", "passfile", *(("hostaddr",) if server else ())):
        info.pop(key, None)
    host, port = info.pop("host", ""), info.pop("port", "")
    if server:
        host, _, given = server.rpartition(":") if ":" in server else (server, "", "")
        port = given or port
    dbname = info.pop("dbname", "") or role
    if host and not host.startswith("/") and "," not in host:
        netloc = quote(host, safe="") + (f":{port}" if port else "")
    else:
        # A unix socket directory (or a host list): in the query, where libpq reads it.
        info = {**({"host": host} if host else {}), **({"port": port} if port else {}), **info}
        netloc = ""
    query = f"?{urlencode(info)}" if info else ""
    url = f"postgresql://{quote(role, safe='')}@{netloc}/{quote(dbname, safe='')}{query}"

    def field(value: str) -> str:  # ~/.pgpass escapes ':' and '\'
        return value.replace("\\", "\\\\").replace(":", "\\:")

    pgpass = ":".join(field(v) for v in (host or "localhost", port or "5432", dbname, role))
    return url, pgpass + ":PASSWORD"


async def _db_init(args: argparse.Namespace) -> int:
    roles = list(dict.fromkeys(args.role or []))
    try:
        passwords = _passwords(roles, args.password_file or [])
    except (_Refused, OSError) as exc:
        say(f"recallctl db init: {exc}")
        return 1
    import psycopg
    from recalld.store.postgres.db import redacted_url
    from recalld.store.postgres.schema import MEMBER_ROLE, init_database

    try:
        version = init_database(args.url, passwords)
    except (psycopg.Error, RuntimeError) as exc:  # RuntimeError: a newer schema
        say(f"recallctl db init: {redacted_url(args.url)}: {exc}".rstrip())
        return 1
    print(f"database {redacted_url(args.url)} is at schema version {version}")
    if not roles:
        print("no roles given: add one per person with --role NAME")
        return 0
    print(f"login roles (members of {MEMBER_ROLE}): {', '.join(roles)}")
    print("in each person's daemon config (recallctl config shows where it is):")
    lines = [daemon_url(args.url, role, args.host) for role in roles]
    for url, _ in lines:
        print(f'  database_url = "{url}"')
    print("and that role's password in ~/.pgpass (chmod 600; or the file $PGPASSFILE names):")
    for _, pgpass in lines:
        print(f"  {pgpass}")
    print("(or the URL with its password in it, in a config file only its owner can read)")
    return 0


# --------------------------------------------------------------------------- migrate


async def _migrate(args: argparse.Namespace) -> int:
    from recalld.config import ConfigError, load_settings  # light: msgspec only

    if args.data_dir is not None:
        data_dir = Path(args.data_dir).expanduser()  # noqa: ASYNC240 (one task)
    else:
        try:
            data_dir = load_settings().data_path
        except ConfigError as exc:
            say(f"recallctl migrate: {exc}")
            return 1
    import sqlite3

    import psycopg
    from recalld.errors import RecallError
    from recalld.store.moving import copy_store
    from recalld.store.postgres.db import redacted_url

    where = redacted_url(args.to)
    bar = Progress("moving in", None)
    try:
        # Blocking, in the one task this command has: Ctrl-C interrupts the copy itself
        # (the page in flight rolls back; what committed stays, and a rerun goes on).
        report = copy_store(data_dir, args.to, progress=bar.update)
    except (RuntimeError, RecallError, psycopg.Error, sqlite3.Error) as exc:
        bar.close()
        say(f"recallctl migrate: {where}: {exc}".rstrip())
        return 1
    bar.close()
    if args.json:
        out = {**dataclasses.asdict(report), "per_s": round(report.per_s, 1)}
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(out), indent=2).decode() + "\n")
        return 0
    print(
        f"moved {data_dir} into {where} as role {report.role}: {report.seen} records in"
        f" {report.seconds:.2f}s ({report.per_s:.0f} records/s)"
    )
    merged = f" ({report.merged} the same content under another id, kept once)"
    print(
        f"  {report.copied} copied, {report.already} already there"
        + (merged if report.merged else "")
    )
    if report.rows:
        print("  rows: " + ", ".join(f"{t} {n}" for t, n in sorted(report.rows.items())))
    if report.vectors_skipped:
        print(f"  {report.vectors_skipped} vectors of another size left out (embedded again)")
    print(f'next: database_url = "{daemon_url(args.to, report.role)[0]}" in this daemon\'s config')
    print("  and restart it; records stored meanwhile: run migrate again (it copies only those;")
    print("  changes to records already moved stay local)")
    return 0


# --------------------------------------------------------------------------- parsers


def add_commands(sub: Any) -> None:
    """Register ``db`` and ``migrate`` on recallctl's subparsers."""
    db = sub.add_parser(
        "db",
        help="set up a shared (team) PostgreSQL database",
        description="Team memory: daemons share one PostgreSQL database with pgvector.",
    )
    db_sub = db.add_subparsers(dest="action", required=True, metavar="ACTION")
    init = db_sub.add_parser(
        "init",
        help="migrate the schema and create login roles",
        description="Run recalld's migrations as the database's owner (creating the vector "
        "extension, the recalld_member group role and the tables with row-level security), "
        "then create each --role as a login role in recalld_member, or set a new password "
        "on one that exists. Safe to run again. Each role's password comes from "
        "--password-file NAME=FILE (its first line), else is asked for on the terminal; "
        "never on the command line.",
    )
    init.add_argument(
        "--url",
        required=True,
        metavar="ADMIN_URL",
        help="the database, as its owner (a password for it: ~/.pgpass or $PGPASSFILE)",
    )
    init.add_argument(
        "--host",
        metavar="HOST[:PORT]",
        help="the server as the daemons reach it, for the URL printed (default: ADMIN_URL's)",
    )
    init.add_argument(
        "--role", action="append", metavar="NAME", help="a login role to create (repeatable)"
    )
    init.add_argument(
        "--password-file",
        action="append",
        metavar="NAME=FILE",
        help="read role NAME's password from FILE's first line (repeatable)",
    )
    init.set_defaults(local=_db_init)

    mi = sub.add_parser(
        "migrate",
        help="move the local store into a team database",
        description="Copy every record of the local store (all kinds, forgotten ones too, "
        "with their metadata, links, outcomes, vectors, lesson support, idempotency keys, "
        "approvals and agent credentials) into the PostgreSQL database at URL, owned by "
        "the role URL logs in as and with the visibility each had. Reads one snapshot of "
        "the local store, so the daemon may keep running. Running it again copies nothing "
        "twice: only what is new since.",
    )
    mi.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the team database, as your role (its password: ~/.pgpass or $PGPASSFILE)",
    )
    mi.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the local store's directory (default: the daemon's data_dir)",
    )
    mi.add_argument("--json", action="store_true", help="print the report as JSON")
    mi.set_defaults(local=_migrate)
