"""A one-line progress bar on stderr, shown only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``label [#####.....] 42%  420/1000`` redrawn in place, at most ten times a second.

    Silent when the stream is not a TTY, so pipes and logs get only the final summary the
    command prints itself.
    """

    def __init__(self, label: str, total: int | None, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._stream = stream or sys.stderr
        self._enabled = self._stream.isatty()
        self._drawn = 0.0

    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int) -> None:
        self.done = done
        now = time.monotonic()
        if self._enabled and now - self._drawn >= 0.1:
            self._drawn = now
            self._draw()

    def _draw(self) -> None:
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(frac * 30)
            line = f"{self.label} [{bar:<30}] {frac:4.0%}  {self.done}/{self.total}"
        else:
            line = f"{self.label} {self.done}"
        self._stream.write("\r\x1b[K" + line)
        self._stream.flush()

    def close(self) -> None:
        if self._enabled:
            self._draw()
            self._stream.write("\n")
            self._stream.flush()
