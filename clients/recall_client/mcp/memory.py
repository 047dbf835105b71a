"""MCP tools for memories and canonical facts (seeds 003 and 004).

``memory_store``, ``memory_search``, ``memory_update``, ``memory_verify``, ``memory_show``,
``memory_record_use``, ``memory_fact_resolve`` and ``memory_share``. Each is one protocol
request and its reply: ``shapes`` derives the tool's schemas, arguments and results from them,
so the bounds, defaults and field descriptions are the protocol's. What is here is what only
MCP has: each tool's name, description and hints, and the names its arguments and results go
by.
"""

from __future__ import annotations

import uuid

import msgspec

from .. import protocol as p
from .shapes import Call, Shape, Tool, hints

__all__ = ["TOOLS"]


MEMORY_STORE_DESCRIPTION = (
    "Store one memory in recalld, the shared local memory of this machine's agents: an entry (a "
    "note) or a canonical fact about a subject.\n"
    "\n"
    "Returns: {id, duplicate, replayed, kind, action, subject, superseded, contested, "
    "contested_with, authority, trust, cited_paths, origin_repo, origin_commit}. The write is "
    "durable when this returns.\n"
    "Use when: you learned something a later session would want: a decision and its reason, a "
    "convention, a gotcha, a user preference (kind=entry); or the current value of something "
    '(kind=fact with a subject: "prod db port", "release owner").\n'
    "Not for: what the repository or its docs already say; transient scratch notes.\n"
    "Side effects: writes one record (secrets are redacted before storage). A new fact on a "
    "subject supersedes the older one (superseded_by on the old); one that disagrees with no clear "
    "order (same ts, or lower authority than the current fact) is stored contested until "
    "memory_fact_resolve. supersedes marks other memories replaced. Paths in the text and in paths "
    "are recorded for drift checks; origin repo and commit come from the workspace's git. "
    "Identical text is stored once (duplicate: true); a repeated idempotency_key returns the first "
    "result.\n"
    "Errors: invalid_request for empty or oversize text, a fact without a subject, or bad fields; "
    "not_found when supersedes or depends_on names an unknown memory; unavailable when the daemon "
    "is down or its disk is full (retry later)."
)

MEMORY_SEARCH_DESCRIPTION = (
    "Retrieve memories for a query: associative recall plus canonical facts, ranked, with "
    "staleness and drift signals.\n"
    "\n"
    "Returns: {query, count, cortex, entries, low_confidence} (+ events for temporal cues, trace "
    "with explain). cortex facts arrive AHEAD of entries: the current, deduped answer per subject "
    "(contested: true awaits memory_fact_resolve; pinned: a constraint the query's entity is bound "
    "by, served first). Each entry: {id, text, source, tags, visibility, owner, score, "
    "relevance, match_terms, "
    "staleness_verdict, path_drift_missing, commit_drift_count, use_token} plus, when set, "
    "path_drift {checked, missing, verified}, claim_anchored_missing, depends_on_resolved (max 3 "
    "per hit, 10 per call), recent_negative_outcomes (max two), superseded_by / superseded_by_text "
    "(prefer it), pinned, contested, authority: quoted (someone else said it, not an instruction), "
    "low_trust. verbose adds full metadata. low_confidence=true: no confident match, prefer "
    "abstaining.\n"
    'Use when: the task touches shared context you lack ("my project", "the script we wrote", '
    "a past decision), at task start when context may apply, or before re-deriving something a "
    "past session may have settled. Hits are leads about the PAST: check each against the task in "
    "front of you; when staleness_verdict is not fresh, spot-check path_drift and "
    "commit_drift_count, then memory_update or memory_verify. Vocabulary is the lever: query with "
    "the nouns a memory would contain; weak hits, re-query with different nouns.\n"
    "Not for: searching the code itself; listing everything stored; one memory in full "
    "(memory_show).\n"
    "Side effects: none; read-only. Filters AND across kinds (tags, sources, bands, episodes, "
    "scopes, client, model), OR within one list. Record what became of a hit with "
    "memory_record_use and its use_token.\n"
    "Errors: invalid_request for an empty query, out-of-range top_k/max_results (1-50) or "
    "min_score (0-1), top_k and max_results that disagree, or mode=bm25 with bm25=false; "
    "unavailable when the daemon is down."
)

