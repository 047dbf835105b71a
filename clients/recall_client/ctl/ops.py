"""recallctl's operations commands: export, import, backup, reindex, workspace, doctor, config.

Each command is ``async def cmd(args) -> int`` and opens the connections it needs itself,
because some of them (backup, doctor, config) must also work while the daemon is down.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import stat
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec

from .. import paths
from .. import protocol as p
from ..client import DaemonUnavailable, RecallClient, RemoteError, connect
from ..hello import hello_tokens
from .output import print_json, say
from .progress import Progress

__all__ = ["add_commands"]

Command = Callable[[argparse.Namespace], Awaitable[int]]

_json = msgspec.json.Encoder()
DB_NAME = "recalld.db"  # the daemon's store.DB_NAME; the client does not import the daemon


def _connect(args: argparse.Namespace, agent: str | None = None) -> Any:
    return connect(
        agent=agent or args.agent,
        workspace=args.workspace,
        client="recallctl",
        path=args.socket,
        **hello_tokens(args),
    )


# --------------------------------------------------------------------------- export


def create_private(path: Path) -> int:
    """Create ``path`` for writing, 0600, failing if anything is there already (a file, or a
    symlink someone planted to make us write through it).

    Raises:
        FileExistsError: ``path`` exists.
        OSError: it cannot be created.
    """
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _publish(partial: Path, dest: Path, force: bool) -> None:
    """Give the finished ``partial`` its name: never over an existing file unless ``force``
    (a hard link fails if ``dest`` exists; a rename replaces a symlink, never its target)."""
    if force:
        partial.replace(dest)
        return
    os.link(partial, dest)
    partial.unlink()


async def _export(args: argparse.Namespace) -> int:
    kind = None if args.kind == "all" else args.kind
    dest = Path(args.output) if args.output not in (None, "-") else None
    if dest is not None and not args.force and (dest.exists() or dest.is_symlink()):
        say(f"recallctl export: {dest} exists; choose another name or pass --force")
        return 1
    # Write to a side file and rename at the end: an interrupted export leaves no half file
    # that looks complete. It holds every memory: 0600, created new.
    partial = dest.with_name(dest.name + ".partial") if dest else None
    if partial is not None:
        partial.unlink(missing_ok=True)
    # One task, one file: blocking writes are fine in this command.
    out: TextIO = (
        os.fdopen(create_private(partial), "w", encoding="utf-8") if partial else sys.stdout
    )
    count = 0
    try:
        async with _connect(args) as rc:
            after = 0
            bar: Progress | None = None
            while True:
                page = await rc.call(
                    p.Export(after=after, workspace=args.workspace_filter, kind=kind),
                    p.ExportPage,
                )
                if bar is None:
                    bar = Progress("exporting", page.total)
                for record in page.records:
                    out.write(_json.encode(record).decode() + "\n")
                count += len(page.records)
                bar.update(count)
                if page.next_after is None:
                    break
                after = page.next_after
            bar.close()
        if partial and dest:
            out.close()
            _publish(partial, dest, args.force)
    finally:
        if partial:
            out.close()
            partial.unlink(missing_ok=True)
    say(
        f"exported {count} {'records' if kind is None else kind + ' records'} to {dest or 'stdout'}"
    )
    return 0


# --------------------------------------------------------------------------- import

_row_decoder = msgspec.json.Decoder(p.ExportedRecord)
# One Import request: at most this many rows, and this many bytes of them encoded, or one
# row alone (the frame is 4 MiB).
IMPORT_ROWS = 500
IMPORT_BYTES = 1024 * 1024
MAX_ROW_BYTES = p.MAX_FRAME - 64 * 1024
MAX_REPORTED_ERRORS = 20
# Where the daemon's error names the row it refused (``records[3].text``); the line says it.
_ROW_AT = re.compile(r"records\[(\d+)\](?::\s|\.)?")


def _read_lines(path: str) -> list[bytes]:
    """The file's lines as bytes: each is decoded (and refused) on its own."""
    if path == "-":
        return sys.stdin.buffer.read().splitlines()
    with open(path, "rb") as fh:
        return fh.read().splitlines()


