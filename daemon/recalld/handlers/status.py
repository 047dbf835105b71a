"""The status report: introspection of the running parts, not separate bookkeeping."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import aiosqlite
from recall_client import protocol as p

from ..pipeline.writer import Principal
from ..domain.scopes import ADMIN
from ..store.sqlite_schema import DB_NAME

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = ["build_report"]


async def build_report(daemon: Daemon, who: Principal) -> p.StatusReport:
    """The report as ``who`` may see it: the connected agents are the daemon's to show only
    to an admin connection; any other sees its own agent's connections."""
    actors = []
    for actor in (daemon.capture, daemon.evaluation, daemon.embedding, daemon.search):
        depth, capacity = actor.queue_depth()
        actors.append(
            p.ActorStatus(
                name=actor.name,
                state=actor.state,
                queue_depth=depth,
                queue_capacity=capacity,
                processed=actor.stats.processed,
                errors=actor.stats.errors,
            )
        )
    model = daemon.model
    index: dict[str, Any] = {"type": None, "size": 0, "dim": None, "rebuilt_reason": None}
    if daemon.index is not None:
        index = {
            "type": daemon.index.kind,
            "size": daemon.index.ntotal,
            "dim": daemon.index.dim,
            "rebuilt_reason": daemon.index.rebuilt_reason,
        }
    records, backlog = await _counts(daemon)
    index["embedding_backlog"] = backlog
    admin = ADMIN in who.scopes
    agents = [
        {
            "agent": c.principal.agent,
            "client": c.principal.client,
            "workspace": c.principal.workspace,
            "pid": c.pid,
            "connected_s": round(max(0.0, time.time() - c.connected_at), 1),
            "requests": c.requests,
        }
        for c in daemon.server.connections.values()
        if c.principal is not None and (admin or c.principal.agent == who.agent)
    ]
    return p.StatusReport(
        state=daemon.state,
        version=daemon.version,
        pid=os.getpid(),
        uptime_s=round(daemon.uptime_s, 3),
        socket=str(daemon.socket_path),
        data_dir=str(daemon.data_dir),
        model=p.ModelStatus(
            name=model.name,
            state=model.state,  # type: ignore[arg-type]
            reason=model.reason,
            dim=model.embedder.dim if model.embedder is not None else None,
            load_s=round(model.load_s, 3) if model.load_s is not None else None,
            backend=model.backend,
        ),
        semantic_search=daemon.index is not None,
        actors=actors,
        records=records,
        index=index,
        agents=agents,
        search_latency_ms=daemon.search.latency_percentiles(),
    )


async def _counts(daemon: Daemon) -> tuple[dict[str, dict[str, int]], int]:
    """Records by kind and eligibility, and the embedding backlog, from one read connection."""
    counts: dict[str, dict[str, int]] = {}
    async with aiosqlite.connect(f"file:{daemon.data_dir / DB_NAME}?mode=ro", uri=True) as db:
        async with db.execute(
            "SELECT kind, eligibility, count(*) FROM records WHERE tombstoned_at IS NULL"
            " GROUP BY kind, eligibility"
        ) as cur:
            async for kind, eligibility, n in cur:
                counts.setdefault(kind, {"total": 0})
                counts[kind][eligibility] = n
                counts[kind]["total"] += n
        async with db.execute(
            # The embedding actor's own backlog: a record waiting for its evaluation (an
            # episode waiting for a verdict) is not embedded yet, and not late either.
            "SELECT count(*) FROM records WHERE embed_state = 0 AND tombstoned_at IS NULL"
            " AND eligibility != 'pending'"
        ) as cur:
            row = await cur.fetchone()
    return counts, int(row[0]) if row else 0