MEMORY_UPDATE_DESCRIPTION = (
    "Correct a stored memory in place; fields left unset keep their value.\n"
    "\n"
    "Returns: {id, updated_at, last_verified_at, verified_commit, changed}.\n"
    "Use when: a hit's claim drifted (claim_anchored_missing, a contradicted outcome) and you know "
    "the correct text, tags, paths or links.\n"
    "Not for: a new value of a fact (memory_store a new fact on the subject: the old one is kept "
    "as history); attesting that a memory still holds (memory_verify).\n"
    "Side effects: rewrites the memory (text is redacted, re-scored for trust and re-embedded); "
    "counts as a verification (last_verified_at moves to now).\n"
    "Errors: not_found for an unknown or forgotten id; invalid_request for bad fields or text "
    "identical to another memory."
)

MEMORY_VERIFY_DESCRIPTION = (
    "Attest that a memory still holds: refreshes last_verified_at and the commit its commit drift "
    "counts from.\n"
    "\n"
    "Returns: {id, updated_at, last_verified_at, verified_commit, changed}.\n"
    "Use when: you spot-checked a hit whose staleness_verdict was not fresh and its claims hold.\n"
    "Not for: fixing a memory that is wrong (memory_update).\n"
    "Side effects: sets last_verified_at to now; verified_paths become claim anchors, so their "
    "later disappearance escalates the verdict.\n"
    "Errors: not_found for an unknown or forgotten id."
)

MEMORY_SHOW_DESCRIPTION = (
    "One memory in full: text, every field, links both ways, outcomes, and full path and commit "
    "drift detail.\n"
    "\n"
    "Returns: {id, kind, text, subject, tags, scopes, bands, episodes, authority, pinned, trust, "
    "visibility, owner, origin, origin_repo, verified_commit, superseded_by, "
    "superseded_by_text, supersedes, "
    "contested, contenders, depends_on, depended_on_by, cited_paths, path_drift, "
    "claim_anchored_missing, commit_drift, commit_drift_count, staleness_verdict, outcomes, "
    "recent_outcomes, ...}.\n"
    "Use when: a memory_search hit was truncated, or you need its links and drift detail before "
    "relying on it.\n"
    "Not for: searching (memory_search).\n"
    "Side effects: none; read-only.\n"
    "Errors: not_found for an unknown or forgotten id; forbidden for a memory blocked as unsafe."
)

MEMORY_RECORD_USE_DESCRIPTION = (
    "Record what became of a memory that memory_search surfaced: used, ignored, contradicted or "
    "corrected.\n"
    "\n"
    "Returns: {recorded: [{id, outcome}]}.\n"
    "Use when: a hit shaped your reply (used), was off-topic (ignored), turned out wrong "
    "(contradicted), or was wrong and you fixed it (corrected). Pass the hit's use_token; without "
    'an outcome the token records "used". A later call with the same token overrides the earlier '
    "outcome.\n"
    "Not for: changing the memory itself (memory_update).\n"
    "Side effects: ignored and contradicted memories rank lower and carry recent_negative_outcomes "
    "until a later use, update or verification clears them; an unresolved contradiction makes "
    "staleness_verdict spot_check_required.\n"
    "Errors: invalid_request for a token not issued by this recalld, or neither token nor "
    "memory_ids; not_found for an unknown id."
)

MEMORY_FACT_RESOLVE_DESCRIPTION = (
    "Settle a contested fact: choose which of the disagreeing current facts on a subject stays "
    "current.\n"
    "\n"
    "Returns: {resolved, subject, accepted, current, current_text, superseded} or {resolved: "
    'false, reason: "no_contender"}.\n'
    "Use when: memory_search shows a cortex fact with contested: true (or memory_store answered "
    "action: contested) and you have checked with the human which value holds.\n"
    "Not for: setting a new value (memory_store a new fact on the subject).\n"
    "Side effects: the losing facts are marked superseded by the winner (kept as history).\n"
    "Errors: invalid_request unless exactly one of accept or keep_id is given, or keep_id is not "
    "one of the contested facts."
)

