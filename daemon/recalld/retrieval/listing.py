"""memory_list and experience_list: browsing newest first, under the searches' reader contracts.

No query and no ranking: a page is the newest records under the filters, by ``ts`` (when the
remembered thing happened) and then by public id, both descending. The cursor a reply hands
on (``next_before``) is the ``ts`` and id of the last item it returned, ``"<ts>:<id>"``; the
next page is what sorts strictly after it, so a record stored meanwhile never shifts a page
(one newer than the first page shows up on the next first page, not in the middle).

memory_list runs under memory_search's contract (:func:`memory_rows.memory_filter`: the
workspace and its global memories, or every workspace; eligible, live, unexpired) and judges
staleness as memory_search and memory_show do (:func:`staleness.staleness`).
experience_list runs under search_experience's: the caller's workspace's experiences.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from recall_client import protocol as p

from ..domain import git_history
from ..domain.policy import subject_key
from ..domain.principal import Principal
from ..errors import RecallError
from ..store.port import Filter, MemoryRow, Reader
from .experience_reader import experience_info, lesson_infos
from .memory_rows import contested_slots, core_of, memory_filter
from .staleness import Checkouts, Staleness, staleness
from .use_outcomes import use_outcomes

__all__ = ["MAX_EXAMINED", "cursor", "experiences", "memories", "parse_cursor"]

# Memories one memory_list request examines at most. Without a staleness filter a page
# examines limit + 1; with one, rows it leaves out are examined too, each costing a check of
# its cited paths and a (budgeted, cached) count of commits, so a verdict that few memories
# have must not make one request walk the whole store: the page then ends early, possibly
# empty, with next_before where the examination stopped.
MAX_EXAMINED = 1_000
# Rows fetched at a time while a staleness filter leaves some out.
STALE_BATCH = 100
# Description (and strategy and file) text one experience_list page carries at most, so a
# page of long descriptions stays well under the frame limit (at least one is always sent).
EXPERIENCE_PAGE_CHARS = 1024 * 1024
# Lessons one experience_list page carries at most (the most confident first).
MAX_PAGE_LESSONS = 200


def cursor(ts: float, record_id: str) -> str:
    """The cursor after the record with this ``ts`` and id (``repr`` keeps the float exact)."""
    return f"{ts!r}:{record_id}"


def parse_cursor(value: str | None) -> tuple[float, str] | None:
    """(ts, id) of a cursor; None for none.

    Raises:
        RecallError: ``invalid_request`` for a cursor no reply handed out.
    """
    if value is None:
        return None
    ts, _, record_id = value.partition(":")
    try:
        when = float(ts)
    except ValueError:
        when = float("nan")
    if not record_id or when != when or when in (float("inf"), float("-inf")):
        raise RecallError("invalid_request", f"before {value!r} is not a cursor from a reply")
    return when, record_id


# --------------------------------------------------------------------------- memories


def memories(
    reader: Reader, who: Principal, req: p.MemoryList, *, every_count: bool
) -> p.MemoryListResult:
    """One memory_list page. ``every_count``: count every workspace's memories (the caller
    has admin:workspace), else only its own.

    Raises:
        RecallError: ``invalid_request`` for a bad cursor.
    """
    now = time.time()
    visible = memory_filter(
        now,
        None if req.all_workspaces else who.workspace,
        tags=req.tags,
        sources=req.sources,
        client=req.client,
        model=req.model,
        agent=req.agent,
        since=req.since,
        until=req.until,
    )
    before = parse_cursor(req.before)
    subject = subject_key(req.subject) if req.subject is not None else None
    kept: list[tuple[MemoryRow, Staleness]] = []
    # History walking this request may do for all its memories together (see _hits).
    budget = git_history.WalkBudget()
    checkouts = Checkouts(reader, who)
    examined = 0
    next_before: str | None = None
    # Bounded: every pass examines at least one more row or ends, and no more than
    # MAX_EXAMINED rows are examined in all.
    while True:
        room = MAX_EXAMINED - examined
        wanted = req.limit - len(kept) + 1 if req.staleness is None else STALE_BATCH
        batch = min(room, wanted)
        rows = reader.memories.newest_page(
            visible,
            before=before,
            limit=batch,
            kind=req.kind,
            subject_key=subject,
            current_only=not req.include_superseded,
        )
        examined += len(rows)
        outcomes = use_outcomes(reader, rows, now)
        full = False
        for row in rows:
            if len(kept) == req.limit:
                full = True
                break
            judged = staleness(
                row,
                now,
                checkouts,
                unresolved_contradiction=outcomes[row.rowid].unresolved_contradiction,
                budget=budget,
            )
            before = (row.ts, row.id)
            if req.staleness is None or judged.verdict == req.staleness:
                kept.append((row, judged))
        if full:
            last = kept[-1][0]
            next_before = cursor(last.ts, last.id)
            break
        if len(rows) < batch:
            break  # the store has no more
        if examined >= MAX_EXAMINED:
            assert before is not None
            next_before = cursor(*before)
            break
    contested = contested_slots(reader, [row for row, _ in kept], now)
    counted = Filter(kind="memory", now=now, workspace=None if every_count else who.workspace)
    return p.MemoryListResult(
        items=[_item(row, judged, contested) for row, judged in kept],
        next_before=next_before,
        workspaces=reader.memories.workspace_counts(counted),
    )


def _item(
    row: MemoryRow, judged: Staleness, contested: set[tuple[str | None, str | None]]
) -> p.MemoryItem:
    truncated = len(row.text) > p.LIST_TEXT
    return p.MemoryItem(
        **core_of(row, judged, contested),
        text=row.text[: p.LIST_TEXT] if truncated else row.text,
        truncated=truncated,
        ts=row.ts,
        created_at=row.created_at,
        updated_at=row.updated_at,
        agent=row.agent,
        client=row.writer_client,
        model=row.writer_model,
        workspace=row.workspace,
        global_scope=row.origin is None,
        eligibility=row.eligibility,
        trust=row.trust,
    )


# --------------------------------------------------------------------------- experiences


def experiences(reader: Reader, workspace: str, req: p.ExperienceList) -> p.ExperienceListResult:
    """One experience_list page of ``workspace``, with the live lessons its experiences
    support. Raises RecallError(invalid_request) for a bad cursor."""
    visible = Filter(kind="experience", now=time.time(), workspace=workspace)
    rowids = reader.experiences.newest_page(
        visible,
        before=parse_cursor(req.before),
        limit=req.limit + 1,
        status=req.status,
        task_class=req.task_class,
    )
    rows = reader.experiences.rows(rowids[: req.limit])
    shown: list[int] = []
    size = 0
    for rowid in rowids[: req.limit]:
        row = rows.get(rowid)
        if row is None:
            continue
        own = row.fields
        size += len(row.text) + len(own.strategy or "") + sum(len(f) for f in own.files)
        if shown and size > EXPERIENCE_PAGE_CHARS:
            break
        shown.append(rowid)
    more = len(shown) < len(rowids)
    last = rows[shown[-1]] if shown else None
    return p.ExperienceListResult(
        experiences=[experience_info(rows[rowid], 0.0, None) for rowid in shown],
        lessons=_lessons(reader, shown),
        next_before=cursor(last.ts, last.id) if more and last is not None else None,
    )


def _lessons(reader: Reader, experience_rowids: Sequence[int]) -> list[p.LessonInfo]:
    """The surfacing lessons of these experiences, each once, the most confident first."""
    if not experience_rowids:
        return []
    linked = sorted({lesson for lesson, _ in reader.experiences.links(experience_rowids)})
    infos = list(lesson_infos(reader, linked).values())
    infos.sort(key=lambda x: (-x.confidence, -x.support, x.id))
    return infos[:MAX_PAGE_LESSONS]
