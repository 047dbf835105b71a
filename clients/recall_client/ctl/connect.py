"""``recallctl connect HOST`` / ``disconnect HOST`` / ``connect --list``: wire recalld into an
agent host's own config files.

Each host keeps its MCP servers in a file of its own shape (:data:`HOSTS`); connect writes
the ``recalld`` server there (this install's ``recall-mcp``, ``--agent`` named after the
host) and, where the host runs hook commands, the capture and context hooks (this install's
``recallctl ... capture`` and ``recallctl ... context``). Files are edited in place: JSON and
JSONC through :mod:`.jsonc_edit` (other members, comments and layout untouched), TOML through
tomlkit (likewise). Every file is parsed before any is written, so a file that does not parse
changes nothing; a changed file is backed up beside itself first; a second run finds nothing
to change and says so.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .capture import HOOK_TIMEOUT_S
from .context import CONTEXT_HOOK_TIMEOUT_S
from .jsonc_edit import JsonDocument, JsonSyntaxError

__all__ = ["HOSTS", "SERVER_NAME", "HookSpec", "Host", "add_commands", "hook_command", "plan"]

SERVER_NAME = "recalld"
BACKUP_SUFFIX = ".recalld-backup"
# A config file larger than this is no host's settings; refused rather than read whole.
MAX_CONFIG_BYTES = 16 * 1024 * 1024

Format = Literal["json", "jsonc", "toml"]


@dataclass(frozen=True)
class HookSpec:
    """One hook a host runs: on ``event`` (for tools matching ``matcher``), this recallctl
    with ``argv`` (``capture --quiet``, ``context``), given ``timeout`` seconds."""

    event: str
    matcher: str | None
    argv: tuple[str, ...]
    timeout: int = HOOK_TIMEOUT_S


_CAPTURE = ("capture", "--quiet")


def _context_hooks(host: str, prompt_event: str) -> tuple[HookSpec, ...]:
    """The context hooks: a session's start (new, resumed, cleared or compacted) and each
    prompt, ``--host`` naming whose events and output the command serves."""
    argv = ("context", "--host", host)
    return (
        HookSpec("SessionStart", None, argv, CONTEXT_HOOK_TIMEOUT_S),
        HookSpec(prompt_event, None, argv, CONTEXT_HOOK_TIMEOUT_S),
    )


# Claude Code's capture hooks, as docs/usage.md's "Capturing episodes with hooks" shows them.
CLAUDE_HOOKS = (
    HookSpec("PostToolUse", "*", _CAPTURE),
    HookSpec("PostToolUseFailure", "*", _CAPTURE),
    HookSpec("Stop", None, _CAPTURE),
    *_context_hooks("claude-code", "UserPromptSubmit"),
)
# Codex's hooks.json has Claude Code's shape; its matcher is a regex over the tool's name,
# so none is given (every tool). A failed call is a PostToolUse too (it has no failure event).
CODEX_HOOKS = (
    HookSpec("PostToolUse", None, _CAPTURE),
    HookSpec("Stop", None, _CAPTURE),
    *_context_hooks("codex", "UserPromptSubmit"),
)
# Gemini CLI: AfterTool is its PostToolUse, AfterAgent its Stop, BeforeAgent its
# UserPromptSubmit; its timeouts are milliseconds (Host.timeout_unit).
GEMINI_HOOKS = (
    HookSpec("AfterTool", None, _CAPTURE),
    HookSpec("AfterAgent", None, _CAPTURE),
    *_context_hooks("gemini", "BeforeAgent"),
)


@dataclass(frozen=True)
class Host:
    name: str  # the command's HOST and the agent name recall-mcp and the hooks use
    title: str
    fmt: Format
    user_file: Callable[[], Path]
    project_file: str  # relative to --project DIR
    servers_key: str
    # VS Code wants the transport named; the others take a command as stdio.
    typed: bool
    # Whether the host is on this machine (--list): its own directory exists.
    installed: Callable[[], bool]
    hooks_user_file: Callable[[], Path] | None = None
    hooks_project_file: str | None = None
    hooks: tuple[HookSpec, ...] = ()
    hooks_fmt: Format = "json"
    # A hook's timeout in the host's unit: seconds (1), or milliseconds (1000).
    timeout_unit: int = 1

    def server_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "stdio"} if self.typed else {}
        entry["command"] = str(_bin("recall-mcp"))
        entry["args"] = ["--agent", self.name]
        return entry


def _home() -> Path:
    return Path.home()


def _codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or _home() / ".codex")


def _vscode_user_dir() -> Path:
    if sys.platform == "darwin":
        return _home() / "Library" / "Application Support" / "Code" / "User"
    return Path(os.environ.get("XDG_CONFIG_HOME") or _home() / ".config") / "Code" / "User"


HOSTS: dict[str, Host] = {
    h.name: h
    for h in (
        Host(
            "claude-code",
            "Claude Code",
            "json",
            user_file=lambda: _home() / ".claude.json",
            project_file=".mcp.json",
            servers_key="mcpServers",
            typed=True,
            installed=lambda: (_home() / ".claude").is_dir() or (_home() / ".claude.json").exists(),
            hooks_user_file=lambda: _home() / ".claude" / "settings.json",
            hooks_project_file=".claude/settings.json",
            hooks=CLAUDE_HOOKS,
        ),
        Host(
            "codex",
            "Codex",
            "toml",
            user_file=lambda: _codex_home() / "config.toml",
            project_file=".codex/config.toml",
            servers_key="mcp_servers",
            typed=False,
            installed=lambda: _codex_home().is_dir(),
            # Codex reads hooks from hooks.json beside config.toml (or [hooks] tables in it);
            # the JSON file keeps them apart from the user's settings.
            hooks_user_file=lambda: _codex_home() / "hooks.json",
            hooks_project_file=".codex/hooks.json",
            hooks=CODEX_HOOKS,
        ),
        Host(
            "cursor",
            "Cursor",
            "json",
            user_file=lambda: _home() / ".cursor" / "mcp.json",
            project_file=".cursor/mcp.json",
            servers_key="mcpServers",
            typed=False,
            installed=lambda: (_home() / ".cursor").is_dir(),
        ),
        Host(
            "gemini",
            "Gemini CLI",
            # Gemini CLI strips comments from its settings before parsing them.
            "jsonc",
            user_file=lambda: _home() / ".gemini" / "settings.json",
            project_file=".gemini/settings.json",
            servers_key="mcpServers",
            typed=False,
            installed=lambda: (_home() / ".gemini").is_dir(),
            # Its hooks live in the same settings file as its servers.
            hooks_user_file=lambda: _home() / ".gemini" / "settings.json",
            hooks_project_file=".gemini/settings.json",
            hooks=GEMINI_HOOKS,
            hooks_fmt="jsonc",
            timeout_unit=1000,
        ),
        Host(
            "vscode",
            "VS Code (Copilot agent mode)",
            "jsonc",
            user_file=lambda: _vscode_user_dir() / "mcp.json",
            project_file=".vscode/mcp.json",
            servers_key="servers",
            typed=True,
            installed=lambda: _vscode_user_dir().is_dir(),
        ),
    )
}


def _bin(name: str) -> Path:
    """A command of this install: beside the interpreter that runs recallctl."""
    return Path(sys.executable).parent / name


def hook_command(host: Host, spec: HookSpec) -> str:
    return shlex.join([str(_bin("recallctl")), "--agent", host.name, *spec.argv])


def _is_ours(command: object) -> bool:
    """A hook command recalld wrote: any install's recallctl (a moved checkout's included)."""
    if not isinstance(command, str):
        return False
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    return bool(argv) and Path(argv[0]).name == "recallctl"


class ConfigError(Exception):
    """A host's file cannot be read or parsed; nothing was changed."""


