"""Which connection the running request came in on, for what must be fair between them.

The edge sets it for each connection's tasks (a context variable: every request task started
from the connection's own task inherits it); the search actor gives its workers' turns by it.
Anything the daemon asks of itself (housekeeping, start-up) is asker 0.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["ASKER"]

ASKER: ContextVar[int] = ContextVar("recalld_asker", default=0)
