"""MCP tools for work episodes (seed 001): ``capture_episode``, ``work_search``,
``work_result`` and ``forget``.

Each is one protocol request and its reply; ``shapes`` derives the tool's schemas, arguments
and results from them. work_search's parameters, defaults, bounds and result fields are the
seed's; the fields response_format=concise drops are UNSET in the reply, so absent from the
structured content, not null.
"""

from __future__ import annotations

import uuid

import msgspec

from .. import protocol as p
from ..client import DaemonUnavailable, RemoteError
from .shapes import Call, Shape, Tool, hints

__all__ = ["TOOLS"]

# One MCP connection (one shim process) is one agent session unless the caller names another.
_SESSION = f"mcp-{uuid.uuid4().hex}"

# --------------------------------------------------------------------------- descriptions

CAPTURE_EPISODE_DESCRIPTION = (
    "Record one step of your work (a tool call, a decision, a finished turn) in the work memory, "
    "so later sessions can find what was actually done.\n"
    "\n"
    "Returns: {id, prev_id, eligibility, trust, blocked, redacted, duplicate, replayed}. The "
    "episode is durable when this returns.\n"
    "Use when: a step is worth finding again (a command that fixed or broke something, a migration "
    "run, a deploy) and no hook records it for you already.\n"
    "Not for: facts, decisions or conventions meant to be recalled as knowledge (use "
    "memory_store); routine reads.\n"
    "Side effects: writes one episode, chained to the previous episode of session_id (default: "
    "this MCP connection's session). Secrets are redacted and trust scored before storage. It "
    "starts 'pending': a success status settles it eligible at once; a failed step waits for "
    "work_result.\n"
    "Errors: invalid_request for an empty or oversize summary or out-of-range numbers; unavailable "
    "when the daemon is down (retry later)."
)

WORK_SEARCH_DESCRIPTION = (
    "Search the experiential work-memory (agent episodes): what the agent actually did. The "
    "work-memory reader contract is enforced: only evaluator-approved (eligible) episodes by "
    "default, tombstoned or expired ones never surface, results are partitioned to the calling "
    "agent, and a trust floor (min_trust, default 0.3) excludes high-risk content. include_pending "
    "opts into not-yet-evaluated episodes (still trust-floored); any_caller crosses the agent "
    "partition and requires the admin:workspace scope (the partition is an authorization boundary, "
    "not a free filter). semantic (opt-in) fuses a cosine-similarity channel over the summary with "
    "the lexical match by Reciprocal Rank Fusion, so a paraphrase can find an episode the words "
    "miss; lexical stays the exact-match failsafe for names, dates and ids, and the same "
    "reader-contract filters apply to both channels (the fused pool is never wider than what "
    "lexical alone could see). It degrades silently to lexical when there is no query, no "
    "embedding model, or the model errors; floor.semantic_used says which ran.\n"
    "\n"
    "Returns: {available, message, floor {min_trust, include_pending, semantic_used}, results[]} "
    "with each result {id, ts, vault, session_id, caller, channel, episode_type, task_result, "
    "verdict_at, tool, status, error_code, duration_ms, result_size, summary, tags, trust, "
    "eligibility, blocked, prev_id}. response_format=concise drops vault, caller, channel, "
    "episode_type, duration_ms, result_size and null or empty fields; trust, eligibility and a "
    "true blocked flag are kept. Without a query the newest episodes under the filters are "
    "listed.\n"
    "Use when: you need what was done before: the command that fixed a build, how a similar error "
    "was handled, what a session did, which steps failed.\n"
    "Not for: facts, notes and decisions (use memory_search); past tasks' outcomes and lessons "
    "(use search_experience).\n"
    "Side effects: none; read-only.\n"
    "Errors: invalid_request for out-of-range k/min_trust/since/until, an empty query, or since "
    "after until; forbidden for any_caller without admin:workspace. available: false (with "
    "message) when the daemon cannot be reached."
)

