"""Whether the pipeline has settled: every stage idle, every queue empty.

Stages report each change of theirs (:meth:`Settled.changed`); a waiter re-checks then, so
waiting for the pipeline (tests, doctor, ``Status(wait_settled_s=...)``) needs no polling.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

__all__ = ["Settled"]


class Settled:
    def __init__(self) -> None:
        self._checks: list[Callable[[], bool]] = []
        self._changed = anyio.Event()

    def watch(self, check: Callable[[], bool]) -> None:
        """Add a condition the pipeline needs to be settled."""
        self._checks.append(check)

    def changed(self) -> None:
        """A stage changed (took work, or finished it): waiters look again."""
        self._changed.set()
        self._changed = anyio.Event()

    def now(self) -> bool:
        return all(check() for check in self._checks)

    async def wait(self, within_s: float) -> bool:
        """Wait at most ``within_s`` seconds for the pipeline to settle; whether it has."""
        with anyio.move_on_after(within_s):
            while not self.now():
                await self._changed.wait()
        return self.now()
