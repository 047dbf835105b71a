"""Experiences and lessons: the newest of a workspace, search, one experience, forget."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import protocol as p
from .context import ALL, UI, after_post, workspace_of
from .render import read_form

__all__ = ["routes"]


def _workspace(request: Request, ui: UI) -> str:
    ws = workspace_of(request, ui)
    # Experiences are read in one workspace at a time (the hello's).
    return ui.link.home if ws == ALL else ws


def routes(ui: UI) -> list[Route]:
    async def experiences(request: Request) -> Response:
        ws = _workspace(request, ui)
        query = request.query_params.get("q", "").strip()
        found: p.ExperienceSearchResult | None = None
        if query:
            found = await ui.link.call(
                p.SearchExperience(query=query, limit=20), p.ExperienceSearchResult, workspace=ws
            )
        listing = await ui.link.call(
            p.ExperienceList(before=request.query_params.get("before") or None, limit=20),
            p.ExperienceListResult,
            workspace=ws,
        )
        return ui.pages.render(
            request,
            "experiences.html",
            ws=ws,
            query=query,
            found=found,
            listing=listing,
            notice=request.query_params.get("done", ""),
        )

    async def experience(request: Request) -> Response:
        ws = _workspace(request, ui)
        record_id = request.path_params["record_id"]
        query = request.query_params.get("q", "").strip() or None
        node = await ui.link.call(
            p.ExplainNode(record_id=record_id, query=query), p.NodeExplained, workspace=ws
        )
        return ui.pages.render(request, "experience.html", ws=ws, node=node, query=query or "")

    async def forget_confirm(request: Request) -> Response:
        ws = _workspace(request, ui)
        record_id = request.path_params["record_id"]
        node = await ui.link.call(p.ExplainNode(record_id=record_id), p.NodeExplained, workspace=ws)
        return ui.pages.render(
            request,
            "confirm.html",
            title="Forget this experience?",
            what=node.experience.description,
            action=f"/experience/{quote(record_id)}/forget?{urlencode({'ws': ws})}",
            cancel=f"/experience/{quote(record_id)}?{urlencode({'ws': ws})}",
            button="Forget it",
        )

    async def forget(request: Request) -> Response:
        ws = _workspace(request, ui)
        record_id = request.path_params["record_id"]
        await read_form(request, ui.guard)
        gone = await ui.link.call(
            p.ForgetExperience(record_id=record_id), p.ExperienceForgotten, workspace=ws
        )
        notice = (
            f"forgot {gone.record_id}: {gone.lessons_weakened} lessons weakened, "
            f"{gone.lessons_retired} retired"
        )
        return after_post(f"/experiences?{urlencode({'ws': ws, 'done': notice})}")

    handle = ui.pages.handle
    return [
        Route("/experiences", handle(experiences), name="experiences"),
        Route("/experience/{record_id}", handle(experience), name="experience"),
        Route("/experience/{record_id}/forget", handle(forget_confirm), methods=["GET"]),
        Route("/experience/{record_id}/forget", handle(forget), methods=["POST"]),
    ]
