"""What every page's routes share: the guard, the templates, the daemon link, the telemetry."""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import RedirectResponse

from .guard import Guard
from .link import DaemonLink
from .live import Telemetry
from .render import FormError, Pages

__all__ = ["ALL", "UI", "after_post", "parse_float", "workspace_of"]

# The workspace choice that means every workspace (admin:workspace).
ALL = "*"


@dataclass(frozen=True, slots=True)
class UI:
    guard: Guard
    pages: Pages
    link: DaemonLink
    telemetry: Telemetry


def workspace_of(request: Request, ui: UI) -> str:
    """The workspace a view is about: ``?ws=`` (ALL for every one), else the page's home."""
    value = request.query_params.get("ws", "").strip()
    return value or ui.link.home


def after_post(url: str) -> RedirectResponse:
    """Post/redirect/get: a reload after a write does not send it again."""
    return RedirectResponse(url, status_code=303)


def parse_float(raw: str | None, what: str) -> float | None:
    """A number from a form or query field; empty is None.

    Raises:
        FormError: not a number.
    """
    if raw is None or not raw.strip():
        return None
    try:
        return float(raw)
    except ValueError:
        raise FormError(HTTPStatus.BAD_REQUEST, f"{what} must be a number, not {raw!r}") from None
