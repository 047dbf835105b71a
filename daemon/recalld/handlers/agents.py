"""Per-agent credentials: an agent name that has one can only be claimed with its token.

Without credentials, the agent partition (an agent reads only its own episodes) is only the
name a hello declares. ``recallctl agent add NAME`` makes the daemon draw a random token for
NAME and store its digest (never the token); recallctl writes the token to a 0600 file that
only that agent's launcher is told about (``recall-mcp --agent-token-file``). From then on a
hello naming NAME must present that token, or the admin token (recallctl acts for any agent,
e.g. from hooks); anything else is refused.

What this protects against: agents that cannot read each other's token files (sandboxed
ones, or agents of other OS users behind the socket's own checks). What it cannot: any
process of the same user that can read the token file, or the admin token.

The digests live in SQLite (``agent_credentials``) and in a map the hello checks without a
database read; the map changes only after the write has committed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
from typing import TYPE_CHECKING

from recall_client import protocol as p

from ..pipeline.writer import WriteJob
from ..errors import RecallError

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = ["AgentCredentials", "EnrollJob", "RevokeJob", "digest", "handle"]


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class AgentCredentials:
    """The enrolled agent names and the digests of their tokens (mirrors the table)."""

    def __init__(self) -> None:
        self._digests: dict[str, tuple[bytes, float]] = {}

    def load(self, conn: sqlite3.Connection) -> None:
        self._digests = {
            agent: (bytes(token_digest), created_at)
            for agent, token_digest, created_at in conn.execute(
                "SELECT agent, token_digest, created_at FROM agent_credentials"
            )
        }

    def check(self, agent: str, token: str | None, *, admin: bool) -> None:
        """Refuse a hello that claims ``agent`` without its credential.

        Raises:
            RecallError: ``forbidden``, saying what to present.
        """
        enrolled = self._digests.get(agent)
        if enrolled is None:
            if token is not None:
                raise RecallError(
                    "forbidden",
                    f"agent {agent!r} has no credential, but an agent token was presented; "
                    "drop it, or enroll the name with: recallctl agent add " + agent,
                )
            return
        if token is None:
            if admin:
                return
            raise RecallError(
                "forbidden",
                f"agent {agent!r} has a credential: present its token "
                "(recall-mcp --agent-token-file FILE, as recallctl agent add printed)",
            )
        if not hmac.compare_digest(digest(token), enrolled[0]):
            raise RecallError("forbidden", f"the agent token does not match agent {agent!r}")

    def listing(self) -> p.AgentListResult:
        return p.AgentListResult(id=0, agents=[
            p.AgentCredential(agent=agent, created_at=created_at)
            for agent, (_, created_at) in sorted(self._digests.items())
        ])

    def enrolled(self, agent: str) -> bool:
        return agent in self._digests

    def set(self, agent: str, token_digest: bytes, created_at: float) -> None:
        self._digests[agent] = (token_digest, created_at)

    def drop(self, agent: str) -> None:
        self._digests.pop(agent, None)


class EnrollJob(WriteJob):
    """Store a fresh token's digest for an agent name; returns (token, digest, rotated)."""

    __slots__ = ("agent", "rotate")

    def __init__(self, agent: str, rotate: bool) -> None:
        super().__init__()
        self.agent = agent
        self.rotate = rotate

    def apply(self, conn: sqlite3.Connection, now: float) -> tuple[str, bytes, bool, float]:
        exists = conn.execute(
            "SELECT 1 FROM agent_credentials WHERE agent = ?", (self.agent,)
        ).fetchone() is not None
        if exists and not self.rotate:
            raise RecallError(
                "invalid_request",
                f"agent {self.agent!r} already has a credential; rotate it (recallctl agent "
                "add --rotate) or revoke it first",
            )
        token = secrets.token_urlsafe(32)
        token_digest = digest(token)
        conn.execute(
            "INSERT INTO agent_credentials (agent, token_digest, created_at) VALUES (?, ?, ?)"
            " ON CONFLICT (agent) DO UPDATE SET token_digest = excluded.token_digest,"
            " created_at = excluded.created_at",
            (self.agent, token_digest, now),
        )
        return token, token_digest, exists, now


class RevokeJob(WriteJob):
    """Delete an agent name's credential; returns whether there was one."""

    __slots__ = ("agent",)

    def __init__(self, agent: str) -> None:
        super().__init__()
        self.agent = agent

    def apply(self, conn: sqlite3.Connection, now: float) -> bool:
        cur = conn.execute("DELETE FROM agent_credentials WHERE agent = ?", (self.agent,))
        return cur.rowcount > 0


async def handle(daemon: Daemon, req: p.AgentEnroll | p.AgentRevoke | p.AgentList) -> p.Reply:
    """Answer recallctl's agent requests; the map changes only after the COMMIT."""
    credentials = daemon.credentials
    if isinstance(req, p.AgentList):
        return credentials.listing()
    if isinstance(req, p.AgentEnroll):
        enroll = EnrollJob(req.agent, req.rotate)
        await daemon.submit(enroll)
        token, token_digest, rotated, created_at = await enroll.wait()
        credentials.set(req.agent, token_digest, created_at)
        return p.AgentEnrolled(id=0, agent=req.agent, token=token, created_at=created_at,
                               rotated=rotated)
    revoke = RevokeJob(req.agent)
    await daemon.submit(revoke)
    removed: bool = await revoke.wait()
    credentials.drop(req.agent)
    return p.AgentChanged(id=0, agent=req.agent, enrolled=False, changed=removed)
