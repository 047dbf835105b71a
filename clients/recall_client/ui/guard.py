"""What stands between a local port and the daemon: every request the page gets passes here.

A loopback port is reachable by every local user and by any web page the user's browser
visits, so nothing is served on trust:

- **Host** must name the loopback address and the port we bound: a page on ``evil.example``
  that re-points its name at 127.0.0.1 (DNS rebinding) sends its own name and is refused.
- **Who**: the printed URL carries a random launch token; presenting it (once per browser)
  sets a session cookie (HttpOnly: no script reads it; SameSite=Strict: no other site's page
  makes the browser send it). Any other request without that cookie is refused.
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
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

__all__ = ["COOKIE", "CSRF_FIELD", "SECURITY_HEADERS", "Guard"]

COOKIE = "recalld_ui"
CSRF_FIELD = "csrf"
# The launch token's query parameter in the printed URL.
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
_MAX_SESSIONS = 32


class Guard:
    """ASGI middleware: Host, session cookie, Origin and CSRF checks, security headers.

    ``app`` (the pages, which need the guard for their CSRF tokens) and ``port`` (known once
    bound) are set before the first request.
    """

    def __init__(self, *, launch_token: str | None = None) -> None:
        self.app: ASGIApp | None = None
        self.launch_token = launch_token or secrets.token_urlsafe(32)
        # Session cookies issued to browsers that presented the launch token, oldest first;
        # bounded, so reopening the link forever cannot grow it.
        self._sessions: OrderedDict[str, None] = OrderedDict()
        self._csrf_key = secrets.token_bytes(32)
        self.port = 0

    # ---- what the pages use

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
        session = _cookie(headers.get("cookie", ""), COOKIE)
        if session is not None and session not in self._sessions:
            session = None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), max_num_fields=20)
        offered = query.get(TOKEN_PARAM, [""])[0]
        if method in _SAFE_METHODS and offered:
            if not hmac.compare_digest(offered.encode(), self.launch_token.encode()):
                await _refuse(
                    send, HTTPStatus.FORBIDDEN, "wrong token: open the URL recallctl ui printed"
                )
                return
            await self._welcome(send)
            return
        if session is None:
            await _refuse(
                send, HTTPStatus.FORBIDDEN, "not signed in: open the URL recallctl ui printed"
            )
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

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _welcome(self, send: Send) -> None:
        """Trade the launch token for a session cookie and drop the token from the address."""
        session = secrets.token_urlsafe(32)
        self._sessions[session] = None
        while len(self._sessions) > _MAX_SESSIONS:
            self._sessions.popitem(last=False)
        cookie = f"{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/"
        await send(
            {
                "type": "http.response.start",
                "status": HTTPStatus.SEE_OTHER,
                "headers": [
                    (b"location", b"/"),
                    (b"set-cookie", cookie.encode()),
                    (b"content-length", b"0"),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


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