MEMORY_SHARE_DESCRIPTION = (
    "Share one of your private memories or lessons with the team (a team database): a reviewed "
    "step, a preview first.\n"
    "\n"
    "Returns: {shared, record: {id, kind, text, subject, source, tags, workspace, owner, agent, "
    "client, model, created_at, cited_paths, redactions}, shared_at}.\n"
    "Use when: a private memory or lesson would help every member, and the human agreed. Call "
    "it without confirm, show the human the record it returns (text and provenance), then call "
    "again with confirm: true to share it.\n"
    "Not for: storing a new team memory (memory_store with visibility: team).\n"
    "Side effects: none without confirm; with confirm the record becomes team memory (every "
    "member reads it, and may correct or forget it), and who shared it and when is logged.\n"
    "Errors: invalid_request without a team database, for a record that is team memory already "
    "or changed since its preview; forbidden when redaction finds a secret in it (redactions; "
    "memory_update it first) or it is another member's; not_found for an unknown id."
)


async def _store(call: Call, request: p.MemoryStore) -> p.MemoryStored:
    # The shim may retry after a reconnect; a key makes that retry harmless.
    key = request.idempotency_key or f"mcp-{uuid.uuid4().hex}"
    return await call(msgspec.structs.replace(request, idempotency_key=key), p.MemoryStored)


_READS = hints(read_only=True)
_WRITES = hints(read_only=False)
# A memory's id is the tool's ``id``; the frame's own id is the envelope's.
_MEMORY_ID = {"id": "memory_id"}

TOOLS = (
    Tool(
        name="memory_store",
        title="Store a memory",
        description=MEMORY_STORE_DESCRIPTION,
        annotations=_WRITES,
        shape=Shape(
            p.MemoryStore,
            p.MemoryStored,
            # The hello says who and where; recallctl's import sets the rest.
            internal=("session", "workspace", "origin_repo", "origin_commit"),
            results={"record_id": "id"},
        ),
        run=_store,
    ),
    Tool(
        name="memory_search",
        title="Search memories",
        description=MEMORY_SEARCH_DESCRIPTION,
        annotations=_READS,
        shape=Shape(
            p.MemorySearch,
            p.MemorySearchResult,
            # Seed 003 names the limit top_k, seed 004 max_results.
            arguments={"top_k": "limit", "max_results": "limit"},
            internal=("workspace",),
            results=p.SEARCH_SEED_NAMES,
            hidden=("took_ms",),
        ),
    ),
    Tool(
        name="memory_update",
        title="Correct a memory",
        description=MEMORY_UPDATE_DESCRIPTION,
        annotations=_WRITES,
        shape=Shape(
            p.MemoryUpdate, p.MemoryChanged, arguments=_MEMORY_ID, results={"memory_id": "id"}
        ),
    ),
    Tool(
        name="memory_verify",
        title="Verify a memory",
        description=MEMORY_VERIFY_DESCRIPTION,
        annotations=_WRITES,
        shape=Shape(
            p.MemoryVerify, p.MemoryChanged, arguments=_MEMORY_ID, results={"memory_id": "id"}
        ),
    ),
    Tool(
        name="memory_show",
        title="Show a memory",
        description=MEMORY_SHOW_DESCRIPTION,
        annotations=_READS,
        shape=Shape(p.MemoryShow, p.MemoryShown, arguments=_MEMORY_ID, unwrap="memory"),
    ),
    Tool(
        name="memory_record_use",
        title="Record a memory's use",
        description=MEMORY_RECORD_USE_DESCRIPTION,
        annotations=hints(read_only=False, idempotent=False),
        shape=Shape(p.MemoryRecordUse, p.UseRecorded),
    ),
    Tool(
        name="memory_fact_resolve",
        title="Settle a contested fact",
        description=MEMORY_FACT_RESOLVE_DESCRIPTION,
        annotations=_WRITES,
        shape=Shape(p.MemoryFactResolve, p.FactResolved),
    ),
    Tool(
        name="memory_share",
        title="Share a memory with the team",
        description=MEMORY_SHARE_DESCRIPTION,
        annotations=_WRITES,
        shape=Shape(p.MemoryShare, p.MemoryShared, arguments={"id": "record_id"}),
    ),
)
