"""recall-mcp driven by the official SDK's stdio client, against a real daemon."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import anyio
import jsonschema  # type: ignore[import-untyped]
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations

from .conftest import BIN, DaemonProcess


def shim_env() -> dict[str, str]:
    """What a shim a test starts inherits: PATH, HOME and this test's XDG dirs, nothing else."""
    keep = ("PATH", "HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME")
    return {k: v for k, v in os.environ.items() if k in keep}


def shim(socket: str, *args: str, autostart: bool = False) -> StdioServerParameters:
    env = shim_env()
    env["RECALLD_SOCKET"] = socket
    # A test that wants a daemon started by the shim says so (tests/test_ops_autostart.py).
    env["RECALLD_AUTOSTART"] = "1" if autostart else "0"
    return StdioServerParameters(
        command=str(BIN / "recall-mcp"), args=["--agent", "shim-test", *args], env=env
    )


def text_of(result: CallToolResult) -> str:
    """The text of a tool result's first content block (recall-mcp answers in text blocks)."""
    return cast(TextContent, result.content[0]).text


def hints_of(tool: Tool) -> ToolAnnotations:
    """A listed tool's annotations (recall-mcp annotates every tool it lists)."""
    return cast(ToolAnnotations, tool.annotations)


async def test_tools_are_listed_with_schemas_and_annotations(running_daemon: DaemonProcess) -> None:
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/mcp")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"memory_store", "memory_search"} <= set(tools)
    search = tools["memory_search"]
    assert search.annotations is not None and search.annotations.read_only_hint is True
    assert hints_of(tools["memory_store"]).read_only_hint is False
    props = search.input_schema["properties"]
    assert props["query"]["minLength"] == 1
    assert props["top_k"]["anyOf"][0]["maximum"] == 50
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


def test_the_client_package_never_loads_torch_faiss_or_aiosqlite() -> None:
    code = (
        "import sys, recall_client, recall_client.client, recall_client.ctl, "
        "recall_client.mcp_shim, recall_client.mcp_memory, recall_client.mcp_common, "
        "recall_client.protocol\n"
        "heavy = {'torch', 'faiss', 'aiosqlite', 'sentence_transformers', 'numpy'}"
        " & set(sys.modules)\n"
        "print(sorted(heavy))\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"client imported {out.stdout} {out.stderr}"


@pytest.mark.parametrize("command", ["recall-mcp", "recallctl", "recalld"])
def test_every_command_has_help(command: str) -> None:
    out = subprocess.run([str(BIN / command), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "usage:" in out.stdout