# ------------------------------------------------------------------ one file's edit


@dataclass
class _Edit:
    path: Path
    before: str
    after: str
    existed: bool


class _File:
    """A host config file, parsed, edited in memory, written by :func:`_commit`."""

    def __init__(self, path: Path, fmt: Format) -> None:
        self.path = path
        self.fmt = fmt
        self.existed = path.exists()
        self.touched = False
        try:
            if self.existed and path.stat().st_size > MAX_CONFIG_BYTES:
                raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes")
            self.before = path.read_text(encoding="utf-8") if self.existed else ""
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
        # Only this command needs tomlkit.
        from tomlkit import parse
        from tomlkit.exceptions import TOMLKitError

        try:
            if fmt == "toml":
                self._toml = parse(self.before)
            else:
                self._json = JsonDocument(self.before, comments=fmt == "jsonc")
        except (JsonSyntaxError, TOMLKitError) as exc:
            raise ConfigError(
                f"cannot parse {path} ({exc}); fix or move it first, nothing was changed"
            ) from exc

    def get(self, path: tuple[str, ...]) -> Any:
        if self.fmt == "toml":
            value: Any = self._toml.unwrap()
            for key in path:
                if not isinstance(value, dict) or key not in value:
                    return None
                value = value[key]
            return value
        return self._json.get(path)

    def set(self, path: tuple[str, ...], value: Any) -> None:
        if self.get(path) == value:
            return  # already so: leave the text exactly as it is
        self.touched = True
        if self.fmt == "toml":
            self._toml_set(path, value)
        else:
            try:
                self._json.set(path, value)
            except JsonSyntaxError as exc:
                raise ConfigError(f"cannot edit {self.path}: {exc}") from exc

    def delete(self, path: tuple[str, ...]) -> None:
        if self.get(path) is None:
            return
        self.touched = True
        if self.fmt == "toml":
            parent: Any = self._toml
            for key in path[:-1]:
                parent = parent[key]
            del parent[path[-1]]
        else:
            self._json.delete(path)

    def append(self, path: tuple[str, ...], value: Any) -> None:
        """Add ``value`` to the JSON array at ``path``."""
        self.touched = True
        try:
            self._json.append(path, value)
        except JsonSyntaxError as exc:
            raise ConfigError(f"cannot edit {self.path}: {exc}") from exc

    def remove(self, path: tuple[str, ...], index: int) -> None:
        """Remove item ``index`` of the JSON array at ``path``."""
        self.touched = True
        self._json.remove(path, index)

    def _toml_set(self, path: tuple[str, ...], value: Any) -> None:
        import tomlkit

        parent: Any = self._toml
        for key in path[:-1]:
            if key not in parent:
                parent[key] = tomlkit.table(is_super_table=True)
            parent = parent[key]
            if not isinstance(parent, dict):
                raise ConfigError(f"cannot edit {self.path}: {key} is not a table")
        table = tomlkit.table()
        for k, v in value.items():
            table[k] = v
        table.add(tomlkit.nl())  # a blank line before whatever table follows
        if path[-1] in parent:
            del parent[path[-1]]
        parent[path[-1]] = table

    def edit(self) -> _Edit:
        if not self.touched:
            return _Edit(self.path, self.before, self.before, self.existed)
        after = self._toml.as_string() if self.fmt == "toml" else self._json.text
        return _Edit(self.path, self.before, after, self.existed)


