"""The page's connections to the daemon: one per workspace it acts in, opened on demand.

The page is one more client of the daemon's socket. Some requests act on the hello's
workspace (resolving a fact, experiences, work episodes), so a view of workspace W talks
over a connection whose hello names W; the daemon then applies exactly the rules it applies
to an agent there (approval gate, partitions, redaction). recallctl's own identity and
tokens are used: with the admin token readable, the page has admin:workspace as recallctl
does.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import TypeVar

import anyio
from anyio.abc import TaskGroup

from .. import protocol as p
from ..client import DaemonUnavailable, RecallClient, open_client

__all__ = ["DaemonLink"]

R = TypeVar("R", bound=p.Reply)

# Workspaces with an open connection at once; the least recently used one is closed first.
_MAX_CONNECTIONS = 8


class DaemonLink:
    """Calls the daemon on behalf of the page, over a connection per workspace."""

    def __init__(
        self,
        tg: TaskGroup,
        *,
        agent: str,
        workspace: str,
        socket: str | os.PathLike[str] | None = None,
        admin_token: str | None = None,
        agent_token: str | None = None,
    ) -> None:
        self._tg = tg
        self._agent = agent
        self.home = workspace
        self._socket = socket
        self._admin_token = admin_token
        self._agent_token = agent_token
        self._clients: OrderedDict[str, RecallClient] = OrderedDict()
        self._lock = anyio.Lock()

    async def is_admin(self) -> bool:
        """Whether the daemon granted the page admin:workspace (recallctl's admin token)."""
        rc = await self._client(self.home)
        return rc.welcome is not None and "admin:workspace" in rc.welcome.scopes

    async def call(
        self, request: p.Request, reply_type: type[R], workspace: str | None = None
    ) -> R:
        """Send ``request`` over the connection of ``workspace`` (default: the home one).

        A connection that broke is opened again once (the daemon restarted); a second
        failure is the caller's DaemonUnavailable.

        Raises:
            DaemonUnavailable: the daemon cannot be reached.
            RemoteError: the daemon refused or failed the request.
        """
        where = workspace or self.home
        home = self._clients.get(self.home)
        if home is not None and home.welcome is not None and home.welcome.workspace == where:
            # The home checkout's identity (as the page lists it): its own connection, whose
            # hello named the path (only the admin token may name an identity).
            where = self.home
        rc = await self._client(where)
        try:
            return await rc.call(request, reply_type)
        except DaemonUnavailable:
            if not rc.closed:
                raise
        # The connection broke (the daemon restarted): one new one, once.
        return await (await self._client(where)).call(request, reply_type)

    async def _client(self, workspace: str) -> RecallClient:
        async with self._lock:
            rc = self._clients.get(workspace)
            if rc is not None and not rc.closed:
                self._clients.move_to_end(workspace)
                return rc
            if rc is not None:
                del self._clients[workspace]
            rc = await open_client(
                self._tg,
                agent=self._agent,
                workspace=workspace,
                client="recallctl-ui",
                path=self._socket,
                admin_token=self._admin_token,
                agent_token=self._agent_token,
            )
            self._clients[workspace] = rc
            while len(self._clients) > _MAX_CONNECTIONS:
                _, oldest = self._clients.popitem(last=False)
                await oldest.aclose()
            return rc

    async def aclose(self) -> None:
        async with self._lock:
            for rc in self._clients.values():
                await rc.aclose()
            self._clients.clear()
