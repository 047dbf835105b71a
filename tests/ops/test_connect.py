"""``recallctl connect`` / ``disconnect`` against temporary HOMEs holding each host's config
files as the hosts write them (other servers, hooks, comments), through the real recallctl,
read back with each format's own parser."""

from __future__ import annotations

import json
import os
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
from recall_client.ctl.context import CONTEXT_HOOK_TIMEOUT_S
from recall_client.ctl.jsonc_edit import JsonDocument, JsonSyntaxError

from tests.support.context import hook_payload, item_ids, make_shop, remember
from tests.support.daemon import BIN, DaemonProcess
from tests.support.episodes import search
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
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return home


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
    assert config[case.servers_key]["recalld"] == case.entry
    original = (
        tomllib.loads(case.original)
        if case.read is read_toml
        else json.loads(strip_jsonc(case.original))
    )
    # Every other key, the other server included, is as it was; its bytes too.
    assert config[case.servers_key][case.other] == original[case.servers_key][case.other]
    ours = {case.servers_key, "hooks"} if case.host == "gemini" else {case.servers_key}
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
    assert case.read(path)[case.servers_key]["recalld"] == case.entry
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
    ours = {
        event: [g for g in groups if "recallctl" in g["hooks"][0]["command"]]
        for event, groups in hooks.items()
    }
    # Exactly docs/usage.md's configuration, with this install's path in it.
    expected = json.loads(
        json.dumps(readme["hooks"]).replace(json.dumps(command)[1:-1], shlex.join(argv))
    )
    assert {e: g for e, g in ours.items() if g and e in readme["hooks"]} == expected
    # And the context hooks: a session's start and each prompt run `recallctl context`.
    assert {e for e, g in ours.items() if g} == {*readme["hooks"], *CONTEXT_EVENTS}
    for event in CONTEXT_EVENTS:
        [group] = ours[event]
        [hook] = group["hooks"]
        assert shlex.split(hook["command"]) == [
            *(CTL, "--agent", "claude-code", "context", "--host", "claude-code")
        ]
        assert hook["timeout"] == CONTEXT_HOOK_TIMEOUT_S and "matcher" not in group
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


def test_project_scope_writes_the_project_files(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    for host in ("claude-code", "codex", "cursor", "gemini", "vscode"):
        out = recallctl("connect", host, "--project", str(project))
        assert out.returncode == 0, out.stderr
    assert read_json(project / ".mcp.json")["mcpServers"]["recalld"]["command"] == MCP
    assert read_json(project / ".claude" / "settings.json")["hooks"]["Stop"]
    assert read_toml(project / ".codex" / "config.toml")["mcp_servers"]["recalld"]["args"] == [
        "--agent",
        "codex",
    ]
    assert read_json(project / ".cursor" / "mcp.json")["mcpServers"]["recalld"]
    assert read_jsonc(project / ".gemini" / "settings.json")["mcpServers"]["recalld"]
    assert read_jsonc(project / ".vscode" / "mcp.json")["servers"]["recalld"]["type"] == "stdio"
    assert list(home.iterdir()) == []  # the user's files are not touched


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
        [ep] = (await search(rc, include_pending=True)).results
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
    # event -> recallctl's arguments after --agent HOST
    events: dict[str, tuple[str, ...]]
    theirs: dict[str, int]  # event -> how many of the user's own groups it holds


CAPTURE = ("capture", "--quiet")
HOOK_CASES = [
    HookCase(
        "codex",
        ".codex/hooks.json",
        CODEX_HOOKS_JSON,
        read_json,
        1,
        {
            "PostToolUse": CAPTURE,
            "Stop": CAPTURE,
            "SessionStart": ("context", "--host", "codex"),
            "UserPromptSubmit": ("context", "--host", "codex"),
        },
        {"SessionStart": 1, "PreToolUse": 1},
    ),
    HookCase(
        "gemini",
        ".gemini/settings.json",
        GEMINI_WITH_HOOKS,
        read_jsonc,
        1000,
        {
            "AfterTool": CAPTURE,
            "AfterAgent": CAPTURE,
            "SessionStart": ("context", "--host", "gemini"),
            "BeforeAgent": ("context", "--host", "gemini"),
        },
        {"SessionStart": 1, "BeforeTool": 1},
    ),
]


def ours_in(hooks: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        event: [g for g in groups if "recallctl" in g["hooks"][0]["command"]]
        for event, groups in hooks.items()
    }


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
    for event, argv in case.events.items():
        [group] = ours[event]
        [hook] = group["hooks"]
        assert shlex.split(hook["command"]) == [CTL, "--agent", case.host, *argv]
        seconds = CONTEXT_HOOK_TIMEOUT_S if argv[0] == "context" else 10
        assert hook["type"] == "command" and hook["timeout"] == seconds * case.unit
        assert "matcher" not in group  # every tool, every start
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
        [group] = ours_in(hooks)[event]
        out = run_hook(shlex.split(group["hooks"][0]["command"]), hook_payload(fixture, shop), env)
        assert out.returncode == 0, out.stderr
        reply = json.loads(out.stdout)
        # Codex's output schemas allow these members and no other.
        assert set(reply) == {"hookSpecificOutput"}
        assert set(reply["hookSpecificOutput"]) == {"hookEventName", "additionalContext"}
        assert reply["hookSpecificOutput"]["hookEventName"] == event
        assert wanted in item_ids(reply["hookSpecificOutput"]["additionalContext"])
    # Another host's prompt event is not this host's: nothing printed, one line why, exit 0.
    other = {
        "gemini": "claude_code_user_prompt_submit.json",
        "codex": "gemini_cli_before_agent.json",
    }[host]
    [group] = ours_in(hooks)[prompt_event]
    out = run_hook(shlex.split(group["hooks"][0]["command"]), hook_payload(other, shop), env)
    assert out.returncode == 0 and out.stdout == ""
    assert f"not {host}'s context event" in out.stderr


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
        [ep] = (await search(rc, include_pending=True)).results
    assert ep.tool == "run_shell_command" and ep.status == "error"
    assert ep.episode_type == "tool_call"
