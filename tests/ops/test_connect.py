"""``recallctl connect`` / ``disconnect`` against temporary HOMEs holding each host's config
files as the hosts write them (other servers, hooks, comments), through the real recallctl,
read back with each format's own parser."""

from __future__ import annotations

import json
import os
import re
import resource
import shlex
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recall_client.ctl.agent_hosts import PASSED_ENV
from recall_client.ctl.context import CONTEXT_HOOK_TIMEOUT_S
from recall_client.ctl.jsonc_edit import JsonDocument, JsonSyntaxError

from tests.support.context import hook_payload, item_ids, make_shop, remember
from tests.support.daemon import BIN, REPO, DaemonProcess
from tests.support.episodes import captured
from tests.support.hooks import payload, readme_hook_command, run_hook

CONTEXT_EVENTS = ("SessionStart", "UserPromptSubmit")

MCP = str(BIN / "recall-mcp")
CTL = str(BIN / "recallctl")

CLAUDE_JSON = """{
  "numStartups": 42,
  "installMethod": "native",
  "mcpServers": {
    "github": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": {"GITHUB_TOKEN": "ghp_example"}
    }
  },
  "projects": {
    "/home/dev/shop": {"allowedTools": [], "hasTrustDialogAccepted": true}
  }
}
"""
CLAUDE_SETTINGS = """{
  "permissions": {"allow": ["Bash(npm test:*)"], "deny": []},
  "hooks": {
    "PostToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [{"type": "command", "command": "npx prettier --write \\"$CLAUDE_FILE_PATHS\\""}]
      }
    ],
    "Notification": [
      {"hooks": [{"type": "command", "command": "notify-send 'Claude Code' 'needs you'"}]}
    ]
  },
  "model": "opus"
}
"""
# ~/.codex/hooks.json as Codex's hooks docs show it: a user's own session-start note and a
# Bash policy check.
CODEX_HOOKS_JSON = """{
  "hooks": {
    "SessionStart": [
      {
        "matcher": "startup|resume",
        "hooks": [
          {
            "type": "command",
            "command": "python3 ~/.codex/hooks/session_start.py",
            "statusMessage": "Loading session notes",
            "timeout": 10
          }
        ]
      }
    ],
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [{"type": "command", "command": "/usr/bin/python3 ~/.codex/hooks/policy.py"}]
      }
    ]
  }
}
"""
# Gemini CLI's settings with hooks of the user's own (timeouts in milliseconds).
GEMINI_WITH_HOOKS = """{
  // Gemini CLI settings
  "theme": "GitHub",
  "mcpServers": {
    "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/src"]}
  },
  "hooksConfig": {"enabled": true},
  "hooks": {
    /* block rm -rf */
    "BeforeTool": [
      {
        "matcher": "run_shell_command",
        "hooks": [
          {
            "name": "guard",
            "type": "command",
            "command": "~/.gemini/hooks/guard.sh",
            "timeout": 5000
          }
        ]
      }
    ],
    "SessionStart": [
      {"matcher": "startup", "hooks": [{"type": "command", "command": "git status --short"}]}
    ]
  }
}
"""
CODEX_TOML = """# Codex settings
model = "gpt-5-codex"  # the default model
approval_policy = "on-request"

[mcp_servers.docs]
command = "npx"  # a documentation server
args = ["-y", "@upstash/context7-mcp"]

[mcp_servers.docs.env]
DEBUG = "0"

[profiles.fast]
model = "gpt-5-mini"
"""
CURSOR_JSON = """{
  "mcpServers": {
    "linear": {
      "command": "npx",
      "args": ["-y", "mcp-remote", "https://mcp.linear.app/sse"]
    }
  }
}
"""
GEMINI_JSONC = """{
  // Gemini CLI settings
  "theme": "GitHub",
  "mcpServers": {
    "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/src"]}
  },
  "telemetry": {"enabled": false}
}
"""
VSCODE_JSONC = """// VS Code MCP servers
{
  "inputs": [
    {"type": "promptString", "id": "token", "description": "API token", "password": true},
  ],
  "servers": {
    /* the team's server */
    "team": {
      "type": "stdio",
      "command": "node",
      "args": ["/opt/team/server.js"],
    },
  },
}
"""


