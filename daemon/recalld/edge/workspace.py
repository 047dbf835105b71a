"""Which workspace a connection and each of its requests file under.

Clients name a workspace by a path (the hello's, or a request's ``workspace`` for one
record: a hook's cwd, a bulk import); the daemon derives the identity from the repository
at that path itself (:mod:`recalld.domain.workspace_identity`). The daemon, not the client,
derives it because the identity decides what a connection may read and write and whether
the approval gate lets it in: an identity a client sent would let an agent in one checkout
claim any repository's memories by naming its remote. A path is only as good as what is
there, and naming a path is what every client could already do; so a client naming
``github.com/acme/app`` gets it only from a checkout of it. Only a connection with the
admin token (which may act as anyone anyway) may name an identity directly: the web page
does, to act in a workspace it listed. A request naming another identity than its
connection's still needs the admin token (authorization.other_workspace).

A request naming a workspace acts as a principal in that workspace (:func:`aim`): every rule
and handler after this reads the identity from the principal, never the request's
``workspace`` (a path, or an identity only an admin may name), and the principal's ``path``
is where that workspace's repository is read. The request itself is left as it came.
"""

from __future__ import annotations

import dataclasses

import anyio
from recall_client import protocol as p

from ..domain import workspace_identity
from ..domain.principal import Principal
from ..domain.workspace_identity import Workspace
from ..errors import RecallError

__all__ = ["aim", "aim_now", "of_hello"]


def of_hello(named: str | None, admin: bool) -> Workspace:
    """The workspace a hello names (no path: "/"). Reads the repository: run in a thread.

    Raises:
        RecallError: ``invalid_request`` for a relative path or an identity named without
            the admin token.
    """
    named = named or "/"
    if named.startswith("/"):
        return workspace_identity.identify(named)
    if admin:
        return workspace_identity.named(named)
    raise RecallError(
        "invalid_request",
        f"the hello's workspace must be an absolute path (got {named!r}): recalld derives "
        "the workspace's identity from the repository there",
    )


def _override(req: p.Request) -> str | None:
    value = getattr(req, "workspace", None)
    return value if isinstance(value, str) and value else None


def _aimed(who: Principal, ws: Workspace) -> Principal:
    if ws.id == who.workspace and not ws.path:
        return who
    return dataclasses.replace(who, workspace=ws.id, path=ws.path)


def aim_now(who: Principal, req: p.Request) -> Principal | None:
    """:func:`aim` without blocking; None when a repository would have to be read."""
    named = _override(req)
    if named is None:
        return who
    if not named.startswith("/"):
        return _aimed(who, _literal(who, named))
    ws = workspace_identity.cached(named)
    return None if ws is None else _aimed(who, ws)


async def aim(who: Principal, req: p.Request) -> Principal:
    """The principal ``req`` acts as: ``who``, or, when it names a workspace, ``who`` in that
    workspace."""
    aimed = aim_now(who, req)
    if aimed is not None:
        return aimed
    named = _override(req)
    assert named is not None
    ws = await anyio.to_thread.run_sync(workspace_identity.identify, named)
    return _aimed(who, ws)


def _literal(who: Principal, identity: str) -> Workspace:
    """A request naming an identity, not a path: its own connection's, or (admin only, as
    authorization decides next) another's."""
    if identity == who.workspace:
        return Workspace(id=identity, path=who.path, basis="named")
    return workspace_identity.named(identity)
