"""The agent hosts ``recallctl connect`` knows: where each keeps its MCP servers and hooks
(its own location variables honoured), the shape of its entries, the hooks recalld wires
into it in the host's own event names, and what the host wants from its user before it runs
them.

Checked against Claude Code 2.1.332, Codex CLI 0.171.0 and Gemini CLI 0.61.0 (each from npm:
its CLI run in a temporary HOME, and its bundled source or binary read), as docs/usage.md's
"Connecting an agent" records.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .capture import HOOK_TIMEOUT_S
from .context import CONTEXT_HOOK_TIMEOUT_S
from .episode_input import RECALLD_SERVER
from .host_files import Format

__all__ = [
    "HOSTS",
    "PASSED_ENV",
    "SERVER_NAME",
    "HookSpec",
    "Host",
    "claude_project_key",
    "excluding",
]

# The name of recalld's MCP server in every host's config (capture leaves its tools out by it).
SERVER_NAME = RECALLD_SERVER
# The variables recall-mcp reads to find the daemon and its store. A host that gives stdio
# servers only a few variables of its own choosing (Codex: HOME, LANG, PATH, SHELL, TERM) is
# told to pass these too, those set where connect runs.
PASSED_ENV = (
    "RECALLD_SOCKET",
    "RECALLD_DATA_DIR",
    "RECALLD_AUTOSTART",
    "XDG_RUNTIME_DIR",
    "XDG_DATA_HOME",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
)


def _capture(host: str, detach: bool) -> tuple[str, ...]:
    """Every capture hook's command (a tool call, a prompt, a turn's end, and the session's
    end, which capture rolls up into the session's experience): ``--host`` reads the host's
    payload shapes and stops reading stdin at one whole payload (a host may keep it open).
    A host that runs hooks in the background runs the tool and prompt captures so, and waits
    for the turn's and the session's end, whose captures are spooled before the hook returns,
    so the roll-up finds the whole session; a host that waits for every hook (``detach``) is
    answered at once and the capture recorded in a detached process."""
    return ("capture", "--host", host, "--quiet", *(("--detach",) if detach else ()))


@dataclass(frozen=True)
class HookSpec:
    """One hook a host runs: on ``event``, this recallctl with ``argv``, given ``timeout``
    seconds."""

    event: str
    argv: tuple[str, ...]
    timeout: int = HOOK_TIMEOUT_S
    # A tool event: its matcher leaves recalld's own tools out (a memory_search is no work).
    tools: bool = False
    # The agent need not wait for it: run in the background where the host can.
    background: bool = False


def _hooks(
    host: str, tool: tuple[str, ...], prompt: str, turn_end: str, *, detach: bool = False
) -> tuple[HookSpec, ...]:
    """A host's hooks: each tool call captured (``tool``: its events), each prompt captured
    and answered with context, each turn's end captured, the session's start answered with
    context and its end captured (rolled up into the session's experience)."""
    context = ("context", "--host", host)
    capture = _capture(host, detach)
    return (
        *(HookSpec(event, capture, tools=True, background=True) for event in tool),
        HookSpec(turn_end, capture),
        HookSpec("SessionEnd", capture),
        HookSpec("SessionStart", context, CONTEXT_HOOK_TIMEOUT_S),
        HookSpec(prompt, context, CONTEXT_HOOK_TIMEOUT_S),
        HookSpec(prompt, capture, background=True),
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
    # The most the host gives an event's hooks, in seconds (more is cut, with a warning).
    timeout_caps: tuple[tuple[str, int], ...] = ()
    # How the host names recalld's MCP tools in a hook's tool name.
    tool_prefix: str = ""
    # The host runs a hook marked "async": true without waiting for it.
    background: bool = False
    # The host hands stdio servers only the variables listed in their env_vars (Codex).
    env_vars: bool = False
    # Codex: hooks may also live in the servers' config.toml (where its switches are too).
    hooks_in_config: bool = False
    # Settings that turn every hook off (a setting's path, the value that does), in the
    # hooks file (Codex: config.toml): connect leaves them as the user set them, and says so.
    hooks_off: tuple[tuple[tuple[str, ...], object], ...] = ()
    # The setting that turns hooks on, which connect writes when the file says nothing of
    # them (Codex before 0.171 had them off by default).
    hooks_on: tuple[str, ...] = ()
    # Claude Code's local scope: this user's servers for one project, in the user file under
    # projects[<project>], and its hooks in this file of the project (never committed).
    local_hooks_file: str | None = None
    # What the host asks of its user before it runs a project's servers or new hooks, said
    # after connect writes them ({dir}: the project).
    project_note: str = ""
    user_note: str = ""

    def timeout(self, spec: HookSpec) -> int:
        """``spec``'s timeout as this host is given it: capped, in the host's unit."""
        seconds = min(
            [spec.timeout, *(cap for event, cap in self.timeout_caps if event == spec.event)]
        )
        return seconds * self.timeout_unit

    def server_entry(self, command: str) -> dict[str, object]:
        entry: dict[str, object] = {"type": "stdio"} if self.typed else {}
        entry["command"] = command
        entry["args"] = ["--agent", self.name]
        passed = [name for name in PASSED_ENV if os.environ.get(name)]
        if self.env_vars and passed:
            entry["env_vars"] = passed
        return entry


def excluding(prefix: str) -> str:
    """A regex that finds every name not starting with ``prefix``.

    Written without lookaround, which Codex's regex engine lacks (Claude Code and Gemini CLI
    test the same pattern with JavaScript's): after each character of the prefix matched so
    far, the name either ends or goes on with another character.
    """
    if not re.fullmatch(r"\w+", prefix):
        raise ValueError(f"not a tool name prefix: {prefix!r}")
    rest = ""
    for ch in reversed(prefix):
        rest = f"$|[^{ch}]|{ch}(?:{rest})" if rest else f"$|[^{ch}]"
    return f"^(?:{rest})"


def claude_project_key(project: Path) -> Path:
    """The key Claude Code files a project's local-scope servers under in ``~/.claude.json``:
    the git root of the directory (what `claude mcp add --scope local` uses, run anywhere
    inside the repository), else the directory itself."""
    for parent in (project, *project.parents):
        if (parent / ".git").exists():
            return parent
    return project


def _home() -> Path:
    return Path.home()


def _env_dir(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


def _claude_dir() -> Path:
    """``$CLAUDE_CONFIG_DIR``, else ``~/.claude``: Claude Code's settings.json lives there."""
    return _env_dir("CLAUDE_CONFIG_DIR") or _home() / ".claude"


def _claude_json() -> Path:
    """Claude Code's own state with the user's servers: ``.claude.json`` in
    ``$CLAUDE_CONFIG_DIR`` when set, else in the home directory."""
    return (_env_dir("CLAUDE_CONFIG_DIR") or _home()) / ".claude.json"


def _codex_home() -> Path:
    return _env_dir("CODEX_HOME") or _home() / ".codex"


def _gemini_dir() -> Path:
    """``.gemini`` in ``$GEMINI_CLI_HOME`` (Gemini CLI's stand-in for the home directory),
    else in the home directory."""
    return (_env_dir("GEMINI_CLI_HOME") or _home()) / ".gemini"


def _vscode_user_dir() -> Path:
    if sys.platform == "darwin":
        return _home() / "Library" / "Application Support" / "Code" / "User"
    return Path(os.environ.get("XDG_CONFIG_HOME") or _home() / ".config") / "Code" / "User"


_CODEX_HOOK_TRUST = (
    "Codex runs a new hook only once you trust it: start codex and trust recalld's under /hooks"
)

HOSTS: dict[str, Host] = {
    h.name: h
    for h in (
        Host(
            "claude-code",
            "Claude Code",
            "json",
            user_file=_claude_json,
            project_file=".mcp.json",
            servers_key="mcpServers",
            typed=True,
            installed=lambda: _claude_dir().is_dir() or _claude_json().exists(),
            hooks_user_file=lambda: _claude_dir() / "settings.json",
            hooks_project_file=".claude/settings.json",
            hooks=_hooks(
                "claude-code", ("PostToolUse", "PostToolUseFailure"), "UserPromptSubmit", "Stop"
            ),
            tool_prefix=f"mcp__{SERVER_NAME}__",
            background=True,
            hooks_off=((("disableAllHooks",), True),),
            local_hooks_file=".claude/settings.local.json",
            project_note="Claude Code lists the servers of {dir}/.mcp.json as pending until you "
            "approve them: run `claude` in {dir} and approve recalld (`claude mcp list` then "
            "shows it connected)",
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
            # Codex reads hooks from hooks.json beside config.toml or from [hooks] in it, and
            # warns when one layer has both: connect keeps recalld's where the user's are.
            hooks_user_file=lambda: _codex_home() / "hooks.json",
            hooks_project_file=".codex/hooks.json",
            # A failed call is a PostToolUse too (Codex has no failure event).
            hooks=_hooks("codex", ("PostToolUse",), "UserPromptSubmit", "Stop"),
            # Codex 0.171 gives SessionEnd hooks 3 s, and warns at each start of one asking more.
            timeout_caps=(("SessionEnd", 3),),
            tool_prefix=f"mcp__{SERVER_NAME}__",
            background=True,
            env_vars=True,
            hooks_in_config=True,
            # `hooks` since the feature became stable, `codex_hooks` before (0.171 reads it as
            # an alias of `hooks`), so connect writes the old name, which both know.
            hooks_off=((("features", "hooks"), False), (("features", "codex_hooks"), False)),
            hooks_on=("features", "codex_hooks"),
            project_note="Codex reads {dir}/.codex only in a trusted project: start codex in "
            "{dir} and trust it. " + _CODEX_HOOK_TRUST,
            user_note=_CODEX_HOOK_TRUST,
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
            user_file=lambda: _gemini_dir() / "settings.json",
            project_file=".gemini/settings.json",
            servers_key="mcpServers",
            typed=False,
            installed=lambda: _gemini_dir().is_dir(),
            # Its hooks live in the same settings file as its servers; AfterTool is its
            # PostToolUse, BeforeAgent its UserPromptSubmit, AfterAgent its Stop.
            hooks_user_file=lambda: _gemini_dir() / "settings.json",
            hooks_project_file=".gemini/settings.json",
            # Gemini CLI waits for every hook: its captures answer it at once.
            hooks=_hooks("gemini", ("AfterTool",), "BeforeAgent", "AfterAgent", detach=True),
            hooks_fmt="jsonc",
            timeout_unit=1000,
            tool_prefix=f"mcp_{SERVER_NAME}_",
            hooks_off=((("hooksConfig", "enabled"), False),),
            project_note="Gemini CLI reads {dir}/.gemini/settings.json, and starts stdio MCP "
            "servers, only in a trusted folder: start gemini in {dir} and trust it when asked "
            "(or `/permissions trust`)",
            user_note="Gemini CLI starts stdio MCP servers only in a trusted folder: trust a "
            "project when Gemini asks (or `/permissions trust` there)",
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
