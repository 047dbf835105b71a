"""Experiences and lessons (seed 000): record, search, list, explain, forget, the execution
context, roll-ups; and their replies."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from .base import (
    FREE_TEXT,
    FilePath,
    IdempotencyKey,
    ListCursor,
    RecordId,
    Reply,
    Request,
    SessionId,
    Visibility,
)

# ---- experiences and lessons (seed 000)

ExperienceStatus = Literal["success", "failure", "unknown"]
ExperienceQuery = Annotated[str, Meta(min_length=1, max_length=1_000)]
LessonText = Annotated[str, Meta(min_length=1, max_length=1_000, extra=FREE_TEXT)]
Description = Annotated[str, Meta(min_length=1, max_length=20_000, extra=FREE_TEXT)]
Strategy = Annotated[str, Meta(min_length=1, max_length=2_000, extra=FREE_TEXT)]
TaskClass = Annotated[str, Meta(min_length=1, max_length=64, extra=FREE_TEXT)]
# Files an experience touched: project-relative once stored; the cap keeps a record compact.
MAX_EXPERIENCE_FILES = 100


class RecordExperience(Request, tag="record_experience"):
    """Record one finished task with its outcome and the lessons drawn from it."""

    description: Annotated[
        Description,
        Meta(
            description=(
                "What the task was, in a sentence or two a later search would "
                "match, e.g. 'Fixed login accepting expired tokens after logout'."
            )
        ),
    ]
    status: Annotated[
        ExperienceStatus, Meta(description="Outcome: success, failure or unknown.")
    ] = "unknown"
    strategy: Annotated[
        Strategy | None,
        Meta(description="How it was approached, when worth repeating or avoiding."),
    ] = None
    # ``class`` on the wire (the seed's name); a Python keyword, hence the attribute name.
    task_class: Annotated[
        TaskClass, Meta(description="Task class, e.g. bugfix, feature, refactor, test, docs, ops.")
    ] = msgspec.field(default="general", name="class")
    tool_calls: Annotated[
        int, Meta(ge=0, le=10_000_000, description="Number of tool calls the task took.")
    ] = 0
    minutes: Annotated[
        float, Meta(ge=0, le=525_600, description="Active time the task took, in minutes.")
    ] = 0.0
    files: Annotated[
        list[FilePath],
        Meta(
            max_length=MAX_EXPERIENCE_FILES,
            description=(
                "Files the task touched, relative to the project root (absolute "
                "paths inside it are accepted)."
            ),
        ),
    ] = []
    lessons: Annotated[
        list[LessonText],
        Meta(
            max_length=20,
            description=(
                "Compact, reusable lessons, one per item, e.g. 'Run the "
                "migrations before the tests.'"
            ),
        ),
    ] = []
    session: Annotated[
        SessionId | None,
        Meta(
            description=(
                "Session id that did the task; links the experience to that "
                "session's captured episodes."
            )
        ),
    ] = None
    # When the task ended (unix seconds); defaults to now. Import keeps the original time.
    ts: Annotated[float, Meta(ge=0)] | None = None
    # A retried request with the same key returns the first request's result.
    idempotency_key: Annotated[
        IdempotencyKey | None,
        Meta(
            description=(
                "Retry-safe key: a repeated key returns the first result instead "
                "of recording again."
            )
        ),
    ] = None
    # Who sees it (and its lessons) in a shared database; unset: the configured default.
    visibility: Annotated[
        Visibility | None,
        Meta(
            description=(
                "In a team database: private (only your role sees it) or team "
                "(every member does). Omit for the daemon's configured default "
                "(private)."
            )
        ),
    ] = None


class SearchExperience(Request, tag="search_experience"):
    """Past experiences of the caller's workspace similar to ``query``, and their lessons."""

    query: Annotated[
        ExperienceQuery,
        Meta(
            description=(
                "Words describing the topic, e.g. 'expired token login bug'. "
                "Matched by words and by meaning against past task descriptions."
            )
        ),
    ]
    limit: Annotated[int, Meta(ge=1, le=20)] = 5


class ExperienceList(Request, tag="experience_list"):
    """Experiences of the caller's workspace newest first (by ts, then id), with the live
    lessons they support; for browsing (recallctl experience list, the web page)."""

    status: ExperienceStatus | None = None
    task_class: TaskClass | None = msgspec.field(default=None, name="class")
    # The previous reply's next_before: the page after it (see MemoryList).
    before: ListCursor | None = None
    limit: Annotated[int, Meta(ge=1, le=100)] = 20


class ExplainNode(Request, tag="explain_node"):
    """One experience in full: its episodes, its lessons, and (given a query) why it ranked."""

    record_id: Annotated[
        RecordId, Meta(description="Experience id, as search_experience returns it.")
    ]
    query: Annotated[
        ExperienceQuery | None,
        Meta(
            description=(
                "The query the experience was found by, to explain its rank; omit "
                "for the experience alone."
            )
        ),
    ] = None


