"""Workspace approval: with ``require_approval`` on, only approved workspaces are served.

The approved workspaces live in the store and in this set, which the edge checks on every
request without a database read. The gate guards against an agent using recalld in a
workspace its user never meant to share with it; it is not a boundary between processes of
the same user (anyone who can reach the socket with the admin token can approve).
"""

from __future__ import annotations

import shlex
import time
from collections import OrderedDict
from collections.abc import Iterable

from recall_client import protocol as p

from ..errors import RecallError

__all__ = ["MAX_REFUSED", "Approvals"]

# Workspaces remembered as refused: a client naming a new workspace per request must not
# grow the daemon without bound.
MAX_REFUSED = 256


class Approvals:
    """The approved workspaces (mirrors the store) and those refused since start."""

    def __init__(self, approved: Iterable[p.WorkspaceApproval] = ()) -> None:
        self.approved: dict[str, p.WorkspaceApproval] = {a.workspace: a for a in approved}
        self.refused: OrderedDict[str, p.RefusedWorkspace] = OrderedDict()

    def check(self, workspace: str) -> None:
        """Refuse a request of ``workspace`` when it is not approved (callers check the
        setting and which requests the gate applies to).

        Raises:
            RecallError: ``forbidden``, naming the command that approves the workspace.
        """
        if workspace in self.approved:
            return
        seen = self.refused.pop(workspace, None)
        self.refused[workspace] = p.RefusedWorkspace(
            workspace=workspace,
            refused=(seen.refused if seen else 0) + 1,
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
            require_approval=require_approval,
            approved=sorted(self.approved.values(), key=lambda a: a.workspace),
            refused=sorted(
                (r for ws, r in self.refused.items() if ws not in self.approved),
                key=lambda r: r.workspace,
            ),
        )
