"""The second stage of hybrid retrieval: a learned linear ranking over what the first stage
already knows of each candidate.

Fusion with fixed weights follows whichever channel is strong on the data it was tuned on.
This stage weighs the evidence per query instead: each candidate of the first stage (the
fused best and, where sessions are ordered, their session neighbours) is described by a few
numbers (:data:`FEATURES`) -- its score and rank in each channel, the share of the query's
words it holds alone and together with its neighbours, its neighbours' channel scores, each
channel's score times how confident that channel is for this query, whether it asks a
question or answers one -- and ranked by a weighted sum of them (:data:`WEIGHTS`), keeping
the first stage's scores (:func:`on_scale`).

The weights are a pairwise logistic regression (each relevant candidate of a query against
every other candidate of it, L2 10) fitted on LoCoMo by ``scripts/retrieval_lab.py``, which
also scores it leave-one-conversation-out (fitted on nine conversations, scored on the
tenth) and on variants of LoCoMo it was not fitted on; nothing is downloaded.

Words are matched as the lexical channel matches them (:func:`.terms.fts_tokens`: FTS5's
tokenizer and Porter stemmer, which PostgreSQL's lexemes are made to follow), over the
candidates' texts, so coverage and bm25 agree on what matched and both engines compute the
same features. A word weighs by its rarity among the candidates: a name in every candidate
says little about which one is meant.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence

from .relevance import cosine_evidence, rarity

__all__ = [
    "FEATURES",
    "MAX_TERMS",
    "WEIGHTS",
    "context_evidence",
    "features",
    "on_scale",
    "query_names",
    "rank",
]

# Query words matched against the candidates, at most.
MAX_TERMS = 12

FEATURES = (
    "lexical",  # min-max normalised bm25 in the lexical channel (0: not found by it)
    "semantic",  # min-max normalised cosine in the semantic channel (0: not found by it)
    "cosine",  # calibrated cosine, 0..1 (0: below noise, or not found)
    "coverage",  # weighted share of the query's words the record holds
    "context_coverage",  # what its session neighbours add to that share
    "context_lexical",  # mean lexical score of its neighbours
    "context_semantic",  # mean semantic score of its neighbours
    "fused",  # the first stage's fused score
    "in_context",  # the first stage's score in session context
    "lexical_rank",  # 1 / (1 + rank) in the lexical channel (0: not found)
    "semantic_rank",  # 1 / (1 + rank) in the semantic channel (0: not found)
    "best_neighbour",  # the best lexical score among its neighbours
    # How sure each channel is of this query: the share of the query's words its top hit
    # holds (lexical), its top hit's calibrated cosine (semantic). A constant per query says
    # nothing of the order; times a candidate's channel score, it weighs that channel.
    "lexical_x_confidence",  # lexical * the lexical channel's confidence
    "semantic_x_confidence",  # semantic * the semantic channel's confidence
    "coverage_x_confidence",  # coverage * the lexical channel's confidence
    "content_coverage",  # coverage with its neighbours over the words that are not names
    "question",  # the record asks (ends with a question mark): it seldom holds the answer
    "answers_question",  # the record right before it in its session asks
)

# Fitted weights, in the order of FEATURES (scripts/retrieval_lab.py prints them).
WEIGHTS: tuple[float, ...] = (
    -1.0464,
    2.9646,
    0.7725,
    10.4603,
    2.9261,
    -1.0993,
    1.1823,
    0.1569,
    7.0935,
    0.5378,
    -0.1448,
    0.0145,
    -2.7120,
    -2.6649,
    -2.6912,
    1.2155,
    -1.0426,
    0.8097,
)

_NAME = re.compile(r"\b[A-Z][a-z]+")


def query_names(query: str) -> frozenset[str]:
    """The capitalised words of a query but its first, lower-cased: names, mostly."""
    return frozenset(m.group(0).lower() for m in _NAME.finditer(query[1:]))


def _minmax(chan: Sequence[tuple[int, float]], depth: int) -> dict[int, float]:
    """A channel's scores in 0..1 between its floor and top, as fusion scales them."""
    if not chan:
        return {}
    hi = max(s for _, s in chan)
    lo = min(s for _, s in chan) if len(chan) >= depth else min(0.0, *(s for _, s in chan))
    span = hi - lo
    return {r: (s - lo) / span if span > 0 else 1.0 for r, s in chan}


