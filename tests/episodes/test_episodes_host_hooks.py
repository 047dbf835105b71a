"""Each host's hooks through the installed ``recallctl``, fed the payloads recorded from the
real hosts (``tests/fixtures/codex-0.171.0-*``, ``gemini-0.61.0-*``: Codex CLI 0.171.0 and
Gemini CLI 0.61.0 from npm, paths rewritten; ``gemini-0.61.0-AfterTool-exit2.json`` is the
recorded AfterTool with the ``llmContent`` Gemini CLI gives a command that exits 2, as the
issue quotes it): what each host's payload says is recorded, a hook never stands in the
host's way, and capture takes any bytes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from recall_client import protocol as p
from recall_client.ctl import hook_entry
from recall_client.ctl.episode_input import episode_from_hook
from recall_client.ctl.main import _parser
from recall_client.spool import default_spool

from tests.support.daemon import BIN, DaemonProcess
from tests.support.episodes import search
from tests.support.hooks import FIXTURES, payload

CODEX_SESSION = "01a2451a-0d4c-7132-8b61-3661d478d5e2"
GEMINI_SESSION = "afe8379c-d012-4d85-904d-4f395497db9d"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


def recallctl(
    *args: str, stdin: bytes, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(BIN / "recallctl"), *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        env=env if env is not None else dict(os.environ),
    )


def hook(
    d: DaemonProcess, host: str, stdin: str | bytes, *more: str
) -> subprocess.CompletedProcess[bytes]:
    """``host``'s capture hook, as ``recallctl connect`` writes it but waited for (no
    ``--quiet``: the detached delivery has a test of its own)."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    out = recallctl(
        "--socket", str(d.socket), "--agent", host, "capture", "--host", host, *more,
        stdin=data, env=d.env(),
    )  # fmt: skip
    assert out.returncode == 0 and out.stderr == b"", out.stderr
    return out


def edited(name: str, cwd: Path, **fields: Any) -> str:
    obj = json.loads(payload(name, cwd))
    obj.update(fields)
    return json.dumps(obj)


async def episodes(d: DaemonProcess, agent: str, workspace: Path, **params: Any) -> list[Any]:
    async with d.client(agent=agent, workspace=str(workspace)) as rc:
        return list((await search(rc, include_pending=True, k=50, **params)).results)


# ----------------------------------------------------------------- every host's payload


