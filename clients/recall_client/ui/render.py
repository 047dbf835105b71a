"""Rendering and reading: templates with every value escaped, forms read under a bound.

Memories are untrusted text written by agents (and often by whoever wrote what the agents
read), so the templates autoescape everything and nothing is marked safe but the SVG the
charts module builds from numbers.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlencode

import msgspec
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..client import DaemonUnavailable, RemoteError
from .charts import sparkline
from .guard import CSRF_FIELD, Guard

__all__ = ["Form", "FormError", "Pages", "read_form"]

# A form post larger than this is refused before it is read whole (a memory's text is at
# most 20,000 characters; percent-encoding may triple it).
MAX_FORM_BYTES = 256 * 1024
_MAX_FIELDS = 64

# Daemon error codes and the HTTP status the page answers with.
_STATUS_OF = {
    "not_found": HTTPStatus.NOT_FOUND,
    "forbidden": HTTPStatus.FORBIDDEN,
    "invalid_request": HTTPStatus.BAD_REQUEST,
    "busy": HTTPStatus.SERVICE_UNAVAILABLE,
    "unavailable": HTTPStatus.SERVICE_UNAVAILABLE,
}


def _when(ts: float | None) -> str:
    if not ts:
        return "—"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _ago(ts: float | None) -> str:
    if not ts:
        return "—"
    seconds = max(0.0, dt.datetime.now().timestamp() - ts)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


def _pretty(value: Any) -> str:
    return json.dumps(msgspec.to_builtins(value), indent=2, sort_keys=True, default=str)


class Form:
    """A posted form's fields (the first value of each), read and CSRF-checked."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self._fields = fields

    def get(self, name: str, default: str = "") -> str:
        values = self._fields.get(name)
        return values[0] if values else default

    def optional(self, name: str) -> str | None:
        value = self.get(name).strip()
        return value or None


class FormError(Exception):
    """A post the page refuses before it reaches the daemon (too large, bad CSRF token)."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_form(request: Request, guard: Guard) -> Form:
    """Read an urlencoded form body under MAX_FORM_BYTES and check its CSRF token.

    Raises:
        FormError: the body is too large, not a form, or its CSRF token is not this
            session's.
    """
    if request.headers.get("content-type", "").split(";")[0].strip() != (
        "application/x-www-form-urlencoded"
    ):
        raise FormError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "a form post is expected")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "the form is too large")
    try:
        fields = parse_qs(
            body.decode("utf-8"),
            keep_blank_values=True,
            max_num_fields=_MAX_FIELDS,
            strict_parsing=False,
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormError(HTTPStatus.BAD_REQUEST, f"unreadable form: {exc}") from exc
    form = Form(fields)
    session = request.scope.get("state", {}).get("ui_session", "")
    if not session or not hmac.compare_digest(form.get(CSRF_FIELD), guard.csrf_for(session)):
        raise FormError(
            HTTPStatus.FORBIDDEN, "the form's CSRF token is missing or not this session's"
        )
    return form


class Pages:
    """The template environment and the page wrapper every route renders through."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.env = Environment(
            loader=PackageLoader("recall_client.ui", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(when=_when, ago=_ago, duration=_duration, pretty=_pretty)
        self.env.globals.update(sparkline=sparkline, urlencode=urlencode)

    def render(
        self,
        request: Request,
        template: str,
        status: int = HTTPStatus.OK,
        **context: Any,
    ) -> HTMLResponse:
        session = request.scope.get("state", {}).get("ui_session", "")
        html = self.env.get_template(template).render(
            request=request,
            path=request.url.path,
            csrf=self.guard.csrf_for(session) if session else "",
            **context,
        )
        return HTMLResponse(html, status_code=status)

    def handle(
        self, route: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """Wrap a route: the daemon's typed errors and refused forms become an error page."""

        async def wrapped(request: Request) -> Response:
            try:
                return await route(request)
            except RemoteError as exc:
                status = _STATUS_OF.get(exc.code, HTTPStatus.INTERNAL_SERVER_ERROR)
                return self.render(
                    request, "error.html", status, code=exc.code, message=exc.message
                )
            except DaemonUnavailable as exc:
                return self.render(
                    request,
                    "error.html",
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    code="unavailable",
                    message=str(exc),
                )
            except FormError as exc:
                return self.render(
                    request, "error.html", exc.status, code="refused", message=str(exc)
                )

        wrapped.__name__ = route.__name__
        return wrapped
