"""Connection slots: how many one client process may hold, and who gives one up when they run
short.

Every connection of the daemon's user holds a slot (``max_connections``; other users' are
refused before they get one). One process, known by the pid the kernel reports for its end
of the socket (SO_PEERCRED), may hold ``max_connections_per_process``: past that its new
connections are refused, so a flood from one process leaves room for everyone else. When
every slot is taken all the same (a flood from many processes), a newcomer gets one by
closing a connection that is waiting for its next frame: first one that has not said hello
within ``hello_grace_s``, else the longest idle; either way, one of the process holding the
most slots. A connection with a request in flight or a frame on its way is never closed to
make room.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import anyio

from ..config import Settings
from ..domain.principal import Principal

__all__ = ["Slots"]


class SlotHolder(Protocol):
    """What slots need of a connection (``exchange.Connection``; a protocol here, so slots
    sits below the server and not beside it)."""

    @property
    def cid(self) -> int: ...
    @property
    def pid(self) -> int: ...
    @property
    def principal(self) -> Principal | None: ...
    @property
    def waiting(self) -> bool: ...
    @property
    def inflight(self) -> int: ...
    @property
    def active_at(self) -> float: ...
    @property
    def idle(self) -> anyio.CancelScope: ...


log = logging.getLogger(__name__)


C = TypeVar("C", bound=SlotHolder)


class Slots(Generic[C]):
    """The connections holding a slot, by connection id (status lists them)."""

    def __init__(self, settings: Callable[[], Settings]) -> None:
        self._settings = settings
        self.held: dict[int, C] = {}
        self._per_pid: Counter[int] = Counter()
        # Connections closed to make room for a newcomer.
        self.reclaimed = 0

    def take(self, conn: C) -> str | None:
        """Give ``conn`` a slot, closing another to make room if need be; None, or why it
        gets none (the refusal's message)."""
        s = self._settings()
        mine = self._per_pid[conn.pid]
        if mine >= s.max_connections_per_process:
            return (
                f"this process (pid {conn.pid}) already holds {mine} connections, as many as "
                "one process may (max_connections_per_process); reuse or close one"
            )
        if len(self.held) >= s.max_connections and not self._reclaim(s):
            return "too many connections (max_connections); retry shortly"
        self.held[conn.cid] = conn
        self._per_pid[conn.pid] += 1
        return None

    def give_back(self, conn: C) -> None:
        """``conn`` has ended (or is closed to make room); idempotent."""
        if self.held.pop(conn.cid, None) is None:
            return
        self._per_pid[conn.pid] -= 1
        if not self._per_pid[conn.pid]:
            del self._per_pid[conn.pid]

    def _reclaim(self, s: Settings) -> bool:
        """Close the connection that most deserves it; False when none may be closed."""
        now = time.monotonic()
        victim: C | None = None
        best: tuple[int, int, float] | None = None
        for c in self.held.values():
            if not c.waiting or c.inflight:
                continue
            if c.principal is None:
                if now - c.active_at < s.hello_grace_s:
                    continue  # just connected: its hello may be on its way
                tier = 0
            else:
                tier = 1
            key = (tier, -self._per_pid[c.pid], c.active_at)
            if best is None or key < best:
                best, victim = key, c
        if victim is None:
            return False
        self.give_back(victim)
        self.reclaimed += 1
        log.debug(
            "closed connection %d of pid %d (%s) to make room",
            victim.cid,
            victim.pid,
            "no hello" if victim.principal is None else f"idle {now - victim.active_at:.1f}s",
        )
        # It waits for a frame under this scope (``waiting``): cancelling ends its reading.
        victim.idle.cancel()
        return True
