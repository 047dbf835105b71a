"""A hook that fires while no daemon answers loses nothing: ``recallctl capture`` starts one
the way recall-mcp does, or spools the episode for the daemon to replay when it starts."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from recall_client import protocol as p
from recall_client.client import DaemonUnavailable, RemoteError, connect
from recall_client.ctl.capture import CAPTURE_BUDGET_S, HOOK_TIMEOUT_S
from recall_client.spool import MAX_BYTES, MAX_FILES, SpooledCapture, default_spool

from tests.support.daemon import BIN, REPO, DaemonFactory, DaemonProcess, stop_daemon
from tests.support.episodes import search
from tests.support.hooks import AGENT, FIXTURES, payload, readme_hook_command

SESSION = "0d9a7e31-2c54-4b8f-a6e0-93f1b2c4d5e6"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    (root / ".git").mkdir(parents=True)
    return root


def hook(sock: Path, stdin: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The documented hook command, as Claude Code runs it: the payload on stdin."""
    _, command = readme_hook_command()
    argv = shlex.split(command)
    argv[0] = str(BIN / "recallctl")
    full = dict(os.environ, RECALLD_SOCKET=str(sock), RECALLD_EMBEDDER="hash", **env)
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60, env=full)


def session_lines(cwd: Path) -> list[str]:
    """The recorded Claude Code session, one hook payload per line, in a real checkout."""
    return payload("claude_code_session.jsonl", cwd).splitlines()


def spooled() -> list[Path]:
    return sorted(default_spool().directory.glob("*.json"))


async def test_hooks_with_no_daemon_running_start_one_and_every_episode_is_found(
    tmp_path: Path, checkout: Path
) -> None:
    sock = tmp_path / "run" / "recalld" / "recalld.sock"
    lines = session_lines(checkout)
    try:
        for line in lines:  # the first starts the daemon, the others find it
            out = hook(sock, line)
            assert out.returncode == 0, out.stderr
            assert out.stdout == ""
        async with connect(agent=AGENT, workspace=str(checkout), path=sock) as rc:
            found = (await search(rc, include_pending=True, session_id=SESSION, k=50)).results
        assert len(found) == len(lines)
        assert [ep.episode_type for ep in found[::-1]] == ["prompt", *["tool_call"] * 5, "turn_end"]
        assert spooled() == []  # sent, acknowledged, removed
        log = (tmp_path / "state-home" / "recalld" / "recalld.log").read_text()
        assert log.count("accepting on") == 1
    finally:
        if sock.exists():
            await stop_daemon(sock)


async def test_with_autostart_off_the_spool_holds_a_session_and_the_daemon_replays_it_in_order(
    daemon_factory: DaemonFactory, checkout: Path
) -> None:
    d = daemon_factory()
    lines = session_lines(checkout)
    for line in lines:
        out = hook(d.socket, line, RECALLD_AUTOSTART="0")
        assert out.returncode == 0, out.stderr  # never 2 (blocking), never lost (3)
    files = spooled()
    assert len(files) == len(lines)
    assert stat.S_IMODE(files[0].parent.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}

    await d.start()
    await d.settled()
    async with d.client(agent=AGENT, workspace=str(checkout)) as rc:
        found = (await search(rc, include_pending=True, session_id=SESSION, k=50)).results
    assert spooled() == []
    # Newest first; each episode's prev_id is the one captured before it: the hooks' order.
    oldest_first = found[::-1]
    assert [ep.episode_type for ep in oldest_first] == [
        "prompt",
        *["tool_call"] * 5,
        "turn_end",
    ]
    assert [ep.prev_id for ep in oldest_first[1:]] == [ep.id for ep in oldest_first[:-1]]
    assert "replayed 7 spooled capture(s)" in d.log()
    await d.stop()


def spool_steps(n: int, workspace: str) -> None:
    """``n`` captures of one episode each, spooled as recallctl capture spools them; none
    has an idempotency key of its own (like a Stop hook's)."""
    spool = default_spool()
    for i in range(n):
        spool.add(
            SpooledCapture(
                agent=AGENT,
                workspace=workspace,
                admin=True,
                agent_token_file=None,
                episodes=[p.CaptureEpisode(summary=f"step {i:04d} of the export fix")],
            )
        )


def stored_steps(d: DaemonProcess) -> list[str]:
    return [row[0] for row in d.sql("SELECT text FROM records WHERE kind = 'episode'")]


