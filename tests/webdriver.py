"""A small W3C WebDriver client: Debian's chromium, driven through its chromedriver.

The web page's browser tests need a dozen WebDriver commands; each is a JSON request over
HTTP, sent here with http.client. Selenium did the same with 31 MB of packages in every
venv (trio, websockets, urllib3 and its own bindings for every browser).
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = ["TAB", "Browser", "Element", "WebDriverError", "chromium"]

# The JSON key that marks an element reference (fixed by the W3C specification).
_ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
# Keys are private-use characters in the specification; the tests only press Tab.
TAB = "\ue004"
_READY = re.compile(rb"started successfully on port (\d+)")


class WebDriverError(Exception):
    """A command the driver refused: ``code`` is WebDriver's error code (``no such element``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Browser:
    """One browser session: navigate, find elements, run scripts, take screenshots."""

    def __init__(self, port: int, capabilities: dict[str, Any]) -> None:
        """Open a session. Raises WebDriverError (``session not created``) if it cannot."""
        # One connection, kept alive: the driver answers one command at a time anyway.
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        created = self._send("POST", "/session", {"capabilities": {"alwaysMatch": capabilities}})
        self._session = f"/session/{created['sessionId']}"

    def _send(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Send one command and return its ``value``. Raises WebDriverError if refused."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {} if payload is None else {"Content-Type": "application/json; charset=utf-8"}
        self._conn.request(method, path, payload, headers)
        reply = self._conn.getresponse()
        value = json.loads(reply.read())["value"]
        if reply.status != 200:
            raise WebDriverError(value["error"], value["message"])
        return value

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """A command of this session (``path`` after ``/session/{id}``)."""
        return self._send(method, self._session + path, body)

    def get(self, url: str) -> None:
        """Navigate, and return once the page has loaded."""
        self.call("POST", "/url", {"url": url})

    @property
    def current_url(self) -> str:
        return str(self.call("GET", "/url"))

    @property
    def source(self) -> str:
        return str(self.call("GET", "/source"))

    def find(self, css: str) -> Element:
        """The first element matching ``css``. Raises WebDriverError (``no such element``)."""
        return Element(self, self.call("POST", "/element", _css(css))[_ELEMENT])

    def find_all(self, css: str) -> list[Element]:
        return [Element(self, e[_ELEMENT]) for e in self.call("POST", "/elements", _css(css))]

    def find_link(self, text: str) -> Element:
        """The first link whose text holds ``text``. Raises WebDriverError if none does."""
        found = self.call("POST", "/element", {"using": "partial link text", "value": text})
        return Element(self, found[_ELEMENT])

    def active_element(self) -> Element:
        return Element(self, self.call("GET", "/element/active")[_ELEMENT])

    def execute(self, script: str, *args: Any) -> Any:
        """Run ``script`` as a function body in the page; what it returns, as JSON."""
        return self.call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def set_window_size(self, width: int, height: int) -> None:
        self.call("POST", "/window/rect", {"width": width, "height": height})

    def screenshot(self, path: Path) -> None:
        """Save what the window shows as a PNG."""
        path.write_bytes(base64.b64decode(self.call("GET", "/screenshot")))

    def quit(self) -> None:
        """End the session: the driver closes the browser."""
        try:
            self.call("DELETE", "")
        finally:
            self._conn.close()


class Element:
    """An element of the page, by the driver's reference (stale once the page changes)."""

    def __init__(self, browser: Browser, ref: str) -> None:
        self._browser = browser
        self._path = f"/element/{ref}"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._browser.call(method, self._path + path, body)

    @property
    def text(self) -> str:
        """The text as rendered (hidden parts left out)."""
        return str(self._call("GET", "/text"))

    def find(self, css: str) -> Element:
        """The first element inside this one matching ``css``. Raises WebDriverError."""
        return Element(self._browser, self._call("POST", "/element", _css(css))[_ELEMENT])

    def find_all(self, css: str) -> list[Element]:
        found = self._call("POST", "/elements", _css(css))
        return [Element(self._browser, e[_ELEMENT]) for e in found]

    def click(self) -> None:
        self._call("POST", "/click", {})

    def clear(self) -> None:
        self._call("POST", "/clear", {})

    def send_keys(self, text: str) -> None:
        self._call("POST", "/value", {"text": text})

    def is_displayed(self) -> bool:
        # Not in the W3C specification, but chromedriver answers it with the same check
        # Selenium runs as a script.
        return bool(self._call("GET", "/displayed"))


def _css(selector: str) -> dict[str, str]:
    return {"using": "css selector", "value": selector}


@contextmanager
def chromium(
    driver: str, binary: str, args: Sequence[str], page_load_s: float = 30.0
) -> Iterator[Browser]:
    """A session of ``binary`` (chromium, started with ``args``) through ``driver``
    (chromedriver), ended on exit. Raises RuntimeError if the driver does not start,
    WebDriverError if the browser does not."""
    # Port 0: the driver binds a free port itself and prints it once it listens.
    proc = subprocess.Popen([driver, "--port=0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    try:
        port = _wait_until_listening(proc.stdout)
        browser = Browser(
            port,
            {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": binary, "args": list(args)},
                "timeouts": {"pageLoad": int(page_load_s * 1000)},
            },
        )
        try:
            yield browser
        finally:
            browser.quit()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _wait_until_listening(out: IO[bytes]) -> int:
    """The port from the driver's start-up lines. Raises RuntimeError if it exits first."""
    seen: list[bytes] = []
    for line in out:
        seen.append(line)
        ready = _READY.search(line)
        if ready:
            threading.Thread(
                target=_drain, args=(out,), name="chromedriver output", daemon=True
            ).start()
            return int(ready.group(1))
    out.close()
    raise RuntimeError("chromedriver exited before listening:\n" + b"".join(seen).decode())


def _drain(out: IO[bytes]) -> None:
    """Read and drop what the driver and the browser print later, so that a full pipe can
    never stall them; close it when the last of them has exited."""
    with out:
        out.read()
