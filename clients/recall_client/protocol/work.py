"""Work episodes (seed 001): capture, work_search, work_result; forget (any record); and
their replies."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from .base import (
    FREE_TEXT,
    FilePath,
    IdempotencyKey,
    Key,
    Name,
    Path,
    Query,
    Reply,
    Request,
    RequestRuleError,
    SessionId,
    Source,
    Tags,
    Text,
)

# ---- work episodes (seed 001): capture, work_search, work_result; forget (any record)

Label = Annotated[str, Meta(min_length=1, max_length=64)]
UnitScore = Annotated[float, Meta(ge=0, le=1)]


# An episode's statuses that count as success: it is eligible once captured (the daemon's
# policy), and the web page counts the others as failures.
SUCCESS_STATUSES = frozenset({"ok", "success", "succeeded", "completed", "done", "passed"})
# The status of a step whose host did not say how it went (Codex reports a command's output,
# not its exit code). Neither a success nor a failure: it is eligible once captured, as a
# success is, but a session's roll-up and the web page count it as neither, and no session
# start lists it among the failures to resolve.
UNKNOWN_STATUS = "unknown"
# The statuses that need no verdict before the step is eligible.
SETTLED_STATUSES = SUCCESS_STATUSES | {UNKNOWN_STATUS}


class CaptureEpisode(Request, tag="capture_episode"):
    """Record one thing an agent did. Captured ``pending``; the evaluation actor settles it."""

    summary: Annotated[
        Text,
        Meta(
            description=(
                "What was done and how it went, in one or two sentences a later "
                "reader can act on, e.g. 'ran alembic upgrade head; failed: "
                "duplicate column email'."
            )
        ),
    ]
    session_id: Annotated[
        SessionId | None,
        Meta(description=("Session the step belongs to; default: this MCP connection's session.")),
    ] = None
    # Free text to the ingest stage (redacted): hooks report whatever a tool was called.
    tool: Annotated[
        Annotated[str, Meta(min_length=1, max_length=128, extra=FREE_TEXT)] | None,
        Meta(description="The tool or command used, e.g. 'Bash', 'pytest'."),
    ] = None
    # SETTLED_STATUSES are eligible at once; anything else (error, timeout, denied) waits for
    # a verdict before it becomes eligible (see recalld.domain.policy).
    status: Annotated[
        Label,
        Meta(
            description=(
                "Outcome of the step: 'ok' (or success, passed, ...), 'unknown' when "
                "it is not known how it went, or a failure such as 'error', 'timeout', "
                "'denied'."
            )
        ),
    ] = "ok"
    error_code: Annotated[
        Annotated[str, Meta(min_length=1, max_length=128, extra=FREE_TEXT)] | None,
        Meta(description="Error kind for a failed step, e.g. 'exit_1', 'ENOENT'."),
    ] = None
    duration_ms: Annotated[
        Annotated[float, Meta(ge=0)] | None,
        Meta(description="How long the step took, milliseconds."),
    ] = None
    result_size: Annotated[
        Annotated[int, Meta(ge=0)] | None, Meta(description="Size of the step's result, bytes.")
    ] = None
    # How the episode reached recalld (mcp, hook, cli, api) and what kind of step it was.
    channel: Label = "api"
    episode_type: Annotated[
        Label, Meta(description="Kind of step: tool_call (default), decision, turn_end, ...")
    ] = "tool_call"
    tags: Annotated[Tags, Meta(description="Short labels, e.g. ['migration'].")] = []
    # A verdict already known at capture (0 = the task failed .. 1 = it succeeded).
    task_result: Annotated[
        UnitScore | None,
        Meta(description="Verdict if already known: 0 (task failed) .. 1 (succeeded)."),
    ] = None
    # Where the summary's words came from (web, tool_output, user, ...); trust weighs it.
    source: Source | None = None
    ts: Annotated[float, Meta(ge=0)] | None = None
    ttl_s: Annotated[float, Meta(gt=0)] | None = None
    idempotency_key: Annotated[
        IdempotencyKey | None,
        Meta(
            description=(
                "Retry-safe key: a repeated key returns the first result instead "
                "of recording again."
            )
        ),
    ] = None
    # Overrides the hello's workspace for this one episode (a hook reports its own cwd).
    workspace: Path | None = None
    # Files the step touched (a hook's tool_input.file_path); a session's roll-up into an
    # experience lists those inside the workspace.
    files: Annotated[list[FilePath], Meta(max_length=64)] = []


class WorkSearch(Request, tag="work_search"):
    """Search the caller's work episodes under the reader contract."""

    # Optional: without a query the newest episodes under the filters are listed.
    query: Annotated[
        Query | None,
        Meta(
            description=(
                "Words the episode's summary would contain (a command, file, "
                "error text); omit to list the newest episodes under the filters."
            )
        ),
    ] = None
    tool: Annotated[Name | None, Meta(description="Only episodes of this tool, e.g. 'Bash'.")] = (
        None
    )
    session_id: Annotated[SessionId | None, Meta(description="Only episodes of this session.")] = (
        None
    )
    # Unix seconds, inclusive.
    since: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="Only episodes at or after this time, unix seconds."),
    ] = None
    until: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="Only episodes at or before this time, unix seconds."),
    ] = None
    k: Annotated[int, Meta(ge=1, le=200, description="Max results (1-200).")] = 20
    min_trust: Annotated[
        UnitScore, Meta(description="Trust floor: episodes below it are excluded as high-risk.")
    ] = 0.3
    include_pending: Annotated[
        bool, Meta(description="Also return episodes not yet evaluated (still trust-floored).")
    ] = False
    # Crosses the agent partition; needs the admin:workspace scope.
    any_caller: Annotated[
        bool,
        Meta(
            description=(
                "Search every agent's episodes, not only yours; requires the admin:workspace scope."
            )
        ),
    ] = False
    semantic: Annotated[
        bool,
        Meta(
            description=(
                "Fuse a meaning-based channel over the summary with the lexical "
                "match (RRF); needs a query."
            )
        ),
    ] = False
    # None: the daemon's configured default (detailed unless configured otherwise).
    response_format: Annotated[
        Literal["concise", "detailed"] | None,
        Meta(
            description=(
                "concise returns only the high-signal fields; detailed (the "
                "shipped default) returns the full payload. Errors and safety "
                "warnings are never trimmed. When omitted, the server's default "
                "applies."
            )
        ),
    ] = None
    # Legacy alias of response_format (terse = concise, full = detailed); loses to it. Its values
    # in the order of work_search's argument: typing caches ``X | None`` by equality and two
    # Literals of the same values are equal in any order, so the one made first would give the
    # tool's inputSchema its enum order, and the listing would change with import order.
    verbosity: Annotated[
        Literal["full", "terse"] | None,
        Meta(description=("Legacy alias for response_format: terse = concise, full = detailed.")),
    ] = None

    def __post_init__(self) -> None:
        if self.since is not None and self.until is not None and self.since > self.until:
            raise RequestRuleError(f"since ({self.since}) is after until ({self.until})")


