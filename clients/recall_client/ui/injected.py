"""What a session's injected items say now, for the page of a session's context.

The log keeps each item's id, section and flags, not its text (a forgotten record's text
must go with it), so the text shown is the record's as the store holds it when the page is
read: a memory by memory_show, an episode among its workspace's newest (work_search), a
lesson among the live lessons of the newest experiences (experience_list). Each has a link
to the page that shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlencode

from .. import protocol as p
from ..client import RemoteError
from .context import UI

__all__ = ["Current", "current"]

# Memories read one by one per page at most (a page of the log is 100 injections).
_MEMORIES = 200
# work_search's and experience_list's own bounds.
_EPISODES = 200
_EXPERIENCES = 100


@dataclass(slots=True, frozen=True)
class Current:
    """An item as the store holds it now; ``text`` None: not found (forgotten, refused to
    this page, or out of what it reads)."""

    text: str | None
    href: str | None
    # A memory's last edit (unix seconds), to tell an item changed since it was injected.
    updated_at: float | None = None
    # Why there is no text, when the daemon said.
    missing: str | None = None


def _memory_href(memory_id: str) -> str:
    return f"/memory/{quote(memory_id, safe='')}"


async def _memory(ui: UI, workspace: str, memory_id: str) -> Current:
    href = _memory_href(memory_id)
    try:
        shown = await ui.link.call(p.MemoryShow(memory_id=memory_id), p.MemoryShown, workspace)
    except RemoteError as exc:
        if exc.code == "not_found":
            return Current(None, href, missing="forgotten: its text is gone")
        if exc.code == "forbidden":
            return Current(None, href, missing=f"not readable by this page: {exc.message}")
        raise
    return Current(shown.memory.text, href, shown.memory.updated_at)


async def _episodes(ui: UI, workspace: str, admin: bool) -> dict[str, Current]:
    found = await ui.link.call(
        p.WorkSearch(
            k=_EPISODES,
            min_trust=0.0,
            include_pending=True,
            any_caller=admin,
            response_format="detailed",
        ),
        p.WorkSearchResult,
        workspace=workspace,
    )
    out: dict[str, Current] = {}
    for e in found.results:
        session = e.session_id if isinstance(e.session_id, str) else None
        text = e.summary if isinstance(e.summary, str) else None
        href = (
            f"/work/session/{quote(session, safe='')}?{urlencode({'ws': workspace})}#{e.id}"
            if session
            else None
        )
        out[e.id] = Current(text, href)
    return out


async def _lessons(ui: UI, workspace: str) -> dict[str, Current]:
    listing = await ui.link.call(
        p.ExperienceList(limit=_EXPERIENCES), p.ExperienceListResult, workspace=workspace
    )
    return {
        x.id: Current(x.text, f"/experiences?{urlencode({'ws': workspace})}#{x.id}")
        for x in listing.lessons
    }


async def current(ui: UI, injections: list[p.ContextInjection]) -> dict[tuple[str, str], Current]:
    """Each item of ``injections`` as it is now, by (workspace, item id)."""
    admin = await ui.link.is_admin()
    out: dict[tuple[str, str], Current] = {}
    wanted: dict[str, set[str]] = {}
    read = 0
    for e in injections:
        for i in e.items:
            key = (e.workspace, i.id)
            if key in out:
                continue
            if i.section == "failures" or i.section == "lessons":
                wanted.setdefault(e.workspace, set()).add(i.section)
            elif read < _MEMORIES:
                read += 1
                out[key] = await _memory(ui, e.workspace, i.id)
            else:
                out[key] = Current(
                    None, _memory_href(i.id), missing=f"not read: a page reads {_MEMORIES} at most"
                )
    for ws, sections in wanted.items():
        found: dict[str, Current] = {}
        if "failures" in sections:
            found |= await _episodes(ui, ws, admin)
        if "lessons" in sections:
            found |= await _lessons(ui, ws)
        out |= {(ws, k): v for k, v in found.items()}
    return out