def strip_jsonc(text: str) -> str:
    """A JSONC reader of the test's own (comments and trailing commas out), then json."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else n
        elif text.startswith("/*", i):
            i = text.index("*/", i) + 2
        elif c == ",":
            k = i + 1
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] in "]}":
                i += 1
                continue
            out.append(c)
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def read_jsonc(path: Path) -> Any:
    return json.loads(strip_jsonc(path.read_text()))


def read_toml(path: Path) -> Any:
    return tomllib.loads(path.read_text())


def ours_in(hooks: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        event: [g for g in groups if "recallctl" in g["hooks"][0]["command"]]
        for event, groups in hooks.items()
        if event != "state"
    }


@dataclass(frozen=True)
class Case:
    host: str
    file: str  # under HOME (or the test's XDG_CONFIG_HOME for VS Code: "$XDG/...")
    original: str
    read: Callable[[Path], Any]
    servers_key: str
    other: str  # another server in the file, which must survive
    other_text: str  # that server's bytes in the original
    entry: dict[str, Any]


CASES = [
    Case(
        "claude-code",
        ".claude.json",
        CLAUDE_JSON,
        read_json,
        "mcpServers",
        "github",
        '"github": {\n      "type": "stdio",',
        {"type": "stdio", "command": MCP, "args": ["--agent", "claude-code"]},
    ),
    Case(
        "codex",
        ".codex/config.toml",
        CODEX_TOML,
        read_toml,
        "mcp_servers",
        "docs",
        '[mcp_servers.docs]\ncommand = "npx"  # a documentation server\n',
        {"command": MCP, "args": ["--agent", "codex"]},
    ),
    Case(
        "cursor",
        ".cursor/mcp.json",
        CURSOR_JSON,
        read_json,
        "mcpServers",
        "linear",
        '"linear": {\n      "command": "npx",',
        {"command": MCP, "args": ["--agent", "cursor"]},
    ),
    Case(
        "gemini",
        ".gemini/settings.json",
        GEMINI_JSONC,
        read_jsonc,
        "mcpServers",
        "fs",
        '// Gemini CLI settings\n  "theme": "GitHub",\n  "mcpServers": {\n    "fs": {"command"',
        {"command": MCP, "args": ["--agent", "gemini"]},
    ),
    Case(
        "vscode",
        "$XDG/Code/User/mcp.json",
        VSCODE_JSONC,
        read_jsonc,
        "servers",
        "team",
        '/* the team\'s server */\n    "team": {\n      "type": "stdio",',
        {"type": "stdio", "command": MCP, "args": ["--agent", "vscode"]},
    ),
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


def entry(case: Case) -> dict[str, Any]:
    """The entry connect writes: Codex's names the variables recall-mcp needs passed."""
    passed = [name for name in PASSED_ENV if os.environ.get(name)]
    return {**case.entry, "env_vars": passed} if case.host == "codex" and passed else case.entry


def where(case: Case, home: Path) -> Path:
    if case.file.startswith("$XDG/"):
        return Path(os.environ["XDG_CONFIG_HOME"]) / case.file.removeprefix("$XDG/")
    return home / case.file


def install(case: Case, home: Path) -> Path:
    path = where(case, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(case.original)
    return path


def recallctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CTL, *args], capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )


@pytest.mark.parametrize("case", CASES, ids=[c.host for c in CASES])
def test_connect_writes_the_entry_its_host_reads_and_keeps_everything_else(
    case: Case, home: Path
) -> None:
    path = install(case, home)
    out = recallctl("connect", case.host)
    assert out.returncode == 0, out.stderr

    config = case.read(path)  # the format's own parser accepts the result
    assert config[case.servers_key]["recalld"] == entry(case)
    original = (
        tomllib.loads(case.original)
        if case.read is read_toml
        else json.loads(strip_jsonc(case.original))
    )
    # Every other key, the other server included, is as it was; its bytes too.
    assert config[case.servers_key][case.other] == original[case.servers_key][case.other]
    ours = {
        "gemini": {case.servers_key, "hooks"},
        "codex": {case.servers_key, "features"},
    }.get(case.host, {case.servers_key})
    assert {k: v for k, v in config.items() if k not in ours} == {
        k: v for k, v in original.items() if k not in ours
    }
    text = path.read_text()
    assert case.other_text in text
    assert path.with_name(path.name + ".recalld-backup").read_text() == case.original

    again = recallctl("connect", case.host)
    assert again.returncode == 0 and "already connected" in again.stdout
    assert path.read_text() == text

    gone = recallctl("disconnect", case.host)
    assert gone.returncode == 0, gone.stderr
    assert path.read_text() == case.original  # byte for byte: comments, order, commas


@pytest.mark.parametrize("case", CASES, ids=[c.host for c in CASES])
def test_connect_on_a_fresh_home_makes_a_file_the_host_parses(case: Case, home: Path) -> None:
    out = recallctl("connect", case.host)
    assert out.returncode == 0, out.stderr
    path = where(case, home)
    assert case.read(path)[case.servers_key]["recalld"] == entry(case)
    assert path.stat().st_mode & 0o077 == 0


