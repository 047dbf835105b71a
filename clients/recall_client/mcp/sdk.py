"""The MCP SDK's server side without the package re-exports: what a recall-mcp process loads.

Importing any ``mcp.*`` module first runs ``mcp/__init__.py`` and ``mcp/server/__init__.py``,
which import the whole SDK to re-export it: its client (httpx), ``MCPServer`` with its HTTP and
SSE transports (starlette, uvicorn, sse-starlette, click) and OAuth (cryptography, jwt). A stdio
server uses none of it, and it is about half of the SDK's import time and memory. The SDK's own
modules import each other by full module path, never through those re-exports, so a process
that registers the packages as bare namespaces (their ``__path__``, without running their
``__init__``) imports exactly the modules the shim uses and what they import.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["load_without_reexports"]

# The packages whose __init__ re-exports heavy parts: mcp.server.mcpserver's imports MCPServer,
# the shim takes only the tool exceptions and func_metadata from under it.
_REEXPORTING = ("mcp", "mcp.server", "mcp.server.mcpserver")


def load_without_reexports() -> None:
    """Register the SDK's re-exporting packages without running their ``__init__``.

    For a process that is recall-mcp and nothing else (``shim.main`` calls it first): in it
    ``from mcp import Client`` would fail. A package already imported is left as it is, so in a
    process that loaded the whole SDK this changes nothing.

    Raises:
        ModuleNotFoundError: the SDK is not installed, or no longer has one of these packages.
    """
    for name in _REEXPORTING:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.submodule_search_locations is None:
            raise ModuleNotFoundError(f"the MCP SDK has no package {name}", name=name)
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, package)
