"""recallctl capture / work-search / work-result / forget, and the Claude Code hook path end
to end: a recorded hook payload piped into the documented hook command (docs/usage.md)
reaches work_search."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest
from recall_client import protocol as p
from recall_client.ctl.episode_input import (
    Ignored,
    InputError,
    episode_from_hook,
    episodes_from_text,
)

from tests.support.daemon import BIN, DaemonProcess
from tests.support.episodes import captured, database_bytes, ids, search, settled
from tests.support.hooks import AGENT, FIXTURES, payload, readme_hook_command, run_hook

pytestmark = pytest.mark.both_backends


def ctl(d: DaemonProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        env=d.env(),
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git working tree; hooks run in a subdirectory of it."""
    root = tmp_path / "shop"
    (root / ".git").mkdir(parents=True)
    (root / "services" / "cart").mkdir(parents=True)
    return root


# ----------------------------------------------------------------- the hook path


def test_the_usage_docs_ship_a_claude_code_hook_configuration() -> None:
    config, command = readme_hook_command()
    assert set(config["hooks"]) == {"PostToolUse", "PostToolUseFailure", "Stop"}
    for event, groups in config["hooks"].items():
        for group in groups:
            assert set(group) <= {"matcher", "hooks"}, event
            for hook in group["hooks"]:
                assert hook["type"] == "command" and 0 < hook["timeout"] <= 60
    argv = shlex.split(command)
    assert argv[0].endswith("/.venv/bin/recallctl")
    assert argv[1:] == ["--agent", AGENT, "capture", "--host", "claude-code", "--quiet"]