@pytest.mark.sqlite_only
async def test_kill_9_during_replay_loses_and_duplicates_nothing(
    daemon_factory: DaemonFactory, checkout: Path
) -> None:
    """The daemon is killed the moment it has acknowledged the 40th file's episode: that
    file goes (its episode is committed), the rest stay and the next start replays them."""
    n, at = 120, 40
    d = daemon_factory()
    await d.start()
    await d.settled()  # its start-up replay has run (on an empty spool)
    spool_steps(n, str(checkout))
    acknowledged = 0

    def kill_at(_name: str, _n: int, reply: p.EpisodeCaptured | RemoteError) -> None:
        nonlocal acknowledged
        assert isinstance(reply, p.EpisodeCaptured)
        acknowledged += 1
        if acknowledged == at:
            d.kill()

    with pytest.raises(DaemonUnavailable):
        await default_spool().replay(d.socket, None, kill_at)
    assert len(spooled()) == n - at
    await d.start()
    await d.settled()
    assert sorted(stored_steps(d)) == [f"step {i:04d} of the export fix" for i in range(n)]
    assert spooled() == []
    await d.stop()


@pytest.mark.sqlite_only
async def test_a_file_sent_again_after_its_acknowledgement_stores_nothing_twice(
    daemon_factory: DaemonFactory, checkout: Path, tmp_path: Path
) -> None:
    """The crash window itself: the daemon acknowledged a file's episodes but the file was
    not removed yet. It goes again at the next replay; the spool's idempotency keys make
    the daemon answer with what it stored."""
    spool_steps(3, str(checkout))
    kept = tmp_path / "kept"
    shutil.copytree(default_spool().directory, kept)
    d = daemon_factory()
    await d.start()
    await d.settled()
    assert len(stored_steps(d)) == 3
    for f in kept.glob("*.json"):
        shutil.copy2(f, default_spool().directory / f.name)
    replies: list[p.EpisodeCaptured] = []
    sent = await default_spool().replay(
        d.socket,
        None,
        lambda _name, _n, reply: replies.append(reply),  # type: ignore[arg-type]
    )
    assert sent == 3
    assert [r.replayed for r in replies] == [True] * 3
    assert len(stored_steps(d)) == 3
    await d.stop()


def test_a_full_spool_keeps_what_it_holds_and_says_so_off_the_hook(tmp_path: Path) -> None:
    sock = tmp_path / "none.sock"
    stdin = (FIXTURES / "claude_code_stop.json").read_text()
    # A spool at its bound: what was spooled stays, the new episode is refused; the host's
    # hook is not told (Gemini CLI would deny the tool's result), a person running it is.
    directory = default_spool().directory
    directory.mkdir(parents=True, mode=0o700)
    (directory / "00000000000000000000-1-filler.json").write_bytes(b"x" * (32 * 1024 * 1024))
    out = hook(sock, stdin, RECALLD_AUTOSTART="0")
    assert (out.returncode, out.stderr) == (0, "")
    plain = json.dumps({"summary": "a step"})
    by_hand = subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(sock), "capture"],
        input=plain,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, RECALLD_AUTOSTART="0"),
    )
    assert by_hand.returncode == 3
    assert "spool" in by_hand.stderr and "is full" in by_hand.stderr
    assert len(spooled()) == 1


def test_capture_with_no_daemon_and_autostart_off_spools_and_exits_0_not_2(
    tmp_path: Path,
) -> None:
    stdin = (FIXTURES / "claude_code_stop.json").read_text()
    out = hook(tmp_path / "none.sock", stdin, RECALLD_AUTOSTART="0")
    assert out.returncode == 0, out.stderr
    [file] = spooled()
    [episode] = json.loads(file.read_text())["episodes"]
    assert episode["episode_type"] == "turn_end" and episode["idempotency_key"]


def test_the_usage_docs_state_the_spool_bounds_and_the_budget_the_code_has() -> None:
    section = (REPO / "docs" / "usage.md").read_text().split("## Capturing episodes with hooks")[1]
    assert f"at most {MAX_FILES:,} captures or {MAX_BYTES // 2**20} MiB" in section
    assert f"within {CAPTURE_BUDGET_S} s (inside\nthe hook's {HOOK_TIMEOUT_S} s)" in section
