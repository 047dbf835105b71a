"""The overview: daemon state, model, actors, latency, records, agents, live.

The page renders the latest sample at once; its script then listens to ``/events`` and
swaps in the same fragment, rendered on the server, at each new sample.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .context import UI

__all__ = ["routes"]

# An open event stream ends after this long; the browser's EventSource reconnects by itself,
# so a stream never outlives a forgotten tab by much.
_STREAM_S = 300.0


def routes(ui: UI) -> list[Route]:
    def fragment(request: Request) -> str:
        return ui.pages.env.get_template("overview_live.html").render(
            report=ui.telemetry.report,
            error=ui.telemetry.error,
            series=ui.telemetry.series,
            request=request,
        )

    async def overview(request: Request) -> Response:
        if ui.telemetry.report is None:
            await ui.telemetry.poll()
        return ui.pages.render(request, "overview.html", live=fragment(request))

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            with anyio.move_on_after(_STREAM_S):
                while True:
                    await ui.telemetry.next()
                    lines = fragment(request).splitlines() or [""]
                    yield "event: overview\n" + "".join(f"data: {line}\n" for line in lines) + "\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return [
        Route("/", ui.pages.handle(overview), name="overview"),
        Route("/events", events, name="events"),
    ]
