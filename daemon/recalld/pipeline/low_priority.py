"""One thread at the lowest CPU priority, for work no one is waiting on.

The embedding backlog is such work: a capture is acknowledged on commit and embedded behind,
so under load the model would otherwise take CPU from the searches and stores that clients
are waiting for (on two cores, a fifth of the machine in the mixed-load benchmark). On Linux
a thread's nice value is its own, and threads it starts inherit it: the model's runtime is
built here, so its pool threads run at this priority too. Elsewhere the nice value is the
process's, and this thread runs at normal priority.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["LowPriorityThread"]

T = TypeVar("T")

# The lowest nice value: such a thread gets the CPU that normal threads leave (a nice-19
# thread beside a busy one still gets about 1.5%, so the backlog is never stuck).
LOWEST = 19


def _lower_this_thread() -> None:
    if sys.platform == "linux":
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST)


class LowPriorityThread:
    """Runs callables one at a time on its own thread, at the lowest priority."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name, initializer=_lower_this_thread)

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on the thread. Cancelling the caller abandons a call that has
        started (it finishes on the thread) and drops one that has not."""
        return await asyncio.wrap_future(self._pool.submit(fn, *args))

    def close(self) -> None:
        """Drop what has not started; a running call finishes on its own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
