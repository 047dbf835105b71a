"""MCP tools for work episodes (seed 001): ``capture_episode``, ``work_search``,
``work_result`` and ``forget``.

work_search's parameters, defaults, bounds and result fields are the seed's. Its output is a
TypedDict so that fields response_format=concise drops are absent from structuredContent,
not null.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Literal, NotRequired

import msgspec
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from . import protocol as p
from .client import DaemonUnavailable, RemoteError, Session
from .mcp_common import ToolRegistry, forwarder, tool_error

__all__ = ["register"]


# --------------------------------------------------------------------------- outputs


class EpisodeCaptureResult(BaseModel):
    id: str = Field(
        description="Id of the episode (for work_result, forget, and as a later episode's prev_id)."
    )
    prev_id: str | None = Field(
        description="The previous episode of the same session, or null for the first."
    )
    eligibility: str = Field(
        description="'pending' for a new episode: the evaluator settles it (eligible, ineligible, "
        "blocked); a failed step waits for work_result."
    )
    trust: float = Field(
        description="Trust in 0..1 from prompt-injection markers, quoted authority and source; "
        "below 0.3 it is hidden by default."
    )
    blocked: bool = Field(
        description="True when the summary tries to instruct its reader; it will never be served "
        "by default."
    )
    redacted: list[str] = Field(
        description="Kinds of secret removed before storage, e.g. ['aws_key']; empty when none."
    )
    duplicate: bool = Field(
        description="True when this exact episode was already recorded; nothing new was written."
    )
    replayed: bool = Field(
        description="True when this idempotency_key was used before; the first result is returned."
    )


class WorkFloorOut(TypedDict):
    min_trust: Annotated[float, Field(description="The trust floor applied.")]
    include_pending: Annotated[
        bool, Field(description="Whether not-yet-evaluated episodes were included.")
    ]
    semantic_used: Annotated[
        bool,
        Field(
            description="True when the cosine channel took part; false means lexical only (not "
            "requested, no query, or no embedding model)."
        ),
    ]


class WorkEpisodeOut(TypedDict):
    id: Annotated[str, Field(description="Episode id.")]
    ts: Annotated[float, Field(description="When it happened, unix seconds.")]
    vault: NotRequired[
        Annotated[str | None, Field(description="Workspace (git root) it happened in.")]
    ]
    session_id: NotRequired[
        Annotated[str | None, Field(description="Agent session it belongs to.")]
    ]
    caller: NotRequired[Annotated[str | None, Field(description="Agent that recorded it.")]]
    channel: NotRequired[
        Annotated[str, Field(description="How it was recorded: mcp, hook, cli or api.")]
    ]
    episode_type: NotRequired[
        Annotated[
            str,
            Field(description="What kind of step: tool_call, turn_end, prompt, session_end, ..."),
        ]
    ]
    task_result: NotRequired[
        Annotated[
            float | None,
            Field(
                description="Verdict on the task, 0 (failed) .. 1 (succeeded); null until judged."
            ),
        ]
    ]
    verdict_at: NotRequired[
        Annotated[float | None, Field(description="When the verdict was set, unix seconds.")]
    ]
    tool: NotRequired[Annotated[str | None, Field(description="Tool that was called, if any.")]]
    status: Annotated[str, Field(description="Outcome of the step: ok, error, ...")]
    error_code: NotRequired[
        Annotated[
            str | None, Field(description="Error kind for a failed step, e.g. exit_1, tool_error.")
        ]
    ]
    duration_ms: NotRequired[
        Annotated[float | None, Field(description="How long the step took, milliseconds.")]
    ]
    result_size: NotRequired[
        Annotated[int | None, Field(description="Size of the tool's result, bytes.")]
    ]
    summary: NotRequired[
        Annotated[str | None, Field(description="What was done (secrets redacted).")]
    ]
    tags: NotRequired[Annotated[list[str], Field(description="Tags recorded with it.")]]
    trust: NotRequired[Annotated[float | None, Field(description="Trust in 0..1.")]]
    eligibility: Annotated[
        str, Field(description="eligible, or pending when include_pending surfaced it.")
    ]
    blocked: NotRequired[
        Annotated[
            bool,
            Field(
                description="True when the content is unsafe to follow; a safety warning, never "
                "trimmed."
            ),
        ]
    ]
    prev_id: NotRequired[
        Annotated[str | None, Field(description="Previous episode of the same session.")]
    ]


class WorkSearchOut(TypedDict):
    available: Annotated[
        bool, Field(description="False when recalld could not be reached; message says why.")
    ]
    message: NotRequired[
        Annotated[str, Field(description="What was searched, or why nothing was.")]
    ]
    floor: NotRequired[
        Annotated[WorkFloorOut, Field(description="The reader contract the search ran under.")]
    ]
    results: NotRequired[
        Annotated[
            list[WorkEpisodeOut],
            Field(
                description="Matching episodes: best match first with a query, newest first "
                "without."
            ),
        ]
    ]


class VerdictResult(BaseModel):
    task_result: float = Field(description="The verdict now recorded.")
    verdict_at: float = Field(description="When it was reached, unix seconds.")
    matched: int = Field(description="Episodes the verdict applies to.")
    updated: int = Field(
        description="Of those, how many it changed (a repeated verdict changes none)."
    )


class ForgetResult(BaseModel):
    id: str = Field(description="The forgotten record's id.")
    kind: str = Field(description="What it was: episode, memory, experience, ...")
    tombstoned_at: float = Field(description="When it was forgotten, unix seconds.")
    already: bool = Field(description="True when it had been forgotten before; nothing changed.")


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


def register(server: ToolRegistry, session: Callable[[], Session]) -> None:
    """Register the work-episode tools on ``server``; ``session`` returns the live session."""

    call = forwarder(session)
    # One MCP connection is one agent session unless the caller names another.
    default_session = f"mcp-{uuid.uuid4().hex}"

    @server.tool(
        name="capture_episode",
        title="Record a work episode",
        description=CAPTURE_EPISODE_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Record a work episode",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    )
    async def capture_episode(
        summary: Annotated[
            str,
            Field(
                min_length=1,
                max_length=100_000,
                description="What was done and how it went, in one or two sentences a later reader "
                "can act on, e.g. 'ran alembic upgrade head; failed: duplicate column email'.",
            ),
        ],
        tool: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=128,
                description="The tool or command used, e.g. 'Bash', 'pytest'.",
            ),
        ] = None,
        status: Annotated[
            str,
            Field(
                min_length=1,
                max_length=64,
                description="Outcome of the step: 'ok' (or success, passed, ...) or a failure such "
                "as 'error', 'timeout', 'denied'.",
            ),
        ] = "ok",
        session_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="Session the step belongs to; default: this MCP connection's session.",
            ),
        ] = None,
        error_code: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=128,
                description="Error kind for a failed step, e.g. 'exit_1', 'ENOENT'.",
            ),
        ] = None,
        duration_ms: Annotated[
            float | None, Field(ge=0, description="How long the step took, milliseconds.")
        ] = None,
        result_size: Annotated[
            int | None, Field(ge=0, description="Size of the step's result, bytes.")
        ] = None,
        episode_type: Annotated[
            str,
            Field(
                min_length=1,
                max_length=64,
                description="Kind of step: tool_call (default), decision, turn_end, ...",
            ),
        ] = "tool_call",
        tags: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=64)]],
            Field(max_length=32, description="Short labels, e.g. ['migration']."),
        ] = [],  # noqa: B006
        task_result: Annotated[
            float | None,
            Field(
                ge=0,
                le=1,
                description="Verdict if already known: 0 (task failed) .. 1 (succeeded).",
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
    ) -> EpisodeCaptureResult:
        req = p.CaptureEpisode(
            summary=summary,
            tool=tool,
            status=status,
            session_id=session_id or default_session,
            error_code=error_code,
            duration_ms=duration_ms,
            result_size=result_size,
            channel="mcp",
            episode_type=episode_type,
            tags=tags,
            task_result=task_result,
            # The shim may retry after a reconnect; a key makes that retry harmless.
            idempotency_key=idempotency_key or f"mcp-{uuid.uuid4().hex}",
        )
        r = await call(req, p.EpisodeCaptured)
        return EpisodeCaptureResult(
            id=r.record_id,
            prev_id=r.prev_id,
            eligibility=r.eligibility,
            trust=r.trust,
            blocked=r.blocked,
            redacted=r.redacted,
            duplicate=r.duplicate,
            replayed=r.replayed,
        )

    @server.tool(
        name="work_search",
        title="Search work episodes",
        description=WORK_SEARCH_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Search work episodes",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    )
    async def work_search(
        query: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=4000,
                description="Words the episode's summary would contain (a command, file, error "
                "text); omit to list the newest episodes under the filters.",
            ),
        ] = None,
        tool: Annotated[
            str | None,
            Field(
                min_length=1, max_length=128, description="Only episodes of this tool, e.g. 'Bash'."
            ),
        ] = None,
        session_id: Annotated[
            str | None,
            Field(min_length=1, max_length=200, description="Only episodes of this session."),
        ] = None,
        since: Annotated[
            int | None,
            Field(ge=1, description="Only episodes at or after this time, unix seconds."),
        ] = None,
        until: Annotated[
            int | None,
            Field(ge=1, description="Only episodes at or before this time, unix seconds."),
        ] = None,
        k: Annotated[int, Field(ge=1, le=200, description="Max results (1-200).")] = 20,
        min_trust: Annotated[
            float,
            Field(
                ge=0, le=1, description="Trust floor: episodes below it are excluded as high-risk."
            ),
        ] = 0.3,
        include_pending: Annotated[
            bool, Field(description="Also return episodes not yet evaluated (still trust-floored).")
        ] = False,
        any_caller: Annotated[
            bool,
            Field(
                description="Search every agent's episodes, not only yours; requires the "
                "admin:workspace scope."
            ),
        ] = False,
        semantic: Annotated[
            bool,
            Field(
                description="Fuse a meaning-based channel over the summary with the lexical match "
                "(RRF); needs a query."
            ),
        ] = False,
        response_format: Annotated[
            Literal["concise", "detailed"] | None,
            Field(
                description="concise returns only the high-signal fields; detailed (the shipped "
                "default) returns the full payload. Errors and safety warnings are never trimmed. "
                "When omitted, the server's default applies."
            ),
        ] = None,
        verbosity: Annotated[
            Literal["full", "terse"] | None,
            Field(
                description="Legacy alias for response_format: terse = concise, full = detailed."
            ),
        ] = None,
    ) -> WorkSearchOut:
        req = p.WorkSearch(
            query=query,
            tool=tool,
            session_id=session_id,
            since=since,
            until=until,
            k=k,
            min_trust=min_trust,
            include_pending=include_pending,
            any_caller=any_caller,
            semantic=semantic,
            response_format=response_format,
            verbosity=verbosity,
        )
        try:
            reply = await session().call(req, p.WorkSearchResult)
        except DaemonUnavailable as exc:
            return {"available": False, "message": f"recalld unavailable: {exc}"}
        except RemoteError as exc:
            if exc.code == "unavailable":
                return {"available": False, "message": f"recalld unavailable: {exc.message}"}
            raise tool_error(exc) from exc
        out: WorkSearchOut = {
            "available": reply.available,
            "results": [msgspec.to_builtins(ep) for ep in reply.results],
        }
        if reply.message is not None:
            out["message"] = reply.message
        if reply.floor is not None:
            out["floor"] = msgspec.to_builtins(reply.floor)
        return out

    @server.tool(
        name="work_result",
        title="Judge work episodes",
        description=WORK_RESULT_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Judge work episodes",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    async def work_result(
        task_result: Annotated[
            float,
            Field(ge=0, le=1, description="How the task turned out: 0 (failed) .. 1 (succeeded)."),
        ],
        episode_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="Judge this one episode. Give this or session_id.",
            ),
        ] = None,
        session_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description="Judge every episode of this session. Give this or episode_id.",
            ),
        ] = None,
        any_caller: Annotated[
            bool,
            Field(
                description="Allow another agent's episodes; requires the admin:workspace scope."
            ),
        ] = False,
    ) -> VerdictResult:
        r = await call(
            p.WorkResult(
                task_result=task_result,
                episode_id=episode_id,
                session_id=session_id,
                any_caller=any_caller,
            ),
            p.VerdictSet,
        )
        return VerdictResult(
            task_result=r.task_result, verdict_at=r.verdict_at, matched=r.matched, updated=r.updated
        )

    @server.tool(
        name="forget",
        title="Forget a record",
        description=FORGET_DESCRIPTION,
        annotations=ToolAnnotations(
            title="Forget a record",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    async def forget(
        id: Annotated[
            str,
            Field(
                min_length=1,
                max_length=200,
                description="Id of the record to forget, as a search returned it "
                "(ep_..., mem_...).",
            ),
        ],
    ) -> ForgetResult:
        r = await call(p.Forget(record_id=id), p.Forgotten)
        return ForgetResult(
            id=r.record_id, kind=r.kind, tombstoned_at=r.tombstoned_at, already=r.already
        )
