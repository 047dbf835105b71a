"""memory_search, the read side: shaping retrieval into the seeds' answer.

What it shares with memory_show (``memory_detail``), memory_list (``listing``) and the context
hooks lives beside it: the reader contract of memory reads (``memory_rows``), the one
judgement of a memory's staleness (``staleness``), what became of its uses (``use_outcomes``);
the query's time cues are ``time_cues``.

Retrieval itself (channels, fusion, query terms) is ``search.retrieve``; this module builds
the reader contract it runs under (visibility, scope and every filter, as one SQL clause),
then scores what comes back and shapes the result:

    score = order * evidence * recency * trust * outcomes * supersession

- ``order``: retrieval's fused score relative to the query's best candidate (1 for it); in
  keyword mode, the rank by term coverage. With a cross-encoder, half of it is the
  cross-encoder's score.
- ``evidence``: 0..1 by ``relevance``, how likely the hit is what the query asks for,
  calibrated the same way for every query and store (:mod:`.relevance`: the share of the
  query's informative words it holds, with its session neighbours for a conversation's turn,
  and its calibrated cosine). Full from one chance in five (:data:`EVIDENCE_FULL`): among hits
  that likely, retrieval's order stands (it orders them better than relevance alone: on
  conversations by far, docs/retrieval.md); below, the score falls with the chance, so the
  best of an unrelated lot is not scored as a match. ``relevance`` also decides
  ``low_confidence`` (no hit of at least 0.5) and what the context hook injects.
- ``recency``: 0.85..1 by age (30-day half-life), unless ``disable_recency_boost``.
- ``trust``: 0.7..1; ``outcomes``: down to 0.7 for recent ignored / contradicted uses that a
  later use, update or verification has not cleared; ``supersession``: 0.6.

A hit's ``relevance`` label is the seed's: how much of the query's wording it holds literally
(its informative words: a stop word, or one every candidate holds, is no match).
The floor (``min_score``, default 0.25) applies to the final score: the best candidate passes
it from one chance in twenty of being what the query asks for, a lower-ranked one needs more.
Hybrid ranks by the score; ``bm25`` and ``keyword`` rank by their own lexical order (with the
adjustments but not the evidence): an agent asking for a mode asks for its order.
Pinned facts (``distortion_tolerance: constraint``) whose subject the query names are served
first whatever their score. The cortex holds the current facts of the subjects of returned hits
about the query (not labelled low, or confident), plus those pinned facts. An expanded top hit
that was superseded gives its place to the current fact of its chain.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from recall_client import protocol as p

from ..domain import git_history, use_tokens
from ..domain.principal import Principal
from ..errors import RecallError
from ..store.port import Filter, MemoryRow, Reader
from . import learned_relevance
from .fusion import RRF_K, Candidate, PendingVector, QueryVector, retrieve
from .memory_rows import (
    contender,
    contested_slots,
    core_of,
    instruction_flags,
    memory_filter,
    summary,
)
from .relevance import CONFIDENT, cosine_evidence
from .rerank import Reranker
from .staleness import Checkouts, staleness
from .terms import Coverage, fts_tokens, make_snippet, query_terms
from .time_cues import temporal_window
from .use_outcomes import Outcomes, use_outcomes

__all__ = ["FLOOR", "Answer", "MemoryReader", "MemorySearchConfig"]

FLOOR = 0.25
# The relevance from which a hit's evidence counts in full (see the module's docstring).
EVIDENCE_FULL = 0.2
RECENCY_WEIGHT = 0.15
RECENCY_HALF_LIFE_DAYS = 30.0
SUPERSEDED_FACTOR = 0.6
# How many replacements an expanded top hit's chain is followed through to its current fact.
CHAIN_HOPS = 16
DEPENDS_PER_HIT = 3
DEPENDS_PER_CALL = 10
# Compact entries carry texts up to this long whole; longer ones as a window (truncated).
COMPACT_TEXT = 600
RERANK_DEPTH = 30
# The top hit "leads decisively" when it scores this much above the runner-up.
DECISIVE_LEAD = 1.25


@dataclass(frozen=True, slots=True)
class MemorySearchConfig:
    """The daemon's defaults for the tri-state parameters (config keys of the same names)."""

    mode: str = "hybrid"
    bm25: bool = True
    rerank: bool = False
    rerank_model_path: str = ""


