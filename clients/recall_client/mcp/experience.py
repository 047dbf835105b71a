"""MCP tools for experiences and lessons (seed 000).

``record_experience``, ``search_experience``, ``explain_node``, ``forget_experience`` and
``get_execution_context``. Each is one protocol request and its reply; ``shapes`` derives the
tool's schemas, arguments and results from them. ``search_experience`` keeps the seed's names,
bounds and result fields exactly: an experience's ``ts`` and ``session`` are explain_node's, and
no result shows a lesson's id.
"""

from __future__ import annotations

import uuid

import msgspec

from .. import protocol as p
from .shapes import Call, Shape, Tool, hints

__all__ = ["TOOLS"]


RECORD_EXPERIENCE_DESCRIPTION = (
    "Record one finished task of this project: what it was, how it went, and the lessons it "
    "taught.\n"
    "\n"
    "Returns: {id, duplicate, replayed, lessons}; each lesson {text, confidence, support, merged}. "
    "Durable when this returns.\n"
    "Use when: a task is done (succeeded, failed or was abandoned) and a later session would "
    "benefit from how it went and what to do differently.\n"
    "Not for: notes or facts that are not the outcome of a task (use memory_store); progress "
    "updates mid-task.\n"
    "Side effects: writes one experience to the current workspace; secrets are redacted before "
    "storage. Each lesson is stored once: a lesson that says the same as a stored one (same words, "
    "or near-identical meaning) is merged into it and adds to its support and confidence. "
    "Recording the same experience again, or repeating an idempotency_key, returns the first "
    "result.\n"
    "Errors: invalid_request for empty or oversize text, a file outside the workspace, over 100 "
    "files or over 20 lessons; forbidden, saying how to approve it, while require_approval is on "
    "and the workspace is not approved; unavailable when the daemon is down."
)

SEARCH_EXPERIENCE_DESCRIPTION = (
    "Search this project's past tasks by description similarity.\n"
    "\n"
    "Returns: structured 'experiences' (id, score, description, class, agent, strategy, status, "
    "tool_calls, minutes, files), best match first, plus structured 'lessons' (text, confidence, "
    "support) derived from them. Both lists are empty when nothing is similar enough.\n"
    "Use when: the user asks what was learned or what worked before, or to find an experience id "
    "for explain_node or forget_experience.\n"
    "Not for: planning a new task (use get_execution_context); searching notes and facts (use "
    "memory_search).\n"
    "Side effects: none; read-only. Matching is by words and by meaning, on task descriptions "
    "only.\n"
    "Errors: invalid limit or query values are rejected by the input schema; forbidden, saying how "
    "to approve it, while require_approval is on and the workspace is not approved; unavailable "
    "when the daemon is down."
)

EXPLAIN_NODE_DESCRIPTION = (
    "Show one past experience in full: its details, its episodes, the lessons it supports and, "
    "given a query, why it ranked for that query.\n"
    "\n"
    "Returns: {experience, episodes, lessons, ranking}; ranking (null without a query) gives the "
    "rank, score, each channel's rank, the cosine, the query words shared and the relevance-floor "
    "verdict with its reason.\n"
    "Use when: deciding whether a search_experience hit really applies, or before "
    "forget_experience to see what goes with it.\n"
    "Not for: finding experiences (use search_experience).\n"
    "Side effects: none; read-only.\n"
    "Errors: not_found for an unknown or forgotten id, or one of another workspace; forbidden, "
    "saying how to approve it, while require_approval is on and the workspace is not approved."
)

FORGET_EXPERIENCE_DESCRIPTION = (
    "Forget one past experience: tombstone it so that it never surfaces again.\n"
    "\n"
    "Returns: {id, already_forgotten, lessons_weakened, lessons_retired}.\n"
    "Use when: an experience is wrong, misleading or was recorded by mistake.\n"
    "Not for: rewording a lesson (record the experience again instead).\n"
    "Side effects: the experience stops surfacing at once. Its lessons lose its support and their "
    "confidence is recomputed; a lesson it alone supported is retired and no longer surfaces. "
    "Forgetting it again changes nothing.\n"
    "Errors: not_found for an unknown id or one of another workspace; forbidden, saying how to "
    "approve it, while require_approval is on and the workspace is not approved."
)

