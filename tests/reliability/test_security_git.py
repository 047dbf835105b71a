"""Finding 1: a memory's origin repository must never make the daemon run anything.

The trap is the reviewer's: a repository whose own config declares a partial clone with a
promisor remote over ssh, ``core.sshCommand`` set to a command that leaves a marker, and a
HEAD naming a commit that is not there. The git program, asked to count commits there,
lazily fetches the missing object and runs the command (each test first proves the trap
still works that way); recalld reads repositories with libgit2 and refuses this one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from recall_client import protocol as p
from recall_client.client import RemoteError

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.git import try_git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")


def trap(root: Path) -> tuple[Path, Path]:
    """(repository, marker): the marker appears when anything runs the repo's sshCommand."""
    repo, marker = root / "trap", root / "PWNED"
    repo.mkdir()
    try_git(repo, "init", "-q")
    try_git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    for key, value in (
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", "origin"),
        ("remote.origin.url", "ssh://example.invalid/x"),
        ("remote.origin.promisor", "true"),
        ("protocol.ssh.allow", "always"),
        ("core.sshCommand", f"touch {marker}; false"),
    ):
        try_git(repo, "config", key, value)
    branch = (repo / ".git" / "HEAD").read_text().split("refs/heads/")[1].strip()
    # HEAD names a commit this clone does not have: reading it means fetching it.
    (repo / ".git" / "refs" / "heads" / branch).write_text("12" * 20 + "\n")
    return repo, marker


def assert_trap_is_live(repo: Path, marker: Path) -> None:
    """The git program falls for it: without this the test below would prove nothing."""
    try_git(repo, "rev-list", "--count", "HEAD")
    assert marker.exists(), "git no longer lazily fetches here; the trap needs rebuilding"
    marker.unlink()


async def test_a_partial_clone_origin_runs_nothing(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    repo, marker = trap(tmp_path)
    assert_trap_is_live(repo, marker)
    async with running_daemon.client(agent="plain", workspace=str(repo)) as rc:
        stored = await rc.call(
            p.MemoryStore(
                text="the deploy script lives in tools/deploy.sh", paths=["tools/deploy.sh"]
            ),
            p.MemoryStored,
        )
        # recalld refuses the repository: no origin is recorded for it.
        assert stored.origin_repo is None and stored.origin_commit is None
        # Naming it as the origin is refused too: it is not a repository recalld can read.
        with pytest.raises(RemoteError) as refused:
            await rc.call(
                p.MemoryStore(
                    text="another note about deploys",
                    origin_repo=str(repo),
                    origin_commit="ab" * 20,
                ),
                p.MemoryStored,
            )
        assert refused.value.code == "invalid_request"
        await rc.call(p.MemoryShow(memory_id=stored.record_id), p.MemoryShown)
        hits = await rc.call(
            p.MemorySearch(query="deploy script", expand_top=True), p.MemorySearchResult
        )
        assert [h.id for h in hits.hits] == [stored.record_id]
        await rc.call(p.MemoryVerify(memory_id=stored.record_id), p.MemoryChanged)
    assert not marker.exists(), "the daemon ran the repository's sshCommand"


async def test_origin_repo_must_be_the_workspace_top_level(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    mine, other = tmp_path / "mine", tmp_path / "other"
    for repo in (mine, other):
        repo.mkdir()
        try_git(repo, "init", "-q")
        try_git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    async with running_daemon.client(workspace=str(mine)) as rc:
        for claimed in (str(other), "/etc", str(tmp_path)):
            with pytest.raises(RemoteError) as refused:
                await rc.call(
                    p.MemoryStore(text=f"claims {claimed}", origin_repo=claimed), p.MemoryStored
                )
            assert refused.value.code == "invalid_request"
            assert str(mine) in refused.value.message
        # The one recalld finds itself is accepted, as given or left out.
        given = await rc.call(
            p.MemoryStore(text="names its own repo", origin_repo=str(mine)), p.MemoryStored
        )
        found = await rc.call(p.MemoryStore(text="leaves it to recalld"), p.MemoryStored)
    assert given.origin_repo == found.origin_repo == str(mine)
    assert given.origin_commit == try_git(mine, "rev-parse", "HEAD")


async def test_the_daemons_own_git_environment_is_ignored(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    # With GIT_DIR in its environment, `git rev-parse` anywhere answered for that repository.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try_git(elsewhere, "init", "-q")
    try_git(elsewhere, "commit", "-q", "--allow-empty", "-m", "one")
    plain = tmp_path / "plain"
    plain.mkdir()
    d = daemon_factory(
        extra_env={"GIT_DIR": str(elsewhere / ".git"), "GIT_WORK_TREE": str(elsewhere)}
    )
    await d.start()
    async with d.client(workspace=str(plain)) as rc:
        stored = await rc.call(
            p.MemoryStore(text="a note in a folder with no repository"), p.MemoryStored
        )
    assert stored.origin_repo is None and stored.origin_commit is None
    assert await d.stop() == 0