class ForgetExperience(Request, tag="forget_experience"):
    """Tombstone one experience; its lessons lose its support."""

    record_id: Annotated[
        RecordId, Meta(description="Experience id to forget, as search_experience returns it.")
    ]


class GetExecutionContext(Request, tag="get_execution_context"):
    """Lessons and similar past experiences that apply to a new task, compact for a prompt."""

    task: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=4_000,
            description=(
                "The new task, described as you would record it, e.g. 'Add rate "
                "limiting to the login endpoint'."
            ),
        ),
    ]
    limit: Annotated[int, Meta(ge=1, le=10)] = 3


class RollUpExperience(Request, tag="roll_up_experience"):
    """Record (or bring up to date) the experience of one session from its captured episodes.

    tool_calls, minutes, files, agent and, unless given, status and description are computed
    from the session's episodes in the caller's workspace (see recalld.experience_rollup).
    One session has one rolled-up experience: rolling it up again updates it.
    """

    session: SessionId
    # Each given field replaces the computed one, now and at later roll-ups of the session.
    description: Description | None = None
    status: ExperienceStatus | None = None
    strategy: Strategy | None = None
    task_class: TaskClass | None = msgspec.field(default=None, name="class")
    # Added to the lessons earlier roll-ups of the session gave (20 at most in all).
    lessons: Annotated[list[LessonText], Meta(max_length=20)] = []


# ---- experiences and lessons (seed 000)


class ExperienceInfo(Struct, kw_only=True):
    """One experience as search, explain and context return it."""

    id: Annotated[
        str,
        Meta(
            description=("Experience id for the past task, for explain_node and forget_experience.")
        ),
    ]
    score: Annotated[
        float, Meta(description="Similarity/retrieval score for this query; higher ranks first.")
    ]
    description: Annotated[
        str, Meta(description="Redacted task description stored for the past execution.")
    ]
    task_class: Annotated[
        str, Meta(description="Task class, e.g. bugfix, feature, refactor, ops.")
    ] = msgspec.field(name="class")
    agent: Annotated[str, Meta(description="Agent that produced the experience.")]
    strategy: Annotated[str | None, Meta(description="Strategy used for the past task when known.")]
    status: Annotated[
        str, Meta(description="Observed outcome status: success, failure or unknown.")
    ]
    tool_calls: Annotated[
        int, Meta(ge=0, description="Number of captured tool calls in the execution.")
    ]
    minutes: Annotated[float, Meta(ge=0, description="Active execution time in minutes.")]
    files: Annotated[
        list[str],
        Meta(
            description=(
                "Project-relative files associated with the execution, capped for compactness."
            )
        ),
    ]
    ts: Annotated[float, Meta(description="When the experience was recorded, unix seconds.")]
    session: Annotated[
        str | None, Meta(description="Session that did the task, when recorded.")
    ] = None


class LessonInfo(Struct, kw_only=True):
    """A lesson with its live support (experiences behind it) and confidence in 0..1."""

    id: str
    text: Annotated[
        str, Meta(description="A compact lesson extracted from one or more past executions.")
    ]
    confidence: Annotated[
        float, Meta(ge=0, le=1, description="Combined confidence in this lesson.")
    ]
    support: Annotated[int, Meta(ge=1, description="Number of experiences supporting the lesson.")]


class RecordedLesson(LessonInfo, kw_only=True):
    # The experience just recorded counts, unless it is held back as untrusted: 0 then.
    support: Annotated[
        int,
        Meta(
            ge=0,
            description="Number of experiences supporting the lesson, this one included (0 "
            "when this experience is held back as untrusted).",
        ),
    ]
    # True when the lesson said the same as one already stored and was merged into it.
    merged: Annotated[
        bool,
        Meta(
            description=(
                "True when the lesson said the same as a stored one and was merged into it."
            )
        ),
    ]


class ExperienceRecorded(Reply, tag="experience_recorded", omit_defaults=False):
    record_id: Annotated[
        str,
        Meta(
            description=("Experience id (or the id of the identical experience already recorded).")
        ),
    ]
    # True when the same experience (description, status, strategy, session) was already
    # recorded in the workspace; record_id is that one and nothing new was written.
    duplicate: Annotated[
        bool,
        Meta(
            description=(
                "True when the same experience was already recorded; nothing new was written."
            )
        ),
    ] = False
    replayed: Annotated[
        bool,
        Meta(
            description=(
                "True when this idempotency_key was used before; the first result is returned."
            )
        ),
    ] = False
    lessons: Annotated[
        list[RecordedLesson], Meta(description="The experience's lessons, in the order given.")
    ] = []


