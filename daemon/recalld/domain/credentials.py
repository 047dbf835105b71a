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

The digests live in the store and in this map, which the hello checks without a database
read; the map changes only after the write has committed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable

from recall_client import protocol as p

from ..errors import RecallError

__all__ = ["AgentCredentials", "digest", "new_token"]


def new_token() -> str:
    return secrets.token_urlsafe(32)


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class AgentCredentials:
    """The enrolled agent names and the digests of their tokens (mirrors the store)."""

    def __init__(self, rows: Iterable[tuple[str, bytes, float]] = ()) -> None:
        self._digests = {agent: (token_digest, created) for agent, token_digest, created in rows}

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
        return p.AgentListResult(
            agents=[
                p.AgentCredential(agent=agent, created_at=created_at)
                for agent, (_, created_at) in sorted(self._digests.items())
            ],
        )

    def set(self, agent: str, token_digest: bytes, created_at: float) -> None:
        self._digests[agent] = (token_digest, created_at)

    def drop(self, agent: str) -> None:
        self._digests.pop(agent, None)
