"""Start the real ``recallctl ui`` against a test daemon, and talk HTTP to it."""

from __future__ import annotations

import http.client
import queue
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode

from .daemon import BIN, DaemonProcess

_URL = re.compile(r"open (http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+))")
_PAGE = re.compile(r"sign in \(once\) by opening (file://\S+)")


@dataclass
class UiServer:
    """A running ``recallctl ui``: ``url`` is its current sign-in link (printed with
    ``--print-url``), ``page`` the file:// page that carries the same link to a browser."""

    proc: subprocess.Popen[str]
    port: int
    url: str
    page: str
    log: list[str]
    links: queue.Queue[tuple[str, str]]

    @property
    def token(self) -> str:
        return self.url.rsplit("=", 1)[1]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def origin(self) -> str:
        return self.base

    def new_link(self) -> str:
        """Ask the server for a fresh one-time sign-in link (SIGUSR1), as a user does."""
        self.proc.send_signal(signal.SIGUSR1)
        self.page, self.url = self.links.get(timeout=20)
        return self.url


def _read_output(
    out: IO[str], log: list[str], links: queue.Queue[tuple[str, str]], with_url: bool
) -> None:
    """Keep reading the server's output (so it never blocks on a full pipe), and pass on each
    sign-in link it announces: its page, then (``with_url``: --print-url) the link itself."""
    page = ""
    for line in out:
        log.append(line)
        if found := _PAGE.search(line):
            page = found.group(1)
            if not with_url:
                links.put((page, ""))
        elif found := _URL.search(line):
            links.put((page, found.group(1)))


@contextmanager
def ui_server(
    d: DaemonProcess,
    workspace: str | Path,
    *extra: str,
    admin: bool = True,
    env: dict[str, str] | None = None,
) -> Iterator[UiServer]:
    """``recallctl ui --print-url`` on a free port, as a user runs it (``extra`` replaces
    ``--print-url``); stopped (SIGINT) at the end."""
    args = [str(BIN / "recallctl"), "--socket", str(d.socket), "--workspace", str(workspace)]
    if not admin:
        args.append("--no-admin")
    command = [*args, "ui", "--interval", "0.5", *(extra or ("--print-url",))]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**d.env(), **(env or {})},
    )
    assert proc.stdout is not None
    out = proc.stdout
    log: list[str] = []
    links: queue.Queue[tuple[str, str]] = queue.Queue()
    reader = threading.Thread(
        target=_read_output, args=(out, log, links, "--print-url" in command), daemon=True
    )
    reader.start()
    try:
        page, url = links.get(timeout=60)
    except queue.Empty:
        proc.kill()
        raise AssertionError("recallctl ui announced no sign-in link:\n" + "".join(log)) from None
    port = int(re.findall(r"serves http://127\.0\.0\.1:(\d+)/", "".join(log))[0])
    server = UiServer(proc, port, url, page, log, links)
    try:
        yield server
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        out.close()


@dataclass
class Reply:
    status_code: int
    headers: dict[str, str]
    text: str


class Http:
    """A bare HTTP client for the guard's tests: it sends exactly the headers it is given
    (a forged Host, a foreign Origin), keeps the session cookie, and follows no redirect."""

    def __init__(self, server: UiServer) -> None:
        self.server = server
        self.cookie: str | None = None

    def request(
        self,
        method: str,
        path: str,
        *,
        data: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=20)
        sent = {"host": f"127.0.0.1:{self.server.port}"}
        body: bytes | None = None
        if data is not None:
            body = urlencode(data).encode()
            sent["content-type"] = "application/x-www-form-urlencoded"
        if self.cookie:
            sent["cookie"] = f"recalld_ui={self.cookie}"
        sent.update(headers or {})
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in sent.items():
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("content-length", str(len(body)))
            conn.endheaders(body)
            raw = conn.getresponse()
            reply = Reply(
                raw.status, {k.lower(): v for k, v in raw.getheaders()}, raw.read().decode()
            )
        finally:
            conn.close()
        cookie = reply.headers.get("set-cookie", "")
        if cookie.startswith("recalld_ui="):
            self.cookie = cookie.split(";", 1)[0].removeprefix("recalld_ui=")
        return reply

    def get(self, path: str, **kw: Any) -> Reply:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Reply:
        return self.request("POST", path, **kw)

    def sign_in(self) -> Http:
        """Sign in with the server's current link, then ask it for a fresh one (each link
        works once), as a user with a second browser would."""
        reply = self.get(f"/?token={self.server.token}")
        assert reply.status_code == 200, reply
        assert '<meta http-equiv="refresh" content="0;url=/">' in reply.text
        self.server.new_link()
        return self


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert found, "the page carries no CSRF field"
    return found.group(1)
