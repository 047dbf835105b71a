"""context_log: what the context hooks injected, newest first, a page at a time.

The caller's own log: its uid's, its workspace's and its agent's injections (another
workspace, every workspace or any agent once the edge has checked admin:workspace); in a
team database the rows are its database role's too, by row-level security. Pages go by the
listings' cursor (:func:`listing.cursor`): the ts and id of the last injection returned.
"""

from __future__ import annotations

from typing import cast

from recall_client import protocol as p

from ..domain.principal import Principal
from ..store.port import InjectionRow, Reader
from .listing import cursor, parse_cursor

__all__ = ["page"]


def page(reader: Reader, *, who: Principal, req: p.ContextLog) -> p.ContextLogResult:
    """One page of the log under ``req``'s filters.

    Raises:
        RecallError: ``invalid_request`` for a cursor no reply handed out.
    """
    before = parse_cursor(req.before)
    found = reader.context.injections(
        workspace=None if req.all_workspaces else who.workspace,
        uid=who.uid,
        agent=None if req.any_caller else who.agent,
        session=req.session_id,
        memory_id=req.memory_id,
        before=before,
        limit=req.limit + 1,  # one more: whether a next page exists
    )
    shown = found[: req.limit]
    more = len(found) > req.limit
    return p.ContextLogResult(
        injections=[_injection(row) for row in shown],
        next_before=cursor(shown[-1].ts, shown[-1].id) if more else None,
    )


def _injection(row: InjectionRow) -> p.ContextInjection:
    # The columns hold what the writer took from the protocol's own Literals.
    return p.ContextInjection(
        id=row.id,
        ts=row.ts,
        workspace=row.workspace,
        agent=row.agent,
        session_id=row.session,
        event=cast("p.ContextEvent", row.event),
        budget=row.budget,
        tokens=row.tokens,
        items=[
            p.LoggedItem(
                id=item.id,
                section=cast("p.ContextSection", item.section),
                tokens=item.tokens,
                drift=cast("p.StalenessVerdict | None", item.drift),
                contested=item.contested,
                outcome=cast("p.StoredOutcome | None", item.outcome),
            )
            for item in row.items
        ],
    )