def _row(line: bytes) -> p.ExportedRecord:
    """One JSON Lines row, as ``export`` writes it.

    Raises:
        ValueError: not UTF-8 text, or not an export row (the message says what is wrong).
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start} is {line[exc.start]:#04x})") from None
    try:
        return _row_decoder.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"not an export row: {exc}") from None


class _ImportStats:
    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.kinds: dict[str, int] = {}
        self.failed: list[str] = []
        self.redacted = 0

    def fail(self, lineno: int, message: str) -> None:
        self.failed.append(f"line {lineno}: {message}")

    def count(self, row: p.ExportedRecord, outcome: p.ImportOutcome) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self.kinds[row.kind] = self.kinds.get(row.kind, 0) + 1

    def summary(self) -> str:
        kinds = ", ".join(
            f"{n} {'memories' if kind == 'memory' else kind + 's'}"
            for kind, n in sorted(self.kinds.items())
        )
        o = self.outcomes
        return (
            f"imported {sum(self.kinds.values())} records ({kinds or 'none'}): "
            f"{o.get('new', 0)} new, {o.get('present', 0)} already there, "
            f"{o.get('duplicate', 0)} duplicates of stored records; "
            f"{self.redacted} redacted; {len(self.failed)} failed"
        )


async def _send(
    rc: RecallClient, batch: list[tuple[int, p.ExportedRecord]], stats: _ImportStats
) -> None:
    """Import ``batch`` ((line number, row) each); a row the daemon refuses is reported by
    its line and the others are sent again without it."""
    while batch:
        try:
            reply = await rc.call(p.Import(records=[row for _, row in batch]), p.Imported)
        except RemoteError as exc:
            at = _ROW_AT.search(exc.message) if exc.code == "invalid_request" else None
            if at is None or int(at.group(1)) >= len(batch):
                for lineno, _ in batch:
                    stats.fail(lineno, f"{exc.code}: {exc.message}")
                return
            lineno, _ = batch.pop(int(at.group(1)))
            stats.fail(lineno, f"{exc.code}: {_ROW_AT.sub('', exc.message, count=1)}")
            continue
        for (_, row), outcome in zip(batch, reply.outcomes, strict=True):
            stats.count(row, outcome)
        stats.redacted += reply.redacted
        return


async def _import(args: argparse.Namespace) -> int:
    try:
        lines = await anyio.to_thread.run_sync(_read_lines, args.file)
    except OSError as exc:
        say(f"recallctl import: cannot read {args.file}: {exc.strerror or exc}")
        return 1
    stats = _ImportStats()
    bar = Progress("importing", len(lines))
    try:
        async with _connect(args) as rc:
            batch: list[tuple[int, p.ExportedRecord]] = []
            size = 0
            for lineno, line in enumerate(lines, 1):
                bar.advance()
                if not line.strip():
                    continue
                try:
                    row = _row(line)
                except ValueError as exc:
                    stats.fail(lineno, str(exc))
                    continue
                # As the request carries it: a request stays inside the frame.
                encoded = len(msgspec.msgpack.encode(row))
                if encoded > MAX_ROW_BYTES:
                    stats.fail(lineno, f"{encoded} bytes encoded: a row is at most {MAX_ROW_BYTES}")
                    continue
                if batch and (len(batch) == IMPORT_ROWS or size + encoded > IMPORT_BYTES):
                    await _send(rc, batch, stats)
                    batch, size = [], 0
                batch.append((lineno, row))
                size += encoded
            await _send(rc, batch, stats)
    finally:
        bar.close()
        # What committed stays committed: say so, also when the daemon went away midway.
        say(stats.summary())
        for message in stats.failed[:MAX_REPORTED_ERRORS]:
            say(f"  {message}")
        if len(stats.failed) > MAX_REPORTED_ERRORS:
            say(f"  ... and {len(stats.failed) - MAX_REPORTED_ERRORS} more")
    return 1 if stats.failed else 0


# --------------------------------------------------------------------------- backup


async def _backup(args: argparse.Namespace) -> int:
    # A CLI with one task: blocking path calls are fine here.
    dest = Path(args.dest).expanduser().absolute()  # noqa: ASYNC240
    if dest.exists() and not args.force:
        say(f"recallctl: {dest} exists; pass --force to replace it")
        return 1
    try:
        async with _connect(args) as rc:
            report = (await rc.call(p.Status(), p.StatusResult)).report
        data_dir = Path(report.data_dir)
    except DaemonUnavailable:
        data_dir = paths.data_dir()
        say(f"daemon not running; backing up {data_dir} directly")
    source = data_dir / DB_NAME
    if not source.exists():
        say(f"recallctl: no database at {source}")
        return 1
    started = time.perf_counter()
    records = await anyio.to_thread.run_sync(_backup_sync, source, dest)
    took = time.perf_counter() - started
    size = dest.stat().st_size / 1024 / 1024
    say(f"backed up {records} records ({size:.1f} MiB) from {source} to {dest} in {took:.2f}s")
    return 0


def _backup_sync(source: Path, dest: Path) -> int:
    """SQLite's online backup, in one step from a read-only connection.

    One step copies every page under a single read transaction, so the copy is the database
    as of one instant even while the daemon goes on writing (WAL: the writer is never
    blocked). A multi-step backup would restart whenever the daemon wrote in between.
    """
    partial = dest.with_name(dest.name + ".partial")
    partial.unlink(missing_ok=True)
    # Made new and private here (never through a planted symlink); SQLite then fills it.
    os.close(create_private(partial))
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=10)
    old = os.umask(0o077)  # a backup holds everything the database does: owner only
    try:
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst)
            # A self-contained file (no -wal/-shm beside it), checked before it is used.
            dst.execute("PRAGMA journal_mode=DELETE")
            check = dst.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(f"the backup failed its check: {check}")
            records = dst.execute(
                "SELECT count(*) FROM records WHERE tombstoned_at IS NULL"
            ).fetchone()[0]
        finally:
            dst.close()
        with open(partial, "rb+") as fh:
            os.fsync(fh.fileno())
        partial.replace(dest)
    finally:
        os.umask(old)
        src.close()
        partial.unlink(missing_ok=True)
    return int(records)


# --------------------------------------------------------------------------- reindex


async def _reindex(args: argparse.Namespace) -> int:
    async with _connect(args) as rc:
        # The model must be up to re-embed with; give a starting daemon time to load it.
        await rc.call(p.Status(wait_model_s=args.wait), p.StatusResult)
        started = await rc.call(p.Reindex(), p.ReindexStarted)
        say(f"re-embedding {started.queued} records with {started.model}")
        if args.no_wait:
            return 0
        bar = Progress("reindexing", started.queued)
        idle_polls = 0
        while True:
            report = (await rc.call(p.Status(), p.StatusResult)).report
            backlog = report.index.embedding_backlog
            bar.update(max(0, started.queued - backlog))
            # A vector is committed before it reaches the index: done when both agree (or, if
            # some record cannot be embedded, when nothing has moved for a while).
            idle_polls = idle_polls + 1 if backlog == 0 else 0
            if backlog == 0 and (report.index.size >= started.queued or idle_polls > 50):
                break
            await anyio.sleep(args.interval)
        bar.close()
    say(f"reindexed: {report.index.size} vectors in the index")
    return 0


# --------------------------------------------------------------------------- workspace


def _workspace_path(path: str, exact: bool) -> str:
    """The workspace a path names: like recall-mcp, the git root above it (unless exact);
    the daemon derives its identity. A name that is no path here and starts with none of
    ``/ . ~`` is an identity already (``github.com/acme/app``, ``git-root:<commit>``)."""
    given = Path(path).expanduser()
    if not given.exists() and not path.startswith(("/", ".", "~")):
        return path
    if exact or not given.exists():
        return os.path.abspath(given)
    return paths.find_workspace(given)


async def _workspace(args: argparse.Namespace) -> int:
    async with _connect(args) as rc:
        if args.action == "list":
            listing = await rc.call(p.WorkspaceList(), p.WorkspaceListResult)
            if args.json:
                print_json(listing)
                return 0
            gate = "on" if listing.require_approval else "off (every workspace is served)"
            print(f"require_approval {gate}")
            print(f"approved ({len(listing.approved)})")
            for a in listing.approved:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(a.approved_at))
                print(f"  {a.workspace}  (by {a.approved_by}, {when})")
            if listing.refused:
                print(f"refused since start, not approved ({len(listing.refused)})")
                for r in listing.refused:
                    print(f"  {r.workspace}  ({r.refused} requests)")
            return 0
        workspace = _workspace_path(args.path, args.exact)
        request: p.Request = (
            p.WorkspaceApprove(workspace=workspace)
            if args.action == "approve"
            else p.WorkspaceRevoke(workspace=workspace)
        )
        changed = await rc.call(request, p.WorkspaceChanged)
    if args.action == "approve":
        print(f"approved {changed.workspace}" + ("" if changed.changed else " (already approved)"))
    else:
        print(f"revoked {changed.workspace}" + ("" if changed.changed else " (was not approved)"))
    return 0


async def _workspaces(args: argparse.Namespace) -> int:
    """recallctl workspaces: every workspace by identity, with the paths it was seen at."""
    async with _connect(args) as rc:
        listing = await rc.call(p.WorkspaceList(), p.WorkspaceListResult)
    if args.json:
        print_json(listing.workspaces)
        return 0
    approved = {a.workspace for a in listing.approved}
    for ws in listing.workspaces:
        mark = "  (approved)" if ws.workspace in approved else ""
        print(f"{ws.workspace}  {ws.records} records{mark}")
        for path in ws.aliases:
            if path != ws.workspace:
                print(f"  at {path}")
    if not listing.workspaces:
        print("no workspaces yet")
    return 0


# --------------------------------------------------------------------------- relevance


async def _relevance(args: argparse.Namespace) -> int:
    """recallctl relevance show|reset: the calibration this workspace's searches rank by,
    learned from use; reset forgets it (the workspace's only, or all of the user's)."""
    async with _connect(args) as rc:
        if args.action == "reset":
            req = p.RelevanceReset(workspace_only=args.only_workspace)
            cleared = await rc.call(req, p.RelevanceCleared)
            where = "this workspace's" if args.only_workspace else "every"
            print(f"cleared {cleared.cleared} of {where} learned calibrations")
            return 0
        shown = await rc.call(p.RelevanceShow(), p.RelevanceShown)
    if args.json:
        print_json(shown)
        return 0
    c, prior = shown.calibration, shown.prior
    print(f"workspace {shown.workspace}: ranked by the {c.source}'s calibration")
    print(f"  bias {c.bias:+.3f}  lexical {c.lexical:.3f}  semantic {c.semantic:.3f}")
    print(f"  updates: {c.updates} in this workspace, {c.user_updates} of the user's")
    print(f"  prior: bias {prior.bias:+.3f}  lexical {prior.lexical:.3f}", end="")
    print(f"  semantic {prior.semantic:.3f}")
    return 0


# --------------------------------------------------------------------------- agent credentials

_AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _token_path(agent: str, output: str | None) -> Path:
    if output is not None:
        return Path(output)
    if _AGENT_NAME.fullmatch(agent) is None:
        raise ValueError(f"agent name {agent!r} is not a plain file name; give -o FILE")
    return paths.config_dir() / "agents" / f"{agent}.token"


def _write_token(path: Path, token: str, replace: bool) -> None:
    """Write ``token`` to ``path`` (0600, in a private directory), never through a symlink."""
    paths.ensure_private_dir(path.parent)
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    with os.fdopen(create_private(partial), "w") as fh:
        fh.write(token + "\n")
    _publish(partial, path, replace)


async def _agent(args: argparse.Namespace) -> int:
    async with _connect(args) as rc:
        if args.action == "list":
            listing = await rc.call(p.AgentList(), p.AgentListResult)
            if args.json:
                print_json(listing)
                return 0
            print(f"agents with a credential ({len(listing.agents)})")
            for a in listing.agents:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(a.created_at))
                print(f"  {a.agent}  (since {when})")
            return 0
        if args.action == "revoke":
            changed = await rc.call(p.AgentRevoke(agent=args.name), p.AgentChanged)
            print(
                f"revoked the credential of {changed.agent}"
                if changed.changed
                else f"{changed.agent} had no credential"
            )
            return 0
        try:
            dest = _token_path(args.name, args.output)
        except ValueError as exc:
            say(f"recallctl agent add: {exc}")
            return 1
        if not args.rotate and (dest.exists() or dest.is_symlink()):
            say(f"recallctl agent add: {dest} exists; pass --rotate to replace the credential")
            return 1
        enrolled = await rc.call(
            p.AgentEnroll(agent=args.name, rotate=args.rotate), p.AgentEnrolled
        )
    await anyio.to_thread.run_sync(_write_token, dest, enrolled.token, args.rotate)
    what = "replaced" if enrolled.rotated else "created"
    print(f"{what} the credential of agent {enrolled.agent} in {dest} (0600)")
    print("give it to this agent's launcher only, e.g.:")
    print(f"  recall-mcp --agent {enrolled.agent} --agent-token-file {dest}")
    print(f"from now on a connection naming {enrolled.agent} without it is refused")
    return 0


# --------------------------------------------------------------------------- doctor


async def _doctor(args: argparse.Namespace) -> int:
    checks: list[p.DoctorCheck] = [_check_config()]
    sock = Path(args.socket) if args.socket else paths.socket_path()
    checks.append(_check_socket(sock))
    try:
        async with _connect(args) as rc:
            status = (await rc.call(p.Status(), p.StatusResult)).report
            checks.append(
                p.DoctorCheck(
                    name="daemon",
                    ok=True,
                    detail=f"recalld {status.version} pid {status.pid}, {status.state}, "
                    f"up {status.uptime_s:.0f}s",
                )
            )
            with anyio.fail_after(args.wait + 120):
                result = await rc.call(p.Doctor(wait_model_s=args.wait), p.DoctorResult)
            checks.extend(result.checks)
    except DaemonUnavailable as exc:
        checks.append(p.DoctorCheck(name="daemon", ok=False, detail=str(exc)))
        checks.append(await anyio.to_thread.run_sync(_check_database_offline, paths.data_dir()))
        for name in ("model", "index"):
            checks.append(
                p.DoctorCheck(name=name, ok=False, detail="not checked: the daemon is not running")
            )
    if args.json:
        print_json({"ok": all(c.ok for c in checks), "checks": checks})
    else:
        for c in checks:
            print(f"{'ok  ' if c.ok else 'FAIL'}  {c.name:<9} {c.detail}")
    failed = [c.name for c in checks if not c.ok]
    if failed:
        say(f"recallctl: doctor found problems: {', '.join(failed)}")
        return 1
    return 0


def _check_config() -> p.DoctorCheck:
    from recalld.config import ConfigError, load_settings  # light: msgspec only

    path = paths.config_file()
    try:
        load_settings()
    except ConfigError as exc:
        return p.DoctorCheck(name="config", ok=False, detail=str(exc))
    where = str(path) if path.exists() else f"no {path}; defaults"
    return p.DoctorCheck(name="config", ok=True, detail=f"{where} (recallctl config shows it)")


def _check_socket(sock: Path) -> p.DoctorCheck:
    def fail(detail: str) -> p.DoctorCheck:
        return p.DoctorCheck(name="socket", ok=False, detail=f"{sock}: {detail}")

    try:
        st = sock.lstat()
    except FileNotFoundError:
        return fail("does not exist (daemon not running, or not socket-activated)")
    if not stat.S_ISSOCK(st.st_mode):
        return fail("is not a socket")
    if st.st_uid != os.getuid():
        return fail(f"is owned by uid {st.st_uid}, not you ({os.getuid()})")
    if st.st_mode & 0o077:
        return fail(f"mode {st.st_mode & 0o777:04o}, should be 0600: other users could connect")
    parent = sock.parent.stat()
    if parent.st_uid != os.getuid() or parent.st_mode & 0o077:
        return fail(
            f"its directory has mode {parent.st_mode & 0o777:04o} "
            f"(owner uid {parent.st_uid}); should be 0700 and yours"
        )
    return p.DoctorCheck(
        name="socket", ok=True, detail=f"{sock} (0600, directory 0700, owned by you)"
    )


def _check_database_offline(data_dir: Path) -> p.DoctorCheck:
    db = data_dir / DB_NAME
    if not db.exists():
        return p.DoctorCheck(name="database", ok=False, detail=f"no database at {db}")
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check(20)")]
    except sqlite3.DatabaseError as exc:
        problems = [str(exc)]
    finally:
        conn.close()
    if problems != ["ok"]:
        return p.DoctorCheck(
            name="database", ok=False, detail=f"{db}: integrity_check: {'; '.join(problems)}"
        )
    return p.DoctorCheck(name="database", ok=True, detail=f"{db}: integrity_check ok")


# --------------------------------------------------------------------------- config


async def _config(args: argparse.Namespace) -> int:
    from recalld.config import ENV, ConfigError, load_settings  # light: msgspec only

    path = paths.config_file()
    try:
        settings = load_settings()
    except ConfigError as exc:
        say(f"recallctl: {exc}")
        return 1
    in_file = paths.file_config()
    values = msgspec.structs.asdict(settings)
    env_of = {key: var for var, key in ENV.items() if os.environ.get(var)}
    source = {
        key: (f"env {env_of[key]}" if key in env_of else "file" if key in in_file else "default")
        for key in values
    }
    effective = {**values, "socket": str(settings.socket_path), "data_dir": str(settings.data_path)}
    if args.json:
        print_json(
            {
                "config_file": str(path),
                "exists": path.exists(),
                "settings": effective,
                "sources": source,
            }
        )
        return 0
    print(f"# {path}{'' if path.exists() else ' (not present: defaults)'}")
    for key, value in effective.items():
        shown = msgspec.json.encode(value).decode()
        print(f"{key} = {shown}  # {source[key]}")
    return 0


# --------------------------------------------------------------------------- parsers


def add_commands(sub: Any) -> None:
    """Register the operations subcommands on recallctl's subparsers."""
    ex = sub.add_parser(
        "export",
        help="write records as JSON Lines",
        description="Write every record (default: memories) as JSON Lines, one record with "
        "all its fields per line, as the store holds it (forgotten ones too, with their "
        "tombstoned_at: they are never served, and kept): a memory with its metadata "
        "(a fact's subject and supersession), labels, links, paths, uses and events; an "
        "episode with its chain and verdict; an experience with its roll-up and lessons; a "
        "lesson with its support. `recallctl import` stores them again as they were. A "
        "progress bar shows on a terminal.",
    )
    ex.add_argument(
        "-o", "--output", metavar="FILE", help="file to write, created 0600 (default: stdout)"
    )
    ex.add_argument("--force", action="store_true", help="replace FILE if it exists")
    ex.add_argument(
        "--kind",
        default="memory",
        help="record kind to export (memory, experience, lesson, episode), or "
        "'all' (default: memory)",
    )
    ex.add_argument(
        "--in",
        dest="workspace_filter",
        metavar="WORKSPACE",
        help="only this workspace (default: every workspace)",
    )
    ex.set_defaults(local=_export)

    im = sub.add_parser(
        "import",
        help="store exported records again, as they were",
        description="Store each JSON Lines row of `recallctl export` again as it was: its "
        "id, times, agent and workspace, a fact's subject and supersession, a memory's uses, "
        "links and paths, an episode's chain and verdict, an experience's lessons and their "
        "support. Every row passes the ingest stage (free text redacted, bounds checked); a "
        "row already there (its id, or its content) is left alone, so importing a file "
        "twice stores nothing new. A bad line is reported by its number and skipped. Exits 1 "
        "if any line failed.",
    )
    im.add_argument("file", help="JSON Lines file, or - for stdin")
    im.set_defaults(local=_import)

    bk = sub.add_parser(
        "backup",
        help="copy the database, consistent while the daemon runs",
        description="Copy the SQLite database with SQLite's online backup API (one read "
        "transaction: a consistent snapshot while the daemon goes on writing). The vector "
        "index is not copied: recalld rebuilds it from the database. To restore, stop "
        "recalld and put the file in the data dir as recalld.db.",
    )
    bk.add_argument("dest", help="file to write")
    bk.add_argument("--force", action="store_true", help="replace DEST if it exists")
    bk.set_defaults(local=_backup)

    ri = sub.add_parser(
        "reindex",
        help="re-embed every record (e.g. after a model change)",
        description="Queue every record for embedding with the daemon's current model and "
        "show progress until done. Searches stay semantic meanwhile (old vectors serve until "
        "replaced).",
    )
    ri.add_argument("--no-wait", action="store_true", help="return once queued")
    ri.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wait up to SECONDS for the model to load first (default 60)",
    )
    ri.add_argument("--interval", type=float, default=0.25, help=argparse.SUPPRESS)
    ri.set_defaults(local=_reindex)

    ws = sub.add_parser(
        "workspace",
        help="approve, revoke or list workspaces",
        description="With require_approval = true in the config, recalld serves only "
        "approved workspaces; agents elsewhere get an error naming this command.",
    )
    ws_sub = ws.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in (("approve", "approve a workspace"), ("revoke", "withdraw an approval")):
        a = ws_sub.add_parser(
            action,
            help=text,
            description=f"{text[0].upper()}{text[1:]}. "
            "PATH is taken to its git root, as recall-mcp does.",
        )
        a.add_argument("path", metavar="PATH")
        a.add_argument("--exact", action="store_true", help="use PATH as given, not its git root")
    ls = ws_sub.add_parser(
        "list",
        help="list approved and refused workspaces",
        description="List approved workspaces, and those refused since the daemon started.",
    )
    ls.add_argument("--json", action="store_true", help="print JSON")
    ws.set_defaults(local=_workspace)
    known = sub.add_parser(
        "workspaces",
        help="list workspaces by identity, with the paths they were seen at",
        description="A workspace is its repository: the normalised origin remote, else "
        "git-root:<root commit>, else the directory's path. Each is listed with its records "
        "and the local paths (checkouts, worktrees) it was seen at.",
    )
    known.add_argument("--json", action="store_true", help="print JSON")
    known.set_defaults(local=_workspaces)

    rl = sub.add_parser(
        "relevance",
        help="show or reset the relevance calibration learned from use",
        description="memory_search scores a hit's relevance by a calibration each store "
        "learns from the outcomes its agents record (memory_record_use with a hit's "
        "use_token): the workspace's, else the user's, else the shipped prior.",
    )
    rl_sub = rl.add_subparsers(dest="action", required=True, metavar="ACTION")
    rs = rl_sub.add_parser("show", help="the calibration this workspace ranks by")
    rs.add_argument("--json", action="store_true", help="print JSON")
    rr = rl_sub.add_parser(
        "reset",
        help="forget what was learned (admin)",
        description="Delete the learned calibrations: every one of yours, or with "
        "--workspace this workspace's only (it then ranks by yours). The recorded outcomes "
        "stay.",
    )
    rr.add_argument(
        "--workspace",
        dest="only_workspace",
        action="store_true",
        help="only this workspace's calibration",
    )
    rl.set_defaults(local=_relevance)

    ag = sub.add_parser(
        "agent",
        help="give agent names their own credentials",
        description="An agent name with a credential can be claimed only with its token "
        "(or the admin token): recall-mcp presents it with --agent-token-file. This makes "
        "the agent partition a real boundary between agents that cannot read each other's "
        "token files (sandboxed ones); it does not stop a process that can read them.",
    )
    ag_sub = ag.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = ag_sub.add_parser(
        "add",
        help="create a credential for an agent name",
        description="Create a credential for NAME and write its token "
        "to a 0600 file (default: $XDG_CONFIG_HOME/recalld/agents/"
        "NAME.token).",
    )
    add.add_argument("name", metavar="NAME")
    add.add_argument("-o", "--output", metavar="FILE", help="where to write the token")
    add.add_argument(
        "--rotate",
        action="store_true",
        help="replace an existing credential (the old token stops working)",
    )
    rv = ag_sub.add_parser("revoke", help="remove an agent name's credential")
    rv.add_argument("name", metavar="NAME")
    al = ag_sub.add_parser("list", help="list the agent names that have a credential")
    al.add_argument("--json", action="store_true", help="print JSON")
    ag.set_defaults(local=_agent)

    dr = sub.add_parser(
        "doctor",
        help="check the socket, database, index and model",
        description="Check the config, the socket and its permissions, that the daemon "
        "answers, PRAGMA integrity_check, that the vector index matches SQLite, that the "
        "model loaded, and that the writer commits. Exits 1 if any check fails.",
    )
    dr.add_argument("--json", action="store_true", help="print JSON")
    dr.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="wait up to SECONDS for a loading model (default 30)",
    )
    dr.set_defaults(local=_doctor)

    cf = sub.add_parser(
        "config",
        help="print the effective config",
        description="Print every setting as the daemon would see it (config.toml, then "
        "environment overrides) and where each value comes from. Exits 1 if the config "
        "is invalid.",
    )
    cf.add_argument("--json", action="store_true", help="print JSON")
    cf.set_defaults(local=_config)
