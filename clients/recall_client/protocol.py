"""The daemon's wire protocol: every frame either side may send, declared once.

A frame is a 4-byte big-endian length followed by one msgpack-encoded message. Requests
form a tagged union on ``op``; replies a tagged union on ``type``. Every request carries an
``id`` that its reply echoes, so one connection can pipeline many requests and receive the
replies out of order. The first request on a connection must be a :class:`Hello`.

The daemon imports this module; nothing redefines these shapes.
"""

from __future__ import annotations

import struct
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

__all__ = [
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "ActorStatus",
    "CaptureEpisode",
    "Doctor",
    "DoctorCheck",
    "DoctorResult",
    "EpisodeCaptured",
    "Error",
    "ErrorCode",
    "Export",
    "ExportPage",
    "ExportedRecord",
    "Forget",
    "Forgotten",
    "FrameTooLarge",
    "Hello",
    "MemoryHit",
    "MemorySearch",
    "MemorySearchResult",
    "MemoryStore",
    "ModelStatus",
    "Ping",
    "Pong",
    "RefusedWorkspace",
    "Reindex",
    "ReindexStarted",
    "Reply",
    "Request",
    "Status",
    "StatusReport",
    "StatusResult",
    "Stored",
    "VerdictSet",
    "Welcome",
    "WorkEpisode",
    "WorkFloor",
    "WorkResult",
    "WorkSearch",
    "WorkSearchResult",
    "WorkspaceApproval",
    "WorkspaceApprove",
    "WorkspaceChanged",
    "WorkspaceList",
    "WorkspaceListResult",
    "WorkspaceRevoke",
    "decode_reply",
    "decode_request",
    "encode",
    "frame",
    "peek_request_id",
]

PROTOCOL_VERSION = 1
# Large enough for a long memory plus metadata; small enough that a hostile client cannot make
# the daemon buffer much. Bigger payloads are refused before they are read.
MAX_FRAME = 4 * 1024 * 1024
HEADER = struct.Struct(">I")

ErrorCode = Literal["invalid_request", "not_found", "forbidden", "busy", "unavailable", "internal"]

# Reusable bounded field types: the bounds live in the protocol, so the daemon rejects
# out-of-range input with a typed error whichever client sent it.
Name = Annotated[str, Meta(min_length=1, max_length=128)]
Tag = Annotated[str, Meta(min_length=1, max_length=64)]
Tags = Annotated[list[Tag], Meta(max_length=32)]
Text = Annotated[str, Meta(min_length=1, max_length=100_000)]
Query = Annotated[str, Meta(min_length=1, max_length=4_000)]
Key = Annotated[str, Meta(min_length=1, max_length=200)]
Path = Annotated[str, Meta(min_length=1, max_length=4_096)]
Seconds = Annotated[float, Meta(ge=0)]


# --------------------------------------------------------------------------- requests


class Request(Struct, tag_field="op", kw_only=True, forbid_unknown_fields=True):
    """Base of every client frame; ``id`` is chosen by the client and echoed in the reply."""

    id: Annotated[int, Meta(ge=0, le=2**53)] = 0


class Hello(Request, tag="hello"):
    """Opens a session: who is calling, from which workspace, speaking which version."""

    version: int
    agent: Name
    workspace: Path | None = None
    client: Annotated[str, Meta(max_length=64)] = ""
    # The writer's declared model (e.g. "claude-opus-4"); memory_search can filter on it.
    model: Annotated[str, Meta(max_length=128)] | None = None
    # The contents of the daemon's admin token file; grants the admin:workspace scope.
    # A token that does not match is refused (forbidden), never silently ignored.
    admin_token: Annotated[str, Meta(min_length=1, max_length=256)] | None = None


class Ping(Request, tag="ping"):
    """Round trip with no work; used by health checks and benchmarks."""


class MemoryStore(Request, tag="memory_store"):
    """Store one memory. Acknowledged only after its transaction has committed."""

    text: Text
    tags: Tags = []
    source: Annotated[str, Meta(max_length=128)] | None = None
    session: Annotated[str, Meta(max_length=200)] | None = None
    # When the remembered thing happened (unix seconds); defaults to the time of capture.
    ts: Annotated[float, Meta(ge=0)] | None = None
    ttl_s: Annotated[float, Meta(gt=0)] | None = None
    # A retried request with the same key returns the first request's result.
    idempotency_key: Key | None = None
    # Overrides the hello's workspace for this one record (bulk import, benchmarks).
    workspace: Path | None = None


