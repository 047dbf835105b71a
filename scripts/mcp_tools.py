"""Write clients/recall_client/mcp/tools.json: recall-mcp's tool listing, as the protocol makes it.

recall-mcp answers tools/list from that file, so that neither initialize nor tools/list loads the
protocol or the tool modules. Each tool's inputSchema and outputSchema are derived from its
protocol request and reply (clients/recall_client/mcp/shapes.py); the inputSchema is closed with
``additionalProperties: false``, as the shim refuses arguments a tool does not declare (a
misnamed argument, ``outcome`` for ``status``, would otherwise run the tool on the default).

tests/mcp/test_mcp_shim.py fails while the file and the protocol disagree; after changing a tool or
a request or reply it sends:

    .venv/bin/python scripts/mcp_tools.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "clients")]

from recall_client.mcp.server import LISTING, every_tool  # noqa: E402

__all__ = ["listing", "render"]


def listing() -> list[dict[str, Any]]:
    """Every tool as tools/list carries it, in the order the shim lists them."""
    return [tool.listed() for tool in every_tool()]


def render() -> str:
    """The file's text, indented so that a changed description or bound is a one-line diff."""
    return json.dumps(listing(), indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    LISTING.write_text(render())
    print(f"wrote {LISTING.relative_to(REPO)}")


if __name__ == "__main__":
    main()