def features(
    pool: Sequence[int],
    *,
    terms: Sequence[str],
    names: frozenset[str],
    lexical: Sequence[tuple[int, float]],
    semantic: Sequence[tuple[int, float]],
    fused: Mapping[int, float],
    in_context: Mapping[int, float],
    near: Mapping[int, Sequence[int]],
    holding: Callable[[str, Sequence[int]], set[int]],
    depth: int,
    texts: Mapping[int, str],
    before: Mapping[int, int],
) -> list[list[float]]:
    """One row of :data:`FEATURES` for each record of ``pool``.

    ``near``: each record's session neighbours (none where the order test failed), and
    ``before`` the one right before it; ``holding(term, rowids)``: those of ``rowids`` that
    hold ``term`` as the lexical channel matches it; ``texts``: the pool's.
    """
    if not pool:
        return []
    lex, sem = _minmax(lexical, depth), _minmax(semantic, depth)
    lex_rank = {r: i for i, (r, _) in enumerate(lexical)}
    sem_rank = {r: i for i, (r, _) in enumerate(semantic)}
    cosine = dict(semantic)
    words = list(terms)[:MAX_TERMS]
    holders = [holding(t, pool) for t in words]
    # A word held by many candidates tells little about which one is meant.
    weight = [rarity(len(pool), len(h)) for h in holders]
    total = sum(weight) or 1.0
    names_mask = sum(1 << i for i, t in enumerate(words) if t in names)
    # Which words each record holds, as a bit mask; a mask's weight once per distinct mask.
    held = {r: sum(1 << i for i, h in enumerate(holders) if r in h) for r in pool}
    weights: dict[int, float] = {}

    def weigh(mask: int) -> float:
        if mask not in weights:
            weights[mask] = sum(w for i, w in enumerate(weight) if mask >> i & 1)
        return weights[mask]

    content_total = weigh(((1 << len(words)) - 1) & ~names_mask) or 1.0

    def holds(rows: Sequence[int]) -> int:
        mask = 0
        for r in rows:
            mask |= held.get(r, 0)
        return mask

    lex_conf = weigh(holds([lexical[0][0]])) / total if lexical else 0.0
    sem_conf = cosine_evidence(semantic[0][1]) if semantic else 0.0

    def asks(rowid: int | None) -> float:
        return 1.0 if rowid is not None and texts.get(rowid, "").rstrip().endswith("?") else 0.0

    rows = []
    for r in pool:
        around = near.get(r, ())
        alone = weigh(held[r]) / total
        with_context = holds([r, *around])
        lx, sm = lex.get(r, 0.0), sem.get(r, 0.0)
        rows.append(
            [
                lx,
                sm,
                cosine_evidence(cosine.get(r)),
                alone,
                weigh(with_context) / total - alone,
                sum(lex.get(n, 0.0) for n in around) / len(around) if around else 0.0,
                sum(sem.get(n, 0.0) for n in around) / len(around) if around else 0.0,
                fused.get(r, 0.0),
                in_context.get(r, 0.0),
                1.0 / (1 + lex_rank[r]) if r in lex_rank else 0.0,
                1.0 / (1 + sem_rank[r]) if r in sem_rank else 0.0,
                max((lex.get(n, 0.0) for n in around), default=0.0),
                lx * lex_conf,
                sm * sem_conf,
                alone * lex_conf,
                weigh(with_context & ~names_mask) / content_total,
                asks(r),
                asks(before.get(r)),
            ]
        )
    return rows


def rank(rows: Sequence[Sequence[float]], weights: Sequence[float] = WEIGHTS) -> list[float]:
    """Each row's score, higher is better: exp of its weighted sum less the best one's, so
    the best scores 1 and the order is the weighted sums' (no saturation, no ties added)."""
    sums = [sum(w * x for w, x in zip(weights, row, strict=True)) for row in rows]
    top = max(sums, default=0.0)
    return [math.exp(max(-50.0, s - top)) for s in sums]


def on_scale(learned: Mapping[int, float], first: Mapping[int, float]) -> dict[int, float]:
    """The learned order on the first stage's scale: the record ranked k-th by ``learned``
    gets the k-th best of the ``first`` stage's scores.

    The weighted sums are far apart (exp of their differences would put every candidate
    but the best near 0); the first stage's scores say how far apart candidates of a query
    usually are, which memory_search's floor and its other factors are calibrated on.
    """
    order = sorted(learned, key=lambda r: (-learned[r], r))
    values = sorted((first[r] for r in order), reverse=True)
    return dict(zip(order, values, strict=True))


_ALONE, _ADDED = FEATURES.index("coverage"), FEATURES.index("context_coverage")


def context_evidence(rows: Sequence[Sequence[float]]) -> list[float]:
    """Each row's weighted share of the query's words held by the record with its session
    neighbours, 0..1."""
    return [min(1.0, row[_ALONE] + row[_ADDED]) for row in rows]
