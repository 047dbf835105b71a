"""``recallctl connect HOST`` / ``disconnect HOST`` / ``connect --list``: wire recalld into an
agent host's own config files.

Each host keeps its MCP servers in a file of its own shape (:mod:`.agent_hosts`); connect
writes the ``recalld`` server there (``recall-mcp``, ``--agent`` named after the host) and,
where the host runs hook commands, the capture, context and roll-up hooks (``recallctl ...``).
Three scopes: the user's own files (this install's absolute paths); a project's files
(``--project DIR``, meant to be committed: the commands by name, from PATH, and nothing else
of this user's); Claude Code's local scope (``--project DIR --local``: this user's, for that
project, never committed). Files are read and written by :mod:`.host_files` (regular files
only, bounded, and a project's never outside the project). Every file is parsed before any is
written, so a file that does not parse changes nothing; a changed file is backed up beside
itself first; a second run finds nothing to change and says so.
"""

from __future__ import annotations

import argparse
import difflib
import json
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .agent_hosts import HOSTS, SERVER_NAME, HookSpec, Host, claude_project_key, excluding
from .host_files import BACKUP_SUFFIX, ConfigError, Edit, HostFile, commit, confine

__all__ = ["Target", "add_commands", "plan"]

Scope = Literal["user", "project", "local"]
# Marks the switch connect turned on (TOML), so that disconnect takes back only its own.
_OURS_COMMENT = "recalld's hooks need it (recallctl connect)"


@dataclass(frozen=True)
class Target:
    """Where connect writes: the user's files, or a project's (``project``, resolved)."""

    scope: Scope
    project: Path | None = None

    def command(self, name: str) -> str:
        """How a file of this scope names a command of this install: by name in a project's
        file (each clone has its own install on PATH), else by its absolute path."""
        return name if self.scope == "project" else str(_bin(name))


def _bin(name: str) -> Path:
    """A command of this install: beside the interpreter that runs recallctl."""
    return Path(sys.executable).parent / name


def _is_ours(command: object) -> bool:
    """A hook command recalld wrote: any install's recallctl (a moved checkout's included)."""
    if not isinstance(command, str):
        return False
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    return bool(argv) and Path(argv[0]).name == "recallctl"


# ------------------------------------------------------------------ where each file lies


@dataclass(frozen=True)
class _Files:
    servers: Path
    servers_key: tuple[str, ...]  # the path of recalld's entry in it
    hooks: Path | None


def _files(host: Host, target: Target) -> _Files:
    """The files ``target`` means for ``host``, every symlink resolved; a project's stay
    inside the project (:func:`confine` raises ConfigError otherwise)."""
    entry = (host.servers_key, SERVER_NAME)
    hooks_user = host.hooks_user_file() if host.hooks_user_file else None
    if target.project is None:
        return _Files(host.user_file().resolve(), entry, hooks_user and hooks_user.resolve())
    project = target.project
    if target.scope == "local":
        assert host.local_hooks_file is not None
        key = str(claude_project_key(project))
        return _Files(
            host.user_file().resolve(),
            ("projects", key, *entry),
            confine(project / host.local_hooks_file, project),
        )
    hooks = confine(project / host.hooks_project_file, project) if host.hooks_project_file else None
    return _Files(confine(project / host.project_file, project), entry, hooks)


# ------------------------------------------------------------------ what connect changes


def _is_recalld_group(group: Any) -> bool:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return (
        isinstance(hooks, list)
        and bool(hooks)
        and all(isinstance(h, dict) and _is_ours(h.get("command")) for h in hooks)
    )


def _hook_group(host: Host, spec: HookSpec, target: Target) -> dict[str, Any]:
    group: dict[str, Any] = {}
    if spec.tools and host.tool_prefix:
        group["matcher"] = excluding(host.tool_prefix)
    command = shlex.join([target.command("recallctl"), "--agent", host.name, *spec.argv])
    hook: dict[str, Any] = {
        "type": "command",
        "command": command,
        "timeout": host.timeout(spec),
    }
    if spec.background and host.background:
        hook["async"] = True
    group["hooks"] = [hook]
    return group


