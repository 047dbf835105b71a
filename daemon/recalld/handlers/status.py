"""The status report: introspection of the running parts, not separate bookkeeping."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from recall_client import protocol as p

from ..actor import Actor
from ..domain.principal import Principal
from ..domain.scopes import ADMIN
from ..errors import RecallError
from ..pipeline.model import Model
from ..store.port import DatabaseFigures, IndexFigures
from .services import Services

__all__ = [
    "Connection",
    "StatusParts",
    "build_report",
    "database_status",
    "index_status",
    "status",
]


class Connection(Protocol):
    principal: Principal | None
    pid: int
    connected_at: float
    requests: int


@dataclass(frozen=True, slots=True)
class StatusParts:
    """What the report reads: the parts the app holds, as they are now."""

    version: str
    started_at: float
    socket: Callable[[], str]
    data_dir: str
    state: Callable[[], p.RunState]
    model: Model
    actors: Sequence[Actor]
    connections: Callable[[], Sequence[Connection]]
    latency: Callable[[], tuple[float | None, float | None, float | None]]
    index: Callable[[], IndexFigures | None]
    # Records by kind and eligibility, and the embedding backlog (a store read).
    counts: Callable[[], Awaitable[tuple[dict[str, dict[str, int]], int]]]
    settled: Callable[[], bool]
    # The index keeper, reported with the index (it is the embedding stage's tail).
    keeper: Actor
    # The store the daemon uses and whether it answers.
    database: Callable[[], DatabaseFigures]
    # The capture spool as the daemon sees it (a directory scan, in a thread).
    spool: Callable[[], Awaitable[p.SpoolStatus]]
    # Why there is no admin token, None while there is one.
    admin_token_problem: Callable[[], str | None]


async def build_report(parts: StatusParts, who: Principal) -> p.StatusReport:
    """The report as ``who`` may see it: every connected agent for an admin connection, the
    caller's own agent's connections otherwise."""
    actors = []
    for actor in parts.actors:
        depth, capacity = actor.queue_depth()
        stats = actor.stats
        actors.append(
            p.ActorStatus(
                name=actor.name,
                state=actor.state,
                queue_depth=depth,
                queue_capacity=capacity,
                processed=stats.processed,
                errors=stats.errors,
                batches=stats.batches,
                last_batch=stats.last_batch,
                per_s=stats.per_second(),
                commit_failures=stats.commit_failures,
                last_error=stats.last_error,
            )
        )
    model = parts.model
    try:
        records, backlog = await parts.counts()
    except RecallError as exc:
        if exc.code != "unavailable":
            raise
        # The database is away: the report says so (database.state) instead of failing.
        records, backlog = {}, 0
    index = index_status(parts.index())
    index.embedding_backlog = backlog
    index.pending_changes = parts.keeper.queue_depth()[0]
    index.last_error = parts.keeper.stats.last_error
    admin = ADMIN in who.scopes
    agents = [
        p.ConnectedAgent(
            agent=c.principal.agent,
            client=c.principal.client,
            workspace=c.principal.workspace,
            workspace_path=c.principal.path or None,
            pid=c.pid,
            connected_s=round(max(0.0, time.time() - c.connected_at), 1),
            requests=c.requests,
        )
        for c in parts.connections()
        if c.principal is not None and (admin or c.principal.agent == who.agent)
    ]
    p50, p90, p99 = parts.latency()
    return p.StatusReport(
        state=parts.state(),
        version=parts.version,
        pid=os.getpid(),
        uptime_s=round(time.time() - parts.started_at, 3),
        socket=parts.socket(),
        data_dir=parts.data_dir,
        model=p.ModelStatus(
            name=model.name,
            state=model.state,  # type: ignore[arg-type]
            reason=model.reason,
            dim=model.embedder.dim if model.embedder is not None else None,
            load_s=round(model.load_s, 3) if model.load_s is not None else None,
            backend=model.backend,
        ),
        semantic_search=index.type is not None,
        actors=actors,
        records=records,
        index=index,
        agents=agents,
        search_latency_ms=p.Latency(p50=p50, p90=p90, p99=p99),
        settled=parts.settled(),
        database=database_status(parts.database()),
        spool=await parts.spool(),
        admin_token_problem=parts.admin_token_problem(),
    )


def index_status(f: IndexFigures | None) -> p.IndexStatus:
    """The index as status shows it: the engine's figures, each by its name."""
    return p.IndexStatus() if f is None else p.IndexStatus(**dataclasses.asdict(f))


def database_status(f: DatabaseFigures) -> p.DatabaseStatus:
    """The database as status shows it: the engine's figures, each by its name, and whether
    it answers as a state."""
    figures = dataclasses.asdict(f)
    answers = figures.pop("answers")
    return p.DatabaseStatus(**figures, state="ok" if answers else "unavailable")


async def status(services: Services, who: Principal, req: p.Status) -> p.StatusResult:
    """status: optionally after the model has loaded and the pipeline has settled."""
    if req.wait_model_s:
        await services.wait_warm(req.wait_model_s)
    if req.wait_settled_s:
        await services.wait_settled(req.wait_settled_s)
    return p.StatusResult(report=await services.report(who))