# --------------------------------------------------------------------------- words


def _names(query_tokens: set[str], subject: str | None) -> bool:
    """Whether a query names a subject: every token of the subject is in the query."""
    subject_tokens = set(fts_tokens(subject or ""))
    return bool(subject_tokens) and subject_tokens <= query_tokens


def _relevance_label(coverage: float) -> p.Relevance:
    return "high" if coverage >= 0.75 else "medium" if coverage >= 0.4 else "low"


@dataclass(frozen=True, slots=True)
class Answer:
    """A memory_search result and its hits' relevance by id (:mod:`.relevance`)."""

    result: p.MemorySearchResult
    relevance: dict[str, float]


@dataclass(slots=True)
class _Scored:
    row: MemoryRow
    cand: Candidate
    fused: float
    coverage: float
    match_terms: list[str]
    cosine_evidence: float
    # The lexical evidence relevance read (coverage, or the session's for a turn).
    lexical: float
    relevance: float
    outcomes: Outcomes
    rerank: float | None = None
    factors: dict[str, float] = field(default_factory=dict)
    score: float = 0.0
    # What orders the hits: the score, or in bm25 and keyword modes their lexical order.
    rank: float = 0.0


# --------------------------------------------------------------------------- the reader


class MemoryReader:
    """memory_search and memory_show, run on a search worker's read-only connection."""

    def __init__(self, config: MemorySearchConfig | None = None) -> None:
        self.config = config or MemorySearchConfig()
        self.reranker = Reranker(self.config.rerank_model_path)

    def mode(self, req: p.MemorySearch) -> str:
        return req.mode or self.config.mode

    def wants_vector(self, req: p.MemorySearch) -> bool:
        return self.mode(req) == "hybrid"

    # ------------------------------------------------------------------ reader contract

    def _contract(
        self,
        reader: Reader,
        who: Principal,
        req: p.MemorySearch,
        now: float,
        trace: dict[str, Any],
    ) -> Filter | None:
        """The reader contract of one search; None: nothing can match."""
        workspace = who.workspace
        updated_after = None
        if req.since_prior_session:
            boundary = reader.memories.prior_session_boundary(who.session)
            trace["prior_session_boundary"] = boundary
            if boundary is None:
                trace["notes"].append("since_prior_session: no prior session in the log")
                return None
            updated_after = boundary
        trace["filters"] = {
            k: v
            for k, v in (
                ("workspace", workspace if req.auto_scope else None),
                ("tags", req.tags),
                ("sources", req.sources),
                ("scopes", req.scopes),
                ("bands", req.bands),
                ("episodes", req.episodes),
                ("client", req.client),
                ("model", req.model),
            )
            if v
        }
        return memory_filter(
            now,
            workspace if req.auto_scope else None,
            tags=req.tags,
            sources=req.sources,
            labels=(("scope", req.scopes), ("band", req.bands), ("episode", req.episodes)),
            client=req.client,
            model=req.model,
            updated_after=updated_after,
        )

    # ------------------------------------------------------------------ search

    def search(
        self,
        reader: Reader,
        who: Principal,
        req: p.MemorySearch,
        qvec: QueryVector,
    ) -> p.MemorySearchResult:
        """Run one memory_search. Raises RecallError(invalid_request) for contradictory flags."""
        return self.answer(reader, who, req, qvec).result

    def answer(
        self,
        reader: Reader,
        who: Principal,
        req: p.MemorySearch,
        qvec: QueryVector,
    ) -> Answer:
        """memory_search's result, with each hit's relevance (for the context hook, which
        injects only what is relevant)."""
        now = time.time()
        mode = self.mode(req)
        bm25 = self.config.bm25 if req.bm25 is None else req.bm25
        want_rerank = self.config.rerank if req.rerank is None else req.rerank
        if mode == "bm25" and not bm25:
            raise RecallError(
                "invalid_request", "mode 'bm25' with bm25=false leaves nothing to rank by"
            )
        floor = FLOOR if req.min_score is None else req.min_score
        verbose = req.verbose or req.explain
        boost = not req.disable_recency_boost
        trace: dict[str, Any] = {
            "mode": mode,
            "bm25": bm25,
            "semantic_used": False,
            "min_score": floor,
            "recency_boost": boost,
            "auto_scope": req.auto_scope,
            "notes": [],
            "rerank": {"requested": want_rerank},
        }
        terms = query_terms(req.query)
        contract = self._contract(reader, who, req, now, trace)
        empty = p.MemorySearchResult(
            query=req.query,
            hits=[],
            semantic_used=False,
            mode=mode,
            took_ms=0.0,
            count=0,
            cortex=[],
            low_confidence=True,
            trace=trace if req.explain else None,
        )
        if contract is None:
            return Answer(empty, {})

        # Candidates to re-score: enough for the adjustments to reorder, few enough to stay cheap.
        depth = min(150, max(20, 3 * req.limit))
        semantic = mode == "hybrid" and qvec is not None and reader.search.has_vectors()
        lexical_terms: Sequence[str] = terms
        if mode == "hybrid" and not bm25:
            if semantic:
                lexical_terms = []  # no terms: retrieve runs the semantic channel only
            else:
                trace["notes"].append(
                    "bm25 off and the semantic channel is down: ranked by keyword"
                )
                mode = "keyword"
        if mode == "hybrid" and not semantic:
            trace["notes"].append("semantic channel unavailable (model not loaded): lexical only")
        trace["semantic_used"] = semantic
        cands = retrieve(
            reader,
            lexical_terms,
            qvec if semantic else None,
            contract,
            limit=depth,
            query=req.query,
            learned=True,
        )
        if semantic and isinstance(qvec, PendingVector) and qvec.wait() is None:
            semantic = trace["semantic_used"] = False
            trace["notes"].append("the query could not be embedded: lexical only")
        trace["candidates"] = len(cands)
        rows = reader.memories.by_rowid([c.rowid for c in cands])
        outcomes = use_outcomes(reader, rows.values(), now)
        covers = Coverage(terms)
        # The calibration this store learned from its outcomes (the workspace's, else the
        # user's, else the prior): see learned_relevance.
        learned = learned_relevance.ranking(
            reader.memories.calibrations(who.workspace, who.uid),
            who.workspace,
        )
        calibration = learned.calibration
        trace["calibration"] = learned.trace()
        # Fusion's scores are relative to this query's candidates (how far ahead of the rest
        # a hit is), so they are taken relative to the best of them; whether a hit is about
        # the query at all is its relevance's to say.
        top_fused = max((c.score for c in cands), default=0.0) or 1.0
        words = set(fts_tokens(req.query))
        scored: list[_Scored] = []
        for c in cands:
            row = rows.get(c.rowid)
            if row is None:
                continue
            literal, matched = covers(row.text)
            # The informative share where retrieval weighed the words (memory_search's own
            # candidates), the plain share elsewhere.
            coverage = literal if c.coverage is None else c.coverage
            cos_ev = cosine_evidence(c.cosine)
            # A turn found by its session's words has its evidence there; a fact whose
            # subject the query names, in its subject (not in its searched text).
            named = row.kind == "fact" and _names(words, row.subject)
            lexical = max(coverage, c.context_evidence or 0.0, 1.0 if named else 0.0)
            scored.append(
                _Scored(
                    row=row,
                    cand=c,
                    fused=c.score / top_fused,
                    coverage=coverage,
                    match_terms=matched if coverage > 0 else [],
                    cosine_evidence=cos_ev,
                    lexical=lexical,
                    relevance=calibration.relevance(lexical, cos_ev),
                    outcomes=outcomes[c.rowid],
                )
            )
        if mode == "keyword":
            # Term coverage first (how many of the query's words a memory has), bm25 rank next.
            scored.sort(
                key=lambda s: (
                    -s.coverage,
                    s.cand.lexical_rank if s.cand.lexical_rank is not None else depth,
                )
            )
            for rank, s in enumerate(scored):
                s.fused = (RRF_K + 1) / (RRF_K + 1 + rank) if s.coverage else 0.0
        self._rerank(req.query, scored, want_rerank, trace)
        for s in scored:
            self._score(s, now, boost, lexical_order=mode != "hybrid")
        # A constraint fact is served first, whatever its score, when the query names its
        # subject (the entity the query is about is bound by it); elsewhere it ranks by
        # score, still marked pinned.
        binding = {id(s) for s in scored if s.row.pinned and _names(words, s.row.subject)}
        kept = [s for s in scored if s.score >= floor or id(s) in binding]
        trace["above_floor"] = len(kept)
        kept.sort(key=lambda s: (id(s) not in binding, -s.rank))
        top = kept[: req.limit]

        hits = self._hits(reader, Checkouts(reader, who), req, top, contract, now, verbose)
        cortex = self._cortex(reader, words, top, contract, now)
        has_cue, start, end = temporal_window(req.query, now)
        events = None
        if has_cue:
            pool = [
                s
                for s in kept
                if (start is None or s.row.ts >= start) and (end is None or s.row.ts < end)
            ]
            pool.sort(key=lambda s: s.row.ts)
            events = [
                p.MemoryEvent(id=s.row.id, ts=s.row.ts, text=summary(s.row.text, 300))
                for s in pool[: req.limit]
            ] or None
            trace["temporal_window"] = [start, end]
        confident = any(s.relevance >= CONFIDENT for s in top) or any(
            c.pinned for c in cortex if c.score >= 1.0
        )
        result = p.MemorySearchResult(
            query=req.query,
            hits=hits,
            semantic_used=semantic,
            mode=mode,
            took_ms=0.0,
            count=len(hits),
            cortex=cortex,
            low_confidence=not confident,
            events=events,
            trace=trace if req.explain else None,
        )
        return Answer(result, {s.row.id: s.relevance for s in top})

    def _rerank(
        self, query: str, scored: list[_Scored], wanted: bool, trace: dict[str, Any]
    ) -> None:
        info = trace["rerank"]
        if not wanted:
            info.update(used=False)
            return
        head = sorted(scored, key=lambda s: -s.fused * s.relevance)[:RERANK_DEPTH]
        values = self.reranker.score(query, [s.row.text for s in head])
        if values is None:
            info.update(available=False, used=False, reason=self.reranker.reason)
            return
        for s, value in zip(head, values, strict=True):
            s.rerank = value
        info.update(available=True, used=True, model=self.reranker.path, depth=len(head))

    def _score(self, s: _Scored, now: float, boost: bool, lexical_order: bool) -> None:
        order = s.fused if s.rerank is None else 0.5 * s.fused + 0.5 * s.rerank
        age_days = max(0.0, now - s.row.ts) / 86400
        recency = 2 ** (-age_days / RECENCY_HALF_LIFE_DAYS)
        s.factors = {
            "evidence": min(1.0, s.relevance / EVIDENCE_FULL),
            "recency": (1 - RECENCY_WEIGHT) + RECENCY_WEIGHT * recency if boost else 1.0,
            "trust": 0.7 + 0.3 * s.row.trust,
            "outcomes": s.outcomes.factor,
            "superseded": SUPERSEDED_FACTOR if s.row.superseded_by else 1.0,
        }
        adjust = 1.0
        for name, factor in s.factors.items():
            if name != "evidence":
                adjust *= factor
        s.score = round(order * s.factors["evidence"] * adjust, 4)
        # bm25 and keyword ask for that lexical order: it ranks, the evidence scores.
        s.rank = order * adjust if lexical_order else s.score

    def _hits(
        self,
        reader: Reader,
        checkouts: Checkouts,
        req: p.MemorySearch,
        top: list[_Scored],
        contract: Filter,
        now: float,
        verbose: bool,
    ) -> list[p.MemoryHit]:
        expand = (
            req.expand_top
            and bool(top)
            and (
                _relevance_label(top[0].coverage) == "high"
                or len(top) == 1
                or top[0].score >= DECISIVE_LEAD * top[1].score
            )
        )
        if expand and top[0].row.superseded_by:
            served = _current_in_place(reader, req, top, contract, now)
            # Inlining a replaced body would steer the reader to the stale answer: with no
            # current fact to serve (forgotten, or outside the filters), nothing is inlined.
            expand = served is not None
            top = served or top
        replaced = reader.memories.texts([s.row.superseded_by for s in top if s.row.superseded_by])
        depends = _depends_on(reader, [s.row for s in top])
        contested = contested_slots(reader, [s.row for s in top], now)
        key = reader.memories.use_token_key()
        hits = []
        # History walking this search may do for all its hits together (the cache makes a
        # repeated count free; a client varying origin_commit cannot make it unbounded).
        budget = git_history.WalkBudget()
        for i, s in enumerate(top):
            row, expanded = s.row, expand and i == 0
            judged = staleness(
                row,
                now,
                checkouts,
                unresolved_contradiction=s.outcomes.unresolved_contradiction,
                budget=budget,
            )
            path_drift, anchored_missing, commit = (
                judged.path_drift,
                judged.anchored_missing,
                judged.commit,
            )
            full = verbose or expanded or len(row.text) <= COMPACT_TEXT
            terms = s.match_terms or query_terms(req.query)
            hit = p.MemoryHit(
                **core_of(row, judged, contested),
                score=s.score,
                text=row.text if full else make_snippet(row.text, terms, COMPACT_TEXT),
                truncated=not full,
                relevance=_relevance_label(s.coverage),
                match_terms=s.match_terms,
                path_drift=path_drift if (path_drift.missing or expanded) else None,
                claim_anchored_missing=anchored_missing,
                commit_drift_count=commit.count if commit is not None and commit.head else None,
                commit_drift=commit if expanded else None,
                depends_on_resolved=depends.get(row.rowid) or None,
                recent_negative_outcomes=s.outcomes.negatives or None,
                superseded_by_text=replaced.get(row.superseded_by) if row.superseded_by else None,
                instruction_signals=instruction_flags(row.text),
                use_token=use_tokens.issue(key, row.id, now, (s.lexical, s.cosine_evidence)),
                expanded=expanded,
            )
            if verbose:
                hit.snippet = make_snippet(row.text, terms)
                hit.ts = row.ts
                hit.distortion_tolerance = row.distortion_tolerance
                hit.scopes = row.labels.get("scope", [])
                hit.bands = row.labels.get("band", [])
                hit.episodes = row.labels.get("episode", [])
                hit.trust = row.trust
                hit.created_at = row.created_at
                hit.updated_at = row.updated_at
                hit.last_verified_at = row.last_verified_at
                hit.origin_repo = row.origin_repo
                hit.origin_commit = row.origin_commit
                hit.agent = row.agent
                hit.client = row.writer_client
                hit.model = row.writer_model
            if req.explain:
                hit.trace = {
                    "fused": round(s.fused, 4),
                    "lexical_rank": s.cand.lexical_rank,
                    "semantic_rank": s.cand.semantic_rank,
                    "cosine": None if s.cand.cosine is None else round(s.cand.cosine, 4),
                    "coverage": round(s.coverage, 4),
                    "rerank": None if s.rerank is None else round(s.rerank, 4),
                    "relevance": round(s.relevance, 4),
                    **{k: round(v, 4) for k, v in s.factors.items()},
                    "pinned": row.pinned,
                    "score": s.score,
                }
            hits.append(hit)
        return hits

    def _cortex(
        self,
        reader: Reader,
        words: set[str],
        top: list[_Scored],
        contract: Filter,
        now: float,
    ) -> list[p.CortexFact]:
        """The current facts for the subjects of the returned hits that are about the query,
        plus constraints the query names: the cortex is served as the answer, ahead of the
        entries, so a weak hit's subject (one shared word) has no place in it. ``words``: the
        query's tokens."""
        best: dict[tuple[str, str | None], float] = {}
        for s in top:
            if s.row.kind == "fact" and s.row.subject_key and _about_the_query(s, words):
                slot = (s.row.subject_key, s.row.origin)
                best[slot] = max(best.get(slot, 0.0), s.score)
        # Constraint facts whose subject the query names are served even when not retrieved.
        for row in reader.memories.pinned_constraints(contract):
            if _names(words, row.subject):
                best[(row.subject_key or "", row.origin)] = 1.0
        cortex = []
        for (key, origin), score in best.items():
            facts = reader.memories.current_facts(key, origin, now)
            if not facts:
                continue
            incumbent = facts[0]
            cortex.append(
                p.CortexFact(
                    id=incumbent.id,
                    subject=incumbent.subject,
                    text=incumbent.text,
                    score=round(score, 4),
                    contested=len(facts) > 1,
                    pinned=incumbent.distortion_tolerance == "constraint",
                    authority=incumbent.authority,
                    ts=incumbent.ts,
                    contenders=[contender(f) for f in facts[1:]],
                )
            )
        cortex.sort(key=lambda c: (not c.pinned, -c.score))
        return cortex


