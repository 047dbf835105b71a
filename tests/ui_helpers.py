"""Start the real ``recallctl ui`` against a test daemon, and talk HTTP to it."""

from __future__ import annotations

import http.client
import re
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from .conftest import BIN, DaemonProcess

_URL = re.compile(r"open (http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+))")


@dataclass
class UiServer:
    proc: subprocess.Popen[str]
    url: str
    port: int
    token: str
    log: list[str]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def origin(self) -> str:
        return self.base


@contextmanager
def ui_server(
    d: DaemonProcess, workspace: str | Path, *extra: str, admin: bool = True
) -> Iterator[UiServer]:
    """``recallctl ui`` on a free port, as a user runs it; stopped (SIGINT) at the end."""
    args = [str(BIN / "recallctl"), "--socket", str(d.socket), "--workspace", str(workspace)]
    if not admin:
        args.append("--no-admin")
    proc = subprocess.Popen(
        [*args, "ui", "--interval", "0.5", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=d.env(),
    )
    assert proc.stdout is not None
    log: list[str] = []
    found: re.Match[str] | None = None
    for line in proc.stdout:
        log.append(line)
        found = _URL.search(line)
        if found:
            break
    if found is None:
        proc.kill()
        raise AssertionError("recallctl ui printed no URL:\n" + "".join(log))
    # Keep draining its output so it never blocks on a full pipe.
    out = proc.stdout
    drain = threading.Thread(target=lambda: log.extend(out), daemon=True)
    drain.start()
    server = UiServer(proc, found.group(1), int(found.group(2)), found.group(3), log)
    assert urlsplit(server.url).hostname == "127.0.0.1"
    try:
        yield server
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        drain.join(timeout=10)
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
        reply = self.get(f"/?token={self.server.token}")
        assert reply.status_code == 303, reply
        assert reply.headers["location"] == "/"
        return self
