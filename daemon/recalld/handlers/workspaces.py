"""Workspace approval: with ``require_approval`` on, only approved workspaces are served.

Approvals live in SQLite (``workspace_approvals``) and in a set the server checks on every
request without touching the database. The gate guards against an agent using recalld in a
workspace its user never meant to share with it; it is not a security boundary between
processes of the same user (anyone who can reach the socket can run recallctl).
"""

from __future__ import annotations

import shlex
import sqlite3
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from recall_client import protocol as p

from ..pipeline.writer import Principal, WriteJob
from ..errors import RecallError

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = ["Approvals", "ApproveJob", "RevokeJob", "handle"]

# Admin requests act on the daemon as a whole, not on one workspace's records: never gated.
_UNGATED = (
    p.Hello, p.Ping, p.Status, p.Export, p.Reindex, p.Doctor,
    p.WorkspaceApprove, p.WorkspaceRevoke, p.WorkspaceList,
    p.AgentEnroll, p.AgentRevoke, p.AgentList,
)
MAX_REFUSED = 256


class Approvals:
    """The approved workspaces (mirrors the table) and those refused since start."""

    def __init__(self) -> None:
        self.approved: dict[str, p.WorkspaceApproval] = {}
        # The most recently refused workspaces, at most MAX_REFUSED: a client naming a new
        # workspace per request must not grow the daemon without bound.
        self.refused: OrderedDict[str, p.RefusedWorkspace] = OrderedDict()

    def load(self, conn: sqlite3.Connection) -> None:
        self.approved = {
            ws: p.WorkspaceApproval(workspace=ws, approved_at=at, approved_by=by)
            for ws, at, by in conn.execute(
                "SELECT workspace, approved_at, approved_by FROM workspace_approvals"
            )
        }

    def check(self, who: Principal, req: p.Request) -> None:
        """Refuse ``req`` when its workspace is not approved (callers check the setting).

        Every request type not known to be an admin one is gated, so a new tool is covered
        without anyone remembering to add it here.

        Raises:
            RecallError: ``forbidden``, naming the command that approves the workspace.
        """
        if isinstance(req, _UNGATED):
            return
        override = getattr(req, "workspace", None)
        workspace = override if isinstance(override, str) and override else who.workspace
        if workspace in self.approved:
            return
        seen = self.refused.pop(workspace, None)
        self.refused[workspace] = p.RefusedWorkspace(
            workspace=workspace, refused=(seen.refused if seen else 0) + 1,
            last_refused_at=time.time(),
        )
        while len(self.refused) > MAX_REFUSED:
            self.refused.popitem(last=False)
        raise RecallError(
            "forbidden",
            f"workspace {workspace} is not approved for recalld (require_approval is on). "
            "Ask the user to approve it with: recallctl workspace approve "
            + shlex.quote(workspace),
        )

    def listing(self, require_approval: bool) -> p.WorkspaceListResult:
        return p.WorkspaceListResult(
            id=0,
            require_approval=require_approval,
            approved=sorted(self.approved.values(), key=lambda a: a.workspace),
            refused=sorted(
                (r for ws, r in self.refused.items() if ws not in self.approved),
                key=lambda r: r.workspace,
            ),
        )


class ApproveJob(WriteJob):
    """Record an approval; the caller updates :class:`Approvals` after the COMMIT."""

    __slots__ = ("by", "workspace")

    def __init__(self, workspace: str, by: str) -> None:
        super().__init__()
        self.workspace = workspace
        self.by = by

    def apply(self, conn: sqlite3.Connection, now: float) -> p.WorkspaceApproval | None:
        cur = conn.execute(
            "INSERT OR IGNORE INTO workspace_approvals (workspace, approved_at, approved_by)"
            " VALUES (?, ?, ?)",
            (self.workspace, now, self.by),
        )
        if not cur.rowcount:
            return None
        return p.WorkspaceApproval(workspace=self.workspace, approved_at=now, approved_by=self.by)


class RevokeJob(WriteJob):
    """Delete an approval; returns whether there was one."""

    __slots__ = ("workspace",)

    def __init__(self, workspace: str) -> None:
        super().__init__()
        self.workspace = workspace

    def apply(self, conn: sqlite3.Connection, now: float) -> bool:
        cur = conn.execute(
            "DELETE FROM workspace_approvals WHERE workspace = ?", (self.workspace,)
        )
        return cur.rowcount > 0


async def handle(
    daemon: Daemon, who: Principal,
    req: p.WorkspaceApprove | p.WorkspaceRevoke | p.WorkspaceList,
) -> p.Reply:
    """Answer recallctl's workspace requests; approvals change only after their COMMIT."""
    approvals = daemon.approvals
    if isinstance(req, p.WorkspaceList):
        return approvals.listing(daemon.settings.require_approval)
    if isinstance(req, p.WorkspaceApprove):
        job: WriteJob = ApproveJob(req.workspace, who.agent)
        await daemon.submit(job)
        added: p.WorkspaceApproval | None = await job.wait()
        if added is not None:
            approvals.approved[req.workspace] = added
        approvals.refused.pop(req.workspace, None)
        return p.WorkspaceChanged(id=0, workspace=req.workspace, approved=True,
                                  changed=added is not None)
    job = RevokeJob(req.workspace)
    await daemon.submit(job)
    removed: bool = await job.wait()
    approvals.approved.pop(req.workspace, None)
    return p.WorkspaceChanged(id=0, workspace=req.workspace, approved=False, changed=removed)
