"""``recallctl experience`` as a subprocess against a real daemon: search, show, record,
forget; the end-of-session roll-up from a recorded Claude Code hook payload through the
documented hook command (docs/usage.md); and export/import carrying experiences and their
lessons."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from recall_client import protocol as p
from recall_client.ctl.experience import PAYLOAD_WAIT_S

from tests.support.daemon import BIN, REPO, DaemonFactory, DaemonProcess

pytestmark = pytest.mark.both_backends

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AGENT = "claude-code"
SESSION = "0d9a7e31-2c54-4b8f-a6e0-93f1b2c4d5e6"


def ctl(
    d: DaemonProcess | None, *args: str, stdin: str | None = None, socket: Path | None = None
) -> subprocess.CompletedProcess[str]:
    sock = socket or (d.socket if d is not None else None)
    env = d.env() if d is not None else None
    return subprocess.run(
        [str(BIN / "recallctl"), *(["--socket", str(sock)] if sock else []), *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
        env=env,
    )


@pytest.fixture
async def running_daemon(running_daemon: DaemonProcess) -> DaemonProcess:
    report = await running_daemon.status(wait_model_s=30)
    assert report.model.state == "ready", report.model.reason
    return running_daemon


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git working tree standing in for the recorded session's /home/dev/shop."""
    root = tmp_path / "shop"
    (root / ".git").mkdir(parents=True)
    return root


def recorded(name: str, checkout: Path) -> str:
    """A recorded payload, its paths (cwd, tool_input.file_path) moved into ``checkout``."""
    return (FIXTURES / name).read_text().replace("/home/dev/shop", str(checkout))


def readme_rollup_hooks() -> dict[str, list[str]]:
    """docs/usage.md's end-of-session hook configuration: event -> its commands."""
    usage = (REPO / "docs" / "usage.md").read_text()
    section = usage.split("### Recording each session's experience", 1)[1]
    block = re.search(r"```json\n(.*?)\n```", section, re.S)
    assert block, "docs/usage.md's roll-up section has a JSON block"
    config = json.loads(block.group(1))
    return {
        event: [hook["command"] for group in groups for hook in group["hooks"]]
        for event, groups in config["hooks"].items()
    }


