"""``recallctl ui``: a local web page over the daemon, served on a loopback port.

The page is one more client of the daemon's Unix socket (the daemon itself never listens on
a network socket); this process serves HTTP on 127.0.0.1 only, behind the guard.
"""

from __future__ import annotations

import argparse
import socket
import sys
import webbrowser
from pathlib import Path

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from ..ctl_hello import hello_tokens
from ..paths import find_workspace
from . import experience_pages, memory_pages, ops_pages, overview, work_pages
from .context import UI
from .guard import Guard
from .link import DaemonLink
from .live import Telemetry
from .render import Pages

__all__ = ["bind", "build_app", "serve"]

_STATIC = Path(__file__).parent / "static"


def build_app(ui: UI) -> Starlette:
    """Every page's routes and the static files (the guard wraps this app)."""
    routes: list[BaseRoute] = [
        *overview.routes(ui),
        *memory_pages.routes(ui),
        *work_pages.routes(ui),
        *experience_pages.routes(ui),
        *ops_pages.routes(ui),
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


async def _open_browser(url: str) -> None:
    # webbrowser may start a program and wait for it: off the event loop.
    await anyio.to_thread.run_sync(webbrowser.open, url)


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
        url = f"http://127.0.0.1:{port}/?token={guard.launch_token}"
        print(f"recallctl ui: open {url}", flush=True)
        print(
            "recallctl ui: the link signs this browser in; Ctrl-C stops the page", file=sys.stderr
        )
        if args.open:
            tg.start_soon(_open_browser, url, name="ui open browser")
        try:
            await server.serve(sockets=[sock])
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await link.aclose()
    return 0