class MemorySearch(Request, tag="memory_search"):
    """Search memories of the caller's workspace, lexically and by meaning."""

    query: Query
    limit: Annotated[int, Meta(ge=1, le=50)] = 5
    # keyword and bm25 are lexical only; hybrid adds the semantic channel when it is up.
    mode: Literal["keyword", "bm25", "hybrid"] = "hybrid"
    tags: Tags = []
    workspace: Path | None = None


class Status(Request, tag="status"):
    """The daemon's introspection report."""

    # Wait up to this long for the embedding model to finish loading before answering;
    # lets a client (or a test) wait for readiness without polling.
    wait_model_s: Annotated[float, Meta(ge=0, le=600)] = 0.0


# ---- work episodes (seed 001): capture, work_search, work_result; forget (any record)

SessionId = Annotated[str, Meta(min_length=1, max_length=200)]
Label = Annotated[str, Meta(min_length=1, max_length=64)]
UnitScore = Annotated[float, Meta(ge=0, le=1)]


class CaptureEpisode(Request, tag="capture_episode"):
    """Record one thing an agent did. Captured ``pending``; the evaluation actor settles it."""

    summary: Text
    session_id: SessionId | None = None
    tool: Name | None = None
    # ok / success / ... count as success; anything else (error, timeout, denied) waits for
    # a verdict before it becomes eligible (see recalld.episodes).
    status: Label = "ok"
    error_code: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    duration_ms: Annotated[float, Meta(ge=0)] | None = None
    result_size: Annotated[int, Meta(ge=0)] | None = None
    # How the episode reached recalld (mcp, hook, cli, api) and what kind of step it was.
    channel: Label = "api"
    episode_type: Label = "tool_call"
    tags: Tags = []
    # A verdict already known at capture (0 = the task failed .. 1 = it succeeded).
    task_result: UnitScore | None = None
    # Where the summary's words came from (web, tool_output, user, ...); trust weighs it.
    source: Annotated[str, Meta(max_length=128)] | None = None
    ts: Annotated[float, Meta(ge=0)] | None = None
    ttl_s: Annotated[float, Meta(gt=0)] | None = None
    idempotency_key: Key | None = None
    # Overrides the hello's workspace for this one episode (a hook reports its own cwd).
    workspace: Path | None = None


class WorkSearch(Request, tag="work_search"):
    """Search the caller's work episodes under the reader contract (seed 001)."""

    # Optional: without a query the newest episodes under the filters are listed.
    query: Query | None = None
    tool: Name | None = None
    session_id: SessionId | None = None
    # Unix seconds, inclusive.
    since: Annotated[int, Meta(ge=1)] | None = None
    until: Annotated[int, Meta(ge=1)] | None = None
    k: Annotated[int, Meta(ge=1, le=200)] = 20
    min_trust: UnitScore = 0.3
    include_pending: bool = False
    # Crosses the agent partition; needs the admin:workspace scope.
    any_caller: bool = False
    semantic: bool = False
    # None: the daemon's configured default (detailed unless configured otherwise).
    response_format: Literal["concise", "detailed"] | None = None
    # Legacy alias of response_format (terse = concise, full = detailed); loses to it.
    verbosity: Literal["terse", "full"] | None = None


class WorkResult(Request, tag="work_result"):
    """Set the verdict of one episode or of every episode of a session."""

    task_result: UnitScore
    episode_id: Key | None = None
    session_id: SessionId | None = None
    # When the verdict was reached; defaults to now.
    verdict_at: Annotated[float, Meta(ge=0)] | None = None
    # Judge another agent's episodes too; needs the admin:workspace scope.
    any_caller: bool = False


class Forget(Request, tag="forget"):
    """Tombstone one record the caller may see: it never surfaces again."""

    record_id: Key



# --------------------------------------------------------------------------- operations
# Admin requests recallctl sends (export, reindex, doctor, workspace approval). They act on
# the whole daemon, so the workspace-approval gate does not apply to them.


class Export(Request, tag="export"):
    """One page of records for ``recallctl export``, in rowid order after ``after``."""

    after: Annotated[int, Meta(ge=0)] = 0
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 500
    # Only this workspace; None exports every workspace.
    workspace: Path | None = None
    # Only records of this kind (memory, episode, ...); None exports every kind.
    kind: Name | None = None


class Reindex(Request, tag="reindex"):
    """Re-embed every record with the current model (e.g. after a model change)."""


class Doctor(Request, tag="doctor"):
    """The daemon's own health checks: database integrity, index vs SQLite, model, writer."""

    # Wait up to this long for the model to finish loading, so its check can say ready.
    wait_model_s: Annotated[float, Meta(ge=0, le=600)] = 0.0


class WorkspaceApprove(Request, tag="workspace_approve"):
    """Approve a workspace: with ``require_approval`` on, only approved ones are served."""

    workspace: Path