def run_hook(command: str, stdin: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a hook command as Claude Code does: the payload on stdin, the session's env."""
    argv = shlex.split(command)
    assert argv[0].endswith("/.venv/bin/recallctl")
    return subprocess.run(
        [str(BIN / "recallctl"), *argv[1:]],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def run_with_stdin_left_open(stdin: str, env: dict[str, str]) -> tuple[int, float, str]:
    """(exit code, seconds after the payload was written, stdout) of a roll-up whose stdin is
    written but never closed."""
    with subprocess.Popen(
        [str(BIN / "recallctl"), "--agent", AGENT, "experience", "rollup", "--hook", "--json"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(stdin)
            proc.stdin.flush()  # and not closed, as Claude Code may leave it
            started = time.monotonic()
            code = proc.wait(timeout=60)
            return code, time.monotonic() - started, proc.stdout.read()
        finally:
            proc.kill()


# --------------------------------------------------------------------------- commands


async def test_record_search_show_and_forget(running_daemon: DaemonProcess) -> None:
    ws = ["--workspace", "/ws/app"]
    rec = ctl(
        running_daemon,
        *ws,
        "experience",
        "record",
        "Fixed the login bug where an expired token was accepted after logout",
        "--outcome",
        "success",
        "--class",
        "bugfix",
        "--strategy",
        "reproduce first",
        "--tool-calls",
        "42",
        "--minutes",
        "17.5",
        "--file",
        "/ws/app/src/auth.py",
        "--lesson",
        "Check token expiry on every request.",
        "--session",
        "s-9",
        "--json",
    )
    assert rec.returncode == 0, rec.stderr
    recorded_reply = json.loads(rec.stdout)
    exp_id = recorded_reply["record_id"]
    assert recorded_reply["lessons"][0]["support"] == 1

    table = ctl(running_daemon, *ws, "experience", "search", "expired token login bug")
    assert table.returncode == 0, table.stderr
    header, row, *rest = table.stdout.splitlines()
    assert header.split() == ["score", "id", "status", "class", "calls", "min", "description"]
    assert row.split()[1:6] == [exp_id, "success", "bugfix", "42", "17.5"]
    assert "Fixed the login bug" in row
    assert rest[1:] == [
        "lessons (confidence, support)",
        "  0.67    1  Check token expiry on every request.",
    ]

    as_json = json.loads(
        ctl(
            running_daemon,
            *ws,
            "experience",
            "search",
            "expired token login",
            "--limit",
            "1",
            "--json",
        ).stdout
    )
    [e] = as_json["experiences"]
    assert (e["id"], e["class"], e["files"], e["minutes"]) == (
        exp_id,
        "bugfix",
        ["src/auth.py"],
        17.5,
    )

    shown = ctl(running_daemon, *ws, "experience", "show", exp_id, "--query", "expired token")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"{exp_id}  success  class bugfix  agent recallctl")
    for line in (
        "  strategy     reproduce first",
        "  effort       42 tool calls, 17.5 minutes",
        "  files        src/auth.py",
        "  session      s-9",
        "  0.67    1  Check token expiry on every request.",
    ):
        assert line in shown.stdout.splitlines()
    assert "for 'expired token': rank 1" in shown.stdout

    forgot = ctl(running_daemon, *ws, "experience", "forget", exp_id)
    assert forgot.stdout.strip() == f"{exp_id} forgotten (0 lessons weakened, 1 retired)"
    again = ctl(running_daemon, *ws, "experience", "forget", exp_id)
    assert again.stdout.strip() == f"{exp_id} was already forgotten"
    empty = ctl(running_daemon, *ws, "experience", "search", "expired token login bug")
    assert empty.stdout.strip() == "no similar experiences"


async def test_bad_input_is_a_clear_failure(running_daemon: DaemonProcess, tmp_path: Path) -> None:
    out = ctl(running_daemon, "experience", "search", "x", "--limit", "21")
    # Refused before sending, in the flag's words and with the protocol's range.
    assert out.returncode == 2 and "--limit: must be 1-20, not 21" in out.stderr
    out = ctl(running_daemon, "experience", "show", "exp_nope")
    assert out.returncode == 1 and "not_found" in out.stderr
    out = ctl(running_daemon, "experience", "record", "x", "--file", "/etc/passwd")
    assert out.returncode == 1 and "outside the workspace" in out.stderr
    out = ctl(running_daemon, "experience", "rollup", "--session", "never-captured")
    assert out.returncode == 1
    assert "not_found: no captured episodes of session never-captured" in out.stderr
    out = ctl(running_daemon, "experience", "rollup", stdin="")
    assert out.returncode == 1 and "no hook payload on stdin" in out.stderr
    out = ctl(running_daemon, "experience", "rollup", "--hook", stdin='{"summary": "x"}')
    assert out.returncode == 1 and "hook_event_name" in out.stderr
    out = ctl(None, "experience", "rollup", "--session", "s", socket=tmp_path / "none.sock")
    assert out.returncode == 3 and "not answering" in out.stderr
    out = ctl(None, "experience", "--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: recallctl experience")


# --------------------------------------------------------------------------- the hook path


def test_the_usage_docs_ship_the_end_of_session_hooks() -> None:
    hooks = readme_rollup_hooks()
    assert set(hooks) == {"UserPromptSubmit", "SessionEnd"}
    assert shlex.split(hooks["UserPromptSubmit"][0])[1:] == [
        *("--agent", AGENT, "capture", "--host", "claude-code", "--quiet")
    ]
    assert shlex.split(hooks["SessionEnd"][0])[1:] == [
        "--agent",
        AGENT,
        "experience",
        "rollup",
        "--hook",
        "--quiet",
    ]


async def test_a_recorded_session_is_rolled_up_by_the_documented_hook(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    env = running_daemon.env()
    # The session's hooks captured its prompt, tool calls and turn end...
    capture = ctl(
        running_daemon,
        "--agent",
        AGENT,
        "capture",
        "--quiet",
        stdin=recorded("claude_code_session.jsonl", checkout),
    )
    assert capture.returncode == 0, capture.stderr
    # ...then Claude Code runs the SessionEnd hook with its payload on stdin.
    [command] = readme_rollup_hooks()["SessionEnd"]
    ended = run_hook(command, recorded("claude_code_session_end.json", checkout), env)
    assert ended.returncode == 0, ended.stderr
    assert ended.stdout == ""  # --quiet

    async with running_daemon.client(agent=AGENT, workspace=str(checkout)) as rc:
        found = await rc.call(
            p.SearchExperience(query="nightly export job fails on staging"),
            p.ExperienceSearchResult,
        )
        [e] = found.experiences
        explained = await rc.call(p.ExplainNode(record_id=e.id), p.NodeExplained)
    assert e.description == "The nightly export job fails on staging, can you fix it?"
    assert (e.agent, e.session, e.status) == (AGENT, SESSION, "success")
    assert e.tool_calls == 5  # Read, Bash, the failed Bash, Edit, Bash
    assert e.files == ["jobs/export.py"]
    assert 0 <= e.minutes < 1  # captured within moments of each other
    assert len(explained.episodes) == 7
    # The secret in one command was redacted at capture; nothing brings it back.
    assert "s3cr3t-Export-99" not in json.dumps([ep.text for ep in explained.episodes])

    # The recorded Stop payload of the same session rolls it up again: the same experience.
    stop = recorded("claude_code_session.jsonl", checkout).splitlines()[-1]
    again = ctl(running_daemon, "--agent", AGENT, "experience", "rollup", "--json", stdin=stop)
    assert again.returncode == 0, again.stderr
    reply = json.loads(again.stdout)
    assert (reply["record_id"], reply["created"], reply["episodes"]) == (e.id, False, 7)
    assert reply["why"] == "no verdict; the last tool call succeeded (1 of 5 tool calls failed)"

    # A person adds what the hook cannot know; the hook's next roll-up keeps it.
    told = ctl(
        running_daemon,
        "--agent",
        AGENT,
        "--workspace",
        str(checkout),
        "experience",
        "rollup",
        "--session",
        SESSION,
        "--description",
        "Fixed the nightly export's encoding error",
        "--lesson",
        "Open CSV exports with encoding='utf-8'.",
    )
    assert told.returncode == 0, told.stderr
    assert told.stdout.splitlines()[:2] == [
        f"{e.id} updated from 7 episodes of session {SESSION}",
        "  status       success (no verdict; the last tool call succeeded (1 of 5 tool calls "
        "failed))",
    ]
    assert "  description  Fixed the nightly export's encoding error" in told.stdout
    assert "  0.67    1  Open CSV exports with encoding='utf-8'.  (new)" in told.stdout
    hook_again = run_hook(command, recorded("claude_code_session_end.json", checkout), env)
    assert hook_again.returncode == 0, hook_again.stderr
    async with running_daemon.client(agent=AGENT, workspace=str(checkout)) as rc:
        final = await rc.call(p.ExplainNode(record_id=e.id), p.NodeExplained)
    assert final.experience.description == "Fixed the nightly export's encoding error"
    assert [x.text for x in final.lessons] == ["Open CSV exports with encoding='utf-8'."]


async def test_a_payload_on_stdin_left_open_is_read_without_waiting_for_eof(
    running_daemon: DaemonProcess, checkout: Path
) -> None:
    capture = ctl(
        running_daemon,
        "--agent",
        AGENT,
        "capture",
        "--quiet",
        stdin=recorded("claude_code_session.jsonl", checkout),
    )
    assert capture.returncode == 0, capture.stderr
    code, took, out = run_with_stdin_left_open(
        recorded("claude_code_session_end.json", checkout), running_daemon.env()
    )
    assert code == 0
    reply = json.loads(out)
    # It stopped reading at the end of the payload, not after waiting PAYLOAD_WAIT_S for more.
    assert took < PAYLOAD_WAIT_S
    assert reply["created"] and reply["session"] == SESSION


# --------------------------------------------------------------------------- export / import


async def test_export_and_import_carry_experiences_and_their_lessons(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    shared = "Run the migration on a copy of production first."
    source: DaemonProcess = daemon_factory("source")
    await source.start()
    async with source.client(agent="alice", workspace="/ws/one") as rc:
        first = await rc.call(
            p.RecordExperience(
                description="Migrated the orders table to the new schema",
                status="success",
                strategy="dual writes, then backfill",
                task_class="migration",
                tool_calls=31,
                minutes=44.5,
                files=["db/migrations/0042_orders.py"],
                session="s-1",
                lessons=[shared, "Backfill in batches of 10k rows."],
            ),
            p.ExperienceRecorded,
        )
        second = await rc.call(
            p.RecordExperience(
                description="Migration of the invoices table locked production",
                status="failure",
                task_class="migration",
                tool_calls=12,
                minutes=9.0,
                # The same lesson in other spelling: merged into the first one's text.
                lessons=["run the migration on a copy of production first"],
            ),
            p.ExperienceRecorded,
        )
        gone = await rc.call(
            p.RecordExperience(
                description="Migration of the payments table was abandoned",
                status="unknown",
                lessons=[shared],
            ),
            p.ExperienceRecorded,
        )
        await rc.call(p.ForgetExperience(record_id=gone.record_id), p.ExperienceForgotten)
        before = await rc.call(
            p.SearchExperience(query="migration table", limit=20), p.ExperienceSearchResult
        )
    async with source.client(agent="bob", workspace="/ws/two") as rc:
        await rc.call(
            p.RecordExperience(
                description="Rotated the TLS certificates",
                status="success",
                lessons=["Check the chain."],
            ),
            p.ExperienceRecorded,
        )
    dump = tmp_path / "dump.jsonl"
    out = ctl(source, "export", "--kind", "all", "-o", str(dump))
    assert out.returncode == 0, out.stderr
    assert await source.stop() == 0

    rows = [json.loads(line) for line in dump.read_text().splitlines()]
    by_id = {r["id"]: r for r in rows}
    # Forgotten, it travels marked so: the links to it stay explainable.
    assert by_id[gone.record_id]["tombstoned_at"] is not None
    exported = by_id[first.record_id]
    links = exported["experience"].pop("lessons")
    assert exported["experience"] == {
        "class": "migration",
        "strategy": "dual writes, then backfill",
        "status": "success",
        "tool_calls": 31,
        "minutes": 44.5,
        "files": ["db/migrations/0042_orders.py"],
        "rollup": None,
    }
    assert [link["id"] for link in links] == [first.lessons[0].id, first.lessons[1].id]
    assert [link["id"] for link in by_id[second.record_id]["experience"]["lessons"]] == [
        first.lessons[0].id
    ]
    lesson_row = by_id[first.lessons[0].id]
    assert lesson_row["kind"] == "lesson" and "experience" not in lesson_row
    # Support counts live experiences; the links name the forgotten one too.
    assert lesson_row["lesson"]["support"] == 2 and lesson_row["lesson"]["confidence"] == 0.5
    assert [link["id"] for link in lesson_row["lesson"]["experiences"]] == [
        first.record_id,
        second.record_id,
        gone.record_id,
    ]

    target: DaemonProcess = daemon_factory("target")
    await target.start()
    await target.status(wait_model_s=30)
    imported = ctl(target, "import", str(dump))
    assert imported.returncode == 0, imported.stderr
    assert "imported 7 records (4 experiences, 3 lessons): 7 new" in imported.stderr
    again = ctl(target, "import", str(dump))
    assert again.returncode == 0 and "7 already there" in again.stderr
    assert (
        ctl(target, "export", "--kind", "all").stdout.splitlines() == dump.read_text().splitlines()
    )

    async with target.client(agent="alice", workspace="/ws/one") as rc:
        after = await rc.call(
            p.SearchExperience(query="migration table", limit=20), p.ExperienceSearchResult
        )
    async with target.client(agent="bob", workspace="/ws/two") as rc:
        tls = await rc.call(
            p.SearchExperience(query="rotated TLS certificates"), p.ExperienceSearchResult
        )

    def same(e: p.ExperienceInfo) -> tuple[Any, ...]:
        return (
            e.description,
            e.task_class,
            e.agent,
            e.strategy,
            e.status,
            e.tool_calls,
            e.minutes,
            e.files,
            e.ts,
            e.session,
        )

    assert len(before.experiences) == 2
    assert [same(e) for e in after.experiences] == [same(e) for e in before.experiences]
    assert [(x.text, x.support, x.confidence) for x in after.lessons] == [
        (x.text, x.support, x.confidence) for x in before.lessons
    ]
    assert (shared, 2, 0.5) in [(x.text, x.support, x.confidence) for x in after.lessons]
    assert [(e.agent, e.description) for e in tls.experiences] == [
        ("bob", "Rotated the TLS certificates")
    ]
    assert await target.stop() == 0


async def test_an_experience_row_without_its_fields_is_refused(
    running_daemon: DaemonProcess,
) -> None:
    now = time.time()
    row = {
        "id": "exp_imported",
        "kind": "experience",
        "text": "a task",
        "workspace": "/ws/i",
        "agent": "alice",
        "ts": now,
        "created_at": now,
        "updated_at": now,
        "trust": 1.0,
        "eligibility": "eligible",
    }
    part = {"class": "general", "status": "success"}
    lines = "\n".join(
        [
            json.dumps(row),  # an experience without its experience part
            json.dumps({**row, "id": "exp_imported2", "experience": {**part, "status": "done"}}),
            json.dumps({**row, "id": "exp_imported3", "kind": "lesson", "experience": part}),
            json.dumps({**row, "id": "exp_imported4", "experience": part}),
        ]
    )
    out = ctl(running_daemon, "import", "-", stdin=lines)
    assert out.returncode == 1
    assert "line 1: invalid_request: an experience row needs its experience part" in out.stderr
    assert "line 2: not an export row" in out.stderr and "status" in out.stderr
    assert "line 3: invalid_request: a lesson row has no experience part" in out.stderr
    assert "imported 1 records (1 experiences): 1 new" in out.stderr
