"""Memories: the list of a workspace (or all), search, one memory (with the sessions the
context hooks injected it into), and what a person may do to it.

Every action is the daemon's own request (memory_update, memory_verify, forget,
memory_fact_resolve, memory_record_use, memory_share), sent over the connection of the
memory's workspace, so the daemon checks it exactly as it checks an agent's.
"""

from __future__ import annotations

import datetime as dt
from http import HTTPStatus
from typing import Literal, cast, get_args
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import protocol as p
from .context import ALL, UI, after_post, parse_float, workspace_of
from .render import FormError, read_form

__all__ = ["routes"]

_KINDS = get_args(p.MemoryKind)
_STALENESS = get_args(p.StalenessVerdict)
_OUTCOMES = get_args(p.Outcome)
_MODES = ("hybrid", "keyword", "bm25")
# The sessions a memory's page lists it was injected into, at most (the newest).
_INJECTIONS = 20


def _day(raw: str, *, end: bool = False) -> float | None:
    """A ``YYYY-MM-DD`` field as unix seconds (the day's start, or its end with ``end``)."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        day = dt.datetime.strptime(raw, "%Y-%m-%d")
    except ValueError:
        raise FormError(HTTPStatus.BAD_REQUEST, f"{raw!r} is not a date (YYYY-MM-DD)") from None
    return (day + dt.timedelta(days=1)).timestamp() - 1e-3 if end else day.timestamp()


def _labels(raw: str) -> list[str]:
    """Comma-separated labels, blanks dropped (at most 32: the protocol bounds them again)."""
    return [part.strip() for part in raw.split(",") if part.strip()][:32]


def _choice(raw: str, allowed: tuple[str, ...]) -> str | None:
    if not raw:
        return None
    if raw not in allowed:
        raise FormError(HTTPStatus.BAD_REQUEST, f"{raw!r} is not one of {', '.join(allowed)}")
    return raw


def _tri(raw: str) -> bool | None:
    """A tri-state select: "" follows the daemon's config, "on" / "off" override it."""
    if raw not in ("", "on", "off"):
        raise FormError(HTTPStatus.BAD_REQUEST, f"{raw!r} is not on, off or empty")
    return None if raw == "" else raw == "on"