def test_claude_code_gets_the_documented_capture_hooks_beside_its_own(home: Path) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(CLAUDE_SETTINGS)
    (home / ".claude.json").write_text(CLAUDE_JSON)
    assert recallctl("connect", "claude-code").returncode == 0

    hooks = read_json(settings)["hooks"]
    readme, command = readme_hook_command()
    argv = shlex.split(command)
    argv[0] = CTL
    ours = {e: g for e, g in ours_in(hooks).items() if g}
    # Exactly docs/usage.md's configuration, with this install's path in it.
    expected = json.loads(
        json.dumps(readme["hooks"]).replace(json.dumps(command)[1:-1], shlex.join(argv))
    )
    assert {e: g for e, g in ours.items() if e in readme["hooks"]} == expected
    # And the context hooks, the prompt's capture and the session's roll-up.
    assert set(ours) == {*readme["hooks"], *CONTEXT_EVENTS, "SessionEnd"}
    for event in CONTEXT_EVENTS:
        group = ours[event][0]
        [hook] = group["hooks"]
        assert shlex.split(hook["command"]) == [
            *(CTL, "--agent", "claude-code", "context", "--host", "claude-code")
        ]
        # The context is waited for (it is the hook's answer), for every start and prompt.
        assert hook["timeout"] == CONTEXT_HOOK_TIMEOUT_S and "matcher" not in group
        assert "async" not in hook
    # The user's own hooks and settings are untouched, their bytes too.
    original = json.loads(CLAUDE_SETTINGS)
    assert hooks["PostToolUse"][0] == original["hooks"]["PostToolUse"][0]
    assert hooks["Notification"] == original["hooks"]["Notification"]
    text = settings.read_text()
    prettier = CLAUDE_SETTINGS.index('      {\n        "matcher": "Edit|Write"')
    assert CLAUDE_SETTINGS[prettier : CLAUDE_SETTINGS.index("\n    ],")] in text  # as written

    assert recallctl("disconnect", "claude-code").returncode == 0
    assert settings.read_text() == CLAUDE_SETTINGS


