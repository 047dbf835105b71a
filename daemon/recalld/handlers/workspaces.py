"""Workspace approval requests (recallctl workspace approve / revoke / list)."""

from __future__ import annotations

from recall_client import protocol as p

from ..domain.principal import Principal
from ..pipeline.intake import RequestJob
from ..store.port import ApprovalRow, WriteTx
from .services import Services

__all__ = ["approve", "listing", "revoke"]


class _Approve(RequestJob):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> ApprovalRow | None:
        return tx.ops.approve(self.clean.request.workspace, self.principal.agent, now)


class _Revoke(RequestJob):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> bool:
        return tx.ops.revoke_approval(self.clean.request.workspace)


async def approve(
    services: Services, who: Principal, req: p.WorkspaceApprove
) -> p.WorkspaceChanged:
    """Approve a workspace; the gate changes only after the COMMIT."""
    added: ApprovalRow | None = await services.write(_Approve(who, req))
    approvals = services.approvals
    if added is not None:
        approvals.approved[req.workspace] = p.WorkspaceApproval(
            workspace=added.workspace, approved_at=added.approved_at, approved_by=added.approved_by
        )
    approvals.refused.pop(req.workspace, None)
    return p.WorkspaceChanged(
        id=0, workspace=req.workspace, approved=True, changed=added is not None
    )


async def revoke(services: Services, who: Principal, req: p.WorkspaceRevoke) -> p.WorkspaceChanged:
    removed: bool = await services.write(_Revoke(who, req))
    services.approvals.approved.pop(req.workspace, None)
    return p.WorkspaceChanged(id=0, workspace=req.workspace, approved=False, changed=removed)


async def listing(
    services: Services, who: Principal, req: p.WorkspaceList
) -> p.WorkspaceListResult:
    return services.approvals.listing(services.settings().require_approval)
