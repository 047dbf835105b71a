"""Different repositories get different identities: each pair of origins below once became
one workspace, so a checkout of one read and wrote the other's memories and passed its
approval. Each pair is two real checkouts (the git program, in the test's tmp dir) seen by a
real daemon; their memories stay apart, while two spellings of one GitHub repository still
share theirs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from recall_client import protocol as p

from tests.support.daemon import DaemonProcess
from tests.support.git import checkout

COLLISIONS = [
    ("/srv/git/Payments.git", "/srv/git/payments.git"),
    ("ssh://host:2222/team/app", "ssh://host/team/app"),
    ("alice@devbox:app.git", "mallory@devbox:app.git"),
]


async def identity_and_memories(d: DaemonProcess, repo: Path, text: str) -> tuple[str, str]:
    """The workspace ``repo`` files under, and the id of ``text`` stored from it."""
    async with d.client(workspace=str(repo)) as rc:
        assert rc.welcome is not None
        stored = await rc.call(p.MemoryStore(text=text), p.Stored)
        return rc.welcome.workspace, stored.record_id


async def found_from(d: DaemonProcess, repo: Path, query: str) -> set[str]:
    async with d.client(workspace=str(repo)) as rc:
        found = await rc.call(p.MemorySearch(query=query, mode="bm25"), p.MemorySearchResult)
    return {h.id for h in found.hits}


@pytest.mark.parametrize(("one", "other"), COLLISIONS)
async def test_two_repositories_keep_two_identities(
    running_daemon: DaemonProcess, tmp_path: Path, one: str, other: str
) -> None:
    first = checkout(tmp_path / "first", one)
    second = checkout(tmp_path / "second", other)
    ws1, mine = await identity_and_memories(running_daemon, first, "Payouts settle at 17:00.")
    ws2, theirs = await identity_and_memories(running_daemon, second, "Payouts settle at 09:00.")
    assert ws1 != ws2
    assert await found_from(running_daemon, first, "payouts settle") == {mine}
    assert await found_from(running_daemon, second, "payouts settle") == {theirs}


async def test_spellings_of_one_github_repository_still_share_one(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    first = checkout(tmp_path / "first", "git@github.com:Acme/Payments.git")
    second = checkout(tmp_path / "second", "https://GitHub.com/acme/payments/")
    ws1, mine = await identity_and_memories(running_daemon, first, "Payouts settle at 17:00.")
    async with running_daemon.client(workspace=str(second)) as rc:
        assert rc.welcome is not None and rc.welcome.workspace == ws1 == "github.com/acme/payments"
    assert await found_from(running_daemon, second, "payouts settle") == {mine}