class WorkspaceRevoke(Request, tag="workspace_revoke"):
    """Withdraw a workspace's approval."""

    workspace: Path


class WorkspaceList(Request, tag="workspace_list"):
    """Approved workspaces, and those refused since the daemon started."""


OpsRequests = Export | Reindex | Doctor | WorkspaceApprove | WorkspaceRevoke | WorkspaceList

Requests = (
    Hello | Ping | MemoryStore | MemorySearch | Status
    | CaptureEpisode | WorkSearch | WorkResult | Forget
    | OpsRequests
)


# --------------------------------------------------------------------------- replies


class Reply(Struct, tag_field="type", kw_only=True, omit_defaults=True):
    """Base of every daemon frame; ``id`` is the request's."""

    id: int


class Error(Reply, tag="error"):
    """A typed failure of one request. ``retryable`` says whether trying again may succeed."""

    code: ErrorCode
    message: str
    retryable: bool = False


class Welcome(Reply, tag="welcome"):
    """Answer to a hello: the identity the daemon will use for this connection."""

    version: int
    server: str
    agent: str
    workspace: str
    uid: int
    pid: int
    # What this connection may do: read:workspace and write:workspace for every peer of
    # the daemon's uid, plus admin:workspace for one that presented the admin token.
    scopes: list[str] = []


class Pong(Reply, tag="pong"):
    pass


class Stored(Reply, tag="stored"):
    """A write that has committed."""

    record_id: str
    # True when the same content already existed in the workspace; record_id is that record.
    duplicate: bool = False
    # True when the idempotency key was seen before; the reply is the first one's.
    replayed: bool = False


class MemoryHit(Struct, kw_only=True):
    id: str
    score: float
    text: str
    snippet: str
    ts: float
    tags: list[str]
    source: str | None = None


class MemorySearchResult(Reply, tag="memory_search_result"):
    query: str
    hits: list[MemoryHit]
    semantic_used: bool
    mode: str
    took_ms: float


class ActorStatus(Struct, kw_only=True):
    name: str
    state: str
    queue_depth: int
    queue_capacity: int
    processed: int
    errors: int


class ModelStatus(Struct, kw_only=True):
    name: str
    state: Literal["disabled", "loading", "ready", "failed"]
    reason: str | None = None
    dim: int | None = None
    load_s: float | None = None
    backend: str | None = None  # onnxruntime | sentence-transformers | hash


class StatusReport(Struct, kw_only=True):
    state: str
    version: str
    pid: int
    uptime_s: float
    socket: str
    data_dir: str
    model: ModelStatus
    semantic_search: bool
    actors: list[ActorStatus]
    records: dict[str, dict[str, int]]
    index: dict[str, Any]
    agents: list[dict[str, Any]]
    search_latency_ms: dict[str, float | None]


class StatusResult(Reply, tag="status_result"):
    report: StatusReport


# ---- work episodes (seed 001)


class EpisodeCaptured(Reply, tag="episode_captured"):
    """An episode that has committed, with what capture decided before the COMMIT."""

    record_id: str
    prev_id: str | None = None
    eligibility: str = "pending"
    trust: float = 1.0
    blocked: bool = False
    # Kinds of secret redacted from the episode, e.g. ["aws_key"].
    redacted: list[str] = []
    duplicate: bool = False
    replayed: bool = False


class WorkFloor(Struct, kw_only=True):
    """The reader contract a search ran under."""

    min_trust: float
    include_pending: bool
    semantic_used: bool


class WorkEpisode(Struct, kw_only=True):
    """One episode as work_search returns it. Fields left UNSET are not sent at all
    (response_format=concise drops some); None is sent as null."""

    id: str
    ts: float
    vault: str | msgspec.UnsetType | None = msgspec.UNSET
    session_id: str | msgspec.UnsetType | None = msgspec.UNSET
    caller: str | msgspec.UnsetType | None = msgspec.UNSET
    channel: str | msgspec.UnsetType = msgspec.UNSET
    episode_type: str | msgspec.UnsetType = msgspec.UNSET
    task_result: float | msgspec.UnsetType | None = msgspec.UNSET
    verdict_at: float | msgspec.UnsetType | None = msgspec.UNSET
    tool: str | msgspec.UnsetType | None = msgspec.UNSET
    status: str
    error_code: str | msgspec.UnsetType | None = msgspec.UNSET
    duration_ms: float | msgspec.UnsetType | None = msgspec.UNSET
    result_size: int | msgspec.UnsetType | None = msgspec.UNSET
    summary: str | msgspec.UnsetType | None = msgspec.UNSET
    tags: list[str] | msgspec.UnsetType = msgspec.UNSET
    trust: float | msgspec.UnsetType | None = msgspec.UNSET
    eligibility: str
    blocked: bool | msgspec.UnsetType = msgspec.UNSET
    prev_id: str | msgspec.UnsetType | None = msgspec.UNSET


