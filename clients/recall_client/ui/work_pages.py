"""Work: sessions as timelines of their episodes, and a session's verdict.

Episodes are read with work_search (no query: the newest first) over the connection of the
workspace, with ``any_caller`` only when the page holds admin:workspace, as for recallctl.
Pending and low-trust episodes are shown too, marked, since a person is auditing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import protocol as p
from .context import ALL, UI, after_post, parse_float, workspace_of
from .render import FormError, read_form

__all__ = ["routes"]

# work_search's own bound on k.
_EPISODES = 200
# A session's name (its first prompt) is cut to this much on the list.
_NAME_CHARS = 90


@dataclass(slots=True)
class Session:
    id: str
    episodes: list[p.WorkEpisode] = field(default_factory=list)

    @property
    def last_ts(self) -> float:
        return max(e.ts for e in self.episodes)

    @property
    def first_ts(self) -> float:
        return min(e.ts for e in self.episodes)

    @property
    def failures(self) -> int:
        return sum(1 for e in self.episodes if e.status not in p.SETTLED_STATUSES)

    @property
    def name(self) -> str:
        """The session's first prompt, else the start of its id."""
        for e in sorted(self.episodes, key=lambda e: e.ts):
            if e.episode_type == "prompt" and not e.blocked and isinstance(e.summary, str):
                # The capture labels a prompt's summary "prompt: ..."; the label is no name.
                text = e.summary.removeprefix("prompt: ").strip()
                if text:
                    return text if len(text) <= _NAME_CHARS else text[: _NAME_CHARS - 1] + "…"
        return self.id[:8]

    @property
    def verdict(self) -> float | None:
        for e in self.episodes:
            if isinstance(e.task_result, float):
                return e.task_result
        return None


def timeline(episodes: list[p.WorkEpisode]) -> list[p.WorkEpisode]:
    """A session's episodes in their ``prev_id`` chain order, oldest first.

    The chain is followed from its head where it is whole; an episode whose predecessor is
    not among these (outside the page, or forgotten) starts a new run, so a broken chain
    still shows every episode once, in time order between runs.
    """
    by_id = {e.id: e for e in episodes}
    following: dict[str, p.WorkEpisode] = {}
    for e in episodes:
        prev = e.prev_id if isinstance(e.prev_id, str) else None
        if prev in by_id and prev not in following:
            following[prev] = e
    chained = {e.id for e in following.values()}
    heads = sorted((e for e in episodes if e.id not in chained), key=lambda e: e.ts)
    out: list[p.WorkEpisode] = []
    seen: set[str] = set()
    for head in heads:
        step: p.WorkEpisode | None = head
        while step is not None and step.id not in seen:
            seen.add(step.id)
            out.append(step)
            step = following.get(step.id)
    # Anything left sits on a cycle (cannot happen from the daemon, but never loop on it).
    out += sorted((e for e in episodes if e.id not in seen), key=lambda e: e.ts)
    return out


def routes(ui: UI) -> list[Route]:
    async def search(
        ws: str, session_id: str | None = None, query: str | None = None
    ) -> p.WorkSearchResult:
        return await ui.link.call(
            p.WorkSearch(
                query=query,
                session_id=session_id,
                k=_EPISODES,
                min_trust=0.0,
                include_pending=True,
                any_caller=await ui.link.is_admin(),
                response_format="detailed",
            ),
            p.WorkSearchResult,
            workspace=None if ws == ALL else ws,
        )

    async def work(request: Request) -> Response:
        ws = workspace_of(request, ui)
        if ws == ALL:
            ws = ui.link.home
        query = request.query_params.get("q", "").strip() or None
        found = await search(ws, query=query)
        sessions: dict[str, Session] = {}
        for e in found.results:
            sid = e.session_id if isinstance(e.session_id, str) else "(no session)"
            sessions.setdefault(sid, Session(sid)).episodes.append(e)
        ordered = sorted(sessions.values(), key=lambda s: s.last_ts, reverse=True)
        return ui.pages.render(
            request,
            "work.html",
            ws=ws,
            sessions=ordered,
            found=found,
            query=query or "",
            limit=_EPISODES,
        )

    async def session(request: Request) -> Response:
        ws = workspace_of(request, ui)
        sid = request.path_params["session_id"]
        found = await search(ws, session_id=sid)
        return ui.pages.render(
            request,
            "session.html",
            ws=ws,
            sid=sid,
            name=Session(sid, found.results).name,
            episodes=timeline(found.results),
            found=found,
            notice=request.query_params.get("done", ""),
        )

    async def verdict(request: Request) -> Response:
        sid = request.path_params["session_id"]
        form = await read_form(request, ui.guard)
        ws = form.get("ws") or ui.link.home
        value = parse_float(form.get("task_result"), "the verdict")
        if value is None or not 0 <= value <= 1:
            raise FormError(
                HTTPStatus.BAD_REQUEST, "the verdict is a number from 0 (failed) to 1 (succeeded)"
            )
        done = await ui.link.call(
            p.WorkResult(task_result=value, session_id=sid, any_caller=await ui.link.is_admin()),
            p.VerdictSet,
            workspace=ws,
        )
        notice = f"verdict {value:g} set on {done.updated} of {done.matched} episodes"
        return after_post(
            f"/work/session/{quote(sid, safe='')}?{urlencode({'ws': ws, 'done': notice})}"
        )

    handle = ui.pages.handle
    return [
        Route("/work", handle(work), name="work"),
        Route("/work/session/{session_id:path}", handle(session), methods=["GET"], name="session"),
        Route("/work/verdict/{session_id:path}", handle(verdict), methods=["POST"]),
    ]