class WorkResult(Request, tag="work_result"):
    """Set the verdict of one episode or of every episode of a session."""

    task_result: Annotated[
        UnitScore, Meta(description="How the task turned out: 0 (failed) .. 1 (succeeded).")
    ]
    episode_id: Annotated[
        Key | None, Meta(description="Judge this one episode. Give this or session_id.")
    ] = None
    session_id: Annotated[
        SessionId | None,
        Meta(description="Judge every episode of this session. Give this or episode_id."),
    ] = None
    # When the verdict was reached; defaults to now.
    verdict_at: Annotated[float, Meta(ge=0)] | None = None
    # Judge another agent's episodes too; needs the admin:workspace scope.
    any_caller: Annotated[
        bool,
        Meta(description=("Allow another agent's episodes; requires the admin:workspace scope.")),
    ] = False

    def __post_init__(self) -> None:
        if (self.episode_id is None) == (self.session_id is None):
            raise RequestRuleError("give exactly one of episode_id or session_id")


class Forget(Request, tag="forget"):
    """Tombstone one record the caller may see: it never surfaces again."""

    record_id: Annotated[
        Key,
        Meta(
            description=("Id of the record to forget, as a search returned it (ep_..., mem_...).")
        ),
    ]


# ---- work episodes (seed 001)


