"""The workspace-approval gate: with require_approval on, only approved workspaces are served."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mcp import Client
from recall_client import protocol as p
from recall_client.client import RemoteError

from tests.support.daemon import BIN, DaemonFactory, DaemonProcess
from tests.support.mcp_client import shim, text_of

GATED = {"RECALLD_REQUIRE_APPROVAL": "1"}


def ctl(d: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_off_by_default_every_workspace_is_served(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(workspace="/ws/anywhere") as rc:
        await rc.call(p.MemoryStore(text="no approval needed"), p.Stored)
        result = await rc.call(p.MemorySearch(query="approval"), p.MemorySearchResult)
    assert result.hits
    listing = json.loads(ctl(running_daemon, "workspace", "list", "--json").stdout)
    assert listing["require_approval"] is False


async def test_an_unapproved_workspace_gets_an_error_that_says_how_to_approve(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(extra_env=GATED)
    await d.start()
    async with d.client(workspace="/ws/new project") as rc:
        for request in (p.MemoryStore(text="refused"), p.MemorySearch(query="refused")):
            with pytest.raises(RemoteError) as err:
                await rc.call(request)
            assert err.value.code == "forbidden"
            assert "not approved" in err.value.message
            assert "recallctl workspace approve '/ws/new project'" in err.value.message
        # Health and status are not workspace data: they stay answered.
        assert isinstance(await rc.call(p.Ping()), p.Pong)
        assert isinstance(await rc.call(p.Status(), p.StatusResult), p.StatusResult)
    assert await d.stop() == 0


async def test_approve_list_revoke_and_the_approval_survives_a_restart(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(extra_env=GATED)
    await d.start()
    async with d.client(workspace="/ws/app") as rc:
        with pytest.raises(RemoteError):
            await rc.call(p.MemoryStore(text="before approval"), p.Stored)

    listing = json.loads(ctl(d, "workspace", "list", "--json").stdout)
    assert listing["require_approval"] is True
    assert [r["workspace"] for r in listing["refused"]] == ["/ws/app"]

    out = ctl(d, "workspace", "approve", "/ws/app")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "approved /ws/app"
    assert (
        ctl(d, "workspace", "approve", "/ws/app").stdout.strip()
        == "approved /ws/app (already approved)"
    )
    async with d.client(workspace="/ws/app") as rc:
        stored = await rc.call(p.MemoryStore(text="after approval"), p.Stored)
        # A request may not reach into another, unapproved workspace through its override.
        with pytest.raises(RemoteError) as err:
            await rc.call(p.MemoryStore(text="elsewhere", workspace="/ws/other"), p.Stored)
        assert "/ws/other" in err.value.message

    table = ctl(d, "workspace", "list").stdout
    assert "require_approval on" in table and "/ws/app" in table and "(by recallctl," in table

    assert await d.stop() == 0
    await d.start()  # approvals live in the database
    async with d.client(workspace="/ws/app") as rc:
        hits = (await rc.call(p.MemorySearch(query="approval"), p.MemorySearchResult)).hits
    assert [h.id for h in hits] == [stored.record_id]

    assert ctl(d, "workspace", "revoke", "/ws/app").stdout.strip() == "revoked /ws/app"
    async with d.client(workspace="/ws/app") as rc:
        with pytest.raises(RemoteError):
            await rc.call(p.MemorySearch(query="approval"), p.MemorySearchResult)
    assert await d.stop() == 0


async def test_approve_takes_a_path_to_its_git_root_like_the_shim(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "pkg").mkdir(parents=True)
    d: DaemonProcess = daemon_factory(extra_env=GATED)
    await d.start()
    out = ctl(d, "workspace", "approve", str(repo / "src" / "pkg"))
    assert out.stdout.strip() == f"approved {repo}"
    out = ctl(d, "workspace", "approve", "--exact", str(repo / "src"))
    assert out.stdout.strip() == f"approved {repo / 'src'}"
    assert await d.stop() == 0


async def test_an_mcp_tool_in_an_unapproved_workspace_fails_with_the_approve_command(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(extra_env=GATED)
    await d.start()
    async with Client(shim(str(d.socket), "--workspace", "/ws/agent")) as client:
        result = await client.call_tool("memory_search", {"query": "anything"})
        assert result.is_error
        text = text_of(result)
        assert "forbidden" in text and "recallctl workspace approve /ws/agent" in text
        assert ctl(d, "workspace", "approve", "--exact", "/ws/agent").returncode == 0
        result = await client.call_tool("memory_store", {"text": "now it is approved"})
        assert not result.is_error, result.content
    assert await d.stop() == 0