class WorkSearchResult(Reply, tag="work_search_result"):
    available: bool
    message: str | None = None
    floor: WorkFloor | None = None
    results: list[WorkEpisode] = []
    response_format: Literal["concise", "detailed"] = "detailed"
    took_ms: float = 0.0


class VerdictSet(Reply, tag="verdict_set"):
    task_result: float
    verdict_at: float
    # Episodes the verdict applies to, and how many of them it changed.
    matched: int
    updated: int


class Forgotten(Reply, tag="forgotten"):
    record_id: str
    kind: str
    tombstoned_at: float
    # True when the record had been forgotten before; nothing changed.
    already: bool = False



# --------------------------------------------------------------------------- operations replies


class ExportedRecord(Struct, kw_only=True):
    """One record as ``recallctl export`` writes it (a JSON Lines row) and import reads it."""

    id: str
    kind: str
    text: str
    workspace: str
    agent: str
    ts: float
    created_at: float | None = None
    updated_at: float | None = None
    session: str | None = None
    source: str | None = None
    tags: list[str] = []
    trust: float | None = None
    eligibility: str | None = None
    expires_at: float | None = None


class ExportPage(Reply, tag="export_page"):
    records: list[ExportedRecord]
    # Pass as ``after`` for the next page; None when this was the last one.
    next_after: int | None = None
    # Records to export in all; only on the first page (``after`` = 0).
    total: int | None = None


class ReindexStarted(Reply, tag="reindex_started"):
    """Every live record was queued for embedding; status' embedding_backlog shows progress."""

    queued: int
    model: str


class DoctorCheck(Struct, kw_only=True):
    name: str
    ok: bool
    detail: str


class DoctorResult(Reply, tag="doctor_result"):
    checks: list[DoctorCheck]


class WorkspaceChanged(Reply, tag="workspace_changed"):
    workspace: str
    approved: bool
    # False when the workspace already was in the state asked for.
    changed: bool


class WorkspaceApproval(Struct, kw_only=True):
    workspace: str
    approved_at: float
    approved_by: str


class RefusedWorkspace(Struct, kw_only=True):
    workspace: str
    refused: int
    last_refused_at: float


class WorkspaceListResult(Reply, tag="workspace_list_result"):
    require_approval: bool
    approved: list[WorkspaceApproval]
    # Workspaces whose requests were refused since the daemon started (not approved yet).
    refused: list[RefusedWorkspace] = []



OpsReplies = ExportPage | ReindexStarted | DoctorResult | WorkspaceChanged | WorkspaceListResult

Replies = (
    Error | Welcome | Pong | Stored | MemorySearchResult | StatusResult
    | EpisodeCaptured | WorkSearchResult | VerdictSet | Forgotten
    | OpsReplies
)


# --------------------------------------------------------------------------- codec

_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(Requests)
_reply_decoder = msgspec.msgpack.Decoder(Replies)


class _IdOnly(Struct):
    id: int = 0


_id_decoder = msgspec.msgpack.Decoder(_IdOnly)


class FrameTooLarge(ValueError):
    """A frame's declared length is over :data:`MAX_FRAME`."""


def encode(msg: Request | Reply) -> bytes:
    """Encode one message body (no length prefix)."""
    return _encoder.encode(msg)


def frame(msg: Request | Reply) -> bytes:
    """Encode one message with its length prefix, ready to send."""
    body = _encoder.encode(msg)
    return HEADER.pack(len(body)) + body


def decode_request(body: bytes) -> Request:
    """Decode a request body.

    Raises:
        msgspec.DecodeError: not msgpack at all.
        msgspec.ValidationError: msgpack, but not a valid request (unknown op, bad field).
    """
    return _request_decoder.decode(body)  # type: ignore[no-any-return]


def decode_reply(body: bytes) -> Reply:
    """Decode a reply body. Raises msgspec.DecodeError or msgspec.ValidationError."""
    return _reply_decoder.decode(body)  # type: ignore[no-any-return]


def peek_request_id(body: bytes) -> int:
    """Best-effort request id of a body that failed validation, so its error reply can name it."""
    try:
        value = _id_decoder.decode(body).id
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        # RecursionError: skipping a deeply nested field; msgspec reports that depth as
        # Python's recursion limit rather than as a DecodeError.
        return 0
    return value if isinstance(value, int) and 0 <= value <= 2**53 else 0
