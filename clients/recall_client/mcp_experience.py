"""MCP tools for experiences and lessons (seed 000).

``record_experience``, ``search_experience``, ``explain_node``, ``forget_experience`` and
``get_execution_context``. ``search_experience`` keeps the seed's names, bounds and result
fields exactly (its result models are named as the seed's outputSchema names them); the
others follow the same shapes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Literal

import msgspec
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from . import protocol as p
from .client import Session
from .mcp_common import ToolRegistry, VisibilityArg, forwarder

__all__ = ["register"]

Status = Literal["success", "failure", "unknown"]


class ExperienceSummary(BaseModel):
    # ``class`` is the seed's field name and a Python keyword: the attribute is task_class.
    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True)

    id: str = Field(
        description="Experience id for the past task, for explain_node and forget_experience."
    )
    score: float = Field(
        description="Similarity/retrieval score for this query; higher ranks first."
    )
    description: str = Field(description="Redacted task description stored for the past execution.")
    task_class: str = Field(
        alias="class", description="Task class, e.g. bugfix, feature, refactor, ops."
    )
    agent: str = Field(description="Agent that produced the experience.")
    strategy: str | None = Field(description="Strategy used for the past task when known.")
    status: Status = Field(description="Observed outcome status: success, failure or unknown.")
    tool_calls: int = Field(ge=0, description="Number of captured tool calls in the execution.")
    minutes: float = Field(ge=0, description="Active execution time in minutes.")
    files: list[str] = Field(
        description="Project-relative files associated with the execution, capped for compactness."
    )


class LessonSummary(BaseModel):
    text: str = Field(description="A compact lesson extracted from one or more past executions.")
    confidence: float = Field(ge=0, le=1, description="Combined confidence in this lesson.")
    support: int = Field(ge=1, description="Number of experiences supporting the lesson.")


class SearchExperienceResult(BaseModel):
    experiences: list[ExperienceSummary] = Field(
        description="Matching past tasks ordered from best to worst match."
    )
    lessons: list[LessonSummary] = Field(
        description="Lessons derived from the returned experiences."
    )


class RecordedLesson(BaseModel):
    text: str = Field(
        description="The lesson as stored: the earlier wording when it was merged into one."
    )
    confidence: float = Field(
        ge=0, le=1, description="Combined confidence in this lesson, this experience included."
    )
    support: int = Field(
        ge=0,
        description="Number of experiences supporting the lesson, this one included (0 when this "
        "experience is held back as untrusted).",
    )
    merged: bool = Field(
        description="True when the lesson said the same as a stored one and was merged into it."
    )


class RecordExperienceResult(BaseModel):
    id: str = Field(
        description="Experience id (or the id of the identical experience already recorded)."
    )
    duplicate: bool = Field(
        description="True when the same experience was already recorded; nothing new was written."
    )
    replayed: bool = Field(
        description="True when this idempotency_key was used before; the first result is returned."
    )
    lessons: list[RecordedLesson] = Field(
        description="The experience's lessons, in the order given."
    )


class ExperienceDetail(ExperienceSummary):
    session: str | None = Field(description="Session that did the task, when recorded.")
    ts: float = Field(description="When the experience was recorded, unix seconds.")


class EpisodeSummary(BaseModel):
    id: str = Field(description="Episode id.")
    ts: float = Field(description="When the episode happened, unix seconds.")
    text: str = Field(description="What the agent did.")


class RankingExplanation(BaseModel):
    query: str = Field(description="The query the ranking is for.")
    rank: int | None = Field(
        description="1-based position among the experiences search_experience would return for the "
        "query; null when it is not among them."
    )
    score: float = Field(description="Fused score, as search_experience reports it.")
    lexical_rank: int | None = Field(
        description="1-based rank in the word-matching channel; null when that channel did not "
        "find it."
    )
    semantic_rank: int | None = Field(
        description="1-based rank in the meaning channel; null when that channel did not find it "
        "or is not up."
    )
    cosine: float | None = Field(
        description="Cosine similarity of the query and the description; null without a model."
    )
    matched_terms: list[str] = Field(description="Query words the description contains.")
    query_terms: list[str] = Field(description="The query's content words (stop words dropped).")
    passed_floor: bool = Field(description="Whether it is similar enough to be returned at all.")
    reason: str = Field(description="The relevance-floor verdict in words.")


class ExplainNodeResult(BaseModel):
    experience: ExperienceDetail = Field(description="The experience in full (all its files).")
    episodes: list[EpisodeSummary] = Field(
        description="Captured episodes of the session that did the task, oldest first; empty when "
        "none were captured."
    )
    lessons: list[LessonSummary] = Field(description="Lessons this experience supports.")
    ranking: RankingExplanation | None = Field(
        description="Why it ranked for the query given; null without a query."
    )


class ForgetExperienceResult(BaseModel):
    id: str = Field(description="The experience id.")
    already_forgotten: bool = Field(
        description="True when it had been forgotten before; nothing changed."
    )
    lessons_weakened: int = Field(
        ge=0, description="Lessons that lost this experience's support but keep others."
    )
    lessons_retired: int = Field(
        ge=0, description="Lessons it alone supported; they no longer surface."
    )


class ExecutionContextResult(BaseModel):
    context: str = Field(
        description="Lessons and similar past tasks as a short text block for a plan or prompt; "
        "empty when nothing applies."
    )
    lessons: list[LessonSummary] = Field(
        description="Lessons that apply to the task, most confident first."
    )
    experiences: list[ExperienceSummary] = Field(
        description="Most similar past tasks, best first; descriptions shortened."
    )


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


def _summary(e: p.ExperienceInfo) -> ExperienceSummary:
    # By attribute name (task_class); fields the summary does not show are ignored.
    return ExperienceSummary.model_validate(msgspec.structs.asdict(e))


def _lesson(lesson: p.LessonInfo) -> LessonSummary:
    return LessonSummary(text=lesson.text, confidence=lesson.confidence, support=lesson.support)


def register(server: ToolRegistry, session: Callable[[], Session]) -> None:
    """Register every tool on ``server``; ``session`` returns the live daemon session."""

    call = forwarder(session)

    @server.tool(
        name="record_experience",
        title="Record a finished task",
        description=RECORD_EXPERIENCE_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Record a finished task",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    async def record_experience(
        description: Annotated[
            str,
            Field(
                min_length=1,
                max_length=20_000,
                description="What the task was, in a sentence or two a later search would match, "
                "e.g. 'Fixed login accepting expired tokens after logout'.",
            ),
        ],
        status: Annotated[
            Status, Field(description="Outcome: success, failure or unknown.")
        ] = "unknown",
        strategy: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=2_000,
                description="How it was approached, when worth repeating or avoiding.",
            ),
        ] = None,
        task_class: Annotated[
            str,
            Field(
                validation_alias="class",
                min_length=1,
                max_length=64,
                description="Task class, e.g. bugfix, feature, refactor, test, docs, ops.",
            ),
        ] = "general",
        tool_calls: Annotated[
            int, Field(ge=0, le=10_000_000, description="Number of tool calls the task took.")
        ] = 0,
        minutes: Annotated[
            float, Field(ge=0, le=525_600, description="Active time the task took, in minutes.")
        ] = 0.0,
        files: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=4_096)]],
            Field(
                max_length=p.MAX_EXPERIENCE_FILES,
                description="Files the task touched, relative to the project root (absolute paths "
                "inside it are accepted).",
            ),
        ] = [],  # noqa: B006
        lessons: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=1_000)]],
            Field(
                max_length=20,
                description="Compact, reusable lessons, one per item, e.g. 'Run the migrations "
                "before the tests.'",
            ),
        ] = [],  # noqa: B006
        session: Annotated[
            str | None,
            Field(
                max_length=200,
                description="Session id that did the task; links the experience to that session's "
                "captured episodes.",
            ),
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="Retry-safe key: a repeated key returns the first result instead of "
                "recording again.",
            ),
        ] = None,
        visibility: VisibilityArg = None,
    ) -> RecordExperienceResult:
        req = p.RecordExperience(
            description=description,
            status=status,
            strategy=strategy,
            task_class=task_class,
            tool_calls=tool_calls,
            minutes=minutes,
            files=files,
            lessons=lessons,
            session=session,
            # The shim may retry after a reconnect; a key makes that retry harmless.
            idempotency_key=idempotency_key or f"mcp-{uuid.uuid4().hex}",
            visibility=visibility,
        )
        reply = await call(req, p.ExperienceRecorded)
        return RecordExperienceResult(
            id=reply.record_id,
            duplicate=reply.duplicate,
            replayed=reply.replayed,
            lessons=[
                RecordedLesson(
                    text=x.text, confidence=x.confidence, support=x.support, merged=x.merged
                )
                for x in reply.lessons
            ],
        )

    @server.tool(
        name="search_experience",
        title="Search experience",
        description=SEARCH_EXPERIENCE_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Search experience",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    async def search_experience(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=1_000,
                description="Words describing the topic, e.g. 'expired token login bug'. Matched "
                "by words and by meaning against past task descriptions.",
            ),
        ],
        limit: Annotated[
            int,
            Field(
                ge=1,
                le=20,
                description="Maximum number of past tasks to return. Default 5; allowed 1-20.",
            ),
        ] = 5,
    ) -> SearchExperienceResult:
        reply = await call(p.SearchExperience(query=query, limit=limit), p.ExperienceSearchResult)
        return SearchExperienceResult(
            experiences=[_summary(e) for e in reply.experiences],
            lessons=[_lesson(x) for x in reply.lessons],
        )

    @server.tool(
        name="explain_node",
        title="Explain an experience",
        description=EXPLAIN_NODE_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Explain an experience",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    async def explain_node(
        id: Annotated[
            str,
            Field(
                min_length=1,
                max_length=64,
                description="Experience id, as search_experience returns it.",
            ),
        ],
        query: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=1_000,
                description="The query the experience was found by, to explain its rank; omit for "
                "the experience alone.",
            ),
        ] = None,
    ) -> ExplainNodeResult:
        reply = await call(p.ExplainNode(record_id=id, query=query), p.NodeExplained)
        r = reply.ranking
        return ExplainNodeResult(
            experience=ExperienceDetail.model_validate(msgspec.structs.asdict(reply.experience)),
            episodes=[EpisodeSummary(id=x.id, ts=x.ts, text=x.text) for x in reply.episodes],
            lessons=[_lesson(x) for x in reply.lessons],
            ranking=None
            if r is None
            else RankingExplanation(
                query=r.query,
                rank=r.rank,
                score=r.score,
                lexical_rank=r.lexical_rank,
                semantic_rank=r.semantic_rank,
                cosine=r.cosine,
                matched_terms=r.matched_terms,
                query_terms=r.query_terms,
                passed_floor=r.passed_floor,
                reason=r.reason,
            ),
        )

    @server.tool(
        name="forget_experience",
        title="Forget an experience",
        description=FORGET_EXPERIENCE_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Forget an experience",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    async def forget_experience(
        id: Annotated[
            str,
            Field(
                min_length=1,
                max_length=64,
                description="Experience id to forget, as search_experience returns it.",
            ),
        ],
    ) -> ForgetExperienceResult:
        reply = await call(p.ForgetExperience(record_id=id), p.ExperienceForgotten)
        return ForgetExperienceResult(
            id=reply.record_id,
            already_forgotten=reply.already_forgotten,
            lessons_weakened=reply.lessons_weakened,
            lessons_retired=reply.lessons_retired,
        )

    @server.tool(
        name="get_execution_context",
        title="Get execution context for a task",
        description=GET_EXECUTION_CONTEXT_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Get execution context for a task",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    async def get_execution_context(
        task: Annotated[
            str,
            Field(
                min_length=1,
                max_length=4_000,
                description="The new task, described as you would record it, e.g. 'Add rate "
                "limiting to the login endpoint'.",
            ),
        ],
        limit: Annotated[
            int,
            Field(
                ge=1,
                le=10,
                description="Maximum number of similar past tasks. Default 3; allowed 1-10.",
            ),
        ] = 3,
    ) -> ExecutionContextResult:
        reply = await call(p.GetExecutionContext(task=task, limit=limit), p.ExecutionContext)
        return ExecutionContextResult(
            context=reply.context,
            lessons=[_lesson(x) for x in reply.lessons],
            experiences=[_summary(e) for e in reply.experiences],
        )
