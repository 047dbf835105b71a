"""recall_client: the light side of recalld (protocol, client library, recallctl, recall-mcp).

Importing this package never loads the daemon or what only it runs (numpy, FAISS, ONNX
Runtime, libgit2, psycopg): the MCP shim starts once per agent and must answer
``initialize`` at once.
"""

from __future__ import annotations

__all__ = ["__version__"]

# recalld's one version: pyproject.toml reads it from here, and the daemon imports it.
__version__ = "0.1.0"