async def test_a_failed_codex_command_is_recorded_unknown_never_ok(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    hook(running_daemon, "codex", payload("codex-0.171.0-PostToolUse.json", checkout))
    [ep] = await episodes(running_daemon, "codex", checkout)
    assert (ep.tool, ep.status, ep.error_code) == ("Bash", p.UNKNOWN_STATUS, None)
    assert ep.summary == (
        "Bash: ls /nonexistent-dir-xyz -> outcome unknown: "
        "ls: cannot access '/nonexistent-dir-xyz': No such file or directory"
    )
    # Not a failure waiting for a verdict: work_search finds it without include_pending.
    async with running_daemon.client(agent="codex", workspace=str(checkout)) as rc:
        await running_daemon.settled(15)
        [found] = (await search(rc, query="nonexistent")).results
    assert found.id == ep.id and found.eligibility == "eligible"


async def test_without_host_a_codex_payload_is_told_by_its_shape(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    out = recallctl(
        "--socket", str(running_daemon.socket), "--agent", "codex", "capture", "--quiet",
        stdin=payload("codex-0.171.0-PostToolUse.json", checkout).encode(),
        env=running_daemon.env(),
    )  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")
    [ep] = await episodes(running_daemon, "codex", checkout)
    assert ep.status == p.UNKNOWN_STATUS


async def test_a_failed_gemini_command_is_recorded_failed_with_its_exit_code_and_output(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    for name in ("gemini-0.61.0-AfterTool.json", "gemini-0.61.0-AfterTool-exit2.json"):
        hook(running_daemon, "gemini", payload(name, checkout))
    failed, ok = await episodes(running_daemon, "gemini", checkout)  # newest first
    assert (failed.status, failed.error_code) == ("error", "exit_2")
    assert failed.summary == (
        "run_shell_command: ls /nonexistent | list it -> failed: "
        "ls: cannot access '/nonexistent': No such file or directory"
    )
    assert (ok.status, ok.error_code) == ("ok", None)
    assert ok.summary.endswith("-> ok: mock-tool-ran")
    assert "untrusted_context" not in failed.summary + ok.summary


async def test_gemini_prompts_are_stored_without_the_block_recalld_injected(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    hook(running_daemon, "gemini", payload("gemini-0.61.0-BeforeAgent.json", checkout))
    hook(running_daemon, "gemini", payload("gemini-0.61.0-AfterAgent.json", checkout))
    turn_end, prompt = await episodes(running_daemon, "gemini", checkout)
    assert (prompt.episode_type, prompt.summary) == ("prompt", "prompt: hello there")
    assert turn_end.summary == "turn ended: All done (mock)."
    async with running_daemon.client(agent="gemini", workspace=str(checkout)) as rc:
        assert (await search(rc, query="Unresolved failures", include_pending=True)).results == []


@pytest.mark.parametrize(
    ("name", "host", "status", "error_code"),
    [
        ("codex-0.171.0-PostToolUse.json", "codex", "unknown", None),
        ("gemini-0.61.0-AfterTool.json", "gemini", "ok", None),
        ("gemini-0.61.0-AfterTool-exit2.json", "gemini", "error", "exit_2"),
        ("gemini_cli_after_tool.json", "gemini", "error", "exit_1"),
        ("claude_code_post_tool_use.json", "claude-code", "ok", None),
        ("claude_code_post_tool_use_failure.json", "claude-code", "error", "exit_1"),
    ],
)
def test_each_host_s_tool_payload_is_read_by_its_shape_or_by_host(
    name: str, host: str, status: str, error_code: str | None
) -> None:
    obj = json.loads((FIXTURES / name).read_text())
    for told in (None, host):
        ep = episode_from_hook(obj, told)
        assert (ep.status, ep.error_code) == (status, error_code), told


def test_a_string_response_is_unknown_from_codex_and_ok_from_claude_code() -> None:
    base = {"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Bash"}
    said = {**base, "tool_response": "3 files"}
    assert episode_from_hook(said, "codex").status == p.UNKNOWN_STATUS
    assert episode_from_hook(said, "claude-code").status == "ok"
    assert episode_from_hook({**said, "tool_response": "error: no such file"}, "codex").status == (
        "error"
    )
    exit_0 = {**base, "tool_response": {"exit_code": 0, "stdout": "done"}}
    assert episode_from_hook(exit_0, "codex").status == "ok"


def test_a_gemini_tool_error_and_a_signal_are_failures() -> None:
    base = {"hook_event_name": "AfterTool", "timestamp": "t", "tool_name": "read_file"}
    failed = {"message": "no file", "type": "ENOENT"}
    error = {"llmContent": "", "returnDisplay": "", "error": failed}
    ep = episode_from_hook({**base, "tool_response": error})
    assert (ep.status, ep.error_code) == ("error", "ENOENT")
    killed = {"llmContent": "Output: half\nSignal: 9\nProcess Group PGID: 1", "returnDisplay": "x"}
    ep = episode_from_hook({**base, "tool_response": killed})
    assert (ep.status, ep.error_code) == ("error", "signal_9")
    # The output printing an "Exit Code" line does not decide: the tool's own last line does.
    echoed = {"llmContent": "Output: Exit Code: 7\nExit Code: 0", "returnDisplay": "Exit Code: 7"}
    assert episode_from_hook({**base, "tool_response": echoed}).status == "ok"


# ----------------------------------------------------------------- never in the host's way


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("claude-code", "claude_code_user_prompt_submit.json"),
        ("codex", "codex-0.171.0-UserPromptSubmit.json"),
        ("gemini", "gemini-0.61.0-BeforeAgent.json"),
    ],
)
def test_with_no_daemon_the_context_hook_says_nothing_and_goes_on(
    tmp_path: Path, host: str, name: str
) -> None:
    env = dict(os.environ, RECALLD_SOCKET=str(tmp_path / "none.sock"))
    out = recallctl(
        "--agent", host, "context", "--host", host, stdin=(FIXTURES / name).read_bytes(), env=env
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")
    loud = recallctl(
        "--agent", host, "context", "--host", host, "--verbose",
        stdin=(FIXTURES / name).read_bytes(), env=env,
    )  # fmt: skip
    assert loud.returncode == 0 and b"recalld is not answering" in loud.stderr


@pytest.mark.parametrize("host", ["claude-code", "codex", "gemini"])
def test_a_full_spool_or_a_bad_payload_never_fails_the_capture_hook(
    tmp_path: Path, host: str
) -> None:
    env = dict(os.environ, RECALLD_SOCKET=str(tmp_path / "none.sock"), RECALLD_AUTOSTART="0")
    directory = default_spool().directory
    directory.mkdir(parents=True, mode=0o700)
    (directory / "00000000000000000000-1-filler.json").write_bytes(b"x" * (32 * 1024 * 1024))
    stdin = (FIXTURES / "codex-0.171.0-Stop.json").read_bytes()
    for data in (stdin, b"not json", b""):
        out = recallctl("--agent", host, "capture", "--host", host, stdin=data, env=env)
        assert (out.returncode, out.stdout, out.stderr) == (0, b"", b""), data
    # Nothing was queued past the full spool (which counts what it turned away apart).
    assert [f.name for f in directory.glob("*.json")] == ["00000000000000000000-1-filler.json"]


@pytest.mark.parametrize("command", [["capture", "--quiet"], ["context"]])
def test_a_hook_run_without_stdin_goes_on(tmp_path: Path, command: list[str]) -> None:
    env = dict(os.environ, RECALLD_SOCKET=str(tmp_path / "none.sock"), RECALLD_AUTOSTART="0")
    out = subprocess.run(
        [str(BIN / "recallctl"), "--agent", "codex", command[0], "--host", "codex", *command[1:]],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        env=env,
        # The host gave the hook no stdin at all: fd 0 is closed.
        preexec_fn=lambda: os.close(0),
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")


# ----------------------------------------------------------------- any bytes


async def test_undecodable_bytes_and_lone_surrogates_are_recorded_replaced(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    base = json.loads(payload("claude_code_post_tool_use.json", checkout))
    base["tool_response"]["stdout"] = "PLACEHOLDER"
    raw = json.dumps(base).encode().replace(b"PLACEHOLDER", b"caf\xe9 \xff ok")
    lone = json.dumps({**base, "tool_use_id": "t2"}).replace("PLACEHOLDER", "\\ud83d ok")
    for data in (raw, lone.encode()):
        out = recallctl(
            "--socket", str(running_daemon.socket), "--agent", "claude-code", "capture",
            "--quiet", stdin=data, env=running_daemon.env(),
        )  # fmt: skip
        assert (out.returncode, out.stderr) == (0, b""), out.stderr
    lone_ep, raw_ep = await episodes(running_daemon, "claude-code", checkout)
    assert raw_ep.summary.endswith("-> ok: caf\ufffd \ufffd ok")
    assert lone_ep.summary.endswith("-> ok: \ufffd ok")


# ----------------------------------------------------------------- prompts and roll-ups


async def test_a_claude_code_session_end_rolls_the_session_up_named_after_its_first_prompt(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    lines = payload("claude_code_session.jsonl", checkout).splitlines()
    end = payload("claude_code_session_end.json", checkout)
    hook(running_daemon, "claude-code", "\n".join(lines) + "\n")
    hook(running_daemon, "claude-code", end)
    async with running_daemon.client(agent="claude-code", workspace=str(checkout)) as rc:
        found = await rc.call(p.ExperienceList(), p.ExperienceListResult)
    [experience] = found.experiences
    assert experience.description.startswith("The nightly export job fails on staging")
    assert experience.tool_calls == 5


async def test_a_codex_stop_rolls_its_session_up(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    for name in ("UserPromptSubmit", "PostToolUse", "Stop"):
        hook(running_daemon, "codex", payload(f"codex-0.171.0-{name}.json", checkout))
    async with running_daemon.client(agent="codex", workspace=str(checkout)) as rc:
        found = await rc.call(p.ExperienceList(), p.ExperienceListResult)
    [experience] = found.experiences
    # Its one call's outcome is unknown: so is the session's.
    assert (experience.description, experience.status) == ("FAILCMD please", "unknown")


async def test_recallds_own_tools_and_unknown_events_are_not_recorded(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    own = [
        edited("claude_code_post_tool_use.json", checkout, tool_name="mcp__recalld__memory_search"),
        edited(
            "gemini-0.61.0-AfterTool.json",
            checkout,
            tool_name="mcp_recalld_memory_search",
            mcp_context={"server_name": "recalld", "tool_name": "memory_search"},
        ),
        edited("claude_code_stop.json", checkout, hook_event_name="Nope"),
    ]
    for stdin in own:
        hook(running_daemon, "claude-code", stdin)
    loud = recallctl(
        "--socket", str(running_daemon.socket), "capture", "--host", "codex", "--verbose",
        stdin=own[-1].encode(), env=running_daemon.env(),
    )  # fmt: skip
    assert loud.returncode == 0 and b"hook event 'Nope' is not one capture records" in loud.stderr
    hook(running_daemon, "claude-code", edited("claude_code_post_tool_use.json", checkout))
    [ep] = await episodes(running_daemon, "claude-code", checkout)
    assert ep.tool == "Bash"


# ----------------------------------------------------------------- the host does not wait


async def test_the_hook_answers_the_host_first_and_the_episode_arrives(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    out = recallctl(
        "--socket", str(running_daemon.socket), "--agent", "gemini", "capture", "--host",
        "gemini", "--quiet", "--detach",
        stdin=payload("gemini-0.61.0-AfterTool-exit2.json", checkout).encode(),
        env=running_daemon.env(),
    )  # fmt: skip
    assert (out.returncode, out.stdout, out.stderr) == (0, b"", b"")
    # Delivered by the detached child: looked for until it is there.
    with anyio.fail_after(20):
        while True:
            if found := await episodes(running_daemon, "gemini", checkout):
                break
            await anyio.sleep(0.05)
    assert found[0].status == "error"


def test_the_hook_entry_knows_recallctl_s_own_options() -> None:
    parser = _parser()
    own = {
        flag: action.nargs != 0
        for action in parser._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag not in ("--help", "--version")
    }
    assert {f for f, value in own.items() if value} == hook_entry.VALUE_OPTIONS
    assert {f for f, value in own.items() if not value} == hook_entry.FLAGS


@pytest.mark.parametrize(
    "argv",
    [
        ["--agent", "gemini", "capture", "--host", "gemini", "--quiet", "--detach"],
        ["--agent=codex", "--no-admin", "capture", "-q", "--detach", "--host=codex"],
        ["capture", "--quiet", "--host", "gemini", "--detach", "--socket", "/s"],
        ["capture", "--host", "claude-code", "--quiet"],
        ["capture", "--quiet", "--detach"],
        ["--agent", "capture", "store", "x"],
        ["capture", "--host", "codex"],
        ["capture", "--host", "codex", "--quiet", "--json"],
        ["capture", "--host", "codex", "--quiet", "--verbose"],
        ["--no-admin", "capture", "--host", "codex", "-q", "--agent"],
        ["context", "--host", "codex", "--quiet"],
    ],
)
def test_only_a_quiet_host_capture_is_answered_first(argv: list[str]) -> None:
    try:
        args = _parser().parse_args(argv)
    except SystemExit:
        expected = False
    else:
        expected = (
            args.command == "capture"
            and bool(args.host)
            and args.quiet
            and args.detach
            and not (args.json or args.verbose)
        )
    assert hook_entry.detachable(argv) == expected


def test_a_hook_payload_is_read_at_its_end_though_stdin_stays_open() -> None:
    read, write = os.pipe()
    try:
        os.write(write, b'{"hook_event_name": "SessionEnd"}\n')
        started = time.monotonic()
        assert hook_entry.read_hook_input(read, wait_s=10) == b'{"hook_event_name": "SessionEnd"}\n'
        assert time.monotonic() - started < 1
    finally:
        os.close(read)
        os.close(write)
