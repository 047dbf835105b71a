"""What stands between a local port and the daemon: every request the page gets passes here.

A loopback port is reachable by every local user and by any web page the user's browser
visits, so nothing is served on trust:

- **Host** must name the loopback address and the port we bound: a page on ``evil.example``
  that re-points its name at 127.0.0.1 (DNS rebinding) sends its own name and is refused.
- **Who**: the sign-in link carries a random launch token, good for one use: presenting it
  sets a session cookie (HttpOnly: no script reads it; SameSite=Strict: no other site's page
  makes the browser send it) and spends it. Any other request without a live cookie is
  refused. Sessions end after a day idle; a full table refuses a newcomer and never evicts a
  live session (else re-using a link could sign the user's own browser out).
- **Writes** (every POST) also need a same-origin ``Origin`` header and the CSRF token the
  page embeds in its forms, derived from the session so another session's token is useless.
- **Responses** carry a Content-Security-Policy that allows only our own static script and
  stylesheet (no inline script, no framing, forms posting only to us), and no CORS header
  ever: another origin cannot read a reply.

The guard is pure ASGI so it runs before any route, for static files and server-sent events
alike.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

__all__ = [
    "COOKIE",
    "CSRF_FIELD",
    "MAX_SESSIONS",
    "PUBLIC_PATHS",
    "SECURITY_HEADERS",
    "SESSION_IDLE_S",
    "TOKEN_PARAM",
    "Guard",
]

COOKIE = "recalld_ui"
CSRF_FIELD = "csrf"
# The launch token's query parameter in the sign-in link.
TOKEN_PARAM = "token"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", _CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on a form
    # post, and the page could not prove its writes come from itself.
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
_SAFE_METHODS = frozenset({"GET", "HEAD"})
MAX_SESSIONS = 32
# Served without a session (GET or HEAD only): what a browser asks for on its own.
PUBLIC_PATHS = frozenset({"/favicon.ico"})
# A session unused this long is gone, so a table filled by old sign-ins frees itself.
SESSION_IDLE_S = 24 * 3600.0


class Guard:
    """ASGI middleware: Host, session cookie, Origin and CSRF checks, security headers.

    ``app`` (the pages, which need the guard for their CSRF tokens) and ``port`` (known once
    bound) are set before the first request; ``on_spent`` runs when the launch token is used.
    """

    def __init__(self, *, now: Callable[[], float] = time.monotonic) -> None:
        self.app: ASGIApp | None = None
        self.port = 0
        self.on_spent: Callable[[], None] = lambda: None
        # The one unspent launch token (None: there is none until new_launch_token).
        self._launch: str | None = None
        # Live session cookies, each with when it was last used; at most MAX_SESSIONS.
        self._sessions: dict[str, float] = {}
        self._csrf_key = secrets.token_bytes(32)
        self._now = now

    # ---- what the pages and the server use

    def new_launch_token(self) -> str:
        """A fresh one-time launch token; an unspent earlier one stops working."""
        self._launch = secrets.token_urlsafe(32)
        return self._launch

    def csrf_for(self, session: str) -> str:
        """The CSRF token of one session (an HMAC: nothing to store, nothing to guess)."""
        return hmac.new(self._csrf_key, session.encode(), hashlib.sha256).hexdigest()

    def origins(self) -> tuple[str, ...]:
        return (f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}")

    # ---- ASGI

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None, "Guard.app is set before serving"
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await _refuse(send, HTTPStatus.NOT_FOUND, "not served here")
            return
        headers = _headers(scope)
        if headers.get("host") not in {o.removeprefix("http://") for o in self.origins()}:
            await _refuse(
                send,
                HTTPStatus.MISDIRECTED_REQUEST,
                "this server answers only on its own loopback address",
            )
            return
        method: str = scope["method"]
        session = self._live(_cookie(headers.get("cookie", ""), COOKIE))
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), max_num_fields=20)
        offered = query.get(TOKEN_PARAM, [""])[0]
        if method in _SAFE_METHODS and offered:
            await self._sign_in(send, offered, session)
            return
        if method in _SAFE_METHODS and scope["path"] in PUBLIC_PATHS:
            # The icon says nothing about the store: a browser fetches it without the cookie
            # (before sign-in, or from the sign-in file's page).
            await self.app(scope, receive, _with_headers(send))
            return
        if session is None:
            await _refuse(send, HTTPStatus.FORBIDDEN, "not signed in: " + _HOW_TO_SIGN_IN)
            return
        if method not in _SAFE_METHODS:
            if method != "POST":
                await _refuse(send, HTTPStatus.METHOD_NOT_ALLOWED, "only GET and POST are served")
                return
            if headers.get("origin") not in self.origins():
                await _refuse(
                    send, HTTPStatus.FORBIDDEN, "a write must come from this page (Origin)"
                )
                return
            # The CSRF field is checked by the route once the form is read (forms.read_form).
        scope.setdefault("state", {})["ui_session"] = session
        await self.app(scope, receive, _with_headers(send))

    def _live(self, session: str | None) -> str | None:
        """``session`` if it is a live session (and mark it used now), else None."""
        if session is None or session not in self._sessions:
            return None
        now = self._now()
        if now - self._sessions[session] > SESSION_IDLE_S:
            del self._sessions[session]
            return None
        self._sessions[session] = now
        return session

    async def _sign_in(self, send: Send, offered: str, session: str | None) -> None:
        """Trade the launch token for a session cookie, once; never evict a live session."""
        launch = self._launch
        if launch is None or not hmac.compare_digest(offered.encode(), launch.encode()):
            if session is not None:
                # A signed-in browser back on a spent link: it has what the link would buy.
                await _welcome(send, [])
                return
            await _refuse(
                send, HTTPStatus.FORBIDDEN, "this sign-in link is spent or wrong: " + _NEW_LINK
            )
            return
        if session is not None:
            # The browser trades its session for the new one: no second place in the table.
            del self._sessions[session]
        now = self._now()
        for old in [s for s, seen in self._sessions.items() if now - seen > SESSION_IDLE_S]:
            del self._sessions[old]
        if len(self._sessions) >= MAX_SESSIONS:
            # Nothing was bought, so the link is not spent: it works once there is room.
            await _refuse(
                send,
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"{MAX_SESSIONS} browsers are signed in already and none is signed out to make "
                f"room; a session ends after {SESSION_IDLE_S / 3600:.0f} h unused, or restart "
                "recallctl ui to sign every browser out",
            )
            return
        self._launch = None
        fresh = secrets.token_urlsafe(32)
        self._sessions[fresh] = now
        self.on_spent()
        cookie = f"{COOKIE}={fresh}; HttpOnly; SameSite=Strict; Path=/"
        await _welcome(send, [(b"set-cookie", cookie.encode())])


# A spent link is no way in: the user asks the running server for another.
_NEW_LINK = "send recallctl ui SIGUSR1 (kill -USR1 PID; it prints its PID) for a new one"
_HOW_TO_SIGN_IN = "open the sign-in link recallctl ui gave (it works once), or " + _NEW_LINK


# The browser goes on to the overview by itself. Not a 303: when the link was opened from
# the sign-in file (another origin), a browser sends no SameSite=Strict cookie anywhere along
# that redirect chain; a navigation this page starts is same-site, so the cookie goes along.
_WELCOME = b"""<!doctype html>
<meta charset="utf-8">
<meta http-equiv="refresh" content="0;url=/">
<title>recallctl ui: signed in</title>
<p>Signed in. <a href="/">On to the overview</a>.</p>
"""


async def _welcome(send: Send, headers: list[tuple[bytes, bytes]]) -> None:
    """Send the browser on to the overview, off the address that carried the token."""
    await send(
        {
            "type": "http.response.start",
            "status": HTTPStatus.OK,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"content-length", str(len(_WELCOME)).encode()),
                *headers,
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": _WELCOME})


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name; a repeated Host or Origin is a refusal."""
    out: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        if name in out and name in ("host", "origin", "cookie"):
            # Two of these can only be a confused or hostile client: keep neither.
            out[name] = "\0"
            continue
        out[name] = value
    return out


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";")[:64]:
        key, _, value = part.strip().partition("=")
        if key == name and value:
            return value
    return None


async def _refuse(send: Send, status: HTTPStatus, why: str) -> None:
    body = f"{status.value} {status.phrase}: {why}\n".encode()
    await send(
        {
            "type": "http.response.start",
            "status": status.value,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _with_headers(send: Send) -> Send:
    """``send`` with the security headers added to the response's start."""

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
        await send(message)

    return send_with_headers
