"""Who a request comes from: the hello's agent and workspace, and the peer's uid and pid."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    agent: str
    # The workspace's identity (recalld.domain.workspace_identity): what records file under.
    workspace: str
    uid: int
    pid: int
    client: str = ""
    model: str | None = None
    # What this connection may do (see recalld.domain.scopes); the hello decides.
    scopes: frozenset[str] = frozenset()
    # The hello's session, else one made for the connection.
    session: str = ""
    # The workspace's local alias, where its git repository and files are read; "" when the
    # workspace was named by identity (an admin client) and has no path here.
    path: str = ""