class ExperienceSearchResult(Reply, tag="experience_search_result"):
    query: str
    experiences: Annotated[
        list[ExperienceInfo],
        Meta(description="Matching past tasks ordered from best to worst match."),
    ]
    lessons: Annotated[
        list[LessonInfo], Meta(description="Lessons derived from the returned experiences.")
    ]
    semantic_used: bool
    took_ms: float


class ExperienceListResult(Reply, tag="experience_list_result"):
    # Newest first; score 0.0 (this is not a search).
    experiences: list[ExperienceInfo]
    # The live lessons those experiences support, each once, by confidence.
    lessons: list[LessonInfo]
    # Pass as ``before`` for the next page; None when this was the last one.
    next_before: str | None = None


class EpisodeRef(Struct, kw_only=True):
    id: Annotated[str, Meta(description="Episode id.")]
    ts: Annotated[float, Meta(description="When the episode happened, unix seconds.")]
    text: Annotated[str, Meta(description="What the agent did.")]


class Ranking(Struct, kw_only=True):
    """Why an experience ranked (or did not) for a query: each channel's say and the floor's."""

    query: Annotated[str, Meta(description="The query the ranking is for.")]
    # 1-based among the results search_experience would return; None if cut
    rank: Annotated[
        int | None,
        Meta(
            description=(
                "1-based position among the experiences search_experience would "
                "return for the query; null when it is not among them."
            )
        ),
    ]
    score: Annotated[float, Meta(description="Fused score, as search_experience reports it.")]
    lexical_rank: Annotated[
        int | None,
        Meta(
            description=(
                "1-based rank in the word-matching channel; null when that channel did not find it."
            )
        ),
    ]
    semantic_rank: Annotated[
        int | None,
        Meta(
            description=(
                "1-based rank in the meaning channel; null when that channel did "
                "not find it or is not up."
            )
        ),
    ]
    cosine: Annotated[
        float | None,
        Meta(
            description=(
                "Cosine similarity of the query and the description; null without a model."
            )
        ),
    ]
    matched_terms: Annotated[list[str], Meta(description="Query words the description contains.")]
    query_terms: Annotated[
        list[str], Meta(description="The query's content words (stop words dropped).")
    ]
    passed_floor: Annotated[
        bool, Meta(description="Whether it is similar enough to be returned at all.")
    ]
    reason: Annotated[str, Meta(description="The relevance-floor verdict in words.")]


class NodeExplained(Reply, tag="node_explained"):
    experience: Annotated[
        ExperienceInfo, Meta(description="The experience in full (all its files).")
    ]
    episodes: Annotated[
        list[EpisodeRef],
        Meta(
            description=(
                "Captured episodes of the session that did the task, oldest "
                "first; empty when none were captured."
            )
        ),
    ]
    lessons: Annotated[list[LessonInfo], Meta(description="Lessons this experience supports.")]
    ranking: Annotated[
        Ranking | None, Meta(description="Why it ranked for the query given; null without a query.")
    ]


class ExperienceForgotten(Reply, tag="experience_forgotten", omit_defaults=False):
    record_id: Annotated[str, Meta(description="The experience id.")]
    already_forgotten: Annotated[
        bool, Meta(description="True when it had been forgotten before; nothing changed.")
    ] = False
    # Lessons that lost this experience's support but keep others.
    lessons_weakened: Annotated[
        int, Meta(description="Lessons that lost this experience's support but keep others.")
    ] = 0
    # Lessons left with no support: tombstoned with it, they no longer surface.
    lessons_retired: Annotated[
        int, Meta(description="Lessons it alone supported; they no longer surface.")
    ] = 0


class ExecutionContext(Reply, tag="execution_context"):
    task: str
    lessons: Annotated[
        list[LessonInfo], Meta(description="Lessons that apply to the task, most confident first.")
    ]
    experiences: Annotated[
        list[ExperienceInfo],
        Meta(description="Most similar past tasks, best first; descriptions shortened."),
    ]
    # The same, rendered as a short block ready to put in a prompt ("" when nothing applies).
    context: Annotated[
        str,
        Meta(
            description=(
                "Lessons and similar past tasks as a short text block for a plan "
                "or prompt; empty when nothing applies."
            )
        ),
    ]
    semantic_used: bool


class ExperienceRolledUp(Reply, tag="experience_rolled_up"):
    record_id: str
    session: str
    # Episodes of the session the roll-up read.
    episodes: int
    # False when an earlier roll-up's experience of this session was updated instead.
    created: bool
    # True when the session's experience had been forgotten: nothing was written again.
    forgotten: bool = False
    # How the status was decided (a verdict, the tool calls' outcomes, or given).
    why: str = ""
    # The experience as stored now (its score is 0: this is not a search); None if forgotten.
    experience: ExperienceInfo | None = None
    # Every lesson it supports, those given now in their order first.
    lessons: list[RecordedLesson] = []
