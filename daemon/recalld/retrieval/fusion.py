"""Retrieval: the lexical and semantic channels, fused, then scored in session context, and
for memory_search ranked again by the learned second stage (:mod:`.ranker`).

Every reader (memory, work and experience search) passes its own reader contract as a
:class:`~recalld.store.port.Filter`; both channels and the session context apply it alike, so
no channel can see more than another and context never surfaces a record it hides.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..store.port import Filter, Reader
from . import ranker, relevance, session_context
from .terms import FAMILY_MIN, fts_tokens, fts_words, kin, porter

__all__ = [
    "CHANNEL_DEPTH",
    "LEXICAL_WEIGHT",
    "RRF_K",
    "Candidate",
    "PendingVector",
    "QueryVector",
    "fuse",
    "retrieve",
    "semantic_threads",
    "vector_of",
]

# Rank-based scores (memory_search's keyword mode ranks by term coverage with these).
RRF_K = 60
# Candidates each channel contributes to fusion: deep enough that fusion and context can
# reorder, bounded so a common word cannot make one search read the whole table.
CHANNEL_DEPTH = 100
# Share of the lexical channel in fusion (the semantic one has the rest). Lexical leads: a
# small general-purpose embedding model is the weaker ranker on the specific nouns, names
# and events people search their memory for, so meaning extends and reorders what the words
# found rather than outvoting them.
LEXICAL_WEIGHT = 0.7


# How long a search waits for its query's vector before it goes on lexical-only.
VECTOR_WAIT_S = 30.0


class PendingVector:
    """A query's vector while the model embeds it: the search runs its lexical channel in the
    meantime (ONNX Runtime and SQLite both release the GIL) and waits only for the semantic
    one. Filled once from the event loop, read in a search worker's thread."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._vec: np.ndarray | None = None

    def set(self, vec: np.ndarray | None) -> None:
        self._vec = vec
        self._done.set()

    def wait(self) -> np.ndarray | None:
        """The vector; None when embedding failed or took longer than VECTOR_WAIT_S."""
        self._done.wait(VECTOR_WAIT_S)
        return self._vec

    def came(self) -> bool:
        """Whether a vector came, without waiting: False while the model still embeds (ask
        once the embedding is done) or when it failed."""
        return self._done.is_set() and self._vec is not None


# A read's query vector: ready, on its way, or none (lexical only).
QueryVector = np.ndarray | PendingVector | None


def vector_of(qvec: QueryVector) -> np.ndarray | None:
    """The vector itself, waiting for one on its way."""
    return qvec.wait() if isinstance(qvec, PendingVector) else qvec


# The semantic channel runs beside the lexical one, in a thread of its own: waiting for the
# query's vector and FAISS's search need no database, and FAISS and SQLite both release the
# GIL, so on two cores a hybrid search takes about the longer of the two, not their sum.
# Bounded: more searches at once than threads here wait for one.
SEMANTIC_THREADS = 4


@contextmanager
def semantic_threads(threads: int = SEMANTIC_THREADS) -> Iterator[ThreadPoolExecutor]:
    """Threads for the semantic channel to run in beside the lexical one, for the ``with``
    block's life: the app opens its store's readers with them (their ``search.beside``) and
    holds them on its exit stack, so they stop with the daemon. A reader without them runs
    the channels one after the other, with the same result."""
    pool = ThreadPoolExecutor(threads, thread_name_prefix="recalld semantic")
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass(slots=True)
class Candidate:
    """One record found by retrieval, with what each channel said of it."""

    rowid: int
    score: float  # in 0..1 (fused, or the learned ranking's); higher is better
    lexical_rank: int | None = None  # 0-based rank in the lexical channel
    semantic_rank: int | None = None  # 0-based rank in the cosine channel
    cosine: float | None = None
    # Learned ranking only: the weighted share of the query's words the record holds with
    # its session neighbours (what a turn that means little alone is found by), 0..1.
    context_evidence: float | None = None
    # memory_search only: the share of the query's informative words the record holds
    # (relevance.informative_coverage over all the candidates), 0..1.
    coverage: float | None = None


