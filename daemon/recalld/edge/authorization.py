"""Authorization: what a request needs, checked in one place before any handler runs.

Each route of the registry carries a :class:`Rule`: the scope it needs (read, write or
admin), what in it escalates to admin (crossing the agent partition, naming another
workspace), and the record ids it names that must belong to the caller.

What "belongs to the caller" means, by kind of record (``admin:workspace`` crosses all):

- a memory: of the caller's workspace, or global (stored with no origin);
- an episode: of the caller's workspace and agent (the agent partition of seed 001);
- an experience or a lesson: of the caller's workspace.

A rule may also require the records it names to be the caller's own (``own``: their owner's,
the database role this daemon logs in as), whoever asks: memory_share's, since only a
record's owner may share it. ``admin:workspace`` crosses workspaces and agents, not people.
Another member's record a caller can read is team memory already, so naming one is answered
``forbidden`` (it tells the caller nothing it cannot read), never shared.

An id that does not belong to the caller is reported ``not_found``, exactly as one that
does not exist, so ids cannot be probed across workspaces or partitions. memory_search with
``auto_scope: false`` is the seed's explicit cross-project search and stays a read of every
workspace's memories; ids found that way are shown and changed only from their own workspace.

Handles that are not record ids are keys within the caller's workspace, and the store looks
them up only there (no rule can check a key the store would then look up more widely):

- a session, and work_result's episode (capture_episode's chain, work_result, work_search,
  roll_up_experience, explain_node's episodes, context_log): the caller's workspace, and its
  agent unless ``any_caller`` (admin:workspace) says any agent's; the same session name
  elsewhere is another session;
- an idempotency key: the caller's agent in the caller's workspace (a replay answers with
  the first request's record, so a key shared across workspaces would hand one over);
- a fact's subject (memory_store's supersession, memory_fact_resolve): the workspace's facts,
  then the global ones, as a memory belongs.

A key not found there is reported as one that does not exist anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from recall_client import protocol as p

from ..domain import use_tokens
from ..domain.principal import Principal
from ..domain.scopes import ADMIN, require
from ..errors import RecallError
from ..store.port import Ownership, Reader

__all__ = [
    "Rule",
    "all_workspaces",
    "any_caller",
    "check_scopes",
    "either",
    "memories",
    "one",
    "other_workspace",
    "owned_ids",
    "record_use",
]


# A reason a request needs admin:workspace, or None: given the connection's principal, the
# one the request acts as (edge.workspace.aim) and the request.
Escalation = Callable[[Principal, Principal, Any], str | None]


@dataclass(frozen=True, slots=True)
class Rule:
    scope: str
    # When the request needs admin:workspace beyond ``scope``.
    escalates: Escalation | None = None
    # (kind expected, id) pairs the request names that must belong to the caller; kind
    # "record" accepts any kind, "shareable" a memory or a lesson.
    names: Callable[[Any], Sequence[tuple[str, str]]] | None = None
    # The named records must also be the caller's own, admin:workspace or not.
    own: bool = False

    def named(self, who: Principal, req: p.Request) -> list[tuple[str, str]]:
        """The ids to check for ``who`` (none when it may cross every boundary)."""
        if self.names is None or (ADMIN in who.scopes and not self.own):
            return []
        return list(self.names(req))


def other_workspace(who: Principal, aimed: Principal, req: Any) -> str | None:
    if aimed.workspace != who.workspace:
        return f"naming workspace {aimed.workspace} (this connection's is {who.workspace})"
    return None


def any_caller(who: Principal, aimed: Principal, req: Any) -> str | None:
    return "any_caller" if req.any_caller else None


def all_workspaces(who: Principal, aimed: Principal, req: Any) -> str | None:
    return "all_workspaces" if req.all_workspaces else None


def either(*checks: Escalation) -> Escalation:
    """Escalates when any of ``checks`` does (the first one's reason)."""

    def escalates(who: Principal, aimed: Principal, req: Any) -> str | None:
        return next((r for c in checks if (r := c(who, aimed, req)) is not None), None)

    return escalates


def memories(*fields: str) -> Callable[[Any], list[tuple[str, str]]]:
    """The memory ids in these fields (an id, a list of ids, or a list of links)."""

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


def one(kind: str, field: str) -> Callable[[Any], list[tuple[str, str]]]:
    return lambda req: [(kind, getattr(req, field))]


def record_use(req: p.MemoryRecordUse) -> list[tuple[str, str]]:
    out = [("memory", i) for i in req.memory_ids]
    if req.use_token is not None:
        memory_id = use_tokens.memory_of(req.use_token)
        if memory_id is not None:
            out.append(("memory", memory_id))
    return out


def check_scopes(rule: Rule, who: Principal, aimed: Principal, req: p.Request) -> None:
    """The scope checks of ``rule`` for a request of ``who`` acting as ``aimed`` (no store
    read).

    Raises:
        RecallError: ``forbidden`` naming the scope and why it is needed.
    """
    what = type(req).__name__
    require(who.scopes, rule.scope, what)
    if rule.escalates is not None:
        reason = rule.escalates(who, aimed, req)
        if reason is not None:
            require(who.scopes, ADMIN, f"{what} {reason}")


def owned_ids(
    reader: Reader, who: Principal, wanted: Sequence[tuple[str, str]], *, own: bool = False
) -> None:
    """Check, on a reader, that every id in ``wanted`` belongs to the caller, and with
    ``own`` that it is the caller's own record.

    Raises:
        RecallError: ``not_found`` for an id that does not (or does not exist);
            ``forbidden`` for another member's record under ``own``.
    """
    rows = reader.records.ownership(sorted({i for _, i in wanted}))
    for kind, record_id in wanted:
        row = rows.get(record_id)
        if row is None or not _belongs(who, kind, row):
            what = _WHAT.get(kind, kind)
            raise RecallError("not_found", f"no {what} {record_id} in workspace {who.workspace}")
        if own and not row.mine:
            raise RecallError(
                "forbidden", f"{record_id} is another member's: only its owner may share it"
            )


_WHAT = {"record": "record", "shareable": "memory or lesson"}


def _belongs(who: Principal, wanted: str, row: Ownership) -> bool:
    if wanted == "shareable":
        if row.kind not in ("memory", "lesson"):
            return False
    elif wanted not in ("record", row.kind):
        return False
    if ADMIN in who.scopes:  # only a rule with ``own`` checks an admin's ids
        return True
    if row.kind == "memory":
        return row.workspace == who.workspace or row.origin is None
    if row.kind == "episode":
        return row.workspace == who.workspace and row.agent == who.agent
    return row.workspace == who.workspace