def _about_the_query(s: _Scored, query_tokens: set[str]) -> bool:
    """Whether a hit is about the query rather than near it: the query names its subject, it
    holds enough of the query's words not to be labelled low, or its evidence alone would
    make the search confident. (A fact's subject is not in its searched text: "staging
    region" asked of "Staging runs in us-east-2" is about it.)"""
    return (
        _names(query_tokens, s.row.subject)
        or _relevance_label(s.coverage) != "low"
        or s.relevance >= CONFIDENT
    )


def _current_in_place(
    reader: Reader, req: p.MemorySearch, top: list[_Scored], contract: Filter, now: float
) -> list[_Scored] | None:
    """``top`` with the current fact of its superseded first hit's chain served first, the
    hit that earned the expansion after it; None when the chain ends in nothing servable.

    expand_top inlines the top hit's full body and drift detail to save a memory_show round
    trip, and the seeds tell a reader of a superseded entry to prefer its replacement: the
    round trip saved is the one to the current fact, so that fact is served as the expanded
    hit, whole and under its own id (a hit's id, text, drift and use token describe one
    memory), taking the score its chain earned. The superseded hit stays, compact, for the
    history the query matched.
    """
    current = _chain_end(reader, top[0].row)
    if current is None or not reader.search.visible([current.rowid], contract):
        return None
    ranked = next((s for s in top if s.row.rowid == current.rowid), None)
    served = ranked or _unranked(reader, req, top[0], current, now)
    rest = [s for s in top if s is not ranked]
    return [replace(served, score=top[0].score), *rest][: req.limit]