def _wanted(host: Host, target: Target) -> dict[str, list[dict[str, Any]]]:
    """recalld's hook groups, event by event, in the order the host runs them."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for spec in host.hooks:
        groups.setdefault(spec.event, []).append(_hook_group(host, spec, target))
    return groups


def _theirs(file: HostFile) -> bool:
    """Whether ``file`` holds hooks of anyone else (Codex's ``hooks.state`` is no hook)."""
    hooks = file.get(("hooks",))
    if not isinstance(hooks, dict):
        return False
    return any(
        isinstance(groups, list) and any(not _is_recalld_group(g) for g in groups)
        for event, groups in hooks.items()
        if event != "state"
    )


def _edit_hooks(file: HostFile, wanted: dict[str, list[dict[str, Any]]]) -> None:
    """recalld's hook groups in a host's hooks file (Claude Code's shape: event -> groups of
    hooks) made ``wanted`` (empty: none): each event's groups of everyone else stay as they
    are (bytes included); recalld's, of any install and any event, are replaced by
    ``wanted``'s or removed, and an event or a ``hooks`` left empty by that goes too."""
    hooks = file.get(("hooks",))
    if hooks is not None and not isinstance(hooks, dict):
        raise ConfigError(f"cannot edit {file.path}: hooks is not an object")
    events = [e for e in (hooks or {}) if e != "state"]
    events += [e for e in wanted if e not in events]
    removed = False
    for event in events:
        path = ("hooks", event)
        groups = file.get(path)
        if groups is not None and not isinstance(groups, list):
            if event not in wanted:
                continue  # a setting of the host's own beside the events, say
            raise ConfigError(f"cannot edit {file.path}: hooks.{event} is not a list")
        groups = groups or []
        ours = [i for i, group in enumerate(groups) if _is_recalld_group(group)]
        want = wanted.get(event, [])
        if [groups[i] for i in ours] == want:
            continue
        if not want and len(ours) == len(groups):
            file.delete(path)
            removed = True
            continue
        for i in reversed(ours):
            file.remove(path, i)
        for group in want:
            file.append(path, group)
    if removed and file.get(("hooks",)) == {}:
        file.delete(("hooks",))


def _edit_switch(file: HostFile, host: Host, *, connect: bool) -> list[str]:
    """The host's switches for hooks in ``file``: connect turns hooks on (``hooks_on``) when
    the file says nothing of them, marked as recalld's; disconnect takes back only its own.
    A user's own "off" is theirs to change: left, and said (the notes returned)."""
    on = host.hooks_on
    if not connect:
        if on and file.comment_of(on) == _OURS_COMMENT:
            file.delete(on)
            if file.get(on[:-1]) == {}:
                file.delete(on[:-1])
        return []
    said = [(path, file.get(path)) for path, _off in host.hooks_off]
    if on and all(value is None for _path, value in said):
        file.set(on, True, comment=_OURS_COMMENT)
    return [
        f"hooks are turned off in {file.path} ({'.'.join(path)} = {json.dumps(off)}): "
        f"{host.title} runs none of them, recalld's included, until you turn them on"
        for (path, off), (_path, value) in zip(host.hooks_off, said, strict=True)
        if value == off
    ]


def plan(host: Host, target: Target, *, connect: bool) -> tuple[list[Edit], list[str]]:
    """The edits connect (or disconnect) makes, computed without writing anything, and
    notes on what the files say that the user should know.

    Raises:
        ConfigError: a file cannot be read or parsed, or lies outside the project
            (nothing was written).
    """
    files = _files(host, target)
    servers = HostFile(files.servers, host.fmt, focus=files.servers_key[:-1])
    if connect:
        servers.set(files.servers_key, host.server_entry(target.command("recall-mcp")))
    else:
        servers.delete(files.servers_key)
    edits = [servers]
    notes = []
    if files.hooks is not None and host.hooks:
        wanted = _wanted(host, target) if connect else {}
        # Gemini CLI's hooks share its servers' file: one parse, one edit, one write.
        hooks = servers if files.hooks == files.servers else HostFile(files.hooks, host.hooks_fmt)
        if hooks is not servers:
            edits.append(hooks)
        if host.hooks_in_config and target.scope != "local":
            # One place per layer: where the user's own hooks are (config.toml's [hooks] if
            # any are there), hooks.json otherwise; recalld's leave the other.
            here, there = (servers, hooks) if _theirs(servers) else (hooks, servers)
            _edit_hooks(there, {})
            _edit_hooks(here, wanted)
            notes += _edit_switch(servers, host, connect=connect)
        else:
            _edit_hooks(hooks, wanted)
            notes += _edit_switch(hooks, host, connect=connect)
    return [file.edit() for file in edits], notes


def _diff(edit: Edit) -> str:
    return "".join(
        difflib.unified_diff(
            edit.before.splitlines(keepends=True),
            edit.after.splitlines(keepends=True),
            fromfile=f"{edit.path} (now)",
            tofile=f"{edit.path} (after)",
        )
    )


def status(host: Host, target: Target) -> str:
    """Whether recalld is in ``host``'s file: connected, another install's, or not."""
    try:
        files = _files(host, target)
        entry = HostFile(files.servers, host.fmt, focus=files.servers_key[:-1]).get(
            files.servers_key
        )
    except ConfigError as exc:
        return f"unreadable ({exc})"
    if entry is None:
        return "not connected"
    if not isinstance(entry, dict) or entry.get("command") != target.command("recall-mcp"):
        command = entry.get("command") if isinstance(entry, dict) else entry
        return f"connected to another install ({command})"
    if files.hooks is None or not host.hooks:
        return "connected"
    try:
        wanted = _wanted(host, target)
        places = [HostFile(files.hooks, host.hooks_fmt)]
        if host.hooks_in_config:
            places.append(HostFile(files.servers, host.fmt))
    except ConfigError:
        return "connected (hooks unreadable)"
    wired = any(
        all(
            group in (file.get(("hooks", e)) or [])
            for e, groups in wanted.items()
            for group in groups
        )
        for file in places
    )
    return "connected, hooks" if wired else "connected (no hooks)"


# ------------------------------------------------------------------ the commands


def _target(args: argparse.Namespace) -> Target:
    if not args.project:
        return Target("user")
    return Target("local" if args.local_scope else "project", Path(args.project).resolve())


def _check(host: Host, target: Target) -> list[str]:
    """Notes on what connect writes for ``target`` (printed after it).

    Raises:
        ConfigError: it cannot be written as asked: a local scope the host lacks, or a
            project file that would name a command not on PATH.
    """
    notes = []
    if target.scope == "local" and host.local_hooks_file is None:
        raise ConfigError(f"--local is Claude Code's scope; {host.title} has none")
    if target.scope == "project":
        for name in ("recall-mcp", "recallctl") if host.hooks else ("recall-mcp",):
            found = shutil.which(name)
            if found is None:
                raise ConfigError(
                    f"{name} is not on PATH: a project's files are shared, so they run it "
                    f"by name rather than by this install's path ({_bin(name)}); put "
                    f"{_bin(name).parent} on PATH, or connect without --project (for Claude "
                    "Code, --project DIR --local keeps it to you); nothing was changed"
                )
            if Path(found).resolve() != _bin(name).resolve():
                notes.append(f"{name} on PATH is {found}, not this install's {_bin(name)}")
    note = host.project_note if target.scope == "project" else host.user_note
    if note and target.project is not None:
        notes.append(note.format(dir=target.project))
    elif note and target.scope == "user":
        notes.append(note)
    return notes


async def _connect(args: argparse.Namespace) -> int:
    if args.list:
        return _list(_target(args))
    if args.host is None:
        print("recallctl connect: name a HOST (or --list)", file=sys.stderr)
        return 1
    return _apply(args, connect=True)


async def _disconnect(args: argparse.Namespace) -> int:
    return _apply(args, connect=False)


def _apply(args: argparse.Namespace, *, connect: bool) -> int:
    host = HOSTS[args.host]
    verb = "connect" if connect else "disconnect"
    target = _target(args)
    if args.local_scope and not args.project:
        print(f"recallctl {verb}: --local names a project: give --project DIR", file=sys.stderr)
        return 1
    try:
        notes = _check(host, target) if connect else []
        edits, found = plan(host, target, connect=connect)
        notes += found
    except ConfigError as exc:
        print(f"recallctl {verb}: {exc}", file=sys.stderr)
        return 1
    where = ""
    if target.scope == "local" and target.project is not None:
        where = f" [project: {claude_project_key(target.project)}]"
    changed = [e for e in edits if e.after != e.before]
    if not changed:
        state = "connected" if connect else "not connected"
        print(
            f"{host.name}: already {state}; nothing changed in "
            + ", ".join(str(e.path) for e in edits)
            + where
        )
        for note in notes:
            print(f"{host.name}: {note}")
        return 0
    for edit in changed:
        if args.dry_run:
            sys.stdout.write(_diff(edit))
            continue
        try:
            backup = commit(edit)
        except OSError as exc:
            print(f"recallctl {verb}: cannot write {edit.path}: {exc}", file=sys.stderr)
            return 1
        saved = f" (the old file is in {backup})" if backup else " (new file)"
        print(f"{host.name}: wrote {edit.path}{saved}{where}")
    if args.dry_run:
        print(f"{host.name}: dry run, nothing written")
    elif connect:
        print(f"{host.name}: restart {host.title} (or reload its MCP servers) to use recalld")
    for note in notes:
        print(f"{host.name}: {note}")
    return 0


def _list(target: Target) -> int:
    found = 0
    for host in HOSTS.values():
        if target.project is None and not host.installed():
            continue
        if target.scope == "local" and host.local_hooks_file is None:
            continue
        found += 1
        try:
            path = str(_files(host, target).servers)
        except ConfigError:
            path = str(target.project)
        print(f"{host.name:<12} {status(host, target):<24} {path}")
    if not found:
        print("no agent host found (looked for " + ", ".join(HOSTS) + ")")
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hosts = sorted(HOSTS)
    for name, connect in (("connect", True), ("disconnect", False)):
        what = "add recalld to" if connect else "remove recalld from"
        cmd = sub.add_parser(
            name,
            help=f"{what} an agent host's config ({', '.join(hosts)})",
            description=f"{what.capitalize()} HOST's own config files: the recalld MCP "
            "server (recall-mcp --agent HOST) and, for claude-code, codex and gemini, the "
            "capture, context and roll-up hooks. Files are edited in place (other entries "
            f"and comments kept), backed up beside themselves ({BACKUP_SUFFIX}) first; a "
            "file that does not parse, or a project's that lies outside the project, is "
            "refused and nothing changes.",
        )
        cmd.add_argument("host", nargs=None if not connect else "?", choices=hosts, metavar="HOST")
        cmd.add_argument(
            "--project",
            metavar="DIR",
            help="the project's files in DIR (.mcp.json, .cursor/mcp.json, ...), to be "
            "committed: they run recall-mcp and recallctl from PATH",
        )
        cmd.add_argument(
            "--local",
            dest="local_scope",
            action="store_true",
            help="with --project DIR, Claude Code's local scope: your servers for DIR in "
            "~/.claude.json, hooks in DIR/.claude/settings.local.json (not committed)",
        )
        cmd.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
        if connect:
            cmd.add_argument(
                "--list",
                action="store_true",
                help="each host found here, its config file and whether recalld is in it",
            )
            cmd.set_defaults(local=_connect)
        else:
            cmd.set_defaults(local=_disconnect, list=False)