class EpisodeCaptured(Reply, tag="episode_captured", omit_defaults=False):
    """An episode that has committed, with what capture decided before the COMMIT."""

    record_id: Annotated[
        str,
        Meta(
            description=(
                "Id of the episode (for work_result, forget, and as a later episode's prev_id)."
            )
        ),
    ]
    prev_id: Annotated[
        str | None,
        Meta(description="The previous episode of the same session, or null for the first."),
    ] = None
    eligibility: Annotated[
        str,
        Meta(
            description=(
                "'pending' for a new episode: the evaluator settles it (eligible, "
                "ineligible, blocked); a failed step waits for work_result."
            )
        ),
    ] = "pending"
    trust: Annotated[
        float,
        Meta(
            description=(
                "Trust in 0..1 from prompt-injection markers, quoted authority "
                "and source; below 0.3 it is hidden by default."
            )
        ),
    ] = 1.0
    blocked: Annotated[
        bool,
        Meta(
            description=(
                "True when the summary tries to instruct its reader; it will "
                "never be served by default."
            )
        ),
    ] = False
    # Kinds of secret redacted from the episode, e.g. ["aws_key"].
    redacted: Annotated[
        list[str],
        Meta(
            description=(
                "Kinds of secret removed before storage, e.g. ['aws_key']; empty when none."
            )
        ),
    ] = []
    duplicate: Annotated[
        bool,
        Meta(
            description=(
                "True when this exact episode was already recorded; nothing new was written."
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


class WorkFloor(Struct, kw_only=True):
    """The reader contract a search ran under."""

    min_trust: Annotated[float, Meta(description="The trust floor applied.")]
    include_pending: Annotated[
        bool, Meta(description="Whether not-yet-evaluated episodes were included.")
    ]
    semantic_used: Annotated[
        bool,
        Meta(
            description=(
                "True when the cosine channel took part; false means lexical only "
                "(not requested, no query, or no embedding model)."
            )
        ),
    ]


class WorkEpisode(Struct, kw_only=True):
    """One episode as work_search returns it. Fields left UNSET are not sent at all
    (response_format=concise drops some); None is sent as null."""

    id: Annotated[str, Meta(description="Episode id.")]
    ts: Annotated[float, Meta(description="When it happened, unix seconds.")]
    vault: Annotated[
        str | msgspec.UnsetType | None, Meta(description="Workspace (git root) it happened in.")
    ] = msgspec.UNSET
    session_id: Annotated[
        str | msgspec.UnsetType | None, Meta(description="Agent session it belongs to.")
    ] = msgspec.UNSET
    caller: Annotated[
        str | msgspec.UnsetType | None, Meta(description="Agent that recorded it.")
    ] = msgspec.UNSET
    channel: Annotated[
        str | msgspec.UnsetType, Meta(description="How it was recorded: mcp, hook, cli or api.")
    ] = msgspec.UNSET
    episode_type: Annotated[
        str | msgspec.UnsetType,
        Meta(description="What kind of step: tool_call, turn_end, prompt, session_end, ..."),
    ] = msgspec.UNSET
    task_result: Annotated[
        float | msgspec.UnsetType | None,
        Meta(description=("Verdict on the task, 0 (failed) .. 1 (succeeded); null until judged.")),
    ] = msgspec.UNSET
    verdict_at: Annotated[
        float | msgspec.UnsetType | None,
        Meta(description="When the verdict was set, unix seconds."),
    ] = msgspec.UNSET
    tool: Annotated[
        str | msgspec.UnsetType | None, Meta(description="Tool that was called, if any.")
    ] = msgspec.UNSET
    status: Annotated[str, Meta(description="Outcome of the step: ok, error, ...")]
    error_code: Annotated[
        str | msgspec.UnsetType | None,
        Meta(description="Error kind for a failed step, e.g. exit_1, tool_error."),
    ] = msgspec.UNSET
    duration_ms: Annotated[
        float | msgspec.UnsetType | None, Meta(description="How long the step took, milliseconds.")
    ] = msgspec.UNSET
    result_size: Annotated[
        int | msgspec.UnsetType | None, Meta(description="Size of the tool's result, bytes.")
    ] = msgspec.UNSET
    summary: Annotated[
        str | msgspec.UnsetType | None, Meta(description="What was done (secrets redacted).")
    ] = msgspec.UNSET
    tags: Annotated[list[str] | msgspec.UnsetType, Meta(description="Tags recorded with it.")] = (
        msgspec.UNSET
    )
    trust: Annotated[float | msgspec.UnsetType | None, Meta(description="Trust in 0..1.")] = (
        msgspec.UNSET
    )
    eligibility: Annotated[
        str, Meta(description="eligible, or pending when include_pending surfaced it.")
    ]
    blocked: Annotated[
        bool | msgspec.UnsetType,
        Meta(
            description=(
                "True when the content is unsafe to follow; a safety warning, never trimmed."
            )
        ),
    ] = msgspec.UNSET
    prev_id: Annotated[
        str | msgspec.UnsetType | None, Meta(description="Previous episode of the same session.")
    ] = msgspec.UNSET


class WorkSearchResult(Reply, tag="work_search_result", kw_only=True):
    available: Annotated[
        bool, Meta(description="False when recalld could not be reached; message says why.")
    ]
    message: Annotated[str | None, Meta(description="What was searched, or why nothing was.")] = (
        None
    )
    floor: Annotated[
        WorkFloor | None, Meta(description="The reader contract the search ran under.")
    ] = None
    # Sent even when empty (and, by recall-mcp, when the daemon could not be asked).
    results: Annotated[
        list[WorkEpisode],
        Meta(
            description=("Matching episodes: best match first with a query, newest first without.")
        ),
    ]
    response_format: Literal["concise", "detailed"] = "detailed"
    took_ms: float = 0.0


class VerdictSet(Reply, tag="verdict_set"):
    task_result: Annotated[float, Meta(description="The verdict now recorded.")]
    verdict_at: Annotated[float, Meta(description="When it was reached, unix seconds.")]
    # Episodes the verdict applies to, and how many of them it changed.
    matched: Annotated[int, Meta(description="Episodes the verdict applies to.")]
    updated: Annotated[
        int, Meta(description="Of those, how many it changed (a repeated verdict changes none).")
    ]


class Forgotten(Reply, tag="forgotten", omit_defaults=False):
    record_id: Annotated[str, Meta(description="The forgotten record's id.")]
    kind: Annotated[str, Meta(description="What it was: episode, memory, experience, ...")]
    tombstoned_at: Annotated[float, Meta(description="When it was forgotten, unix seconds.")]
    # True when the record had been forgotten before; nothing changed.
    already: Annotated[
        bool, Meta(description="True when it had been forgotten before; nothing changed.")
    ] = False
