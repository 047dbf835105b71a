"""Workspace requests (recallctl workspace approve / revoke / list, recallctl workspaces),
and the aliases a workspace is seen at."""

from __future__ import annotations

import logging

from recall_client import protocol as p

from ..domain.git_history import LRU
from ..domain.principal import Principal
from ..domain.workspace_identity import Workspace
from ..errors import RecallError
from ..pipeline.intake import RequestJob
from ..pipeline.writer import WriteJob
from ..store.port import ApprovalRow, Reader, WriteTx
from .services import Services

__all__ = ["approve", "listing", "revoke", "seen"]

log = logging.getLogger(__name__)

# (path, identity) pairs noted since start: a hello notes its checkout's once.
_noted: LRU[tuple[str, str], bool] = LRU(1024)


class _NoteAlias(WriteJob[None]):
    __slots__ = ("path", "workspace")
    background = True

    def __init__(self, path: str, workspace: str) -> None:
        super().__init__()
        self.path, self.workspace = path, workspace

    def apply(self, tx: WriteTx, now: float) -> None:
        tx.ops.note_alias(self.path, self.workspace, now)


async def seen(services: Services, ws: Workspace) -> None:
    """Note the checkout a hello came from as an alias of its workspace (queued, not
    awaited: a hello never waits for a write)."""
    if not ws.path or _noted.get((ws.path, ws.id)):
        return
    try:
        await services.submit(_NoteAlias(ws.path, ws.id))
    except RecallError as exc:  # busy: the next hello from there notes it
        log.debug("alias %s of %s not noted: %s", ws.path, ws.id, exc.message)
        return
    _noted.put((ws.path, ws.id), True)


class _Approve(RequestJob[ApprovalRow | None]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> ApprovalRow | None:
        return tx.ops.approve(self.principal.workspace, self.principal.agent, now)


class _Revoke(RequestJob[bool]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> bool:
        return tx.ops.revoke_approval(self.principal.workspace)


async def approve(
    services: Services, who: Principal, req: p.WorkspaceApprove
) -> p.WorkspaceChanged:
    """Approve a workspace; the gate changes only after the COMMIT."""
    added = await services.write(_Approve(who, req))
    approvals = services.approvals
    if added is not None:
        approvals.approved[who.workspace] = p.WorkspaceApproval(
            workspace=added.workspace, approved_at=added.approved_at, approved_by=added.approved_by
        )
    approvals.refused.pop(who.workspace, None)
    return p.WorkspaceChanged(workspace=who.workspace, approved=True, changed=added is not None)


async def revoke(services: Services, who: Principal, req: p.WorkspaceRevoke) -> p.WorkspaceChanged:
    removed = await services.write(_Revoke(who, req))
    services.approvals.approved.pop(who.workspace, None)
    return p.WorkspaceChanged(workspace=who.workspace, approved=False, changed=removed)


async def listing(
    services: Services, who: Principal, req: p.WorkspaceList
) -> p.WorkspaceListResult:
    result = services.approvals.listing(services.settings().require_approval)
    result.workspaces = await services.read_aside(_known)
    return result


def _known(reader: Reader) -> list[p.KnownWorkspace]:
    counts = reader.ops.workspace_records()
    aliases: dict[str, list[tuple[float, str]]] = {}
    for row in reader.ops.aliases():
        aliases.setdefault(row.workspace, []).append((row.seen_at, row.path))
    return [
        p.KnownWorkspace(
            workspace=ws,
            aliases=[path for _, path in sorted(aliases.get(ws, []), reverse=True)],
            records=counts.get(ws, 0),
        )
        for ws in sorted(counts.keys() | aliases.keys())
    ]
