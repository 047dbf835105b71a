"""The context hooks' log: each block a hook was given, its items, and their uses' outcomes.

An injection is written by the job that records its uses, in the same transaction, so the
log and the uses agree. The log keeps ids, never the lines: an item's text is its record's,
and a forgotten record's text must not live on here. A memory's item names its use by the
use token's nonce (``memory_uses.token``), so a read joins in the use's outcome as it stands
now: "injected" until a memory_record_use of that token replaced it.
"""

from __future__ import annotations

from typing import Any

from ..port import InjectedItem, InjectionRow
from .db import Db
from .filters import marks

__all__ = ["SqlContextReads", "SqlContextWrites"]

_INJECTION_SQL = (
    "SELECT i.id, i.ts, i.workspace, i.uid, i.agent, i.session, i.event, i.budget, i.tokens"
    " FROM context_injections i"
)
# The outcome of a memory's use, by its token's nonce (a lesson or an episode has none).
_ITEM_SQL = (
    "SELECT c.injection, c.item_id, c.section, c.tokens, c.drift, c.contested, c.use_token,"
    " u.outcome"
    " FROM context_items c LEFT JOIN memory_uses u ON u.token = c.use_token"
)


class SqlContextReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def injections(
        self,
        *,
        workspace: str | None,
        uid: int,
        agent: str | None,
        session: str | None,
        memory_id: str | None,
        before: tuple[float, str] | None,
        limit: int,
    ) -> list[InjectionRow]:
        clauses = ["i.uid = ?"]
        params: list[Any] = [uid]
        for column, value in (("workspace", workspace), ("agent", agent), ("session", session)):
            if value is not None:
                clauses.append(f"i.{column} = ?")
                params.append(value)
        if memory_id is not None:
            clauses.append(
                "EXISTS (SELECT 1 FROM context_items c WHERE c.injection = i.id AND c.item_id = ?)"
            )
            params.append(memory_id)
        if before is not None:
            clauses.append("(i.ts < ? OR (i.ts = ? AND i.id < ?))")
            params += [before[0], before[0], before[1]]
        rows = self._conn.execute(
            f"{_INJECTION_SQL} WHERE {' AND '.join(clauses)} ORDER BY i.ts DESC, i.id DESC LIMIT ?",
            [*params, limit],
        ).fetchall()
        if not rows:
            return []
        ids = [row[0] for row in rows]
        items: dict[str, list[InjectedItem]] = {i: [] for i in ids}
        for (
            injection,
            item_id,
            section,
            tokens,
            drift,
            contested,
            token,
            outcome,
        ) in self._conn.execute(
            f"{_ITEM_SQL} WHERE c.injection IN ({marks(ids)}) ORDER BY c.injection, c.position",
            ids,
        ):
            items[injection].append(
                InjectedItem(item_id, section, int(tokens), drift, bool(contested), token, outcome)
            )
        return [
            InjectionRow(
                id=i,
                ts=float(ts),
                workspace=workspace_,
                uid=int(uid_),
                agent=agent_,
                session=session_,
                event=event,
                budget=int(budget),
                tokens=int(tokens),
                items=items[i],
            )
            for i, ts, workspace_, uid_, agent_, session_, event, budget, tokens in rows
        ]


class SqlContextWrites:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def record_injection(self, injection: InjectionRow) -> None:
        i = injection
        self._conn.execute(
            "INSERT INTO context_injections"
            " (id, ts, workspace, uid, agent, session, event, budget, tokens)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (i.id, i.ts, i.workspace, i.uid, i.agent, i.session, i.event, i.budget, i.tokens),
        )
        self._conn.executemany(
            "INSERT INTO context_items"
            " (injection, position, item_id, section, tokens, drift, contested, use_token)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (i.id, n, it.id, it.section, it.tokens, it.drift, int(it.contested), it.use_token)
                for n, it in enumerate(i.items)
            ],
        )
