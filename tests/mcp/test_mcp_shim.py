"""recall-mcp driven by the official SDK's stdio client, against a real daemon."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio
import jsonschema  # type: ignore[import-untyped]
import mcp_tools
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from recall_client.mcp.server import LISTING

from tests.support.daemon import BIN, DaemonProcess
from tests.support.light import daemon_side_loaded
from tests.support.mcp_client import hints_of, shim, text_of


async def test_tools_are_listed_with_schemas_and_annotations(running_daemon: DaemonProcess) -> None:
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/mcp")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"memory_store", "memory_search"} <= set(tools)
    search = tools["memory_search"]
    assert search.annotations is not None and search.annotations.read_only_hint is True
    assert hints_of(tools["memory_store"]).read_only_hint is False
    props = search.input_schema["properties"]
    assert props["query"]["minLength"] == 1
    assert props["top_k"]["maximum"] == 50
    assert search.output_schema is not None
    for name in ("Returns:", "Use when:", "Not for:", "Side effects:", "Errors:"):
        assert name in (search.description or ""), name


async def test_store_three_then_the_right_one_comes_first(running_daemon: DaemonProcess) -> None:
    texts = [
        "The CI cache key includes the lockfile hash.",
        "Release tags are signed with the team's GPG key.",
        "The flaky test test_upload retries three times on timeout.",
    ]
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/mcp")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        ids = []
        for text in texts:
            result = await client.call_tool("memory_store", {"text": text, "tags": ["ci"]})
            assert not result.is_error, result.content
            jsonschema.validate(result.structured_content, tools["memory_store"].output_schema)
            ids.append(result.structured_content["id"])
        result = await client.call_tool("memory_search", {"query": "flaky upload test", "top_k": 3})
    assert not result.is_error, result.content
    jsonschema.validate(result.structured_content, tools["memory_search"].output_schema)
    entries = result.structured_content["entries"]
    assert entries[0]["id"] == ids[2]
    assert result.structured_content["count"] == len(entries)


async def test_out_of_range_input_is_rejected_with_a_clear_error(
    running_daemon: DaemonProcess,
) -> None:
    async with Client(shim(str(running_daemon.socket))) as client:
        result = await client.call_tool("memory_search", {"query": "x", "top_k": 51})
        assert result.is_error
        assert "top_k" in text_of(result)
        result = await client.call_tool("memory_search", {"query": ""})
        assert result.is_error


async def test_without_a_daemon_initialize_is_answered_and_tools_fail_clearly(
    tmp_path: Path,
) -> None:
    started = time.perf_counter()
    async with Client(shim(str(tmp_path / "absent.sock"))) as client:
        initialized = time.perf_counter() - started
        with anyio.fail_after(10):
            result = await client.call_tool("memory_search", {"query": "anything"})
    assert result.is_error
    assert "recalld unavailable" in text_of(result)
    assert "absent.sock" in text_of(result)
    # Generous bound: this guards against waiting on the daemon, not SDK import speed.
    assert initialized < 10


def test_the_client_package_never_loads_the_daemon_side() -> None:
    loaded = daemon_side_loaded(
        "recall_client",
        "recall_client.client",
        "recall_client.ctl.main",
        "recall_client.mcp.shim",
        "recall_client.mcp.server",
        "recall_client.mcp.memory",
        "recall_client.mcp.common",
        "recall_client.protocol",
    )
    assert loaded == []


# What the shim must never load: the SDK's client, MCPServer and the low-level Server with the
# HTTP and SSE transports and OAuth they import, and the libraries those bring.
HEAVY = (
    "mcp.client",
    "mcp.server.lowlevel",
    "mcp.server.mcpserver.server",
    "mcp.server.streamable_http",
    "mcp.server.auth",
    "starlette",
    "uvicorn",
    "sse_starlette",
    "httpx",
    "httpx2",
    "jsonschema",
    "click",
    "cryptography",
    "jwt",
    "python_multipart",
    "pydantic_settings",
)
# What initialize and tools/list do without: the tool modules, the protocol, the daemon client.
FIRST_CALL = (
    "recall_client.mcp.memory",
    "recall_client.mcp.work",
    "recall_client.mcp.experience",
    "recall_client.mcp.common",
    "recall_client.mcp.shapes",
    "recall_client.client",
    "recall_client.protocol",
)


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(f"{n}.") for n in names))


def shim_reporting_modules(socket: str, report: Path) -> StdioServerParameters:
    """recall-mcp, writing the names of every module it loaded to ``report`` as it exits."""
    params = shim(socket, "--workspace", "/ws/mcp")
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(report)!r}, 'w').write('\\n'.join(sys.modules)))\n"
        "from recall_client.mcp.shim import main\n"
        f"main({params.args!r})\n"
    )
    return StdioServerParameters(command=sys.executable, args=["-c", code], env=params.env)


async def test_initialize_and_tools_list_load_no_tool_code(tmp_path: Path) -> None:
    report = tmp_path / "modules"
    async with Client(shim_reporting_modules(str(tmp_path / "absent.sock"), report)) as client:
        assert len((await client.list_tools()).tools) == 17
        # The prompt and the resource template are listed without the protocol too.
        assert len((await client.list_prompts()).prompts) == 1
        assert len((await client.list_resource_templates()).resource_templates) == 1
    modules = set(report.read_text().split())
    assert "mcp.server.runner" in modules  # the report is the shim's
    assert loaded(modules, HEAVY) == []
    assert loaded(modules, FIRST_CALL) == []


async def test_tool_calls_load_none_of_the_sdk_s_http_side(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    report = tmp_path / "modules"
    async with Client(shim_reporting_modules(str(running_daemon.socket), report)) as client:
        await client.list_tools()
        stored = await client.call_tool("memory_store", {"text": "The lint job runs ruff."})
        found = await client.call_tool("memory_search", {"query": "lint ruff"})
        episodes = await client.call_tool("work_search", {"query": "lint"})
        lessons = await client.call_tool("search_experience", {"query": "lint"})
    assert not any(r.is_error for r in (stored, found, episodes, lessons))
    modules = set(report.read_text().split())
    assert "recall_client.mcp.memory" in modules
    assert loaded(modules, HEAVY) == []


def test_the_listing_served_is_what_the_protocol_makes_of_the_tool_modules() -> None:
    # After changing a tool: .venv/bin/python scripts/mcp_tools.py
    assert LISTING.read_text() == mcp_tools.render()


@pytest.mark.parametrize("command", ["recall-mcp", "recallctl", "recalld"])
def test_every_command_has_help(command: str) -> None:
    out = subprocess.run([str(BIN / command), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "usage:" in out.stdout
