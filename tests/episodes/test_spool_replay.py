"""The capture spool replays safely (issue 40, point 5): a file that is not a regular one, or
one whose agent token can no longer be read, is moved aside with its reason and the replay
goes on; what the spool set aside or dropped for want of room shows in ``recallctl status``
and on the page's overview."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
from recall_client import protocol as p
from recall_client.spool import MAX_BYTES, REJECTED, SpooledCapture, default_spool

from tests.support.daemon import BIN, DaemonFactory, DaemonProcess
from tests.support.hooks import AGENT, FIXTURES
from tests.support.ui import Http, ui_server

# Sorts before any name the spool gives, so the replay meets it first.
FIRST = "00000000000000000000-1-planted.json"


def spool(summary: str, agent_token_file: str | None = None) -> str:
    return default_spool().add(
        SpooledCapture(
            agent=AGENT,
            workspace="/ws/spool",
            admin=agent_token_file is None,
            agent_token_file=agent_token_file,
            episodes=[p.CaptureEpisode(summary=summary)],
        )
    )


def stored(d: DaemonProcess) -> list[str]:
    return sorted(row[0] for row in d.sql("SELECT text FROM records WHERE kind = 'episode'"))


def status_text(d: DaemonProcess) -> str:
    out = subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def overview(d: DaemonProcess) -> str:
    """The web page's overview, as the user signed in to it sees it."""
    with ui_server(d, "/ws/spool") as server:
        return Http(server).sign_in().get("/").text


def capture(stdin: str, env: dict[str, str]) -> None:
    """A hook's ``recallctl capture`` (its exit code is the hook's business, not this test's)."""
    subprocess.run(
        [str(BIN / "recallctl"), "capture", "--agent", AGENT],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


async def test_a_fifo_in_the_spool_neither_freezes_the_daemon_nor_stops_the_replay(
    daemon_factory: DaemonFactory,
) -> None:
    spool("ran the migration")
    directory = default_spool().directory
    os.mkfifo(directory / FIRST, 0o600)
    spool("fixed the export")
    d = daemon_factory()
    await d.start()
    with anyio.fail_after(30):  # before, the replay blocked the event loop on the FIFO
        report = await d.settled(within_s=20)
    assert stored(d) == ["fixed the export", "ran the migration"]
    assert default_spool().names() == []
    assert (directory / REJECTED / FIRST).exists()
    assert report.spool is not None
    assert report.spool.rejected == 1
    assert report.spool.last_rejection == f"{FIRST}: not a regular file"
    assert await d.stop() == 0


async def test_a_file_whose_agent_token_cannot_be_read_is_set_aside_and_the_rest_go(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    gone = tmp_path / "agent.token"  # removed since the capture was spooled
    bad = spool("step with a lost token", agent_token_file=str(gone))
    spool("step one")
    spool("step two")
    d = daemon_factory()
    await d.start()
    await d.settled()
    assert stored(d) == ["step one", "step two"]
    rejected = default_spool().directory / REJECTED
    assert (rejected / bad).exists()
    reason = (rejected / (bad + ".reason")).read_text()
    assert "cannot read the agent token file" in reason and str(gone) in reason
    shown = status_text(d)
    assert "1 files could not be sent" in shown
    assert str(gone) in shown
    assert await d.stop() == 0


async def test_a_full_spool_counts_what_it_dropped_and_status_says_so(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    directory = default_spool().directory
    directory.mkdir(parents=True, mode=0o700)
    # A sparse file at the spool's bound: full, without writing 32 MiB.
    with (directory / ".filler").open("wb") as fh:
        fh.truncate(MAX_BYTES)
    stdin = (FIXTURES / "claude_code_stop.json").read_text()
    env = dict(os.environ, RECALLD_SOCKET=str(tmp_path / "none.sock"), RECALLD_AUTOSTART="0")
    for _ in range(2):
        capture(stdin, env)
    assert default_spool().names() == []
    d = daemon_factory()
    await d.start()
    report = await d.status()
    assert report.spool is not None
    assert report.spool.full and report.spool.dropped == 2
    shown = status_text(d)
    assert "FULL" in shown and "2 episodes dropped" in shown
    page = overview(d)
    assert "Capture spool" in page and "2 episodes dropped for want of room" in page
    assert await d.stop() == 0
