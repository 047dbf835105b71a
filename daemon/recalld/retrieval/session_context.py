"""Session context: ranking a record together with its neighbours in its session.

A conversation turn often means little alone ("yes, the one at the lake!"): the words a
query looks for are in the turns around it. So retrieval scores each of its best candidates,
and each record near one in its session, as the weighted mean of its own fused score and
its neighbours' (see :func:`in_context`).

That only helps where a session's order carries meaning. Whether it does is measured, not
assumed, per workspace and kind (see :func:`ordered`): adjacent records of a session must
share more words than records of the same session far apart, by a margin a t-test calls
significant. Where they do not (notes stored in any order, shuffled data, sessions that are
just connections), records keep their own scores and retrieval is plain fusion.
"""

from __future__ import annotations

import math
import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass

from ..store.port import Reader
from .terms import query_terms

__all__ = [
    "CONTEXT_CANDIDATES",
    "CONTEXT_WEIGHT",
    "CONTEXT_WINDOW",
    "in_context",
    "neighbours",
    "ordered",
]

# How many places each side of a record count as its context, and the weight of each
# neighbour's score against the record's own (see in_context).
CONTEXT_WINDOW = 2
CONTEXT_WEIGHT = 0.5
# The best fused candidates that are ranked in context, with their neighbours; the rest
# are too far down to reach the top of the list.
CONTEXT_CANDIDATES = 50

# The order test: the most recent records of a workspace's kind it reads, the fewest pairs
# it decides on, and the one-sided t it needs (3: a chance of about 1 in 700 that unordered
# sessions pass).
ORDER_SAMPLE = 1_000
ORDER_MIN_PAIRS = 30
ORDER_T = 3.0
# How long a verdict stands: sessions change as records arrive; a verdict drawn on a small
# sample is taken again sooner.
ORDER_TTL_S, ORDER_TTL_SMALL_S = 600.0, 30.0


def neighbours(
    reader: Reader,
    rowids: list[int],
    window: int,
    *,
    test_order: bool = True,
    previous: dict[int, int] | None = None,
) -> dict[int, list[int]]:
    """``{rowid: neighbours}``: the records within ``window`` places of it in its session,
    for every record of ``rowids`` and every neighbour of one. A record without a session,
    or in a workspace whose sessions fail the order test (unless ``test_order`` is off),
    has none. ``previous``, when given, is filled with the record right before each record
    of the result that has one.

    One statement reads ``2 * window`` places each side of each record: that run of the
    session holds the whole window of every record within ``window`` of its centre (where
    the run is shorter, the session ends there).
    """
    out: dict[int, list[int]] = {}
    verdicts: dict[tuple[str, str], bool] = {}
    for rowid, workspace, kind, earlier, later in reader.search.neighbours(rowids, 2 * window):
        if test_order:
            if (workspace, kind) not in verdicts:
                verdicts[workspace, kind] = ordered(reader, workspace, kind)
            if not verdicts[workspace, kind]:
                continue
        run = [*reversed(earlier), rowid, *later]
        centre = len(earlier)
        for i in range(max(0, centre - window), min(len(run), centre + window + 1)):
            if previous is not None and i > 0:
                previous.setdefault(run[i], run[i - 1])
            if run[i] not in out:
                out[run[i]] = [
                    run[j]
                    for j in range(max(0, i - window), min(len(run), i + window + 1))
                    if j != i
                ]
    for rowid in rowids:  # no session, or no order in it: no neighbours
        out.setdefault(rowid, [])
    return out


def in_context(
    scores: dict[int, float], near: dict[int, list[int]], weight: float
) -> dict[int, float]:
    """Score each record of ``near`` together with its session neighbours: the weighted
    mean of its own score and theirs (weight 1 for itself, ``weight`` for each).

    Smoothing over the session lets a turn rise with its context, and lets a record that
    matched alone in an unrelated stretch sink a little. A record without neighbours keeps
    its score. Only the records ``near`` covers are scored; the rest are dropped.
    """
    out: dict[int, float] = {}
    for rowid, around in near.items():
        total = scores.get(rowid, 0.0) + weight * sum(scores.get(n, 0.0) for n in around)
        # A channel's weakest candidate normalises to 0 yet was found: it stays. A neighbour
        # only joins when its context gives it something.
        if total > 0 or rowid in scores:
            out[rowid] = total / (1.0 + weight * len(around))
    return out


