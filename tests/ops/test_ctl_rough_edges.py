"""What a new user runs into first, through the real ``recallctl`` against a real daemon:
input refused before it is sent (one line, exit 2), recallctl's own options after the
command, status and doctor agreeing on the embedding backlog, empty answers that say where
they looked and how to widen, and the work page counting failures as the daemon does."""

from __future__ import annotations

import json
import re
import subprocess

import anyio
from recall_client import protocol as p

from tests.support.daemon import BIN, DaemonProcess
from tests.support.ui import Http, ui_server

WS = "/ws/rough"


def ctl(
    d: DaemonProcess, *args: str, stdin: bytes | None = None, before: bool = True
) -> subprocess.CompletedProcess[str]:
    """recallctl with --socket and --workspace before the command (``before``) or after it."""
    options = ["--socket", str(d.socket), "--workspace", WS]
    argv = [*options, *args] if before else [*args, *options]
    done = subprocess.run(
        [str(BIN / "recallctl"), *argv], capture_output=True, input=stdin, timeout=120, env=d.env()
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode(errors="replace")
    )


def stored(d: DaemonProcess) -> list[str]:
    done = ctl(d, "memories", "--json")
    assert done.returncode == 0, done.stderr
    return [item["text"] for item in json.loads(done.stdout)["items"]]


async def test_store_refuses_text_it_cannot_send_in_one_line_before_sending(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    cases = [
        (b"\xff\xfe not utf-8", ["not UTF-8", "0xff", "offset 0"]),
        (b"a" * 5_000_000, ["more than 4194304 bytes", "at most 100000 characters"]),
        ("é".encode() * 100_001, ["100001 characters", "at most 100000"]),
    ]
    for stdin, said in cases:
        done = ctl(d, "store", "-", stdin=stdin)
        assert done.returncode == 2, done
        line = done.stderr.strip()
        assert "\n" not in line and "Traceback" not in line, done.stderr
        assert line.startswith("recallctl store: "), line
        for words in said:
            assert words in line, line
    # A hook's capture takes any bytes (an undecodable one replaced): it never blocks a host.
    hook = ctl(d, "capture", stdin=b'{"summary": "caf\xe9"}')
    assert hook.returncode == 0 and hook.stdout.startswith("ep_"), hook
    # Nothing was stored, and the daemon never saw a frame it had to drop.
    assert stored(d) == []
    assert ctl(d, "store", "-", stdin=b"a memory that fits").returncode == 0
    assert stored(d) == ["a memory that fits"]


async def test_recallctls_options_work_after_the_command_too(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    # --socket and --workspace after the command (ctl puts them there).
    done = ctl(d, "store", "Deploys go through the staging cluster", "--agent", "bob", before=False)
    assert done.returncode == 0, done.stderr
    listed = ctl(d, "memories", "--json", before=False)
    assert listed.returncode == 0, listed.stderr
    (item,) = json.loads(listed.stdout)["items"]
    assert item["workspace"] == WS and item["agent"] == "bob"
    # memories has an --agent of its own (the writer): there it keeps that meaning.
    mine = ctl(d, "memories", "--json", "--agent", "someone-else")
    assert json.loads(mine.stdout)["items"] == []
    # --no-admin after the command: listing another workspace then needs the admin token.
    assert ctl(d, "memories", "--in", "/ws/other").returncode == 0
    refused = ctl(d, "memories", "--in", "/ws/other", "--no-admin")
    assert refused.returncode == 1 and "forbidden" in refused.stderr, refused
    # --agent-token-file after the command is read (and a missing one said so).
    missing = ctl(d, "status", "--agent-token-file", "/nonexistent/agent.token")
    assert missing.returncode == 1 and "/nonexistent/agent.token" in missing.stderr, missing
    # --version, and a subcommand's subcommand.
    version = ctl(d, "status", "--version")
    assert version.returncode == 0 and version.stdout.startswith("recallctl "), version
    approvals = ctl(d, "workspace", "list", "--no-admin")
    assert approvals.returncode == 1 and "admin" in approvals.stderr, approvals


async def test_ui_accepts_no_admin_after_the_command(running_daemon: DaemonProcess) -> None:
    with ui_server(running_daemon, WS, "--no-admin", "--print-url") as server:
        http = Http(server).sign_in()
        refused = http.get("/operations")
        assert refused.status_code == 403 and "admin:workspace" in refused.text


async def test_status_and_doctor_count_one_embedding_backlog(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    # A failed step with no verdict waits for one before it is embedded: not a backlog.
    episode = {"summary": "pytest failed on the parser", "status": "error", "session_id": "s1"}
    captured = ctl(d, "capture", stdin=json.dumps(episode).encode())
    assert captured.returncode == 0, captured.stderr
    report = await d.status(wait_settled_s=30)
    doctor = ctl(d, "doctor", "--json")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    (index,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "index"]
    waiting = re.search(r"(\d+) records waiting to be embedded", index["detail"])
    assert (int(waiting.group(1)) if waiting else 0) == report.index.embedding_backlog == 0


async def test_empty_answers_name_where_they_looked_and_the_flag_that_widens(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    none = ctl(d, "memories")
    assert none.returncode == 0, none.stderr
    assert f"no memories in workspace {WS}" in none.stdout and "--all" in none.stdout
    by_bob = ctl(d, "memories", "--agent", "bob", "--kind", "fact")
    assert "written by agent bob" in by_bob.stdout
    assert "without --kind, --agent" in by_bob.stdout
    work = ctl(d, "--agent", "carol", "work-search", "parser", "--tool", "pytest")
    assert work.returncode == 0, work.stderr
    assert "agent 'carol'" in work.stdout and WS in work.stdout
    assert "--include-pending" in work.stdout and "--any-caller" in work.stdout
    assert "without --tool" in work.stdout


async def test_the_work_page_counts_failed_steps_with_the_daemons_success_statuses(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    async with d.client(workspace=WS) as rc:
        for status in [*sorted(p.SUCCESS_STATUSES), "error"]:
            await rc.call(
                p.CaptureEpisode(summary=f"step {status}", status=status, session_id="s-page"),
                p.EpisodeCaptured,
            )
    with anyio.fail_after(30):
        await d.status(wait_settled_s=20)
    with ui_server(d, WS) as server:
        page = Http(server).sign_in().get(f"/work?ws={WS}")
    assert page.status_code == 200
    row = re.search(r"s-page</span></td><td>(\d+)</td><td[^>]*>(\d+)</td>", page.text)
    assert row is not None, page.text
    assert (int(row.group(1)), int(row.group(2))) == (len(p.SUCCESS_STATUSES) + 1, 1)
