"""Whether a memory is what a query asks for: one calibrated relevance, 0..1.

Retrieval orders candidates, but its scores are relative to the query's candidates (the best
of an unrelated lot still scores first). Relevance says, the same way for every query and
store, how likely a hit is one the agent needs: a hit of relevance 0.8 is right about four
times in five. memory_search's score, its ``relevance`` label and ``low_confidence``, and
which memories the context hook injects all read it.

Two kinds of evidence, each 0..1:

- ``lexical``: the share of the query's informative words the memory holds. A word weighs by
  its rarity among the candidates (:func:`rarity`): one every candidate holds says nothing
  of which one is meant, and a stop word (``terms.query_terms``) is not looked for at all.
- ``semantic``: the cosine of the query's and the memory's vectors, calibrated (below 0.2 is
  noise for a sentence embedder, above 0.6 close).

    relevance = 1 / (1 + exp(-(bias + lexical_w * lexical + semantic_w * semantic)))

:data:`PRIOR` is a logistic regression of "labelled relevant" on the two, over the top ten of
each query of a coding project's memory (benchdata ``codemem``, dev split), where it is
calibrated: of the hits it puts between 0.5 and 0.75, 62% are relevant; above 0.75, 86%.
The weights are a store's channel weights too: the store learns its own from what its agents
used and ignored (``learned_relevance``), starting from this prior.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recall_client import protocol as p

__all__ = [
    "CONFIDENT",
    "PRIOR",
    "Calibration",
    "cosine_evidence",
    "informative_coverage",
    "label",
    "rarity",
]

# Cosines below the first bound are noise for sentence embedders; above the second, close.
COSINE_NOISE, COSINE_SPAN = 0.2, 0.4
# A hit at least this relevant is a confident match (more likely right than not).
CONFIDENT = 0.5
# From here a hit is "high": right about five times in six on the prior's data.
HIGH = 0.75


@dataclass(frozen=True, slots=True)
class Calibration:
    """The logistic calibration of relevance: its bias and each channel's weight."""

    bias: float
    lexical: float
    semantic: float

    def relevance(self, lexical: float, semantic: float) -> float:
        z = self.bias + self.lexical * lexical + self.semantic * semantic
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))


PRIOR = Calibration(bias=-5.37, lexical=5.78, semantic=4.12)


def cosine_evidence(cosine: float | None) -> float:
    """A cosine as evidence, 0..1 (0: noise, or no vector)."""
    if cosine is None:
        return 0.0
    return min(1.0, max(0.0, (cosine - COSINE_NOISE) / COSINE_SPAN))


def rarity(candidates: int, holders: int) -> float:
    """How much a word tells which of ``candidates`` is meant when ``holders`` of them hold
    it: much when few do, little when all do."""
    return math.log(1.0 + candidates / (1.0 + holders))


def informative_coverage(
    terms: Sequence[str],
    pool: Sequence[int],
    holding: Callable[[str, Sequence[int]], set[int]],
) -> dict[int, float]:
    """Each of ``pool``'s share of the query's ``terms``, each term weighed by its
    :func:`rarity` among the pool; ``holding(term, pool)``: those of the pool holding it."""
    if not pool or not terms:
        return {r: 0.0 for r in pool}
    held = [holding(t, pool) for t in terms]
    weights = [rarity(len(pool), len(h)) for h in held]
    total = sum(weights) or 1.0
    return {r: sum(w for w, h in zip(weights, held, strict=True) if r in h) / total for r in pool}


def label(relevance: float) -> p.Relevance:
    """memory_search's ``relevance`` of a hit."""
    return "high" if relevance >= HIGH else "medium" if relevance >= CONFIDENT else "low"
