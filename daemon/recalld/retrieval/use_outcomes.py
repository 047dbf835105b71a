"""What became of a memory when it was used: recent ignored and contradicted uses that nothing
since has cleared, as the factor memory_search scores with and the outcomes it reports."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from recall_client import protocol as p

from ..store.port import MemoryRow, Reader, UseRow

__all__ = ["Outcomes", "judge_uses", "use_outcomes"]

NEGATIVE_WINDOW_DAYS = 30.0
NEGATIVES_PER_HIT = 2


@dataclass(slots=True)
class Outcomes:
    factor: float = 1.0
    negatives: list[p.NegativeOutcome] = field(default_factory=list)
    unresolved_contradiction: bool = False


def use_outcomes(reader: Reader, rows: Iterable[MemoryRow], now: float) -> dict[int, Outcomes]:
    """Recent negative uses not cleared since by a use, a correction, an update or a verify."""
    rows = list(rows)
    if not rows:
        return {}
    # Only uses after the last verification (an update verifies) and inside the window count.
    since = {r.rowid: max(r.last_verified_at, now - NEGATIVE_WINDOW_DAYS * 86400) for r in rows}
    return judge_uses(reader.memories.uses(list(since)), since)


def judge_uses(uses: Iterable[UseRow], since: Mapping[int, float]) -> dict[int, Outcomes]:
    """Each memory's outcomes from its uses, newest first (as the store lists them), those
    after ``since[rowid]``: walking back, a use or a correction clears everything older; the
    ignored and contradicted uses before it lower the factor (a contradiction twice as much,
    saturating at 0.7) and the first of each kind is reported, at most two a memory."""
    out = {rowid: Outcomes() for rowid in since}
    seen: dict[int, dict[str, int]] = {}
    cleared: set[int] = set()
    for use in uses:
        rowid, outcome, ts, note = use.rowid, use.outcome, use.ts, use.note
        # An injection says nothing yet of what became of the memory.
        if outcome == "injected" or rowid in cleared or ts <= since[rowid]:
            continue
        if outcome in ("used", "corrected"):
            cleared.add(rowid)
            continue
        counts = seen.setdefault(rowid, {"ignored": 0, "contradicted": 0})
        if counts[outcome] == 0 and len(out[rowid].negatives) < NEGATIVES_PER_HIT:
            out[rowid].negatives.append(p.NegativeOutcome(outcome=outcome, ts=ts, note=note))
        counts[outcome] += 1
    for rowid, counts in seen.items():
        weighted = counts["ignored"] + 2 * counts["contradicted"]
        out[rowid].factor = 1.0 - 0.3 * (1.0 - math.exp(-weighted / 2.0))
        out[rowid].unresolved_contradiction = counts["contradicted"] > 0
    return out
