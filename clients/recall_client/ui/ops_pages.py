"""Operations: workspace approvals, agent credentials, doctor, export. All need admin:workspace.

The daemon decides: without the admin token the page shows its ``forbidden`` answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from http import HTTPStatus
from urllib.parse import urlencode

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .. import protocol as p
from .context import UI, after_post
from .render import FormError, read_form

__all__ = ["routes"]

_json = msgspec.json.Encoder()
_EXPORT_KINDS = ("all", "memory", "episode", "experience", "lesson")


def routes(ui: UI) -> list[Route]:
    async def operations(request: Request) -> Response:
        listing = await ui.link.call(p.WorkspaceList(), p.WorkspaceListResult)
        agents = await ui.link.call(p.AgentList(), p.AgentListResult)
        doctor: p.DoctorResult | None = None
        if request.query_params.get("doctor") == "1":
            doctor = await ui.link.call(p.Doctor(), p.DoctorResult)
        return ui.pages.render(
            request,
            "operations.html",
            listing=listing,
            agents=agents,
            doctor=doctor,
            kinds=_EXPORT_KINDS,
            home=ui.link.home,
            notice=request.query_params.get("done", ""),
        )

    async def approval(request: Request) -> Response:
        form = await read_form(request, ui.guard)
        workspace = form.get("workspace").strip()
        # A checkout's absolute path (the daemon derives its identity) or an identity as
        # listed (github.com/acme/app); never a path relative to wherever the page runs.
        if not workspace or workspace.startswith("."):
            raise FormError(
                HTTPStatus.BAD_REQUEST, "a workspace is an absolute path or an identity"
            )
        action = request.path_params["action"]
        if action not in ("approve", "revoke"):
            raise FormError(HTTPStatus.NOT_FOUND, f"no action {action!r}")
        if action == "approve":
            changed = await ui.link.call(
                p.WorkspaceApprove(workspace=workspace), p.WorkspaceChanged
            )
        else:
            changed = await ui.link.call(p.WorkspaceRevoke(workspace=workspace), p.WorkspaceChanged)
        state = "approved" if changed.approved else "not approved"
        notice = f"{changed.workspace} {state}" + ("" if changed.changed else " (already)")
        return after_post(f"/operations?{urlencode({'done': notice})}")

    async def export(request: Request) -> Response:
        kind = request.query_params.get("kind", "all")
        if kind not in _EXPORT_KINDS:
            raise FormError(HTTPStatus.BAD_REQUEST, f"kind is one of {', '.join(_EXPORT_KINDS)}")
        workspace = request.query_params.get("ws", "").strip() or None
        # The first page is read before the response starts, so a refusal is a page, not a
        # truncated download.
        first = await ui.link.call(
            p.Export(workspace=workspace, kind=None if kind == "all" else kind), p.ExportPage
        )

        async def rows() -> AsyncIterator[bytes]:
            page = first
            while True:
                yield b"".join(_json.encode(r) + b"\n" for r in page.records)
                if page.next_after is None:
                    return
                page = await ui.link.call(
                    p.Export(
                        after=page.next_after,
                        workspace=workspace,
                        kind=None if kind == "all" else kind,
                    ),
                    p.ExportPage,
                )

        return StreamingResponse(
            rows(),
            media_type="application/x-ndjson",
            headers={"content-disposition": 'attachment; filename="recalld-export.jsonl"'},
        )

    handle = ui.pages.handle
    return [
        Route("/operations", handle(operations), name="operations"),
        Route("/operations/workspace/{action:str}", handle(approval), methods=["POST"]),
        Route("/operations/export.jsonl", handle(export), name="export"),
    ]