async def test_the_documented_hook_records_a_post_tool_use_payload_end_to_end(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    _, command = readme_hook_command()
    argv = shlex.split(command)
    argv[0] = str(BIN / "recallctl")
    # Claude Code runs the command with the payload on stdin, in the session's environment.
    out = run_hook(
        argv,
        payload("claude_code_post_tool_use.json", checkout / "services" / "cart"),
        running_daemon.env(),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""  # --quiet: nothing reaches the model

    async with running_daemon.client(agent=AGENT, workspace=str(checkout)) as rc:
        [ep] = await captured(rc)
        await settled(running_daemon, ep.id)
        [ep] = (await search(rc, query="cart tests")).results
    assert ep.vault == str(checkout)  # the git root of the hook's cwd
    assert ep.session_id == "5c3f2b9e-8a41-4f0e-9d2a-6b1e7c4d8f20"
    assert ep.caller == AGENT
    assert (ep.channel, ep.episode_type, ep.tool, ep.status) == ("hook", "tool_call", "Bash", "ok")
    assert ep.error_code is None and ep.eligibility == "eligible"
    assert (
        ep.summary
        == "Bash: pytest -q tests/test_cart.py | Run the cart tests -> ok: 4 passed in 0.31s"
    )
    assert ep.result_size == len(
        json.dumps(
            json.loads((FIXTURES / "claude_code_post_tool_use.json").read_text())["tool_response"]
        ).encode()
    )
    assert ep.tags == ["hook:PostToolUse"]
    assert ep.trust is not None and cast(float, ep.trust) >= 0.3


async def test_a_failed_tool_call_waits_for_its_sessions_verdict(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    cwd = checkout / "services" / "cart"
    for name in ("claude_code_post_tool_use_failure.json", "claude_code_stop.json"):
        out = ctl(running_daemon, "--agent", AGENT, "capture", stdin=payload(name, cwd))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("ep_")
    async with running_daemon.client(agent=AGENT, workspace=str(checkout)) as rc:
        listing = await search(rc, include_pending=True)
        failure, stop = sorted(listing.results, key=lambda ep: ep.episode_type != "tool_call")
        await settled(running_daemon, stop.id)
        assert (failure.status, failure.error_code, failure.eligibility) == (
            "error",
            "exit_1",
            "pending",
        )
        assert "already exists" in (failure.summary or "")
        assert (stop.episode_type, stop.prev_id, stop.tool) == ("turn_end", failure.id, None)
        assert ids(await search(rc, query="alembic")) == []

        verdict = ctl(
            running_daemon,
            "--agent",
            AGENT,
            # A verdict judges a session of its own workspace only.
            "--workspace",
            str(checkout),
            "work-result",
            "--session",
            "5c3f2b9e-8a41-4f0e-9d2a-6b1e7c4d8f20",
            "0",
            "--json",
        )
        assert verdict.returncode == 0, verdict.stderr
        assert json.loads(verdict.stdout)["matched"] == 2
        await settled(running_daemon, failure.id)
        [found] = (await search(rc, query="alembic")).results
    assert (found.id, found.task_result, found.eligibility) == (failure.id, 0.0, "eligible")


async def test_a_recorded_session_is_captured_in_order_with_its_secrets_redacted(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    stdin = payload("claude_code_session.jsonl", checkout)
    out = ctl(running_daemon, "--agent", AGENT, "capture", "--json", stdin=stdin)
    assert out.returncode == 0, out.stderr
    replies = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(replies) == 7
    # Each episode points at the one before it: the session's chain, in order.
    assert [r.get("prev_id") for r in replies] == [None] + [r["record_id"] for r in replies[:-1]]
    assert replies[2]["redacted"] == ["secret_assignment"]

    # The same payloads again (a retried hook) are not stored twice.
    again = ctl(running_daemon, "--agent", AGENT, "capture", "--json", stdin=stdin)
    replayed = [json.loads(line) for line in again.stdout.splitlines()]
    tool_calls = [
        r for r, line in zip(replayed, stdin.splitlines(), strict=True) if "tool_use_id" in line
    ]
    assert tool_calls and all(r["replayed"] for r in tool_calls)

    async with running_daemon.client(agent=AGENT, workspace=str(checkout)) as rc:
        await settled(running_daemon, replies[-1]["record_id"])
        listing = await search(rc, include_pending=True, k=200)
        assert "s3cr3t-Export-99" not in json.dumps([ep.summary for ep in listing.results])
        assert (await search(rc, query="s3cr3t", include_pending=True)).results == []
        session = await search(
            rc, session_id="0d9a7e31-2c54-4b8f-a6e0-93f1b2c4d5e6", include_pending=True
        )
        assert len(session.results) == 7 + 2  # the prompt and the Stop were new events again
        fixed = await search(rc, query="export job", tool="Bash")
    assert {ep.status for ep in fixed.results} == {"ok"}
    assert await running_daemon.stop() == 0
    assert b"s3cr3t-Export-99" not in database_bytes(running_daemon)


# ----------------------------------------------------------------- recallctl


async def test_plain_episode_objects_and_a_bad_line(running_daemon: DaemonProcess) -> None:
    lines = [
        json.dumps(
            {
                "summary": "rebuilt the search index",
                "tool": "make",
                "session_id": "s1",
                "duration_ms": 4200,
                "tags": ["ops"],
            }
        ),
        "this is not json",
        json.dumps({"summary": "x", "caller": "someone-else"}),
        json.dumps(
            {
                "summary": "vacuumed the database",
                "status": "ok",
                "session_id": "s1",
                "vault": "/ws/ops",
            }
        ),
    ]
    out = ctl(
        running_daemon,
        "--agent",
        "ops-bot",
        "--workspace",
        "/ws/ops",
        "capture",
        stdin="\n".join(lines),
    )
    assert out.returncode == 1
    assert "line 2: not JSON" in out.stderr
    assert "line 3: unknown field(s) caller" in out.stderr
    captured = out.stdout.split()
    assert len(captured) == 2

    listing = ctl(
        running_daemon,
        "--agent",
        "ops-bot",
        "--workspace",
        "/ws/ops",
        "work-search",
        "--include-pending",
        "--json",
    )
    assert listing.returncode == 0, listing.stderr
    found = json.loads(listing.stdout)
    assert {r["id"] for r in found["results"]} == set(captured)
    by_summary = {r["summary"]: r for r in found["results"]}
    assert by_summary["rebuilt the search index"]["channel"] == "cli"
    assert by_summary["rebuilt the search index"]["duration_ms"] == 4200
    assert by_summary["vacuumed the database"]["prev_id"] == captured[0]


async def test_capture_with_nothing_on_stdin_fails_clearly(running_daemon: DaemonProcess) -> None:
    out = ctl(running_daemon, "capture", stdin="")
    assert out.returncode == 1
    assert "no input" in out.stderr


async def test_recallctl_forget_and_the_admin_token(running_daemon: DaemonProcess) -> None:
    out = ctl(
        running_daemon,
        "--agent",
        "a",
        "--workspace",
        "/ws/x",
        "capture",
        stdin=json.dumps({"summary": "a's step"}),
    )
    record_id = out.stdout.strip()
    # recallctl reads the admin token, so it may cross the partition...
    everyone = ctl(
        running_daemon,
        "--agent",
        "b",
        "--workspace",
        "/ws/x",
        "work-search",
        "--any-caller",
        "--include-pending",
        "--json",
    )
    assert everyone.returncode == 0, everyone.stderr
    assert [r["id"] for r in json.loads(everyone.stdout)["results"]] == [record_id]
    # ...unless told not to.
    plain = ctl(
        running_daemon,
        "--no-admin",
        "--agent",
        "b",
        "--workspace",
        "/ws/x",
        "work-search",
        "--any-caller",
    )
    assert plain.returncode == 1
    assert "forbidden" in plain.stderr
    refused = ctl(running_daemon, "--no-admin", "--agent", "b", "forget", record_id)
    assert refused.returncode == 1 and "not_found" in refused.stderr

    forgot = ctl(running_daemon, "--agent", "a", "forget", record_id, "ep_unknown")
    assert forgot.returncode == 1
    assert f"{record_id} (episode) forgotten" in forgot.stdout
    assert "not_found" in forgot.stderr
    after = ctl(
        running_daemon,
        "--agent",
        "a",
        "--workspace",
        "/ws/x",
        "work-search",
        "--include-pending",
        "--json",
    )
    assert json.loads(after.stdout)["results"] == []


# ----------------------------------------------------------------- payload mapping


def _hook(**fields: Any) -> p.CaptureEpisode:
    base = {
        "session_id": "s",
        "cwd": "/nonexistent/repo",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "make"},
    }
    return episode_from_hook({**base, **fields})


@pytest.mark.parametrize(
    ("response", "status", "error_code"),
    [
        ({"stdout": "done", "stderr": "", "interrupted": False}, "ok", None),
        ({"stdout": "", "stderr": "boom", "interrupted": True}, "error", "interrupted"),
        ({"exit_code": 2, "stderr": "make: *** [all] Error 2"}, "error", "exit_2"),
        ({"success": False, "error": "file not found"}, "error", "tool_error"),
        ({"is_error": True, "error": "denied", "error_code": "EACCES"}, "error", "EACCES"),
        ("Error: permission denied", "error", "tool_error"),
        ("plain text result", "ok", None),
    ],
)
def test_the_tool_response_decides_status_and_error_code(
    response: Any, status: str, error_code: str | None
) -> None:
    ep = _hook(tool_response=response)
    assert (ep.status, ep.error_code) == (status, error_code)
    assert ep.result_size == len(json.dumps(response).encode())


def test_an_interrupted_failure_and_other_events() -> None:
    interrupted = _hook(hook_event_name="PostToolUseFailure", error="", is_interrupt=True)
    assert (interrupted.status, interrupted.error_code) == ("error", "interrupted")
    prompt = episode_from_hook(
        {
            "session_id": "s",
            "hook_event_name": "UserPromptSubmit",
            "prompt": "fix the flaky test\nplease",
        }
    )
    assert (prompt.episode_type, prompt.summary, prompt.source) == (
        "prompt",
        "prompt: fix the flaky test",
        "user",
    )
    end = episode_from_hook(
        {"session_id": "s", "hook_event_name": "SessionEnd", "reason": "logout"}
    )
    assert (end.episode_type, end.summary) == ("session_end", "session ended: logout")
    with pytest.raises(Ignored, match="TeammateIdle"):
        episode_from_hook({"hook_event_name": "TeammateIdle"})
    web = _hook(
        tool_name="WebFetch",
        tool_input={"url": "https://example.com"},
        tool_response={"durationMs": 310, "result": "..."},
    )
    assert (web.source, web.duration_ms) == ("web", 310.0)


def test_a_long_payload_becomes_a_compact_summary() -> None:
    ep = _hook(
        tool_input={"command": "echo " + "x" * 5000},
        tool_response={"stdout": "y" * 5000, "stderr": ""},
    )
    assert len(ep.summary) <= 600
    assert ep.result_size is not None and ep.result_size > 5000


def test_unusable_input_is_named() -> None:
    results = episodes_from_text('[{"summary": "ok"}, 5, {"hook_event_name": ""}]')
    assert isinstance(results[0], p.CaptureEpisode)
    assert isinstance(results[1], InputError) and "item 2" in str(results[1])
    assert isinstance(results[2], InputError) and "hook_event_name" in str(results[2])
