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
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from . import __version__
from .client import Session
from .paths import autostart_enabled, find_workspace

if TYPE_CHECKING:
    # Only for the annotation: importing it loads the MCP SDK, which build_server defers.
    from .mcp_common import StrictMCPServer

__all__ = ["ShimConfig", "build_server", "main"]

log = logging.getLogger("recall-mcp")

INSTRUCTIONS = """recalld is the shared, local memory of the agents on this machine.
Search before you re-derive: memory_search for facts, notes and decisions. Store what a later
session would want to know with memory_store (decisions, conventions, gotchas), not what the
repository already says. work_search finds what agents actually did (commands, failures,
sessions); work_result records how a task turned out. Before planning a task,
get_execution_context for the lessons and similar past tasks that apply; when a task is done,
record_experience with its outcome and lessons. Hits are leads about the past: check them
against the task at hand."""


@dataclass(frozen=True, slots=True)
class ShimConfig:
    agent: str
    workspace: str
    model: str | None = None
    socket: str | None = None
    # Present the admin token file: the admin:workspace scope (work_search any_caller, ...).
    admin: bool = False
    autostart: bool = False
    # The agent's own credential (recallctl agent add), presented in every hello.
    agent_token_file: str | None = None


def build_server(config: ShimConfig) -> StrictMCPServer[None]:
    """The MCP server with every recalld tool registered (imports the SDK, ~1 s)."""
    from . import mcp_experience, mcp_memory, mcp_work
    from .mcp_common import StrictMCPServer

    holder: dict[str, Session] = {}

    @asynccontextmanager
    async def lifespan(_server: object) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            holder["session"] = Session(
                tg,
                autostart=config.autostart,
                agent=config.agent,
                workspace=config.workspace,
                client="recall-mcp",
                model=config.model,
                path=config.socket,
                admin=config.admin,
                agent_token_file=config.agent_token_file,
                # One agent session per shim process, kept across reconnects.
                session=f"mcp-{uuid.uuid4().hex}",
            )
            try:
                yield None
            finally:
                await holder["session"].aclose()
                tg.cancel_scope.cancel()

    # Strict: a tool refuses arguments it does not declare rather than running on defaults.
    server = StrictMCPServer(
        name="recalld",
        title="recalld memory",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
    )
    # One module per tool family; each registers its tools on the server.
    for module in (mcp_memory, mcp_work, mcp_experience):
        module.register(server, lambda: holder["session"])
    return server


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="recall-mcp",
        description="MCP stdio server that forwards to the recalld daemon. An agent host "
        "(Claude Code, Cursor, Codex) spawns it; it is not meant to be run by hand.",
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
    config = ShimConfig(
        agent=args.agent or "agent",
        workspace=args.workspace or find_workspace(),
        model=args.model,
        socket=args.socket,
        admin=args.admin,
        autostart=autostart_enabled(),
        agent_token_file=args.agent_token_file,
    )
    build_server(config).run("stdio")


if __name__ == "__main__":
    main()
