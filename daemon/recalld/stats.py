"""What an actor records of its own work, for status."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

__all__ = ["THROUGHPUT_WINDOW_S", "ActorStats"]

# Throughput is measured over the last minute.
THROUGHPUT_WINDOW_S = 60.0


@dataclass(slots=True)
class ActorStats:
    processed: int = 0
    errors: int = 0
    batches: int = 0
    last_batch: int = 0
    commit_failures: int = 0
    last_error: str | None = None
    # (monotonic time, processed then), one a batch, for the last minute.
    _marks: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=4096))

    def batch(self, size: int) -> None:
        self.batches += 1
        self.last_batch = size
        self._marks.append((time.monotonic(), self.processed))

    def failed(self, n: int, why: str) -> None:
        self.errors += n
        self.last_error = why[:500]

    def per_second(self) -> float:
        """Items processed per second over the last minute (0 when idle that long)."""
        now = time.monotonic()
        while self._marks and now - self._marks[0][0] > THROUGHPUT_WINDOW_S:
            self._marks.popleft()
        if not self._marks:
            return 0.0
        start, before = self._marks[0]
        elapsed = max(now - start, 1.0)
        return round((self.processed - before) / elapsed, 2)
