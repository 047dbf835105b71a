"""A workspace is the repository, not the path: checkouts of one origin at different paths, a
git worktree, and clones of a repository without a remote share memories through recall-mcp;
unrelated repositories with the same directory name, and plain directories, do not.

Every repository is made by the git program with commits, in the test's tmp dir; every
memory is stored and searched through recall-mcp with the MCP SDK's client.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest
from mcp import Client
from recall_client import protocol as p
from recall_client.client import RemoteError
from recalld.domain import workspace_identity

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.git import checkout, git
from tests.support.mcp_client import call, shim
from tests.support.recallctl import ctl
from tests.support.team import TeamDb

pytestmark = pytest.mark.both_backends


async def store_in(d: DaemonProcess, workspace: Path, text: str) -> str:
    async with Client(shim(str(d.socket), "--workspace", str(workspace))) as client:
        stored = await call(client, "memory_store", text=text)
    record_id = stored["id"]
    assert isinstance(record_id, str)
    return record_id


async def found_in(d: DaemonProcess, workspace: Path, query: str) -> list[str]:
    """Ids memory_search finds from ``workspace`` (auto_scope: its own and global ones)."""
    async with Client(shim(str(d.socket), "--workspace", str(workspace))) as client:
        found = await call(client, "memory_search", query=query, mode="bm25")
    return [e["id"] for e in found["entries"]]


async def welcome(d: DaemonProcess, workspace: Path) -> p.Welcome:
    async with d.client(workspace=str(workspace)) as rc:
        assert rc.welcome is not None
        return rc.welcome


async def test_two_checkouts_of_one_origin_share_memories(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    alice = checkout(tmp_path / "home" / "alice" / "src" / "app", "git@github.com:Acme/App.git")
    bob = checkout(tmp_path / "Users" / "bob" / "work" / "shop", "https://github.com/acme/app.git")
    carol = checkout(tmp_path / "carol", "ssh://git@github.com/acme/app")
    memory = await store_in(running_daemon, alice, "Release builds need the arm64 runner.")
    assert memory in await found_in(running_daemon, bob, "arm64 runner release")
    assert memory in await found_in(running_daemon, carol, "arm64 runner release")
    # The identity is the normalised remote; the path stays the local alias.
    (bob / "docs").mkdir()
    seen = await welcome(running_daemon, bob / "docs")  # a directory inside the checkout
    assert (seen.workspace, seen.workspace_path) == ("github.com/acme/app", str(bob))


async def test_a_worktree_is_its_repository_s_workspace(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    main = checkout(tmp_path / "main")  # no remote: the root commit is the identity
    tree = tmp_path / "feature-tree"
    git(main, "worktree", "add", "-q", "-b", "feature", str(tree))
    memory = await store_in(running_daemon, main, "The flaky test is test_sockets_reconnect.")
    assert memory in await found_in(running_daemon, tree, "flaky sockets reconnect")
    root = git(main, "rev-list", "--max-parents=0", "HEAD")
    seen = await welcome(running_daemon, tree)
    assert (seen.workspace, seen.workspace_path) == (f"git-root:{root}", str(tree))
    async with running_daemon.client(workspace=str(tree)) as rc:
        status = (await rc.call(p.Status(), p.StatusResult)).report
    mine = [a for a in status.agents if a.workspace_path == str(tree)]
    assert mine and mine[0].workspace == f"git-root:{root}"


async def test_recallctl_workspaces_lists_identities_with_their_aliases(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    one = checkout(tmp_path / "one" / "app", "git@github.com:Acme/App.git")
    two = checkout(tmp_path / "two" / "app", "https://github.com/acme/app")
    tree = tmp_path / "app-hotfix"
    git(one, "worktree", "add", "-q", "-b", "hotfix", str(tree))
    await store_in(running_daemon, one, "The hotfix branch ships from CI only.")
    for path in (two, tree):
        await welcome(running_daemon, path)
    await running_daemon.settled()  # the aliases are noted by background writes
    out = ctl(running_daemon, "workspaces", "--json")
    assert out.returncode == 0, out.stderr
    listed = {w["workspace"]: w for w in json.loads(out.stdout)}
    app = listed["github.com/acme/app"]
    assert sorted(app["aliases"]) == sorted([str(one), str(two), str(tree)])
    assert app["records"] == 1
    text = ctl(running_daemon, "workspaces").stdout
    assert f"github.com/acme/app  1 records\n  at {tree}" in text


async def test_approving_one_checkout_approves_its_repository_everywhere(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """The approval gate works on the identity: an unapproved checkout is told the identity
    to approve, approving another checkout's path lets it in, a different repository of the
    same directory name stays out; revoking by identity closes both checkouts."""
    mine = checkout(tmp_path / "me" / "app", "git@github.com:acme/app.git")
    elsewhere = checkout(tmp_path / "elsewhere" / "app", "https://github.com/acme/app")
    other = checkout(tmp_path / "other" / "app", "git@github.com:someone/app.git")
    d = daemon_factory(extra_env={"RECALLD_REQUIRE_APPROVAL": "1"})
    await d.start()
    async with d.client(workspace=str(elsewhere)) as rc:
        with pytest.raises(RemoteError, match=r"recallctl workspace approve github\.com/acme/app"):
            await rc.call(p.MemoryStore(text="refused"))
    approved = ctl(d, "workspace", "approve", str(mine))
    assert approved.returncode == 0 and "approved github.com/acme/app" in approved.stdout
    async with d.client(workspace=str(elsewhere)) as rc:
        await rc.call(p.MemoryStore(text="Served once its repository is approved."), p.Stored)
    async with d.client(workspace=str(other)) as rc:
        with pytest.raises(RemoteError, match="not approved"):
            await rc.call(p.MemorySearch(query="served"))
    assert ctl(d, "workspace", "revoke", "github.com/acme/app").returncode == 0
    async with d.client(workspace=str(mine)) as rc:
        with pytest.raises(RemoteError, match="not approved"):
            await rc.call(p.MemorySearch(query="served"))
    assert await d.stop() == 0


async def test_unrelated_repositories_of_one_directory_name_do_not_share(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    ours = checkout(tmp_path / "a" / "app", "git@github.com:acme/app.git")
    theirs = checkout(tmp_path / "b" / "app", "git@github.com:other/app.git")
    plain = checkout(tmp_path / "c" / "app")  # no remote, its own root commit
    memory = await store_in(running_daemon, ours, "Staging deploys go through the bastion host.")
    assert memory in await found_in(running_daemon, ours, "staging bastion deploys")
    assert memory not in await found_in(running_daemon, theirs, "staging bastion deploys")
    assert memory not in await found_in(running_daemon, plain, "staging bastion deploys")


async def test_clones_of_a_repository_without_remote_share_its_root_commit(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    first = checkout(tmp_path / "first")
    second = tmp_path / "second"
    git(tmp_path, "clone", "-q", str(first), str(second))
    git(second, "remote", "remove", "origin")
    (second / "NOTES").write_text("more\n")
    git(second, "add", ".")
    git(second, "commit", "-qm", "three")  # histories differ; the root is the same
    memory = await store_in(running_daemon, second, "Vendored protobuf lives in third_party.")
    assert memory in await found_in(running_daemon, first, "vendored protobuf third_party")
    assert (await welcome(running_daemon, first)).workspace.startswith("git-root:")


async def test_a_plain_directory_is_keyed_by_its_path(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    one, two = tmp_path / "one" / "notes", tmp_path / "two" / "notes"
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    memory = await store_in(running_daemon, one, "The wiki export runs on Sundays.")
    assert memory in await found_in(running_daemon, one, "wiki export sundays")
    assert memory not in await found_in(running_daemon, two, "wiki export sundays")
    seen = await welcome(running_daemon, one)
    assert (seen.workspace, seen.workspace_path) == (str(one), str(one))


async def test_a_hostile_repository_config_runs_nothing_and_blocks_nothing(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    """A config naming commands (fsmonitor, sshCommand, a pager) is only read; a config that
    is a FIFO (which would block a reader for ever) is refused, and the hello is answered."""
    marker = tmp_path / "PWNED"
    evil = checkout(tmp_path / "evil", "git@github.com:acme/evil.git")
    for key in ("core.fsmonitor", "core.sshCommand", "core.pager", "core.hooksPath"):
        git(evil, "config", key, f"touch {marker}")
    assert (await welcome(running_daemon, evil)).workspace == "github.com/acme/evil"
    blocked = checkout(tmp_path / "blocked")
    config = blocked / ".git" / "config"
    config.unlink()
    os.mkfifo(config)
    seen = await welcome(running_daemon, blocked)
    assert seen.workspace == str(blocked)  # refused as a repository: keyed by its path
    included = checkout(tmp_path / "included", "git@github.com:acme/included.git")
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    git(included, "config", "include.path", str(fifo))
    async with Client(shim(str(running_daemon.socket), "--workspace", str(included))) as client:
        stored = await call(client, "memory_store", text="Stored although its repo is refused.")
    assert stored.get("origin_repo") is None  # no repository read: no origin, no drift
    assert (await welcome(running_daemon, included)).workspace == str(included)
    assert not marker.exists()


async def test_an_identity_is_not_taken_from_a_hello_without_the_admin_token(
    running_daemon: DaemonProcess,
) -> None:
    with pytest.raises(RemoteError, match="absolute path"):
        async with running_daemon.client(workspace="github.com/acme/app"):
            pass


async def test_two_people_at_different_paths_share_team_memories_through_recall_mcp(
    daemon_factory: DaemonFactory, team_db: TeamDb, tmp_path: Path
) -> None:
    """Alice and Bob, each with a daemon of their own on one PostgreSQL, each with a checkout
    of one repository at a path of their own (and Bob with a worktree too): a team memory
    Alice stores is found by Bob's agent, with its visibility and owner; her private one is
    not."""
    alice_repo = checkout(tmp_path / "home" / "alice" / "src" / "app", "git@github.com:Acme/App")
    bob_repo = checkout(tmp_path / "Users" / "bob" / "work" / "app", "https://github.com/acme/app")
    bob_tree = tmp_path / "Users" / "bob" / "work" / "app-review"
    git(bob_repo, "worktree", "add", "-q", "-b", "review", str(bob_tree))
    alice = daemon_factory("alice", extra_env={"RECALLD_DATABASE_URL": team_db.url("alice")})
    bob = daemon_factory("bob", extra_env={"RECALLD_DATABASE_URL": team_db.url("bob")})
    await alice.start()
    await bob.start()
    try:
        async with Client(shim(str(alice.socket), "--workspace", str(alice_repo))) as client:
            team = await call(
                client,
                "memory_store",
                text="The payments service retries webhooks three times.",
                visibility="team",
            )
            private = await call(
                client, "memory_store", text="Alice's payments webhook scratch notes."
            )
        for where in (bob_repo, bob_tree):
            async with Client(shim(str(bob.socket), "--workspace", str(where))) as client:
                found = await call(client, "memory_search", query="payments webhooks", mode="bm25")
                entries = {e["id"]: e for e in found["entries"]}
                assert team["id"] in entries and private["id"] not in entries
                assert entries[team["id"]]["visibility"] == "team"
                assert entries[team["id"]]["owner"] == "alice"
                shown = await call(client, "memory_show", id=team["id"])
                assert (shown["visibility"], shown["owner"]) == ("team", "alice")
                assert shown["workspace"] == "github.com/acme/app"
    finally:
        await alice.stop()
        await bob.stop()


async def test_every_hit_and_memory_show_say_visibility_and_owner(
    running_daemon: DaemonProcess, tmp_path: Path, backend: str
) -> None:
    repo = checkout(tmp_path / "repo", "git@github.com:acme/fields.git")
    async with Client(shim(str(running_daemon.socket), "--workspace", str(repo))) as client:
        mine = await call(client, "memory_store", text="Cache keys include the tenant id.")
        found = await call(client, "memory_search", query="cache keys tenant", mode="bm25")
        shown = await call(client, "memory_show", id=mine["id"])
    (hit,) = [e for e in found["entries"] if e["id"] == mine["id"]]
    owner = "alice" if backend == "postgres" else pwd.getpwuid(os.getuid()).pw_name
    assert (hit["visibility"], hit["owner"]) == ("private", owner)
    assert (shown["visibility"], shown["owner"]) == ("private", owner)


@pytest.mark.parametrize(
    ("url", "identity"),
    [
        ("git@github.com:Acme/App.git", "github.com/acme/app"),
        ("ssh://git@github.com/acme/app", "github.com/acme/app"),
        ("https://github.com/acme/app.git", "github.com/acme/app"),
        ("HTTPS://user:token@GitHub.com:443/acme/app/", "github.com/acme/app"),
        ("ssh://git@gitlab.example.org:2222/Group/app.git", "gitlab.example.org:2222/Group/app"),
        ("ssh://git@GitLab.example.org:22/Group/app.git", "gitlab.example.org/Group/app"),
        ("https://bob:token@devbox/team/app", "devbox/team/app"),
        ("git@devbox:app.git", "devbox/app"),
        ("alice@devbox:app.git", "alice@devbox/app"),
        ("ssh://alice:secret@devbox/app", "alice@devbox/app"),
        ("/srv/git/App.git", "file:/srv/git/App"),
        ("file:///srv/git/app.git", "file:/srv/git/app"),
        ("ssh://devbox:notaport/app", None),
        ("../sibling.git", None),
        ("", None),
    ],
)
def test_remote_urls_fold_to_one_identity(url: str, identity: str | None) -> None:
    """Folded: the scheme's form, an https credential (a token never reaches the store),
    the scheme's default port, .git, the host's case, and on GitHub the path's case and
    the git user; kept: path case elsewhere, another port, another ssh user."""
    assert workspace_identity.normalise_remote(url) == identity
