"""Time cues in a query ("last week", "in 2023", "3 days ago"): whether it asks about a time
and the window it names, for memory_search's temporal boost. Pure: the query and the clock.
Every pattern is a bounded alternation scanned once, linear in the query."""

from __future__ import annotations

import calendar
import re

__all__ = ["temporal_window"]

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_CUE = re.compile(
    # Whole words only: "ago" is no cue inside "agony", nor "today" inside "todays".
    r"\b(?:when|timelines?|histor(?:y|ies)|chronolog\w*|ago|yesterday|today|recently|"
    r"last time|(?:this|last|past) (?:\d+ )?(?:days?|weeks?|months?|years?)|in (?:19|20)\d\d|"
    r"(?:since|in|during) (?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r"))\b",
    re.IGNORECASE,
)
_SPAN = re.compile(r"\b(this|last|past) (\d+ )?(day|week|month|year)s?\b", re.IGNORECASE)
_AGO = re.compile(r"\b(\d+) (day|week|month|year)s? ago\b", re.IGNORECASE)
_YEAR = re.compile(r"\bin ((?:19|20)\d\d)\b", re.IGNORECASE)
_UNIT = {"day": 86400.0, "week": 7 * 86400.0, "month": 30 * 86400.0, "year": 365 * 86400.0}


def temporal_window(query: str, now: float) -> tuple[bool, float | None, float | None]:
    """(has a temporal cue, window start, window end); an open window is None, None."""
    if not _CUE.search(query):
        return False, None, None
    q = query.lower()
    midnight = now - (now % 86400)
    if "yesterday" in q:
        return True, midnight - 86400, midnight
    if "today" in q:
        return True, midnight, now
    if m := _AGO.search(q):
        unit = _UNIT[m.group(2)] * int(m.group(1))
        return True, now - unit - _UNIT[m.group(2)], now - unit + _UNIT[m.group(2)]
    if m := _SPAN.search(q):
        which, n, unit = m.group(1), int(m.group(2) or 1), _UNIT[m.group(3)]
        if which == "last" and not m.group(2):
            return True, now - 2 * unit, now - unit
        return True, now - n * unit, now
    if m := _YEAR.search(q):
        start = calendar.timegm((int(m.group(1)), 1, 1, 0, 0, 0))
        return True, float(start), float(calendar.timegm((int(m.group(1)) + 1, 1, 1, 0, 0, 0)))
    return True, None, None
