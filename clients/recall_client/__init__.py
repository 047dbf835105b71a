"""recall_client: the light side of recalld (protocol, client library, recallctl, recall-mcp).

Importing this package never loads torch, faiss or aiosqlite: the MCP shim starts once per
agent and must answer ``initialize`` at once.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
