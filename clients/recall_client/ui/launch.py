"""The sign-in link of ``recallctl ui``, handed to the browser where no other user reads it.

Every local user can read every process's command line (``/proc/PID/cmdline``), so the link
and its token never go on one: the browser is given the path of a 0600 HTML file in this
user's private runtime directory, and the file sends it on to the link (as notebook servers
do). The file goes as soon as the token is spent. ``--print-url`` also prints the link, for
a user who opens it by hand.
"""

from __future__ import annotations

import html
import os
import sys
import tempfile
import webbrowser
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

from ..paths import ensure_private_dir, runtime_dir
from .guard import TOKEN_PARAM, Guard

__all__ = ["SignInLinks"]

_PAGE = """<!doctype html>
<meta charset="utf-8">
<meta http-equiv="refresh" content="0;url={url}">
<title>recallctl ui: signing in</title>
<p>Signing in to <a href="{url}">recallctl ui</a>…</p>
"""


class SignInLinks:
    """Mints the guard's one-time launch token and hands it over, each time it is asked."""

    def __init__(self, guard: Guard, tg: TaskGroup, *, print_url: bool, open_browser: bool) -> None:
        self._guard = guard
        self._tg = tg
        self._print_url = print_url
        self._open_browser = open_browser
        self._page: Path | None = None
        guard.on_spent = self.close

    def issue(self) -> None:
        """A new sign-in link (the last one, spent or not, stops working): write its page,
        say where it is, and open it in the browser if asked to.

        Raises:
            InsecureDirectory: the runtime directory is not this user's alone.
        """
        token = self._guard.new_launch_token()
        url = f"http://127.0.0.1:{self._guard.port}/?{TOKEN_PARAM}={token}"
        self.close()
        self._page = _write_page(url)
        uri = self._page.as_uri()
        print(f"recallctl ui: sign in (once) by opening {uri}", flush=True)
        if self._print_url:
            print(f"recallctl ui: or open {url}", flush=True)
        if self._open_browser:
            self._tg.start_soon(_open_in_browser, uri, name="ui browser")

    def close(self) -> None:
        """Remove the page of the current link, if any (its token is spent or dropped)."""
        if self._page is not None:
            self._page.unlink(missing_ok=True)
            self._page = None


async def _open_in_browser(uri: str) -> None:
    # webbrowser may start a program and wait for it (a console browser runs until the user
    # quits it): off the event loop, in a task of its own.
    if not await anyio.to_thread.run_sync(webbrowser.open, uri):
        print(
            f"recallctl ui: no browser could be opened (set $BROWSER, or open {uri} in one "
            "by hand; --print-url also prints the link, for a browser on another machine "
            "forwarding this port)",
            file=sys.stderr,
            flush=True,
        )


def _write_page(url: str) -> Path:
    """A new 0600 HTML file in ``$XDG_RUNTIME_DIR/recalld`` that redirects to ``url``."""
    folder = runtime_dir() / "recalld"
    ensure_private_dir(folder)
    # mkstemp: a fresh name opened O_EXCL with mode 0600, so nothing else can be there first.
    fd, name = tempfile.mkstemp(prefix="ui-sign-in-", suffix=".html", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as page:
        page.write(_PAGE.format(url=html.escape(url)))
    return Path(name)