# ---------------------------------------------------------------------------- order test


@dataclass(frozen=True, slots=True)
class OrderVerdict:
    ordered: bool
    pairs: int
    t: float
    at: float


# (database file, workspace, kind) -> verdict. Shared by the search workers' threads: a
# verdict is replaced whole, and two workers that both find it stale compute the same.
_verdicts: dict[tuple[str, str, str], OrderVerdict] = {}
_verdicts_lock = threading.Lock()


def ordered(reader: Reader, workspace: str, kind: str) -> bool:
    """Whether the order of ``workspace``'s ``kind`` records within their sessions carries
    meaning (see :func:`order_test`), from a verdict cached for a while."""
    key = (reader.search.database_id(), workspace, kind)
    now = time.monotonic()
    verdict = _verdicts.get(key)
    if verdict is not None:
        ttl = ORDER_TTL_S if verdict.pairs >= ORDER_SAMPLE // 2 else ORDER_TTL_SMALL_S
        if now - verdict.at < ttl:
            return verdict.ordered
    verdict = order_test(reader, workspace, kind, now)
    with _verdicts_lock:
        _verdicts[key] = verdict
    return verdict.ordered


def _words(text: str) -> frozenset[str]:
    return frozenset(query_terms(text))


def order_test(reader: Reader, workspace: str, kind: str, now: float) -> OrderVerdict:
    """Do adjacent records of a session share more words than records of it far apart?

    Over the most recent records, each record is paired with the next one in its session
    and with one of the same session more than a window away, drawn at random with a seed
    fixed per workspace (so the verdict is reproducible). The per-record difference of word
    overlap (Jaccard, each word weighted by its IDF in the sample) must be above zero by
    ``ORDER_T`` standard errors, over at least
    ``ORDER_MIN_PAIRS`` records; too few records give no evidence of order, so no context.
    """
    rows = reader.search.session_sample(workspace, kind, ORDER_SAMPLE)
    sessions: dict[str, list[frozenset[str]]] = {}
    for session, text in rows:
        sessions.setdefault(session, []).append(_words(text))
    # Words weigh by their rarity in the sample: a word in every other record (a speaker's
    # name, a project's name) says nothing about what two records share.
    df = Counter(w for words in sessions.values() for record in words for w in record)
    weight = {w: math.log(len(rows) / n) for w, n in df.items()}
    rng = random.Random(f"{workspace}\0{kind}")
    diffs = []
    for words in sessions.values():
        for i in range(len(words) - 1):
            far = [j for j in range(len(words)) if abs(j - i) > CONTEXT_WINDOW]
            if far:
                j = rng.choice(far)
                diffs.append(
                    _overlap(words[i], words[i + 1], weight) - _overlap(words[i], words[j], weight)
                )
    if len(diffs) < ORDER_MIN_PAIRS:
        return OrderVerdict(ordered=False, pairs=len(diffs), t=0.0, at=now)
    mean = statistics.fmean(diffs)
    sd = statistics.stdev(diffs)
    t = mean / (sd / math.sqrt(len(diffs))) if sd > 0 else (math.inf if mean > 0 else 0.0)
    return OrderVerdict(ordered=t >= ORDER_T, pairs=len(diffs), t=t, at=now)


def _overlap(a: frozenset[str], b: frozenset[str], weight: dict[str, float]) -> float:
    """Weighted Jaccard: the weight of the words both share over that of all they hold."""
    union = sum(weight[w] for w in a | b)
    return sum(weight[w] for w in a & b) / union if union else 0.0