GET_EXECUTION_CONTEXT_DESCRIPTION = (
    "Gather what past work in this project says about a new task: the lessons that apply and the "
    "most similar past tasks, compact enough for a plan or prompt.\n"
    "\n"
    'Returns: {context, lessons, experiences}: context is a short ready-to-use text block ("" '
    "when nothing applies); lessons (text, confidence, support) most confident first; experiences "
    "best match first with shortened descriptions. Empty when nothing is similar enough.\n"
    "Use when: starting or planning a task, to reuse what worked and avoid what failed.\n"
    "Not for: questions about past work (use search_experience); recording an outcome (use "
    "record_experience).\n"
    "Side effects: none; read-only.\n"
    "Errors: invalid task or limit values are rejected by the input schema; forbidden, saying how "
    "to approve it, while require_approval is on and the workspace is not approved; unavailable "
    "when the daemon is down."
)


async def _record(call: Call, request: p.RecordExperience) -> p.ExperienceRecorded:
    # The shim may retry after a reconnect; a key makes that retry harmless.
    key = request.idempotency_key or f"mcp-{uuid.uuid4().hex}"
    return await call(msgspec.structs.replace(request, idempotency_key=key), p.ExperienceRecorded)


_READS = hints(read_only=True)
# The seed's experience summary and lesson (search_experience, get_execution_context).
_SUMMARIES: dict[type[msgspec.Struct], tuple[str, ...]] = {
    p.ExperienceInfo: ("ts", "session"),
    p.LessonInfo: ("id",),
}

TOOLS = (
    Tool(
        name="record_experience",
        title="Record a finished task",
        description=RECORD_EXPERIENCE_DESCRIPTION,
        annotations=hints(read_only=False),
        shape=Shape(
            p.RecordExperience,
            p.ExperienceRecorded,
            # recallctl's import keeps the original time; a tool records now.
            internal=("ts",),
            results={"record_id": "id"},
            hidden_within={p.RecordedLesson: ("id",)},
        ),
        run=_record,
    ),
    Tool(
        name="search_experience",
        title="Search experience",
        description=SEARCH_EXPERIENCE_DESCRIPTION,
        annotations=_READS,
        shape=Shape(
            p.SearchExperience,
            p.ExperienceSearchResult,
            hidden=("query", "semantic_used", "took_ms"),
            hidden_within=_SUMMARIES,
            # The seed's names for its result and the two summaries in it.
            titles={
                "ExperienceSearchResult": "SearchExperienceResult",
                "ExperienceInfo": "ExperienceSummary",
                "LessonInfo": "LessonSummary",
            },
        ),
    ),
    Tool(
        name="explain_node",
        title="Explain an experience",
        description=EXPLAIN_NODE_DESCRIPTION,
        annotations=_READS,
        shape=Shape(
            p.ExplainNode,
            p.NodeExplained,
            arguments={"id": "record_id"},
            hidden_within={p.LessonInfo: ("id",)},
        ),
    ),
    Tool(
        name="forget_experience",
        title="Forget an experience",
        description=FORGET_EXPERIENCE_DESCRIPTION,
        annotations=hints(read_only=False, destructive=True),
        shape=Shape(
            p.ForgetExperience,
            p.ExperienceForgotten,
            arguments={"id": "record_id"},
            results={"record_id": "id"},
        ),
    ),
    Tool(
        name="get_execution_context",
        title="Get execution context for a task",
        description=GET_EXECUTION_CONTEXT_DESCRIPTION,
        annotations=_READS,
        shape=Shape(
            p.GetExecutionContext,
            p.ExecutionContext,
            hidden=("task", "semantic_used"),
            hidden_within=_SUMMARIES,
        ),
    ),
)
