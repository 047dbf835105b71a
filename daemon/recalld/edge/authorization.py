"""Authorization: what each request needs, in one table, checked in one place.

Every request type has a :class:`Rule`: the scope it needs (read, write or admin), what in
it escalates to admin (crossing the agent partition, naming another workspace), and the
record ids it names that must belong to the caller. The server calls :func:`authorize`
before any handler runs; a request type without a rule is refused, so a new one cannot be
forgotten here.

What "belongs to the caller" means, by kind of record (``admin:workspace`` crosses all):

- a memory: of the caller's workspace, or global (stored with no origin);
- an episode: of the caller's workspace and agent (the agent partition of seed 001);
- an experience or a lesson: of the caller's workspace.

An id that does not belong to the caller is reported ``not_found``, exactly as one that
does not exist, so ids cannot be probed across workspaces or partitions. memory_search with
``auto_scope: false`` is the seed's explicit cross-project search and stays a read of every
workspace's memories; ids found that way are shown and changed only from their own workspace.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from recall_client import protocol as p

from ..pipeline.writer import Principal
from ..errors import RecallError
from ..domain.scopes import ADMIN, READ, WRITE, require

__all__ = ["RULES", "Rule", "authorize", "owned_ids"]


@dataclass(frozen=True, slots=True)
class Rule:
    scope: str
    # A reason when this request needs admin:workspace beyond ``scope``; None when not.
    escalates: Callable[[Principal, Any], str | None] | None = None
    # (kind expected, id) pairs the request names that must belong to the caller; kind
    # "record" accepts any kind.
    names: Callable[[Any], Sequence[tuple[str, str]]] | None = None


def _other_workspace(who: Principal, req: Any) -> str | None:
    workspace = getattr(req, "workspace", None)
    if workspace is not None and workspace != who.workspace:
        return f"naming workspace {workspace} (this connection's is {who.workspace})"
    return None


def _any_caller(who: Principal, req: Any) -> str | None:
    return "any_caller" if req.any_caller else None


def _memories(*fields: str) -> Callable[[Any], list[tuple[str, str]]]:
    def names(req: Any) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for name in fields:
            value = getattr(req, name)
            if value is None:
                continue
            if isinstance(value, str):
                out.append(("memory", value))
            else:
                out += [("memory", v if isinstance(v, str) else v.id) for v in value]
        return out

    return names


def _record_use(req: p.MemoryRecordUse) -> list[tuple[str, str]]:
    from ..handlers.memories import token_memory_id  # the token's layout lives with its issuer

    out = [("memory", i) for i in req.memory_ids]
    if req.use_token is not None:
        memory_id = token_memory_id(req.use_token)
        if memory_id is not None:
            out.append(("memory", memory_id))
    return out


RULES: dict[type[p.Request], Rule] = {
    p.Hello: Rule(READ),
    p.Ping: Rule(READ),
    # Everyone may see the daemon's state; the connected agents of others only with admin.
    p.Status: Rule(READ),
    p.MemoryStore: Rule(WRITE, _other_workspace, _memories("supersedes", "depends_on")),
    p.MemorySearch: Rule(READ, _other_workspace),
    p.MemoryUpdate: Rule(WRITE, None, _memories("memory_id", "depends_on")),
    p.MemoryVerify: Rule(WRITE, None, _memories("memory_id")),
    p.MemoryShow: Rule(READ, None, _memories("memory_id")),
    p.MemoryRecordUse: Rule(WRITE, None, _record_use),
    # Resolves the subject's facts of the caller's workspace (else the global ones).
    p.MemoryFactResolve: Rule(WRITE),
    p.CaptureEpisode: Rule(WRITE, _other_workspace),
    p.WorkSearch: Rule(READ, _any_caller),
    p.WorkResult: Rule(WRITE, _any_caller),
    p.Forget: Rule(WRITE, None, lambda req: [("record", req.record_id)]),
    p.RecordExperience: Rule(WRITE),
    p.SearchExperience: Rule(READ),
    p.ExplainNode: Rule(READ, None, lambda req: [("experience", req.record_id)]),
    p.ForgetExperience: Rule(WRITE, None, lambda req: [("experience", req.record_id)]),
    p.GetExecutionContext: Rule(READ),
    p.RollUpExperience: Rule(WRITE),
    # The daemon as a whole: every workspace's and agent's records, or its configuration.
    p.Export: Rule(ADMIN),
    p.Reindex: Rule(ADMIN),
    p.Doctor: Rule(ADMIN),
    p.WorkspaceApprove: Rule(ADMIN),
    p.WorkspaceRevoke: Rule(ADMIN),
    p.WorkspaceList: Rule(ADMIN),
    p.AgentEnroll: Rule(ADMIN),
    p.AgentRevoke: Rule(ADMIN),
    p.AgentList: Rule(ADMIN),
}


def rule_of(req: p.Request) -> Rule:
    """The request's rule. Raises RecallError ``forbidden`` for a type with none."""
    rule = RULES.get(type(req))
    if rule is None:
        raise RecallError("forbidden", f"{type(req).__name__} has no authorization rule")
    return rule


def needs_lookup(who: Principal, req: p.Request) -> bool:
    """Whether :func:`authorize` must read the database (the request names ids and the
    caller cannot cross every boundary anyway)."""
    rule = rule_of(req)
    return rule.names is not None and ADMIN not in who.scopes and bool(rule.names(req))


def check_scopes(who: Principal, req: p.Request) -> None:
    """The scope checks of ``req``'s rule (no database read).

    Raises:
        RecallError: ``forbidden`` naming the scope and why it is needed.
    """
    rule = rule_of(req)
    what = type(req).__name__
    require(who.scopes, rule.scope, what)
    if rule.escalates is not None:
        reason = rule.escalates(who, req)
        if reason is not None:
            require(who.scopes, ADMIN, f"{what} {reason}")


def owned_ids(conn: sqlite3.Connection, who: Principal, req: p.Request) -> None:
    """Check, on a read connection, that every id ``req`` names belongs to the caller.

    Raises:
        RecallError: ``not_found`` for an id that does not (or does not exist).
    """
    rule = rule_of(req)
    if rule.names is None or ADMIN in who.scopes:
        return
    wanted = list(rule.names(req))
    if not wanted:
        return
    ids = sorted({i for _, i in wanted})
    rows = {
        row[0]: row[1:]
        for row in conn.execute(
            "SELECT r.id, r.kind, r.workspace, r.agent,"
            " CASE WHEN m.rowid IS NULL THEN r.workspace ELSE m.origin END"
            " FROM records r LEFT JOIN memory_meta m ON m.rowid = r.rowid"
            f" WHERE r.id IN ({','.join('?' * len(ids))})",
            ids,
        )
    }
    for kind, record_id in wanted:
        row = rows.get(record_id)
        if row is None or not _belongs(who, kind, *row):
            what = "record" if kind == "record" else kind
            raise RecallError("not_found", f"no {what} {record_id} in workspace {who.workspace}")


def _belongs(who: Principal, wanted: str, kind: str, workspace: str, agent: str,
             origin: str | None) -> bool:
    if wanted != "record" and wanted != kind:
        return False
    if kind == "memory":
        return workspace == who.workspace or origin is None
    if kind == "episode":
        return workspace == who.workspace and agent == who.agent
    return workspace == who.workspace
