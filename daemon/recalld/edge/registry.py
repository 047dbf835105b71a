"""The handler registry: every request type, its handler and its properties, in one table.

A :class:`Route` says which handler answers a request type, what authorization it needs
(:class:`~recalld.edge.authorization.Rule`), whether it is a read the search workers answer
(a connection takes turns at them), whether the workspace-approval gate applies, whether
it is answered while the daemon drains, and for a write that needs no wait before it queues,
how to build its job. A request type without a route is refused, so a new one cannot be
forgotten here; a test walks the protocol against this table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from recall_client import protocol as p

from ..domain.principal import Principal
from ..domain.scopes import ADMIN, READ, WRITE
from ..errors import RecallError
from ..handlers import (
    agents,
    context,
    episodes,
    experiences,
    forget,
    memories,
    ops,
    relevance,
    rollup,
    sharing,
    status,
    workspaces,
)
from ..handlers.services import Services
from ..pipeline.intake import RequestJob
from .authorization import (
    Rule,
    all_workspaces,
    any_caller,
    either,
    one,
    other_workspace,
    record_use,
)
from .authorization import memories as memory_ids

__all__ = ["ROUTES", "Route", "route_of"]

Handler = Callable[[Services, Principal, Any], Awaitable[p.Reply]]
# Builds a write's job on the event loop when nothing has to be awaited first; None when
# something has (the handler then runs). The job's result is the reply.
JobBuilder = Callable[[Services, Principal, Any], RequestJob[p.Reply] | None]


async def _pong(services: Services, who: Principal, req: p.Ping) -> p.Pong:
    return p.Pong(id=req.id)


@dataclass(frozen=True, slots=True)
class Route:
    handler: Handler
    rule: Rule
    # Answered by a search worker: a connection runs at most search_workers of these at
    # once, so one that pipelines many takes turns with the others.
    read: bool = False
    # The workspace-approval gate applies (not to requests on the daemon as a whole).
    gated: bool = True
    # Answered while the daemon drains (everything else gets ``unavailable``).
    while_draining: bool = False
    # A write the edge may hand to the pipeline itself, with no task of its own (see
    # Server._write_now): capture's bursts of small writes.
    job: JobBuilder | None = None


ROUTES: dict[type[p.Request], Route] = {
    p.Ping: Route(_pong, Rule(READ), gated=False),
    # Everyone may see the daemon's state; the connected agents of others only with admin.
    p.Status: Route(status.status, Rule(READ), gated=False, while_draining=True),
    p.MemoryStore: Route(
        memories.store,
        Rule(WRITE, other_workspace, memory_ids("supersedes", "depends_on")),
        job=memories.store_job,
    ),
    p.MemorySearch: Route(memories.search, Rule(READ, other_workspace), read=True),
    # memory_search's reader contract and workspace rule, without a query.
    p.MemoryList: Route(memories.listing, Rule(READ, other_workspace), read=True),
    p.MemoryUpdate: Route(
        memories.update, Rule(WRITE, None, memory_ids("memory_id", "depends_on"))
    ),
    p.MemoryVerify: Route(memories.verify, Rule(WRITE, None, memory_ids("memory_id"))),
    p.MemoryShow: Route(memories.show, Rule(READ, None, memory_ids("memory_id")), read=True),
    p.MemoryRecordUse: Route(memories.record_use, Rule(WRITE, None, record_use)),
    # The calibration the caller's workspace ranks by: the caller's own (its uid's, and in a
    # team database its role's).
    p.RelevanceShow: Route(relevance.show, Rule(READ, other_workspace), read=True),
    # Resolves the subject's facts of the caller's workspace (else the global ones).
    p.MemoryFactResolve: Route(memories.fact_resolve, Rule(WRITE)),
    # Only the record's owner shares it, admin:workspace or not.
    p.MemoryShare: Route(sharing.share, Rule(WRITE, None, one("shareable", "record_id"), own=True)),
    p.CaptureEpisode: Route(
        episodes.capture, Rule(WRITE, other_workspace), job=episodes.capture_job
    ),
    p.WorkSearch: Route(episodes.search, Rule(READ, any_caller), read=True),
    # Its episode or session is looked up in the caller's workspace (see authorization).
    p.WorkResult: Route(episodes.set_verdict, Rule(WRITE, any_caller)),
    p.Forget: Route(forget.forget, Rule(WRITE, None, one("record", "record_id"))),
    p.RecordExperience: Route(experiences.record, Rule(WRITE)),
    p.SearchExperience: Route(experiences.search, Rule(READ), read=True),
    p.ExperienceList: Route(experiences.listing, Rule(READ), read=True),
    p.ExplainNode: Route(
        experiences.explain, Rule(READ, None, one("experience", "record_id")), read=True
    ),
    p.ForgetExperience: Route(
        experiences.forget, Rule(WRITE, None, one("experience", "record_id"))
    ),
    p.GetExecutionContext: Route(experiences.execution_context, Rule(READ), read=True),
    p.RollUpExperience: Route(rollup.roll_up, Rule(WRITE)),
    # A read of the caller's workspace (memory_search's rule); the uses it records are the
    # daemon's own account of what it served.
    p.ContextBlock: Route(context.block, Rule(READ, other_workspace), read=True),
    # The caller's own log: its workspace's and agent's (work_search's partition); another
    # workspace, every workspace or any agent's is admin:workspace's (the page's). Its
    # memory_id only narrows that log, so an id not the caller's finds what none finds.
    p.ContextLog: Route(
        context.injections,
        Rule(READ, either(other_workspace, all_workspaces, any_caller)),
        read=True,
    ),
    # The daemon as a whole: every workspace's and agent's records, or its configuration.
    p.Export: Route(ops.export_page, Rule(ADMIN), gated=False),
    p.Import: Route(ops.import_records, Rule(ADMIN), gated=False),
    p.Reindex: Route(ops.reindex, Rule(ADMIN), gated=False),
    p.Doctor: Route(ops.doctor, Rule(ADMIN), gated=False),
    # What the caller's outcomes taught the ranking: the caller's own rows only.
    p.RelevanceReset: Route(relevance.reset, Rule(ADMIN), gated=False),
    p.WorkspaceApprove: Route(workspaces.approve, Rule(ADMIN), gated=False),
    p.WorkspaceRevoke: Route(workspaces.revoke, Rule(ADMIN), gated=False),
    p.WorkspaceList: Route(workspaces.listing, Rule(ADMIN), gated=False),
    p.AgentEnroll: Route(agents.enroll, Rule(ADMIN), gated=False),
    p.AgentRevoke: Route(agents.revoke, Rule(ADMIN), gated=False),
    p.AgentList: Route(agents.listing, Rule(ADMIN), gated=False),
}


def route_of(req: p.Request) -> Route:
    """The request's route.

    Raises:
        RecallError: ``invalid_request`` for a hello after the first, or a type with none.
    """
    found = ROUTES.get(type(req))
    if found is not None:
        return found
    if isinstance(req, p.Hello):
        raise RecallError("invalid_request", "hello was already said on this connection")
    raise RecallError("invalid_request", f"unsupported request {type(req).__name__}")