def _unranked(
    reader: Reader, req: p.MemorySearch, earned: _Scored, row: MemoryRow, now: float
) -> _Scored:
    """A memory retrieval did not rank, scored for serving in the place ``earned`` holds: its
    own words matched against the query (relevance says what it holds, not how it ranked)."""
    coverage, matched = Coverage(query_terms(req.query))(row.text)
    return _Scored(
        row=row,
        cand=Candidate(rowid=row.rowid, score=earned.cand.score),
        fused=earned.fused,
        coverage=coverage,
        match_terms=matched,
        cosine_evidence=0.0,
        lexical=coverage,
        # It answers for the superseded memory it replaces: as relevant as that one was.
        relevance=earned.relevance,
        outcomes=use_outcomes(reader, [row], now)[row.rowid],
    )


def _chain_end(reader: Reader, row: MemoryRow) -> MemoryRow | None:
    """The memory a superseded one's chain of replacements ends in, following at most
    CHAIN_HOPS links (a cycle cannot hold a search); None when a link is forgotten or the
    chain runs longer."""
    for _ in range(CHAIN_HOPS):
        if row.superseded_by is None:
            return row
        found = reader.memories.live([row.superseded_by]).get(row.superseded_by)
        if found is None:
            return None
        row = found
    return row if row.superseded_by is None else None


def _depends_on(reader: Reader, rows: list[MemoryRow]) -> dict[int, list[p.DependsOnResolved]]:
    """Each hit's depends_on targets: at most 3 a hit and 10 a call, in rank order."""
    if not rows:
        return {}
    links = reader.memories.depends_on([r.rowid for r in rows])
    targets = reader.memories.live([d for ls in links.values() for d, _ in ls]) if links else {}
    out: dict[int, list[p.DependsOnResolved]] = {}
    budget = DEPENDS_PER_CALL
    for row in rows:
        for dst, note in links.get(row.rowid, []):
            if budget == 0 or len(out.get(row.rowid, [])) == DEPENDS_PER_HIT:
                break
            target = targets.get(dst)
            if target is None:
                continue
            out.setdefault(row.rowid, []).append(
                p.DependsOnResolved(
                    id=dst,
                    scopes=target.labels.get("scope", []),
                    summary=summary(target.text),
                    link_note=note,
                )
            )
            budget -= 1
    return out