WORK_RESULT_DESCRIPTION = (
    "Record the verdict on one episode or on every episode of a session: how the task they served "
    "turned out.\n"
    "\n"
    "Returns: {task_result, verdict_at, matched, updated}.\n"
    "Use when: a task is finished and you know whether it worked (tests pass: 1; abandoned or "
    "broken: 0; partly: in between), so failed steps on the way become searchable with their "
    "outcome.\n"
    "Not for: recording a new step (use capture_episode).\n"
    "Side effects: sets task_result and verdict_at on the matched episodes, replacing an earlier "
    "verdict; the same verdict again changes nothing. Pending failed steps of those episodes "
    "become eligible.\n"
    "Errors: invalid_request unless exactly one of episode_id and session_id is given, or "
    "task_result outside 0..1; not_found when no episode of yours matches; forbidden for "
    "any_caller without admin:workspace."
)

FORGET_DESCRIPTION = (
    "Forget one record by id (a work episode, a memory, or any other record you can see): it is "
    "tombstoned and never surfaces in any search again.\n"
    "\n"
    "Returns: {id, kind, tombstoned_at, already}.\n"
    "Use when: a record is wrong, harmful or must not be recalled (it leaked something, it "
    "misleads).\n"
    "Not for: correcting a memory that is partly right (store the correction instead); hiding a "
    "failed step (judge it with work_result).\n"
    "Side effects: destructive and not undoable: the record is tombstoned, its vector leaves the "
    "index, and maintenance purges it later. Forgetting it again changes nothing.\n"
    "Errors: not_found when no record of that id is visible to you (another agent's episode needs "
    "the admin:workspace scope)."
)


async def _capture(call: Call, request: p.CaptureEpisode) -> p.EpisodeCaptured:
    filled = msgspec.structs.replace(
        request,
        session_id=request.session_id or _SESSION,
        channel="mcp",
        # The shim may retry after a reconnect; a key makes that retry harmless.
        idempotency_key=request.idempotency_key or f"mcp-{uuid.uuid4().hex}",
    )
    return await call(filled, p.EpisodeCaptured)


async def _search(call: Call, request: p.WorkSearch) -> p.WorkSearchResult:
    # Seed 001: a daemon that cannot answer is an answer that says so, not a tool error.
    try:
        return await call(request, p.WorkSearchResult)
    except DaemonUnavailable as exc:
        message = f"recalld unavailable: {exc}"
    except RemoteError as exc:
        if exc.code != "unavailable":
            raise
        message = f"recalld unavailable: {exc.message}"
    return p.WorkSearchResult(available=False, message=message, results=[])


TOOLS = (
    Tool(
        name="capture_episode",
        title="Record a work episode",
        description=CAPTURE_EPISODE_DESCRIPTION,
        annotations=hints(read_only=False, idempotent=False),
        shape=Shape(
            p.CaptureEpisode,
            p.EpisodeCaptured,
            # The shim says the channel; hooks and recallctl send the rest.
            internal=("channel", "source", "ts", "ttl_s", "workspace", "files"),
            results={"record_id": "id"},
        ),
        run=_capture,
    ),
    Tool(
        name="work_search",
        title="Search work episodes",
        description=WORK_SEARCH_DESCRIPTION,
        annotations=hints(read_only=True, idempotent=False),
        shape=Shape(p.WorkSearch, p.WorkSearchResult, hidden=("response_format", "took_ms")),
        run=_search,
    ),
    Tool(
        name="work_result",
        title="Judge work episodes",
        description=WORK_RESULT_DESCRIPTION,
        annotations=hints(read_only=False),
        shape=Shape(p.WorkResult, p.VerdictSet, internal=("verdict_at",)),
    ),
    Tool(
        name="forget",
        title="Forget a record",
        description=FORGET_DESCRIPTION,
        annotations=hints(read_only=False, destructive=True),
        shape=Shape(
            p.Forget, p.Forgotten, arguments={"id": "record_id"}, results={"record_id": "id"}
        ),
    ),
)
