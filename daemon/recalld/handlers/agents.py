"""Agent credential requests (recallctl agent add / revoke / list); see
:mod:`recalld.domain.credentials` for what a credential protects."""

from __future__ import annotations

from recall_client import protocol as p

from ..domain.credentials import digest, new_token
from ..domain.principal import Principal
from ..errors import RecallError
from ..pipeline.intake import RequestJob
from ..store.port import WriteTx
from .services import Services

__all__ = ["enroll", "listing", "revoke"]


class _Enroll(RequestJob[bool]):
    """Stores a fresh token's digest; the token itself leaves only in the reply."""

    __slots__ = ("created_at", "token", "token_digest")

    def __init__(self, who: Principal, req: p.AgentEnroll) -> None:
        super().__init__(who, req)
        self.token = new_token()
        self.token_digest = digest(self.token)
        self.created_at = 0.0

    def apply(self, tx: WriteTx, now: float) -> bool:
        req: p.AgentEnroll = self.clean.request
        if tx.ops.enrolled(req.agent) and not req.rotate:
            raise RecallError(
                "invalid_request",
                f"agent {req.agent!r} already has a credential; rotate it (recallctl agent "
                "add --rotate) or revoke it first",
            )
        self.created_at = now
        return tx.ops.enroll_agent(req.agent, self.token_digest, now)


class _Revoke(RequestJob[bool]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> bool:
        return tx.ops.revoke_agent(self.clean.request.agent)


async def enroll(services: Services, who: Principal, req: p.AgentEnroll) -> p.AgentEnrolled:
    """A new credential for an agent name; the map changes only after the COMMIT."""
    job = _Enroll(who, req)
    rotated = await services.write(job)
    services.credentials.set(req.agent, job.token_digest, job.created_at)
    return p.AgentEnrolled(
        agent=req.agent, token=job.token, created_at=job.created_at, rotated=rotated
    )


async def revoke(services: Services, who: Principal, req: p.AgentRevoke) -> p.AgentChanged:
    removed = await services.write(_Revoke(who, req))
    services.credentials.drop(req.agent)
    return p.AgentChanged(agent=req.agent, enrolled=False, changed=removed)


async def listing(services: Services, who: Principal, req: p.AgentList) -> p.AgentListResult:
    return services.credentials.listing()