def _commit(edit: _Edit) -> str | None:
    """Write ``edit`` (a backup of the old file first); the backup's path."""
    target = edit.path.resolve() if edit.path.is_symlink() else edit.path
    target.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    mode = 0o600
    if edit.existed:
        mode = target.stat().st_mode & 0o777
        backup = target.with_name(target.name + BACKUP_SUFFIX)
        _write(backup, edit.before, 0o600)
    _write(target, edit.after, mode)
    return str(backup) if backup else None


def _write(path: Path, text: str, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------ what connect changes


def _files(host: Host, project: Path | None) -> tuple[Path, Path | None]:
    if project is None:
        hooks = host.hooks_user_file() if host.hooks_user_file else None
        return host.user_file(), hooks
    hooks_rel = host.hooks_project_file
    return project / host.project_file, (project / hooks_rel) if hooks_rel else None


def _is_recalld_group(group: Any) -> bool:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return (
        isinstance(hooks, list)
        and bool(hooks)
        and all(isinstance(h, dict) and _is_ours(h.get("command")) for h in hooks)
    )


def _hook_group(host: Host, spec: HookSpec) -> dict[str, Any]:
    group: dict[str, Any] = {} if spec.matcher is None else {"matcher": spec.matcher}
    timeout = spec.timeout * host.timeout_unit
    group["hooks"] = [{"type": "command", "command": hook_command(host, spec), "timeout": timeout}]
    return group


def _edit_hooks(file: _File, host: Host, *, connect: bool) -> None:
    """recalld's hook groups in a host's hooks file (Claude Code's shape: event -> groups of
    hooks): each event's groups of everyone else stay as they are (bytes included);
    recalld's, of any install, are replaced by this install's (connect) or removed
    (disconnect), and a ``hooks`` left empty by that goes too."""
    removed = False
    for spec in host.hooks:
        path = ("hooks", spec.event)
        groups = file.get(path)
        if groups is not None and not isinstance(groups, list):
            raise ConfigError(f"cannot edit {file.path}: hooks.{spec.event} is not a list")
        groups = groups or []
        ours = [i for i, group in enumerate(groups) if _is_recalld_group(group)]
        wanted = _hook_group(host, spec)
        if connect and [groups[i] for i in ours] == [wanted]:
            continue
        if not connect and ours and len(ours) == len(groups):
            file.delete(path)
            removed = True
            continue
        for i in reversed(ours):
            file.remove(path, i)
        if connect:
            file.append(path, wanted)
    if removed and file.get(("hooks",)) == {}:
        file.delete(("hooks",))


def plan(host: Host, project: Path | None, *, connect: bool) -> list[_Edit]:
    """The edits connect (or disconnect) makes, computed without writing anything.

    Raises:
        ConfigError: a file cannot be read or parsed (nothing was written).
    """
    servers_path, hooks_path = _files(host, project)
    edits = []
    servers = _File(servers_path, host.fmt)
    key = (host.servers_key, SERVER_NAME)
    if connect:
        servers.set(key, host.server_entry())
    else:
        servers.delete(key)
    if hooks_path is not None and host.hooks:
        # Gemini CLI's hooks share its servers' file: one parse, one edit, one write.
        hooks = servers if hooks_path == servers_path else _File(hooks_path, host.hooks_fmt)
        _edit_hooks(hooks, host, connect=connect)
        if hooks is not servers:
            edits.append(hooks.edit())
    edits.insert(0, servers.edit())
    return edits


def _diff(edit: _Edit) -> str:
    return "".join(
        difflib.unified_diff(
            edit.before.splitlines(keepends=True),
            edit.after.splitlines(keepends=True),
            fromfile=f"{edit.path} (now)",
            tofile=f"{edit.path} (after)",
        )
    )


def _hooks_status(host: Host, project: Path | None) -> str:
    _, hooks_path = _files(host, project)
    if hooks_path is None or not host.hooks:
        return ""
    try:
        file = _File(hooks_path, host.hooks_fmt)
    except ConfigError:
        return " (hooks unreadable)"
    wired = all(
        _hook_group(host, spec) in (file.get(("hooks", spec.event)) or []) for spec in host.hooks
    )
    return ", hooks" if wired else " (no hooks)"


def status(host: Host, project: Path | None) -> str:
    """Whether recalld is in ``host``'s file: connected, another install's, or not."""
    servers_path, _ = _files(host, project)
    try:
        entry = _File(servers_path, host.fmt).get((host.servers_key, SERVER_NAME))
    except ConfigError as exc:
        return f"unreadable ({exc})"
    if entry is None:
        return "not connected"
    if isinstance(entry, dict) and entry.get("command") == str(_bin("recall-mcp")):
        return "connected" + _hooks_status(host, project)
    command = entry.get("command") if isinstance(entry, dict) else entry
    return f"connected to another install ({command})"


# ------------------------------------------------------------------ the commands


def _scope(args: argparse.Namespace) -> Path | None:
    return Path(args.project).resolve() if args.project else None


async def _connect(args: argparse.Namespace) -> int:
    if args.list:
        return _list(_scope(args))
    if args.host is None:
        print("recallctl connect: name a HOST (or --list)", file=sys.stderr)
        return 1
    return _apply(args, connect=True)


async def _disconnect(args: argparse.Namespace) -> int:
    return _apply(args, connect=False)


def _apply(args: argparse.Namespace, *, connect: bool) -> int:
    host = HOSTS[args.host]
    verb = "connect" if connect else "disconnect"
    try:
        edits = plan(host, _scope(args), connect=connect)
    except ConfigError as exc:
        print(f"recallctl {verb}: {exc}", file=sys.stderr)
        return 1
    changed = [e for e in edits if e.after != e.before]
    if not changed:
        state = "connected" if connect else "not connected"
        print(
            f"{host.name}: already {state}; nothing changed in "
            + ", ".join(str(e.path) for e in edits)
        )
        return 0
    for edit in changed:
        if args.dry_run:
            sys.stdout.write(_diff(edit))
            continue
        try:
            backup = _commit(edit)
        except OSError as exc:
            print(f"recallctl {verb}: cannot write {edit.path}: {exc}", file=sys.stderr)
            return 1
        saved = f" (the old file is in {backup})" if backup else " (new file)"
        print(f"{host.name}: wrote {edit.path}{saved}")
    if args.dry_run:
        print(f"{host.name}: dry run, nothing written")
    elif connect:
        print(f"{host.name}: restart {host.title} (or reload its MCP servers) to use recalld")
    return 0


def _list(project: Path | None) -> int:
    found = 0
    for host in HOSTS.values():
        if project is None and not host.installed():
            continue
        found += 1
        servers_path, _ = _files(host, project)
        print(f"{host.name:<12} {status(host, project):<24} {servers_path}")
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
            "server (this install's recall-mcp, --agent HOST) and, for claude-code, codex and "
            "gemini, the capture and context hooks. Files are edited in place (other "
            "entries and comments kept), "
            f"backed up beside themselves ({BACKUP_SUFFIX}) first; a file that does not "
            "parse is refused and nothing changes.",
        )
        cmd.add_argument("host", nargs=None if not connect else "?", choices=hosts, metavar="HOST")
        cmd.add_argument(
            "--project",
            metavar="DIR",
            help="the project's files in DIR (.mcp.json, .cursor/mcp.json, ...) instead of "
            "the user's",
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