def test_a_moved_install_replaces_its_old_hooks_instead_of_adding_more(home: Path) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    old = "/old/checkout/.venv/bin/recallctl --agent claude-code capture --quiet"
    settings.write_text(
        json.dumps(
            {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": old, "timeout": 10}]}]}}
        )
    )
    assert recallctl("connect", "claude-code").returncode == 0
    [stop] = read_json(settings)["hooks"]["Stop"]
    assert stop["hooks"][0]["command"].startswith(CTL + " ")


@pytest.mark.parametrize("case", CASES, ids=[c.host for c in CASES])
def test_a_file_that_does_not_parse_is_refused_by_name_and_nothing_changes(
    case: Case, home: Path
) -> None:
    path = where(case, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    broken = case.original.replace("{", "{ oops", 1).replace("[mcp", "[[mcp = ", 1)
    path.write_text(broken)
    settings = home / ".claude" / "settings.json"
    out = recallctl("connect", case.host)
    assert out.returncode == 1
    assert str(path) in out.stderr and "cannot parse" in out.stderr
    assert path.read_text() == broken
    assert not path.with_name(path.name + ".recalld-backup").exists()
    assert not settings.exists()


def test_a_comment_in_a_strict_json_file_is_refused(home: Path) -> None:
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir()
    path.write_text('{\n  // not JSON\n  "mcpServers": {}\n}\n')
    out = recallctl("connect", "cursor")
    assert out.returncode == 1 and str(path) in out.stderr


def test_dry_run_prints_the_diff_and_writes_nothing(home: Path) -> None:
    path = install(CASES[1], home)
    out = recallctl("connect", "codex", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "+[mcp_servers.recalld]" in out.stdout
    assert f'+command = "{MCP}"' in out.stdout
    assert path.read_text() == CODEX_TOML
    assert not path.with_name(path.name + ".recalld-backup").exists()


def on_path(monkeypatch: pytest.MonkeyPatch, *dirs: Path) -> None:
    """PATH holding ``dirs`` and the system's commands, as a user's shell has it."""
    monkeypatch.setenv("PATH", os.pathsep.join([*map(str, dirs), "/usr/bin", "/bin"]))


PROJECT_FILES = {
    "claude-code": (".mcp.json", ".claude/settings.json"),
    "codex": (".codex/config.toml", ".codex/hooks.json"),
    "cursor": (".cursor/mcp.json",),
    "gemini": (".gemini/settings.json",),
    "vscode": (".vscode/mcp.json",),
}


def test_project_scope_writes_the_project_files_with_nothing_of_this_user(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    on_path(monkeypatch, BIN)
    for host in PROJECT_FILES:
        out = recallctl("connect", host, "--project", str(project))
        assert out.returncode == 0, out.stderr
    # Files meant to be committed run recalld's commands from PATH: no path of this user's.
    assert read_json(project / ".mcp.json")["mcpServers"]["recalld"]["command"] == "recall-mcp"
    assert read_json(project / ".claude" / "settings.json")["hooks"]["Stop"]
    assert read_toml(project / ".codex" / "config.toml")["mcp_servers"]["recalld"] == {
        "command": "recall-mcp",
        "args": ["--agent", "codex"],
        "env_vars": [name for name in PASSED_ENV if os.environ.get(name)],
    }
    assert read_json(project / ".cursor" / "mcp.json")["mcpServers"]["recalld"]
    assert read_jsonc(project / ".gemini" / "settings.json")["mcpServers"]["recalld"]
    assert read_jsonc(project / ".vscode" / "mcp.json")["servers"]["recalld"]["type"] == "stdio"
    for files in PROJECT_FILES.values():
        for name in files:
            text = (project / name).read_text()
            assert str(BIN) not in text and str(REPO) not in text and str(home) not in text
    assert list(home.iterdir()) == []  # the user's files are not touched


def test_a_project_file_is_refused_when_recall_mcp_is_not_on_path(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    on_path(monkeypatch)
    out = recallctl("connect", "cursor", "--project", str(project))
    assert out.returncode == 1
    assert "recall-mcp is not on PATH" in out.stderr and str(BIN) in out.stderr
    assert list(project.iterdir()) == []


def test_project_scope_says_what_each_host_asks_before_it_runs_the_server(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    on_path(monkeypatch, BIN)
    said = {
        host: recallctl("connect", host, "--project", str(project)).stdout
        for host in ("claude-code", "codex", "gemini")
    }
    assert "pending until you approve them: run `claude` in " + str(project) in said["claude-code"]
    assert "trusted project" in said["codex"] and "/hooks" in said["codex"]
    assert "trusted folder: start gemini in " + str(project) in said["gemini"]


def test_list_shows_each_host_found_its_file_and_whether_it_is_connected(home: Path) -> None:
    install(CASES[0], home)  # Claude Code
    install(CASES[1], home)  # Codex
    assert recallctl("connect", "codex").returncode == 0
    out = recallctl("connect", "--list")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines()}
    assert set(lines) == {"claude-code", "codex"}  # the hosts on this machine
    assert (
        "not connected" in lines["claude-code"]
        and str(home / ".claude.json") in lines["claude-code"]
    )
    assert (
        " connected, hooks " in lines["codex"]
        and str(home / ".codex" / "config.toml") in lines["codex"]
    )
    assert recallctl("connect", "claude-code").returncode == 0
    claude = recallctl("connect", "--list").stdout.splitlines()[0]
    assert claude.split()[:3] == ["claude-code", "connected,", "hooks"], claude


async def test_the_hook_connect_wrote_records_a_payload_end_to_end(
    running_daemon: DaemonProcess, home: Path, tmp_path: Path
) -> None:
    assert recallctl("connect", "claude-code").returncode == 0
    [group] = read_json(home / ".claude" / "settings.json")["hooks"]["PostToolUse"]
    checkout = tmp_path / "shop"
    (checkout / ".git").mkdir(parents=True)
    out = run_hook(
        shlex.split(group["hooks"][0]["command"]),
        payload("claude_code_post_tool_use.json", checkout),
        running_daemon.env(),
    )
    assert out.returncode == 0, out.stderr
    async with running_daemon.client(agent="claude-code", workspace=str(checkout)) as rc:
        [ep] = await captured(rc)
    assert ep.tool == "Bash"


# ------------------------------------------------------------------ the JSON(C) editor itself

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    others=st.dictionaries(st.text(max_size=6), _json_values, min_size=1, max_size=4),
    rest=st.dictionaries(st.text(max_size=6), _json_values, max_size=4),
    indent=st.sampled_from([None, 2, 4, "\t"]),
)
def test_adding_then_removing_an_entry_gives_back_the_same_bytes(
    others: dict[str, Any], rest: dict[str, Any], indent: int | str | None
) -> None:
    rest.pop("mcpServers", None)
    others.pop("recalld", None)
    if not others:
        return
    text = json.dumps({**rest, "mcpServers": others}, indent=indent)
    doc = JsonDocument(text, comments=False)
    entry = {"command": "/x/recall-mcp", "args": ["--agent", "a"]}
    doc.set(("mcpServers", "recalld"), entry)
    value = json.loads(doc.text)
    assert value["mcpServers"] == {**others, "recalld": entry}
    assert {k: v for k, v in value.items() if k != "mcpServers"} == rest
    doc.delete(("mcpServers", "recalld"))
    assert doc.text == text


@settings(max_examples=100, deadline=None)
@given(
    servers=st.dictionaries(st.text(max_size=6), _json_values, max_size=3),
    rest=st.dictionaries(st.text(max_size=6), _json_values, max_size=3),
    indent=st.sampled_from([None, 2, "\t"]),
)
def test_an_entry_three_objects_deep_is_added_and_removed_on_the_focus(
    servers: dict[str, Any], rest: dict[str, Any], indent: int | str | None
) -> None:
    # Claude Code's local scope: projects[<dir>].mcpServers.recalld in ~/.claude.json.
    servers.pop("recalld", None)
    project = {**rest, "mcpServers": servers}
    text = json.dumps({"numStartups": 3, "projects": {"/a": project, "/b": project}}, indent=indent)
    path = ("projects", "/b", "mcpServers", "recalld")
    doc = JsonDocument(text, comments=False, focus=path[:-1])
    doc.set(path, {"command": "recall-mcp"})
    value = json.loads(doc.text)
    assert value["projects"]["/b"]["mcpServers"] == {
        **servers,
        "recalld": {"command": "recall-mcp"},
    }
    assert value["projects"]["/a"] == project
    doc.delete(path)
    assert doc.text == text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[],:"\\/ \n*ab1-.etrufnl', max_size=60), st.booleans())
def test_any_text_parses_or_is_a_json_syntax_error(text: str, comments: bool) -> None:
    try:
        JsonDocument(text, comments=comments)
    except JsonSyntaxError:
        pass


# ------------------------------------------------------------------ Codex's and Gemini CLI's hooks


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return make_shop(tmp_path)


@dataclass(frozen=True)
class HookCase:
    host: str
    file: str  # under HOME
    original: str
    read: Callable[[Path], Any]
    unit: int  # the host's timeout unit, in seconds
    # event -> recallctl's arguments after --agent HOST, one per recalld group, in order
    events: dict[str, list[tuple[str, ...]]]
    theirs: dict[str, int]  # event -> how many of the user's own groups it holds
    tool_events: tuple[str, ...]  # events whose matcher leaves recalld's tools out
    tool_prefix: str  # how the host names recalld's MCP tools
    # The events whose capture runs in the background ("async": true): the host can, and
    # the agent need not wait for a capture of a tool call or a prompt.
    background: tuple[str, ...]
    caps: dict[str, int]  # event -> the most seconds the host gives its hooks


CODEX_CAPTURE = ("capture", "--host", "codex", "--quiet")
GEMINI_CAPTURE = ("capture", "--host", "gemini", "--quiet", "--detach")
HOOK_CASES = [
    HookCase(
        "codex",
        ".codex/hooks.json",
        CODEX_HOOKS_JSON,
        read_json,
        1,
        {
            "PostToolUse": [CODEX_CAPTURE],
            "Stop": [CODEX_CAPTURE],
            "SessionEnd": [CODEX_CAPTURE],
            "SessionStart": [("context", "--host", "codex")],
            "UserPromptSubmit": [("context", "--host", "codex"), CODEX_CAPTURE],
        },
        {"SessionStart": 1, "PreToolUse": 1},
        ("PostToolUse",),
        "mcp__recalld__",
        ("PostToolUse", "UserPromptSubmit"),
        {"SessionEnd": 3},  # Codex 0.171 clamps it, with a warning at each start
    ),
    HookCase(
        "gemini",
        ".gemini/settings.json",
        GEMINI_WITH_HOOKS,
        read_jsonc,
        1000,
        {
            "AfterTool": [GEMINI_CAPTURE],
            "AfterAgent": [GEMINI_CAPTURE],
            "SessionEnd": [GEMINI_CAPTURE],
            "SessionStart": [("context", "--host", "gemini")],
            "BeforeAgent": [("context", "--host", "gemini"), GEMINI_CAPTURE],
        },
        {"SessionStart": 1, "BeforeTool": 1},
        ("AfterTool",),
        "mcp_recalld_",
        (),  # Gemini CLI waits for every hook
        {},
    ),
]
TIMEOUTS = {"capture": 10, "context": CONTEXT_HOOK_TIMEOUT_S}


@pytest.mark.parametrize("case", HOOK_CASES, ids=[c.host for c in HOOK_CASES])
def test_codex_and_gemini_get_capture_and_context_hooks_beside_their_own(
    case: HookCase, home: Path
) -> None:
    path = home / case.file
    path.parent.mkdir(parents=True)
    path.write_text(case.original)
    assert recallctl("connect", case.host).returncode == 0

    hooks = case.read(path)["hooks"]  # the format's own parser accepts it
    ours = {e: g for e, g in ours_in(hooks).items() if g}
    assert set(ours) == set(case.events)
    for event, argvs in case.events.items():
        assert len(ours[event]) == len(argvs)
        for group, argv in zip(ours[event], argvs, strict=True):
            [hook] = group["hooks"]
            assert shlex.split(hook["command"]) == [CTL, "--agent", case.host, *argv]
            seconds = case.caps.get(event, TIMEOUTS[argv[0]])
            assert hook["type"] == "command" and hook["timeout"] == seconds * case.unit
            assert ("matcher" in group) == (event in case.tool_events)
            background = argv[0] == "capture" and event in case.background
            assert hook.get("async", False) is background
    # The user's own hooks are kept, and come first.
    original = json.loads(strip_jsonc(case.original))["hooks"]
    for event, n in case.theirs.items():
        assert hooks[event][:n] == original[event]
    text = path.read_text()
    again = recallctl("connect", case.host)
    assert again.returncode == 0 and "already connected" in again.stdout
    assert path.read_text() == text

    # Gemini CLI's servers and hooks share the file: both go, every other byte stays.
    assert recallctl("disconnect", case.host).returncode == 0
    assert path.read_text() == case.original


TOOLS = [
    tool["name"] for tool in json.loads((REPO / "clients/recall_client/mcp/tools.json").read_text())
]


@pytest.mark.parametrize(
    ("host", "file", "prefix"),
    [
        ("claude-code", ".claude/settings.json", "mcp__recalld__"),
        ("codex", ".codex/hooks.json", "mcp__recalld__"),
        ("gemini", ".gemini/settings.json", "mcp_recalld_"),
    ],
)
def test_the_tool_hooks_leave_recallds_own_tools_out(
    home: Path, host: str, file: str, prefix: str
) -> None:
    assert recallctl("connect", host).returncode == 0
    hooks = read_jsonc(home / file)["hooks"]
    tool_events = {"PostToolUse", "PostToolUseFailure", "AfterTool"}
    matchers = {
        g.get("matcher") for e, gs in ours_in(hooks).items() if e in tool_events for g in gs
    }
    [matcher] = matchers
    # The subset of regex it uses reads the same in Python, JavaScript and Rust's regex.
    assert "(?=" not in matcher and "(?!" not in matcher
    for tool in TOOLS:
        assert not re.search(matcher, prefix + tool), tool
    others = ["Bash", "Edit", "run_shell_command", "mcp__github__create_issue", "mcp_fs_read"]
    others += ["mcp__recall__x", "mcp__recalldx__y", "mcp_recalld", "mcp", ""]
    for name in others:
        assert re.search(matcher, name), name


@pytest.mark.parametrize(
    ("host", "file", "start", "prompt", "prompt_event"),
    [
        (
            "codex",
            ".codex/hooks.json",
            "codex_session_start.json",
            "codex_user_prompt_submit.json",
            "UserPromptSubmit",
        ),
        (
            "gemini",
            ".gemini/settings.json",
            "gemini_cli_session_start.json",
            "gemini_cli_before_agent.json",
            "BeforeAgent",
        ),
    ],
)
async def test_the_context_hooks_connect_wrote_answer_in_the_hosts_own_shape(
    running_daemon: DaemonProcess,
    home: Path,
    shop: Path,
    host: str,
    file: str,
    start: str,
    prompt: str,
    prompt_event: str,
) -> None:
    assert recallctl("connect", host).returncode == 0
    hooks = read_jsonc(home / file)["hooks"]
    async with running_daemon.client(agent=host, workspace=str(shop)) as rc:
        fact = await remember(
            rc, "Releases of the shop go out on Fridays.", kind="fact", subject="release day"
        )
        total = await remember(
            rc,
            "The cart total is computed with Decimal, never float: a float total is off by a "
            "cent on discounted orders.",
        )
    await running_daemon.settled()
    env = running_daemon.env()
    for event, fixture, wanted in (("SessionStart", start, fact), (prompt_event, prompt, total)):
        group = ours_in(hooks)[event][0]  # the context hook comes first
        out = run_hook(shlex.split(group["hooks"][0]["command"]), hook_payload(fixture, shop), env)
        assert out.returncode == 0, out.stderr
        reply = json.loads(out.stdout)
        # Codex's output schemas allow these members and no other.
        assert set(reply) == {"hookSpecificOutput"}
        assert set(reply["hookSpecificOutput"]) == {"hookEventName", "additionalContext"}
        assert reply["hookSpecificOutput"]["hookEventName"] == event
        assert wanted in item_ids(reply["hookSpecificOutput"]["additionalContext"])
    # Another host's prompt event is not this host's: nothing printed (a hook is silent
    # unless --verbose), exit 0.
    other = {
        "gemini": "claude_code_user_prompt_submit.json",
        "codex": "gemini_cli_before_agent.json",
    }[host]
    group = ours_in(hooks)[prompt_event][0]
    out = run_hook(shlex.split(group["hooks"][0]["command"]), hook_payload(other, shop), env)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


async def test_the_capture_hook_gemini_got_records_its_after_tool_payload(
    running_daemon: DaemonProcess, home: Path, tmp_path: Path
) -> None:
    assert recallctl("connect", "gemini").returncode == 0
    [group] = ours_in(read_jsonc(home / ".gemini" / "settings.json")["hooks"])["AfterTool"]
    checkout = tmp_path / "shop"
    (checkout / ".git").mkdir(parents=True)
    out = run_hook(
        shlex.split(group["hooks"][0]["command"]),
        payload("gemini_cli_after_tool.json", checkout),
        running_daemon.env(),
    )
    assert out.returncode == 0, out.stderr
    async with running_daemon.client(agent="gemini", workspace=str(checkout)) as rc:
        [ep] = await captured(rc)
    assert ep.tool == "run_shell_command" and ep.status == "error"
    assert ep.episode_type == "tool_call"


# ------------------------------------------------------------------ a hostile project


def run_bounded(*args: str) -> subprocess.CompletedProcess[str]:
    """recallctl under 1 GiB of address space and 20 s: a read without end fails the test
    instead of the machine."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run(
        [CTL, *args],
        capture_output=True,
        text=True,
        timeout=20,
        env=dict(os.environ),
        preexec_fn=limit,
    )


@pytest.mark.parametrize("args", [(), ("--dry-run",)], ids=["connect", "dry-run"])
def test_a_fifo_in_a_project_is_refused_not_waited_on(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    project = tmp_path / "clone"
    project.mkdir()
    os.mkfifo(project / ".mcp.json")
    on_path(monkeypatch, BIN)
    out = run_bounded("connect", "claude-code", "--project", str(project), *args)
    assert out.returncode == 1
    assert f"{project / '.mcp.json'} is not a regular file" in out.stderr
    listed = run_bounded("connect", "--list", "--project", str(project))
    assert listed.returncode == 0
    assert "is not a regular file" in listed.stdout.splitlines()[0]
    assert not (project / ".claude").exists()


def test_a_device_is_refused_not_read_without_end(home: Path) -> None:
    # The user's own file may be a symlink (a dotfiles repository); one to /dev/zero is
    # followed, then refused: size 0 by stat, endless by read.
    (home / ".cursor").mkdir()
    (home / ".cursor" / "mcp.json").symlink_to("/dev/zero")
    for args in (("connect", "cursor"), ("connect", "cursor", "--dry-run")):
        out = run_bounded(*args)
        assert out.returncode == 1 and "/dev/zero is not a regular file" in out.stderr
    assert "is not a regular file" in run_bounded("connect", "--list").stdout


def test_a_project_config_dir_linked_out_of_the_project_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(CLAUDE_SETTINGS)
    project = tmp_path / "clone"
    project.mkdir()
    (project / ".claude").symlink_to(home / ".claude")
    on_path(monkeypatch, BIN)
    for args in ((), ("--dry-run",)):
        out = recallctl("connect", "claude-code", "--project", str(project), *args)
        assert out.returncode == 1
        assert f"{project / '.claude'} is a symlink that leads out of {project}" in out.stderr
    assert settings.read_text() == CLAUDE_SETTINGS  # the user's settings untouched
    assert sorted(p.name for p in project.iterdir()) == [".claude"]  # nothing half-written


def test_a_symlink_inside_the_project_is_followed_and_written_there(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "shop"
    (project / "config").mkdir(parents=True)
    (project / "config" / "cursor.json").write_text(CURSOR_JSON)
    (project / ".cursor").mkdir()
    (project / ".cursor" / "mcp.json").symlink_to("../config/cursor.json")
    on_path(monkeypatch, BIN)
    out = recallctl("connect", "cursor", "--project", str(project))
    assert out.returncode == 0, out.stderr
    assert str(project / "config" / "cursor.json") in out.stdout  # where it wrote, said
    assert (project / ".cursor" / "mcp.json").is_symlink()
    assert read_json(project / "config" / "cursor.json")["mcpServers"]["recalld"]


# ------------------------------------------------------------------ where each host looks


def test_claude_code_config_dir_is_where_its_files_are_written(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "claude-config"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    assert recallctl("connect", "claude-code").returncode == 0
    # Claude Code 2.1.332 reads .claude.json and settings.json from CLAUDE_CONFIG_DIR.
    assert read_json(config / ".claude.json")["mcpServers"]["recalld"]["command"] == MCP
    assert read_json(config / "settings.json")["hooks"]["SessionStart"]
    assert list(home.iterdir()) == []
    [listed] = recallctl("connect", "--list").stdout.splitlines()
    assert listed.split() == ["claude-code", "connected,", "hooks", str(config / ".claude.json")]


def test_gemini_cli_home_is_where_its_settings_are_written(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gemini_home = tmp_path / "gemini-home"
    monkeypatch.setenv("GEMINI_CLI_HOME", str(gemini_home))
    assert recallctl("connect", "gemini").returncode == 0
    # Gemini CLI 0.61.0 stands GEMINI_CLI_HOME in for the home directory: .gemini under it.
    settings = read_jsonc(gemini_home / ".gemini" / "settings.json")
    assert settings["mcpServers"]["recalld"]["command"] == MCP and settings["hooks"]["AfterTool"]
    assert list(home.iterdir()) == []


# ------------------------------------------------------------------ Claude Code's local scope


def test_claude_local_scope_keeps_the_server_to_this_user_and_project(
    home: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "shop"
    (repo / ".git").mkdir(parents=True)
    (repo / "web").mkdir()
    # The project has a local server of the user's already (`claude mcp add --scope local`).
    theirs = {"type": "stdio", "command": "/bin/echo", "args": ["hi"], "env": {}}
    state = json.loads(CLAUDE_JSON)
    state["projects"][str(repo)] = {"allowedTools": [], "mcpServers": {"echo": theirs}}
    (home / ".claude.json").write_text(json.dumps(state, indent=2))
    out = recallctl("connect", "claude-code", "--project", str(repo / "web"), "--local")
    assert out.returncode == 0, out.stderr
    claude = read_json(home / ".claude.json")
    # Filed under the repository's root, as `claude mcp add --scope local` does there.
    local = claude["projects"][str(repo)]["mcpServers"]["recalld"]
    assert local == {"type": "stdio", "command": MCP, "args": ["--agent", "claude-code"]}
    assert "recalld" not in claude["mcpServers"]  # not the user scope
    assert (
        claude["projects"]["/home/dev/shop"]
        == json.loads(CLAUDE_JSON)["projects"]["/home/dev/shop"]
    )
    hooks = read_json(repo / "web" / ".claude" / "settings.local.json")["hooks"]
    assert shlex.split(hooks["Stop"][0]["hooks"][0]["command"])[0] == CTL
    assert not (repo / "web" / ".mcp.json").exists() and "pending" not in out.stdout
    assert (
        "already connected"
        in recallctl("connect", "claude-code", "--project", str(repo / "web"), "--local").stdout
    )
    gone = recallctl("disconnect", "claude-code", "--project", str(repo / "web"), "--local")
    assert gone.returncode == 0, gone.stderr
    assert read_json(home / ".claude.json") == state


def test_local_scope_is_claude_codes_only(home: Path, tmp_path: Path) -> None:
    out = recallctl("connect", "cursor", "--project", str(tmp_path), "--local")
    assert out.returncode == 1 and "--local is Claude Code's scope" in out.stderr


# ------------------------------------------------------------------ Codex


def test_codex_hooks_go_where_the_users_are_in_one_place(home: Path) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    hooks_json = home / ".codex" / "hooks.json"
    assert recallctl("connect", "codex").returncode == 0
    assert ours_in(read_json(hooks_json)["hooks"])["PostToolUse"]
    # The user moves their own hooks into config.toml: recalld's follow, and leave hooks.json.
    text = config.read_text() + (
        '\n[[hooks.PreToolUse]]\nmatcher = "Bash"\n\n[[hooks.PreToolUse.hooks]]\n'
        'type = "command"\ncommand = "python3 ~/.codex/hooks/policy.py"\n'
    )
    config.write_text(text)
    assert recallctl("connect", "codex").returncode == 0
    toml_hooks = read_toml(config)["hooks"]
    assert toml_hooks["PreToolUse"][0]["matcher"] == "Bash"
    assert {e for e, g in ours_in(toml_hooks).items() if g} == {
        "PostToolUse",
        "Stop",
        "SessionEnd",
        "SessionStart",
        "UserPromptSubmit",
    }
    assert "hooks" not in read_json(hooks_json)
    assert "connected, hooks" in recallctl("connect", "--list").stdout
    assert recallctl("disconnect", "codex").returncode == 0
    assert read_toml(config)["hooks"] == {"PreToolUse": toml_hooks["PreToolUse"]}


def test_codex_hooks_feature_is_turned_on_and_a_users_choice_kept(home: Path) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(CODEX_TOML)
    assert recallctl("connect", "codex").returncode == 0
    assert read_toml(config)["features"] == {"codex_hooks": True}
    assert recallctl("disconnect", "codex").returncode == 0
    assert config.read_text() == CODEX_TOML
    # Turned off by the user: left so, and said.
    config.write_text(CODEX_TOML + "\n[features]\nhooks = false\n")
    out = recallctl("connect", "codex")
    assert read_toml(config)["features"] == {"hooks": False}
    assert f"hooks are turned off in {config} (features.hooks = false)" in out.stdout


def test_codex_is_told_to_pass_the_variables_recall_mcp_reads(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECALLD_SOCKET", "/run/user/1000/recalld/recalld.sock")
    monkeypatch.delenv("RECALLD_DATA_DIR", raising=False)
    assert recallctl("connect", "codex").returncode == 0
    server = read_toml(home / ".codex" / "config.toml")["mcp_servers"]["recalld"]
    # Codex hands a stdio server only HOME, LANG, PATH, SHELL and TERM, and those it names.
    assert "RECALLD_SOCKET" in server["env_vars"] and "RECALLD_DATA_DIR" not in server["env_vars"]
    assert "env" not in server  # the names only: their values stay in the user's environment


@pytest.mark.parametrize(
    ("host", "file", "off"),
    [
        ("claude-code", ".claude/settings.json", '{"disableAllHooks": true}'),
        ("gemini", ".gemini/settings.json", '{"hooksConfig": {"enabled": false}}'),
    ],
)
def test_a_users_hooks_switched_off_are_left_so_and_said(
    home: Path, host: str, file: str, off: str
) -> None:
    path = home / file
    path.parent.mkdir()
    path.write_text(off)
    out = recallctl("connect", host)
    assert out.returncode == 0, out.stderr
    assert f"hooks are turned off in {path}" in out.stdout
    setting = json.loads(off)
    assert {k: v for k, v in read_json(path).items() if k in setting} == setting
