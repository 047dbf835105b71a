"""Live figures for the overview: the daemon's status, sampled, with the last minutes kept.

One task polls ``status`` at a fixed interval and keeps a bounded ring of samples; every
open overview page listens for the next sample (server-sent events) instead of polling the
daemon itself, so ten open tabs cost the daemon one request per interval.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import anyio

from .. import protocol as p
from ..client import DaemonUnavailable, RemoteError
from .link import DaemonLink

__all__ = ["Sample", "Telemetry"]

# Ten minutes at the default two-second interval.
_KEEP = 300


@dataclass(frozen=True, slots=True)
class Sample:
    ts: float
    # Actor name -> items per second over the last minute, and queue depth.
    per_s: dict[str, float]
    queued: dict[str, int]
    search_p50: float | None
    search_p99: float | None
    records: int


@dataclass(slots=True)
class Telemetry:
    link: DaemonLink
    interval_s: float = 2.0
    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=_KEEP))
    report: p.StatusReport | None = None
    # Why the last poll failed (daemon away, refused); None while polls succeed.
    error: str | None = None
    _fresh: anyio.Event = field(default_factory=anyio.Event)

    async def run(self) -> None:
        """Poll until cancelled; a failed poll is remembered and shown, never raised."""
        while True:
            await self.poll()
            await anyio.sleep(self.interval_s)

    async def poll(self) -> None:
        try:
            reply = await self.link.call(p.Status(), p.StatusResult)
        except (DaemonUnavailable, RemoteError) as exc:
            self.error = str(exc)
        else:
            self.error = None
            self.report = reply.report
            self.samples.append(_sample(reply.report))
        fresh, self._fresh = self._fresh, anyio.Event()
        fresh.set()

    async def next(self) -> None:
        """Wait for the next poll."""
        await self._fresh.wait()

    def series(self, pick: str) -> list[float]:
        """One figure over the kept samples, oldest first (missing values as 0)."""
        out: list[float] = []
        for s in self.samples:
            if pick == "search_p50":
                out.append(s.search_p50 or 0.0)
            elif pick == "search_p99":
                out.append(s.search_p99 or 0.0)
            elif pick == "records":
                out.append(float(s.records))
            else:
                kind, _, actor = pick.partition(":")
                out.append(float((s.per_s if kind == "per_s" else s.queued).get(actor, 0)))
        return out


def _sample(report: p.StatusReport) -> Sample:
    return Sample(
        ts=time.time(),
        per_s={a.name: a.per_s for a in report.actors},
        queued={a.name: a.queue_depth for a in report.actors},
        search_p50=report.search_latency_ms.p50,
        search_p99=report.search_latency_ms.p99,
        records=sum(v.get("total", 0) for v in report.records.values()),
    )
