"""``recall-mcp``: the MCP stdio shim an agent host spawns; it forwards tool calls to recalld.

stdout carries MCP frames only; every log line goes to stderr. ``initialize`` is answered
without touching the daemon: the shim connects on the first tool call. When no daemon answers
then, the shim starts one (unless autostart is off: ``RECALLD_AUTOSTART=0`` or
``autostart = false``), and a daemon it cannot reach or start is a clear tool error, never a
hang.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import anyio

from .. import __version__
from ..paths import autostart_enabled, find_workspace
from . import sdk

__all__ = ["main"]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="recall-mcp",
        description="MCP stdio server that forwards to the recalld daemon. An agent host "
        "(Claude Code, Codex, Cursor, Gemini CLI, VS Code: `recallctl connect HOST` writes "
        "its entry) spawns it; it is not meant to be run by hand.",
    )
    ap.add_argument(
        "--agent",
        default=os.environ.get("RECALL_AGENT"),
        help="this agent's name (default: $RECALL_AGENT, else 'agent')",
    )
    ap.add_argument(
        "--model",
        default=os.environ.get("RECALL_MODEL"),
        help="the model driving the agent, recorded with what it writes (default: $RECALL_MODEL)",
    )
    ap.add_argument(
        "--workspace", help="workspace path (default: the git root of the working directory)"
    )
    ap.add_argument(
        "--socket",
        help="daemon socket (default: $RECALLD_SOCKET, else $XDG_RUNTIME_DIR/recalld/recalld.sock)",
    )
    ap.add_argument(
        "--admin",
        action="store_true",
        help="present the daemon's admin token ($XDG_CONFIG_HOME/recalld/"
        "admin.token) for the admin:workspace scope, e.g. work_search any_caller",
    )
    ap.add_argument(
        "--agent-token-file",
        default=os.environ.get("RECALL_AGENT_TOKEN_FILE"),
        metavar="FILE",
        help="this agent's credential, as `recallctl agent add` wrote it "
        "(default: $RECALL_AGENT_TOKEN_FILE); required once the name has one",
    )
    ap.add_argument("--version", action="version", version=f"recall-mcp {__version__}")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("RECALL_MCP_LOG_LEVEL", "WARNING"),
        format="recall-mcp %(levelname)s %(name)s: %(message)s",
    )
    # This process is the shim and nothing else: it loads the SDK's server side alone.
    sdk.load_without_reexports()
    from .server import ShimConfig, serve

    config = ShimConfig(
        agent=args.agent or "agent",
        # A path: the daemon derives the workspace's identity from the repository there.
        workspace=os.path.abspath(args.workspace) if args.workspace else find_workspace(),
        model=args.model,
        socket=args.socket,
        admin=args.admin,
        autostart=autostart_enabled(),
        agent_token_file=args.agent_token_file,
    )
    anyio.run(serve, config)


if __name__ == "__main__":
    main()
