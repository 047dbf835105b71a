"""What every actor is: the contract the app runs and the status report reads.

An actor is a long-lived task with one bounded inbox (a memory object stream). It records
its own work in :class:`ActorStats`, says where it is in its life in :class:`ActorState`,
and tells the pipeline's settledness watch when it has gone idle (``on_change``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Protocol

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream

from .stats import ActorStats

__all__ = ["Actor", "ActorBase", "ActorState"]


class ActorState(enum.StrEnum):
    """Where an actor is in its life (a str, as the status report shows it)."""

    STARTING = "starting"
    # The embedding actor runs but embeds nothing until the model has loaded.
    WAITING_FOR_MODEL = "waiting for model"
    RUNNING = "running"
    STOPPED = "stopped"


class Actor(Protocol):
    name: str
    state: ActorState
    stats: ActorStats
    # Nothing in hand; with an empty inbox, the actor has nothing left to do.
    idle: bool
    on_change: Callable[[], None]

    def queue_depth(self) -> tuple[int, int]: ...

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None: ...


class ActorBase:
    """The members :class:`Actor` asks for, around the actor's inbox."""

    name: str

    def __init__(self, inbox: MemoryObjectReceiveStream[Any], *, idle: bool = True) -> None:
        self._inbox_statistics = inbox.statistics
        self.stats = ActorStats()
        self.state = ActorState.STARTING
        self.idle = idle
        # Called when the actor may have gone idle (the pipeline's settledness is looked at
        # again); the app sets it.
        self.on_change: Callable[[], None] = lambda: None

    def queue_depth(self) -> tuple[int, int]:
        """(items waiting in the inbox, its capacity)."""
        s = self._inbox_statistics()
        return s.current_buffer_used, int(s.max_buffer_size)
