"""Finding 6: resource bounds and file modes.

A byte budget for frames in flight; bounded caches of workspaces; a bound on history
walking per search; export files created private and never through a symlink; an admin
token that is not ASCII refused like any wrong one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from recall_client import protocol as p
from recall_client.client import RemoteError, connect
from recall_client.paths import read_admin_token
from recalld.domain import git_history

from tests.support.daemon import BIN, DaemonFactory, DaemonProcess

from .harness import FIGURES, RawConnection


async def test_frames_in_flight_share_one_byte_budget(
    daemon_factory: DaemonFactory,
) -> None:
    d = daemon_factory(extra_env={"RECALLD_MAX_INFLIGHT_BYTES": str(p.MAX_FRAME)})
    await d.start()
    async with await RawConnection.open(d) as hog:
        # A frame as large as the whole budget, arriving slowly: it holds the budget.
        await hog.send(p.HEADER.pack(p.MAX_FRAME) + b"\x85")
        started = time.monotonic()
        async with await RawConnection.open(d, hello=False) as late:
            await late.send(p.frame(p.Hello(id=1, version=p.PROTOCOL_VERSION, agent="late")))
            refusal = await late.reply(within_s=15)
        waited = time.monotonic() - started
        assert isinstance(refusal, p.Error) and refusal.code == "busy" and refusal.retryable
        assert 4 <= waited < 10, waited
    # The hog gone, its share is back: a new client is served at once.
    with anyio.fail_after(5):
        async with d.client() as rc:
            await rc.call(p.Ping(), p.Pong)
    FIGURES["bounds: a frame over the byte budget waited (s)"] = round(waited, 1)
    assert await d.stop() == 0


async def test_refused_workspaces_are_remembered_within_a_bound(
    daemon_factory: DaemonFactory,
) -> None:
    d = daemon_factory(extra_env={"RECALLD_REQUIRE_APPROVAL": "1"})
    await d.start()
    async with connect(agent="admin", path=d.socket, admin_token=read_admin_token()) as rc:
        for i in range(300):
            with pytest.raises(RemoteError) as refused:
                await rc.call(p.MemoryStore(text="x", workspace=f"/ws/refused/{i}"))
            assert refused.value.code == "forbidden"
        listing = await rc.call(p.WorkspaceList(), p.WorkspaceListResult)
    # The most recent ones are kept; a client naming a new workspace each time cannot grow it.
    assert 0 < len(listing.refused) <= 256
    assert any(r.workspace == "/ws/refused/299" for r in listing.refused)
    assert await d.stop() == 0


def test_the_workspace_top_level_cache_is_bounded(tmp_path: Path) -> None:
    for i in range(git_history.TOP_CACHE * 2):
        git_history.top_level(str(tmp_path / f"ws{i}"))
    assert len(git_history._tops._data) <= git_history.TOP_CACHE


def _repo_with_history(repo: Path, commits: int) -> list[str]:
    """A repository of ``commits`` commits made in one git fast-import; their ids, oldest first."""
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    stream = []
    for i in range(commits):
        message, content = f"c{i}", f"{i}\n"
        stream.append(
            f"commit refs/heads/main\nmark :{i + 1}\n"
            f"committer t <t@t> {1_600_000_000 + i} +0000\n"
            f"data {len(message)}\n{message}\n"
            + (f"from :{i}\n" if i else "")
            + f"M 644 inline notes.txt\ndata {len(content)}\n{content}\n"
        )
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet"],
        input="".join(stream),
        text=True,
        check=True,
    )
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True)
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-list", "--reverse", "main"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program to build a repo")
async def test_history_walking_per_search_is_bounded(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    repo = tmp_path / "busy"
    commits = _repo_with_history(repo, 4000)
    async with running_daemon.client(workspace=str(repo)) as rc:
        # Each memory claims another old commit as its origin: counting each from there
        # walks thousands of commits, and the cache cannot help.
        for i in range(50):
            await rc.call(
                p.MemoryStore(
                    text=f"deploy runbook step {i} for the busy service", origin_commit=commits[i]
                ),
                p.MemoryStored,
            )
        started = time.perf_counter()
        found = await rc.call(
            p.MemorySearch(query="deploy runbook busy service", limit=50, min_score=0),
            p.MemorySearchResult,
        )
        took = time.perf_counter() - started
        shown = await rc.call(p.MemoryShow(memory_id=found.hits[-1].id), p.MemoryShown)
    counted = [h.commit_drift_count for h in found.hits if h.commit_drift_count is not None]
    assert len(found.hits) == 50
    # 50 hits x ~4,000 commits would be 200,000; the budget is 20,000 a search.
    assert 0 < len(counted) < 10 and all(c >= 3950 for c in counted)
    assert took < 5, f"a search took {took:.1f}s"
    # memory_show of any one of them counts in full: it has a budget of its own.
    assert shown.memory.commit_drift_count is not None and shown.memory.commit_drift_count > 3900
    FIGURES["bounds: hits with commit drift counted in one search of 50"] = len(counted)


def _export(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), "export", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_export_files_are_private_and_never_written_through_a_symlink(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    d = running_daemon
    async with d.client() as rc:
        await rc.call(p.MemoryStore(text="exported note"), p.Stored)
    old = os.umask(0o022)
    try:
        dest = tmp_path / "out.jsonl"
        assert _export(d, "-o", str(dest)).returncode == 0
        assert dest.stat().st_mode & 0o777 == 0o600
        assert "exported note" in dest.read_text()
        # An existing file is not replaced unless asked.
        again = _export(d, "-o", str(dest))
        assert again.returncode == 1 and "exists" in again.stderr
        # A planted symlink is refused, and with --force replaced, never written through.
        target = tmp_path / "someone-elses-file"
        target.write_text("theirs\n")
        link = tmp_path / "link.jsonl"
        link.symlink_to(target)
        assert _export(d, "-o", str(link)).returncode == 1
        assert _export(d, "-o", str(link), "--force").returncode == 0
        assert target.read_text() == "theirs\n"
        assert not link.is_symlink() and link.stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


async def test_a_non_ascii_admin_token_is_refused_not_an_internal_error(
    running_daemon: DaemonProcess,
) -> None:
    with pytest.raises(RemoteError) as refused:
        async with connect(agent="x", path=running_daemon.socket, admin_token="tökén"):
            pass
    assert refused.value.code == "forbidden"
    async with running_daemon.client() as rc:  # and the daemon is none the worse
        await rc.call(p.Ping(), p.Pong)
