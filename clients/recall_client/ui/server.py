"""``recallctl ui``: a local web page over the daemon, served on a loopback port.

The page is one more client of the daemon's Unix socket (the daemon itself never listens on
a network socket); this process serves HTTP on 127.0.0.1 only, behind the guard.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from pathlib import Path

import anyio
import uvicorn
from anyio.abc import TaskStatus
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..hello import hello_tokens
from ..paths import find_workspace
from . import context_pages, experience_pages, memory_pages, ops_pages, overview, work_pages
from .context import UI
from .guard import Guard
from .launch import SignInLinks
from .link import DaemonLink
from .live import Telemetry
from .render import Pages

__all__ = ["bind", "build_app", "serve"]

_STATIC = Path(__file__).parent / "static"


async def _favicon(_: Request) -> FileResponse:
    return FileResponse(_STATIC / "favicon.svg", media_type="image/svg+xml")


def build_app(ui: UI) -> Starlette:
    """Every page's routes and the static files (the guard wraps this app)."""
    routes: list[BaseRoute] = [
        *overview.routes(ui),
        *memory_pages.routes(ui),
        *work_pages.routes(ui),
        *context_pages.routes(ui),
        *experience_pages.routes(ui),
        *ops_pages.routes(ui),
        Route("/favicon.ico", _favicon, methods=["GET", "HEAD"]),
        Mount("/static", StaticFiles(directory=_STATIC), name="static"),
    ]
    return Starlette(routes=routes)


def bind(port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 (``port`` 0: any free one).

    Raises:
        OSError: the port is taken.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


async def _links_on_demand(
    links: SignInLinks, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """A new sign-in link on every SIGUSR1: the way back in once a link is spent (only this
    user, or root, may signal the process)."""
    with anyio.open_signal_receiver(signal.SIGUSR1) as signals:
        task_status.started()
        async for _ in signals:
            try:
                links.issue()
            except OSError as exc:  # the runtime dir was tampered with: keep serving
                print(f"recallctl ui: no new sign-in link: {exc}", file=sys.stderr, flush=True)


async def serve(args: argparse.Namespace) -> int:
    """Serve the page until interrupted."""
    sock = bind(args.port)
    port = sock.getsockname()[1]
    workspace = args.workspace or find_workspace()
    async with anyio.create_task_group() as tg:
        link = DaemonLink(
            tg, agent=args.agent, workspace=workspace, socket=args.socket, **hello_tokens(args)
        )
        guard = Guard()
        guard.port = port
        telemetry = Telemetry(link, interval_s=args.interval)
        ui = UI(guard=guard, pages=Pages(guard), link=link, telemetry=telemetry)
        guard.app = build_app(ui)
        tg.start_soon(telemetry.run, name="ui telemetry")
        config = uvicorn.Config(
            guard,
            lifespan="off",
            http="h11",
            ws="none",
            # Nothing sits in front of this server: never take a client's word for its address.
            proxy_headers=False,
            server_header=False,
            access_log=False,
            log_level="warning",
            limit_concurrency=64,
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        links = SignInLinks(guard, tg, print_url=args.print_url, open_browser=args.open)
        try:
            await tg.start(_links_on_demand, links, name="ui sign-in links")
            pid = os.getpid()
            print(
                f"recallctl ui (pid {pid}) serves http://127.0.0.1:{port}/; Ctrl-C stops it, "
                f"kill -USR1 {pid} gives a new sign-in link",
                file=sys.stderr,
                flush=True,
            )
            links.issue()
            await server.serve(sockets=[sock])
        finally:
            links.close()
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await link.aclose()
    return 0