def retrieve(
    reader: Reader,
    terms: Sequence[str],
    qvec: QueryVector,
    where: Filter,
    *,
    limit: int,
    query: str = "",
    lexical_weight: float = LEXICAL_WEIGHT,
    context_window: int = session_context.CONTEXT_WINDOW,
    context_weight: float = session_context.CONTEXT_WEIGHT,
    learned: bool = False,
) -> list[Candidate]:
    """Candidates for a query, best first: the lexical and (when ``qvec`` is given and the
    store has vectors) the semantic channel under ``where``, fused (see :func:`fuse`), then
    scored in the context of each record's session (``context_window=0`` turns it off). The
    semantic channel runs beside the lexical one (a :class:`PendingVector` is waited for
    there).

    With ``learned`` (memory_search), when both channels ran, that first stage is ranked
    again by the learned ranking (:mod:`.ranker`); ``query`` (its text) tells it the names.
    """
    search = reader.search
    beside: Future[list[tuple[int, float]] | None] | None = None
    wanted = qvec is not None and search.has_vectors()
    if wanted and qvec is not None and search.beside is not None:
        beside = search.beside.submit(_semantic, reader, qvec, where)
    lexical = search.lexical(terms, where, CHANNEL_DEPTH) if terms else []
    if beside is not None:
        semantic = beside.result()
    else:
        semantic = _semantic(reader, qvec, where) if wanted and qvec is not None else None
    use_vectors = semantic is not None
    semantic = semantic or []
    # Weights are shared among the channels that ran: a channel that ran and found nothing
    # keeps its share, so meaning alone (no word of the query anywhere) cannot score full.
    ran = [(lexical, lexical_weight)] if terms else []
    if use_vectors:
        ran.append((semantic, 1.0 - lexical_weight))
    found = fuse(ran)
    near: dict[int, list[int]] = {}
    previous: dict[int, int] = {}
    if context_window > 0 and found:
        best = sorted(found, key=lambda rowid: -found[rowid])[
            : max(limit, session_context.CONTEXT_CANDIDATES)
        ]
        near = session_context.neighbours(reader, best, context_window, previous=previous)
        scores = session_context.in_context(found, near, context_weight)
    else:
        scores = found
    # Neighbours came from the session, not from a channel: keep only those the caller's
    # contract allows, like every other candidate.
    if added := [rowid for rowid in scores if rowid not in found]:
        allowed = search.visible(added, where)
        scores = {rowid: s for rowid, s in scores.items() if rowid in found or rowid in allowed}
    evidence: dict[int, float] = {}
    coverage: dict[int, float] = {}
    if learned and terms and scores:
        # Every candidate's words are read once: for its coverage (how informative a word is
        # depends on how many candidates hold it) and for the learned ranking's features.
        pool = list(scores)
        texts = search.texts(pool)
        holding = _holding(texts)
        coverage = relevance.informative_coverage(terms[: ranker.MAX_TERMS], pool, holding)
    if learned and terms and use_vectors and scores:
        kept = set(pool)
        rows = ranker.features(
            pool,
            terms=terms,
            names=ranker.query_names(query),
            lexical=lexical,
            semantic=semantic,
            fused=found,
            in_context=scores,
            near={r: [n for n in near.get(r, ()) if n in kept] for r in pool},
            holding=holding,
            depth=CHANNEL_DEPTH,
            texts=texts,
            # The record before, when the caller may see it (a hidden one says nothing).
            before={r: b for r, b in previous.items() if b in kept},
        )
        scores = ranker.on_scale(dict(zip(pool, ranker.rank(rows), strict=True)), scores)
        evidence = dict(zip(pool, ranker.context_evidence(rows), strict=True))
    lexical_rank = {rowid: i for i, (rowid, _) in enumerate(lexical)}
    semantic_rank = {rowid: (i, cos) for i, (rowid, cos) in enumerate(semantic)}
    out = []
    for rowid, score in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]:
        sem = semantic_rank.get(rowid)
        out.append(
            Candidate(
                rowid=rowid,
                score=score,
                lexical_rank=lexical_rank.get(rowid),
                semantic_rank=sem[0] if sem else None,
                cosine=sem[1] if sem else None,
                context_evidence=evidence.get(rowid),
                coverage=coverage.get(rowid),
            )
        )
    return out


def _semantic(
    reader: Reader, qvec: np.ndarray | PendingVector, where: Filter
) -> list[tuple[int, float]] | None:
    """The semantic channel's candidates; None when the query has no vector after all."""
    vec = vector_of(qvec)
    return None if vec is None else reader.search.semantic(vec, where, CHANNEL_DEPTH)


def _holding(texts: dict[int, str]) -> Callable[[str, Sequence[int]], set[int]]:
    """Which records hold a query word, as FTS5 tokenizes and stems it (:func:`fts_tokens`;
    PostgreSQL's lexemes are made to match FTS5's): a word of several tokens, all of them; a
    word of one, it or a word of its family (:func:`~.terms.kin`).

    Only a text's words that could stem to a query word's stem or its family are stemmed:
    a word and its stem differ in at most their last three letters (``ability``, ``abil``;
    ``staging``, ``stage``: see :class:`~.terms.Coverage`), and a family's stems share their
    first :data:`~.terms.FAMILY_MIN`, so its words share the first two.
    """
    words = {rowid: fts_words(text) for rowid, text in texts.items()}
    stems: dict[int, set[str]] = {}
    looked: dict[int, set[str]] = {}

    def holding(term: str, rowids: Sequence[int]) -> set[int]:
        want = fts_tokens(term)
        if not want:
            return set()
        for stem in want:
            start = stem[: max(1, min(len(stem), FAMILY_MIN) - 3)]
            for rowid in rowids:
                seen = looked.setdefault(rowid, set())
                if start not in seen:
                    seen.add(start)
                    stems.setdefault(rowid, set()).update(
                        porter(w) for w in words.get(rowid, ()) if w.startswith(start)
                    )
        if len(want) == 1:
            return {r for r in rowids if any(kin(h, want[0]) for h in stems.get(r, ()))}
        return {r for r in rowids if all(t in stems.get(r, ()) for t in want)}

    return holding


def fuse(
    channels: Sequence[tuple[Sequence[tuple[int, float]], float]], depth: int = CHANNEL_DEPTH
) -> dict[int, float]:
    """Weighted sum of each channel's scores, each scaled to 0..1 between its floor and top.

    Normalising per query puts bm25 (unbounded) and cosine (model-dependent range) on one
    0..1 scale while keeping how far apart the candidates are, which RRF throws away: a
    record far ahead in one channel stays ahead. The weights of the channels given are
    renormalised to sum to 1, so a lexical-only search scores like bm25 alone.
    """
    total = sum(w for _, w in channels)
    live = [(chan, w) for chan, w in channels if chan and w > 0]
    out: dict[int, float] = {}
    for chan, w in live:
        hi = max(s for _, s in chan)
        # A channel cut at its depth has the rest of the store below its weakest candidate:
        # that is its floor. A shorter one returned all it found; its floor is "unrelated", 0.
        lo = min(s for _, s in chan) if len(chan) >= depth else min(0.0, *(s for _, s in chan))
        span = hi - lo
        for rowid, s in chan:
            norm = (s - lo) / span if span > 0 else 1.0
            out[rowid] = out.get(rowid, 0.0) + w / total * norm
    return out
