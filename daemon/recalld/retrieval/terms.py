"""Words of queries and texts: the terms a query looks for, and a snippet around them."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["make_snippet", "query_terms"]

_STOP = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()
)
_TOKEN = re.compile(r"\w+", re.UNICODE)


def query_terms(query: str) -> list[str]:
    """The words of a query that carry meaning: stop words dropped, order kept, deduped."""
    words = [w.lower() for w in _TOKEN.findall(query)]
    content = [w for w in words if w not in _STOP]
    return list(dict.fromkeys(content or words))


def make_snippet(text: str, terms: Sequence[str], width: int = 200) -> str:
    """A window of ``text`` around the first query term it contains."""
    if len(text) <= width:
        return text
    lowered = text.lower()
    positions = [i for t in terms if (i := lowered.find(t)) >= 0]
    centre = min(positions) if positions else 0
    start = max(0, min(centre - width // 3, len(text) - width))
    end = start + width
    return ("…" if start else "") + text[start:end].strip() + ("…" if end < len(text) else "")
