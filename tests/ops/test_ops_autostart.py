"""recall-mcp starts the daemon itself when none answers (no systemd), exactly once however
many shims race; ``RECALLD_AUTOSTART=0`` or ``autostart = false`` turns that off."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from recall_client import protocol as p
from recall_client.client import connect
from recall_client.paths import read_admin_token

from tests.support.daemon import BIN, pid_alive, stop_daemon
from tests.support.mcp_client import shim_env, text_of

SHIMS = 4


def shim_params(sock: Path, agent: str, **extra: str) -> StdioServerParameters:
    env = shim_env()
    # What the started daemon inherits: a fast embedder, this test's data dir.
    env.update(RECALLD_SOCKET=str(sock), RECALLD_EMBEDDER="hash", **extra)
    return StdioServerParameters(
        command=str(BIN / "recall-mcp"), args=["--agent", agent, "--workspace", "/ws/auto"], env=env
    )


def log_file() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "recalld" / "recalld.log"


async def test_racing_shims_start_exactly_one_daemon(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "recalld" / "recalld.sock"
    results: dict[str, dict[str, object]] = {}
    init_times: list[float] = []
    ready = anyio.Event()
    agents_seen: list[p.ConnectedAgent] = []

    async def agent(n: int, tg_ready: anyio.Event) -> None:
        started = time.perf_counter()
        async with Client(shim_params(sock, f"agent-{n}")) as client:
            init_times.append(time.perf_counter() - started)
            if len(init_times) == SHIMS:
                tg_ready.set()
            await tg_ready.wait()  # every shim is up before any tool call: a real race
            with anyio.fail_after(60):
                result = await client.call_tool(
                    "memory_store", {"text": f"agent {n} was here", "tags": ["race"]}
                )
            assert not result.is_error, result.content
            results[f"agent-{n}"] = result.structured_content or {}
            if len(results) == SHIMS:
                async with connect(
                    agent="observer", path=sock, admin_token=read_admin_token()
                ) as rc:
                    report = (await rc.call(p.Status(), p.StatusResult)).report
                agents_seen.extend(report.agents)
                ready.set()
            await ready.wait()  # keep every shim connected until status has seen them

    try:
        async with anyio.create_task_group() as tg:
            all_up = anyio.Event()
            for n in range(SHIMS):
                tg.start_soon(agent, n, all_up)
        assert len(results) == SHIMS
        log = log_file().read_text()
        assert log.count("accepting on") == 1, log
        assert "already answers" not in log and "already runs" not in log
        # One daemon serves every shim.
        assert {a.agent for a in agents_seen} >= {f"agent-{n}" for n in range(SHIMS)}
        # initialize never waited for the daemon (bound generous for SDK import on busy CI).
        assert max(init_times) < 10
    finally:
        if sock.exists():
            await stop_daemon(sock)
    # The daemon outlived its shims and stopped cleanly when told to.
    assert "recalld stopped" in log_file().read_text()


async def test_a_started_daemon_outlives_the_shim_and_serves_the_next(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "recalld" / "recalld.sock"
    try:
        async with Client(shim_params(sock, "first")) as client:
            result = await client.call_tool("memory_store", {"text": "kept across shims"})
            assert not result.is_error, result.content
        async with connect(agent="probe", path=sock) as rc:
            pid = (await rc.call(p.Status(), p.StatusResult)).report.pid
        assert pid_alive(pid)
        async with Client(shim_params(sock, "second")) as client:
            result = await client.call_tool("memory_search", {"query": "kept across shims"})
        assert not result.is_error
        assert result.structured_content["count"] == 1
        assert log_file().read_text().count("accepting on") == 1
    finally:
        if sock.exists():
            await stop_daemon(sock)


async def test_autostart_off_by_env_or_config_starts_nothing(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "recalld" / "recalld.sock"
    async with Client(shim_params(sock, "no-auto", RECALLD_AUTOSTART="0")) as client:
        result = await client.call_tool("memory_search", {"query": "anything"})
    assert result.is_error and "not answering" in text_of(result)

    config = Path(os.environ["XDG_CONFIG_HOME"]) / "recalld" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("autostart = false\n")
    async with Client(shim_params(sock, "no-auto")) as client:
        result = await client.call_tool("memory_search", {"query": "anything"})
    assert result.is_error and "not answering" in text_of(result)
    assert not sock.exists()
    assert not log_file().exists()


async def test_a_daemon_that_cannot_start_is_a_clear_tool_error(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "recalld" / "recalld.sock"
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "recalld" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("queue_size = 1\n")  # out of range: recalld refuses to start
    async with Client(shim_params(sock, "doomed")) as client:
        with anyio.fail_after(60):
            result = await client.call_tool("memory_search", {"query": "anything"})
    assert result.is_error
    text = text_of(result)
    assert "starting it failed" in text and "exited with code 2" in text
    assert str(log_file()) in text
    assert "queue_size" in log_file().read_text()
