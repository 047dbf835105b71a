"""Write clients/recall_client/mcp_tools.json: recall-mcp's tool listing, as the MCP SDK makes it.

recall-mcp answers tools/list from that file, so that neither initialize nor tools/list waits for
the SDK's MCPServer or the tool modules' pydantic models. Here the listing is made the way the
SDK makes it: every tool module registered on an ``MCPServer``, which derives each inputSchema
and outputSchema from the tool's signature, and each inputSchema then closed with
``additionalProperties: false``. The shim refuses arguments a tool does not declare: the SDK's
argument models keep pydantic's ``extra="ignore"`` with no setting for it (python-sdk#3067), and
a misnamed argument (``outcome`` for ``status``) would otherwise run the tool on the default.

tests/test_mcp_shim.py fails while the file and the tool modules disagree; after changing a tool:

    .venv/bin/python scripts/mcp_tools.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "clients")]

from mcp.server.mcpserver import MCPServer  # noqa: E402
from recall_client import mcp_experience, mcp_memory, mcp_work  # noqa: E402
from recall_client.mcp_server import LISTING  # noqa: E402

__all__ = ["listing", "render"]


def listing() -> list[dict[str, Any]]:
    """Every tool as tools/list carries it, in registration order."""
    server: MCPServer[None] = MCPServer(name="recalld")

    def no_session() -> Any:
        raise AssertionError("listing the tools calls none")

    for module in (mcp_experience,):
        module.register(server, no_session)
    tools = anyio.run(server.list_tools)
    return [tool.listed() for tool in (*mcp_memory.TOOLS, *mcp_work.TOOLS)] + [
        {
            **tool.model_dump(by_alias=True, mode="json", exclude_none=True),
            "inputSchema": {**tool.input_schema, "additionalProperties": False},
        }
        for tool in tools
    ]


def render() -> str:
    """The file's text, indented so that a changed description or bound is a one-line diff."""
    return json.dumps(listing(), indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    LISTING.write_text(render())
    print(f"wrote {LISTING.relative_to(REPO)}")


if __name__ == "__main__":
    main()
