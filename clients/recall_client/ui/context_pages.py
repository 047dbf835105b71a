"""Sessions: what the context hooks injected into each agent session, and what became of it.

Read with context_log over the page's home connection: one workspace (its own, or another's
with admin:workspace) or every workspace, every agent's only when the page holds
admin:workspace, as the work page reads episodes. A memory's outcome is its use's as it
stands now ("injected" until the agent, or a person, said what became of it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import protocol as p
from .context import ALL, UI, workspace_of
from .injected import current
from .render import FormError

__all__ = ["routes"]

# context_log's own bound on a page.
_INJECTIONS = 100


@dataclass(slots=True)
class Session:
    """One host session's injections on a page of the log (newest first)."""

    workspace: str
    id: str
    injections: list[p.ContextInjection] = field(default_factory=list)

    @property
    def agents(self) -> list[str]:
        return sorted({e.agent for e in self.injections})

    @property
    def first_ts(self) -> float:
        return min(e.ts for e in self.injections)

    @property
    def last_ts(self) -> float:
        return max(e.ts for e in self.injections)

    @property
    def items(self) -> int:
        return sum(len(e.items) for e in self.injections)

    @property
    def outcomes(self) -> Counter[str]:
        """Memories injected, by their outcome now."""
        return Counter(i.outcome for e in self.injections for i in e.items if i.outcome)


def sessions(injections: list[p.ContextInjection]) -> list[Session]:
    """The injections grouped by (workspace, session), the newest session first."""
    found: dict[tuple[str, str], Session] = {}
    for e in injections:
        key = (e.workspace, e.session_id)
        found.setdefault(key, Session(*key)).injections.append(e)
    return sorted(found.values(), key=lambda s: s.last_ts, reverse=True)


async def _read(
    ui: UI, ws: str, *, before: str | None, session: str | None = None
) -> p.ContextLogResult:
    """A page of the log of ``ws`` (ALL: every workspace's), every agent's with
    admin:workspace."""
    every = ws == ALL
    return await ui.link.call(
        p.ContextLog(
            workspace=None if every else ws,
            all_workspaces=every,
            any_caller=await ui.link.is_admin(),
            session_id=session,
            before=before,
            limit=_INJECTIONS,
        ),
        p.ContextLogResult,
    )


def routes(ui: UI) -> list[Route]:
    async def listing(request: Request) -> Response:
        ws = workspace_of(request, ui)
        log = await _read(ui, ws, before=request.query_params.get("before") or None)
        return ui.pages.render(
            request,
            "context_sessions.html",
            ws=ws,
            admin=await ui.link.is_admin(),
            sessions=sessions(log.injections),
            log=log,
            limit=_INJECTIONS,
        )

    async def session(request: Request) -> Response:
        ws = workspace_of(request, ui)
        sid = request.query_params.get("session", "").strip()
        if not sid:
            raise FormError(HTTPStatus.BAD_REQUEST, "name the session (?session=...)")
        log = await _read(ui, ws, before=request.query_params.get("before") or None, session=sid)
        return ui.pages.render(
            request,
            "context_session.html",
            ws=ws,
            sid=sid,
            # Oldest first, as the session went (a page is the newest of what is left).
            injections=log.injections[::-1],
            now=await current(ui, log.injections),
            log=log,
        )

    handle = ui.pages.handle
    return [
        Route("/sessions", handle(listing), name="sessions"),
        Route("/sessions/show", handle(session), name="context_session"),
    ]