def routes(ui: UI) -> list[Route]:
    async def memories(request: Request) -> Response:
        q = request.query_params
        ws = workspace_of(request, ui)
        every = ws == ALL
        where = None if every else ws
        query = q.get("q", "").strip()
        kind = cast("p.MemoryKind | None", _choice(q.get("kind", ""), _KINDS))
        tags = _labels(q.get("tag", ""))
        sources = _labels(q.get("source", ""))
        client = q.get("client", "").strip() or None
        staleness = cast("p.StalenessVerdict | None", _choice(q.get("staleness", ""), _STALENESS))
        listing = await ui.link.call(
            p.MemoryList(
                workspace=where,
                all_workspaces=every,
                kind=kind,
                tags=tags,
                sources=sources,
                agent=q.get("agent", "").strip() or None,
                client=client,
                since=_day(q.get("since", "")),
                until=_day(q.get("until", ""), end=True),
                staleness=staleness,
                before=q.get("before") or None,
                limit=50,
            ),
            p.MemoryListResult,
        )
        found: p.MemorySearchResult | None = None
        if query:
            mode = cast(
                "Literal['keyword', 'bm25', 'hybrid']", _choice(q.get("mode") or "hybrid", _MODES)
            )
            found = await ui.link.call(
                p.MemorySearch(
                    query=query,
                    limit=50,
                    mode=mode,
                    workspace=where,
                    auto_scope=not every,
                    tags=tags,
                    sources=sources,
                    client=client,
                    scopes=_labels(q.get("scope", "")),
                    bands=_labels(q.get("band", "")),
                    episodes=_labels(q.get("episode", "")),
                    model=q.get("model", "").strip() or None,
                    min_score=parse_float(q.get("min_score"), "the minimum score"),
                    bm25=_tri(q.get("bm25", "")),
                    rerank=_tri(q.get("rerank", "")),
                    disable_recency_boost=q.get("no_recency") == "1",
                    expand_top=q.get("expand_top") == "1",
                    since_prior_session=q.get("since_prior") == "1",
                    explain=q.get("explain") == "1",
                    verbose=True,
                ),
                p.MemorySearchResult,
            )
        # The calibration this workspace's searches rank by, learned from use.
        relevance = (
            None
            if every
            else await ui.link.call(p.RelevanceShow(workspace=where), p.RelevanceShown)
        )
        return ui.pages.render(
            request,
            "memories.html",
            ws=ws,
            every=every,
            relevance=relevance,
            admin=await ui.link.is_admin(),
            workspaces=sorted({*listing.workspaces, ui.link.home}),
            listing=listing,
            found=found,
            query=query,
            q=q,
            kinds=_KINDS,
            staleness=_STALENESS,
            modes=_MODES,
        )

    async def memory(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        shown = await ui.link.call(p.MemoryShow(memory_id=memory_id), p.MemoryShown)
        # The context hooks' injections of it: every workspace's and agent's with
        # admin:workspace (a global memory is injected anywhere), else the page's own.
        admin = await ui.link.is_admin()
        injected = await ui.link.call(
            p.ContextLog(
                memory_id=memory_id, all_workspaces=admin, any_caller=admin, limit=_INJECTIONS
            ),
            p.ContextLogResult,
        )
        # Sharing needs a team database: on a local store it could only fail.
        db = (await ui.link.call(p.Status(), p.StatusResult)).report.database
        return ui.pages.render(
            request,
            "memory.html",
            m=shown.memory,
            admin=admin,
            team=db is not None and db.engine == "postgresql",
            injected=injected,
            outcomes=_OUTCOMES,
            notice=request.query_params.get("done", ""),
        )

    def back(memory_id: str, done: str) -> Response:
        return after_post(f"/memory/{quote(memory_id)}?done={quote(done)}")

    async def edit(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        form = await read_form(request, ui.guard)
        text = form.get("text").strip()
        if not text:
            raise FormError(
                HTTPStatus.BAD_REQUEST, "a memory's text cannot be empty (forget it instead)"
            )
        await ui.link.call(
            p.MemoryUpdate(
                memory_id=memory_id,
                text=text,
                tags=_labels(form.get("tags")),
                source=form.optional("source"),
            ),
            p.MemoryChanged,
        )
        return back(memory_id, "edited")

    async def verify(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        form = await read_form(request, ui.guard)
        await ui.link.call(
            p.MemoryVerify(memory_id=memory_id, note=form.optional("note")), p.MemoryChanged
        )
        return back(memory_id, "verified")

    async def outcome(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        form = await read_form(request, ui.guard)
        chosen = _choice(form.get("outcome"), _OUTCOMES)
        if chosen is None:
            raise FormError(HTTPStatus.BAD_REQUEST, "choose an outcome")
        await ui.link.call(
            p.MemoryRecordUse(
                memory_ids=[memory_id],
                outcome=cast("p.Outcome", chosen),
                note=form.optional("note"),
            ),
            p.UseRecorded,
        )
        return back(memory_id, f"outcome {chosen} recorded")

    async def forget_confirm(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        shown = await ui.link.call(p.MemoryShow(memory_id=memory_id), p.MemoryShown)
        return ui.pages.render(
            request,
            "confirm.html",
            title="Forget this memory?",
            what=shown.memory.text,
            action=f"/memory/{quote(memory_id)}/forget",
            cancel=f"/memory/{quote(memory_id)}",
            button="Forget it",
        )

    async def forget(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        await read_form(request, ui.guard)
        gone = await ui.link.call(p.Forget(record_id=memory_id), p.Forgotten)
        return after_post(f"/memories?forgotten={quote(gone.record_id)}")

    async def share_review(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        # The daemon's preview, not the page's: redaction runs again there, and a record
        # that is not the caller's own is refused there.
        preview = await ui.link.call(p.MemoryShare(record_id=memory_id), p.MemoryShared)
        return ui.pages.render(
            request,
            "share.html",
            r=preview.record,
            action=f"/memory/{quote(memory_id)}/share",
            cancel=f"/memory/{quote(memory_id)}",
        )

    async def share(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        await read_form(request, ui.guard)
        await ui.link.call(p.MemoryShare(record_id=memory_id, confirm=True), p.MemoryShared)
        return back(memory_id, "shared with the team")

    async def resolve(request: Request) -> Response:
        form = await read_form(request, ui.guard)
        memory_id = form.get("memory_id")
        workspace = form.get("workspace") or None
        subject = form.get("subject")
        choice = form.get("choice")
        if choice == "accept":
            req = p.MemoryFactResolve(subject=subject, accept=True)
        elif choice == "keep_current":
            req = p.MemoryFactResolve(subject=subject, accept=False)
        elif choice.startswith("keep:"):
            req = p.MemoryFactResolve(subject=subject, keep_id=choice.removeprefix("keep:"))
        else:
            raise FormError(HTTPStatus.BAD_REQUEST, "choose which value of the fact holds")
        resolved = await ui.link.call(req, p.FactResolved, workspace=workspace)
        target = resolved.current or memory_id
        return back(
            target, "fact resolved" if resolved.resolved else f"not resolved: {resolved.reason}"
        )

    handle = ui.pages.handle
    return [
        Route("/memories", handle(memories), name="memories"),
        Route("/memory/{memory_id}", handle(memory), name="memory"),
        Route("/memory/{memory_id}/edit", handle(edit), methods=["POST"]),
        Route("/memory/{memory_id}/verify", handle(verify), methods=["POST"]),
        Route("/memory/{memory_id}/outcome", handle(outcome), methods=["POST"]),
        Route("/memory/{memory_id}/forget", handle(forget_confirm), methods=["GET"]),
        Route("/memory/{memory_id}/forget", handle(forget), methods=["POST"]),
        Route("/memory/{memory_id}/share", handle(share_review), methods=["GET"]),
        Route("/memory/{memory_id}/share", handle(share), methods=["POST"]),
        Route("/facts/resolve", handle(resolve), methods=["POST"]),
    ]
