"""recall-mcp as an MCP client starts it: the shim's command line and environment, and its
tools called with every structured result checked against the tool's outputSchema."""

from __future__ import annotations

import os
from typing import Any, cast

import jsonschema  # type: ignore[import-untyped]
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations

from .daemon import BIN


def shim_env() -> dict[str, str]:
    """What a shim a test starts inherits: PATH, HOME and this test's XDG dirs, nothing else."""
    keep = ("PATH", "HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME")
    return {k: v for k, v in os.environ.items() if k in keep}


def shim(socket: str, *args: str, autostart: bool = False) -> StdioServerParameters:
    env = shim_env()
    env["RECALLD_SOCKET"] = socket
    # A test that wants a daemon started by the shim says so (tests/ops/test_ops_autostart.py).
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


class Tools:
    """Calls tools and checks every structured result against the tool's outputSchema."""

    def __init__(self, client: Client, schemas: dict[str, Any]) -> None:
        self.client = client
        self.schemas = schemas

    async def __call__(self, name: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(name, args)
        assert not result.is_error, result.content
        jsonschema.validate(result.structured_content, self.schemas[name])
        content: dict[str, Any] = result.structured_content
        return content

    async def error(self, name: str, **args: Any) -> str:
        result = await self.client.call_tool(name, args)
        assert result.is_error
        return text_of(result)


async def open_tools(client: Client) -> Tools:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    return Tools(client, {n: t.output_schema for n, t in tools.items()})


async def call(client: Client, name: str, **args: Any) -> dict[str, Any]:
    """A tool's structured result, asserting the call succeeded."""
    result = await client.call_tool(name, args)
    assert not result.is_error, (name, args, result.content)
    content = result.structured_content
    assert isinstance(content, dict), content
    return content
