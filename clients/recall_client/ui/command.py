"""``recallctl ui``: the command; the page's server is imported only when it runs."""

from __future__ import annotations

import argparse

__all__ = ["add_command"]


async def _serve(args: argparse.Namespace) -> int:
    # Starlette, uvicorn and Jinja2 cost every other recallctl command nothing.
    from .server import serve

    return await serve(args)


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ui = sub.add_parser(
        "ui",
        help="serve a local web page to see, correct and forget what agents remember",
        description="Serve a web page on 127.0.0.1 that shows the daemon's state and every "
        "memory, episode and experience, and lets you edit, verify or forget them. It writes a "
        "one-time sign-in link to a private file and prints that file's path; only browsers "
        "holding the cookie a link buys are served (kill -USR1 PID: a new link). Acts with "
        "the admin token as recallctl does (unless --no-admin).",
    )
    ui.add_argument(
        "--port", type=int, default=0, help="port to bind on 127.0.0.1 (default: a free one)"
    )
    ui.add_argument(
        "--open",
        action="store_true",
        help="open the sign-in link in the default browser (through its private file)",
    )
    ui.add_argument(
        "--print-url",
        action="store_true",
        help="also print the sign-in link itself (anyone who sees the terminal can use it)",
    )
    ui.add_argument(
        "--interval", type=float, default=2.0, help="seconds between the overview's live samples"
    )
    ui.set_defaults(local=_serve)
