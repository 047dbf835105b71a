"""The daemon's wire protocol: every frame either side may send, declared once.

A frame is a 4-byte big-endian length followed by one msgpack-encoded message. Requests
form a tagged union on ``op``; replies a tagged union on ``type``. Every request carries an
``id`` that its reply echoes, so one connection can pipeline many requests and receive the
replies out of order. The first request on a connection must be a :class:`Hello`.

The daemon imports this module; nothing redefines these shapes.
"""

from __future__ import annotations

import enum
import operator
import struct
from collections.abc import Callable
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

__all__ = [
    "FREE_TEXT",
    "LIST_TEXT",
    "MAX_EXPERIENCE_FILES",
    "MAX_FRAME",
    "OPAQUE",
    "PROTOCOL_VERSION",
    "SUCCESS_STATUSES",
    "ActorStatus",
    "AgentChanged",
    "AgentCredential",
    "AgentEnroll",
    "AgentEnrolled",
    "AgentList",
    "AgentListResult",
    "AgentRevoke",
    "CaptureEpisode",
    "CitedPath",
    "CommitDrift",
    "ConnectedAgent",
    "Contender",
    "CortexFact",
    "DatabaseStatus",
    "DependsOn",
    "DependsOnResolved",
    "Doctor",
    "DoctorCheck",
    "DoctorResult",
    "EpisodeCaptured",
    "EpisodeRef",
    "Error",
    "ErrorCode",
    "ExecutionContext",
    "ExperienceForgotten",
    "ExperienceInfo",
    "ExperienceList",
    "ExperienceListResult",
    "ExperienceRecorded",
    "ExperienceRolledUp",
    "ExperienceSearchResult",
    "ExperienceStatus",
    "ExplainNode",
    "Export",
    "ExportPage",
    "ExportedEpisode",
    "ExportedEvent",
    "ExportedExperience",
    "ExportedLesson",
    "ExportedLessonLink",
    "ExportedLink",
    "ExportedMemory",
    "ExportedPath",
    "ExportedRecord",
    "ExportedRollup",
    "ExportedUse",
    "FactResolved",
    "Forget",
    "ForgetExperience",
    "Forgotten",
    "FrameTooLarge",
    "GetExecutionContext",
    "Hello",
    "Import",
    "Imported",
    "IndexStatus",
    "Latency",
    "LessonInfo",
    "MemoryChanged",
    "MemoryDetail",
    "MemoryEvent",
    "MemoryFactResolve",
    "MemoryHit",
    "MemoryItem",
    "MemoryLink",
    "MemoryList",
    "MemoryListResult",
    "MemoryRecordUse",
    "MemorySearch",
    "MemorySearchResult",
    "MemoryShow",
    "MemoryShown",
    "MemoryStore",
    "MemoryStored",
    "MemoryUpdate",
    "MemoryVerify",
    "ModelStatus",
    "NegativeOutcome",
    "NodeExplained",
    "PathDrift",
    "Ping",
    "Pong",
    "Ranking",
    "RecordExperience",
    "RecordedLesson",
    "RecordedUse",
    "RefusedWorkspace",
    "Reindex",
    "ReindexStarted",
    "Reply",
    "Request",
    "RollUpExperience",
    "RunState",
    "SearchExperience",
    "Status",
    "StatusReport",
    "StatusResult",
    "Stored",
    "UseRecorded",
    "VerdictSet",
    "Visibility",
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

# How the daemon's ingest stage treats each string a write request carries (recalld's
# sanitize module reads these marks, so a new field is covered the moment it is declared):
# FREE_TEXT is redacted of secrets before anything is stored; OPAQUE is never stored as
# sent (a digest at most); every other string is an identifier (a name, an id, a path the
# daemon looks up) that redaction would change the meaning of, so a request whose
# identifier holds a secret is refused.
FREE_TEXT: dict[str, Any] = {"text": "free"}
OPAQUE: dict[str, Any] = {"text": "opaque"}

# Reusable bounded field types: the bounds live in the protocol, so the daemon rejects
# out-of-range input with a typed error whichever client sent it.
Name = Annotated[str, Meta(min_length=1, max_length=128)]
Tag = Annotated[str, Meta(min_length=1, max_length=64, extra=FREE_TEXT)]
Tags = Annotated[list[Tag], Meta(max_length=32)]
Text = Annotated[str, Meta(min_length=1, max_length=100_000, extra=FREE_TEXT)]
Query = Annotated[str, Meta(min_length=1, max_length=4_000)]
Key = Annotated[str, Meta(min_length=1, max_length=200)]
# Stored as a digest only: a retry must present the same key, and no key is ever stored.
IdempotencyKey = Annotated[str, Meta(min_length=1, max_length=200, extra=OPAQUE)]
Path = Annotated[str, Meta(min_length=1, max_length=4_096)]
# A path a memory or an episode cites: stored, so redacted like text.
FilePath = Annotated[str, Meta(min_length=1, max_length=4_096, extra=FREE_TEXT)]
Seconds = Annotated[float, Meta(ge=0)]
MemoryId = Annotated[str, Meta(min_length=1, max_length=64)]
Subject = Annotated[str, Meta(min_length=1, max_length=200, extra=FREE_TEXT)]
MemoryLabel = Annotated[str, Meta(min_length=1, max_length=200, extra=FREE_TEXT)]
Labels = Annotated[list[MemoryLabel], Meta(max_length=32)]
Note = Annotated[str, Meta(max_length=500, extra=FREE_TEXT)]
Source = Annotated[str, Meta(max_length=128, extra=FREE_TEXT)]
CitedPaths = Annotated[list[FilePath], Meta(max_length=64)]
Commit = Annotated[str, Meta(pattern=r"^[0-9a-f]{7,64}$")]
MemoryKind = Literal["entry", "fact"]
Authority = Literal["first-party", "quoted"]
# private: only the role (person) that stored it sees it in a shared database; team: every
# role of that database does. The embedded store has one user and keeps it for migration.
Visibility = Literal["private", "team"]
DistortionTolerance = Literal["constraint"]
Outcome = Literal["used", "ignored", "contradicted", "corrected"]
Relevance = Literal["high", "medium", "low"]
StalenessVerdict = Literal["fresh", "spot_check_recommended", "spot_check_required"]


# --------------------------------------------------------------------------- requests
# Two rules hold for every string of every request, whatever its field, so they live here
# once rather than on each declaration: no string holds a NUL (no engine's text can carry
# one; PostgreSQL refuses it outright), and a string that may not be empty may not be only
# whitespace either (a blank memory, query or session id is as empty as ""). They are part
# of decoding a request (decode_request), so the daemon answers them ``invalid_request``
# like any other bad field; building a request does not check them, so a client (recallctl,
# the MCP shim) shows the daemon's typed answer rather than failing on its own.


class _Strings:
    """Where one request struct holds strings, each group fetched in one call: its string
    fields that refuse blank (declared with a min_length) and the others, its lists of
    strings likewise, and its lists of nested request structs."""

    __slots__ = ("filled", "filled_lists", "lists", "named", "nested", "scalars")

    def __init__(
        self,
        scalars: list[tuple[str, str, bool]],
        lists: list[tuple[str, str, bool]],
        nested: list[tuple[str, str]],
    ) -> None:
        # (attribute, wire name, refuses blank) of each, to name one that breaks a rule.
        self.named = scalars, lists, nested
        self.filled = _getter([n for n, _, blank in scalars if blank])
        self.scalars = _getter([n for n, _, blank in scalars if not blank])
        self.filled_lists = _getter([n for n, _, blank in lists if blank])
        self.lists = _getter([n for n, _, blank in lists if not blank])
        self.nested = _getter([n for n, _ in nested])


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    if not names:
        return lambda struct: ()
    get = operator.attrgetter(*names)
    return get if len(names) > 1 else lambda struct: (get(struct),)


_strings_of: dict[type, _Strings] = {}


def _strings(cls: type) -> _Strings:
    # Built once per request type, at its first decode (the shim imports no msgspec.inspect).
    import msgspec.inspect as mi

    def members(t: mi.Type) -> list[mi.Type]:
        if isinstance(t, mi.Metadata):
            t = t.type
        if isinstance(t, mi.UnionType):
            return [m for u in t.types for m in members(u)]
        return [t]

    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    scalars: list[tuple[str, str, bool]] = []
    lists: list[tuple[str, str, bool]] = []
    nested: list[tuple[str, str]] = []
    for f in info.fields:
        kinds = members(f.type)
        items = [i for m in kinds if isinstance(m, mi.ListType) for i in members(m.item_type)]
        for found, into in (
            ([m for m in kinds if isinstance(m, mi.StrType)], scalars),
            ([i for i in items if isinstance(i, mi.StrType)], lists),
        ):
            if found:
                into.append((f.name, f.encode_name, any((s.min_length or 0) > 0 for s in found)))
        if any(isinstance(i, mi.StructType) and issubclass(i.cls, _Checked) for i in items):
            nested.append((f.name, f.encode_name))
        # The checks take a string field's value to be a string or None, a list's items
        # strings: a field that mixed in another type would need a check of its own.
        assert not any(isinstance(m, mi.StrType) for m in kinds) or all(
            isinstance(m, (mi.StrType, mi.NoneType, mi.LiteralType)) for m in kinds
        ), f.name
    plan = _strings_of[cls] = _Strings(scalars, lists, nested)
    return plan


def _bad(value: str, refuses_blank: bool) -> bool:
    return "\x00" in value or (refuses_blank and value.isspace())


class _Checked(Struct):
    """A struct a client sends: its strings obey the two rules above."""

    def _check_strings(self) -> None:
        """Raises msgspec.ValidationError naming the first string that breaks a rule."""
        # Plain loops and no names on the way: a capture decodes thousands a second.
        plan = _strings_of.get(type(self)) or _strings(type(self))
        for value in plan.filled(self):
            if value is not None and ("\x00" in value or value.isspace()):
                self._refuse(plan)
        for value in plan.scalars(self):
            if value is not None and "\x00" in value:
                self._refuse(plan)
        for values in plan.filled_lists(self):
            for value in values or ():
                if "\x00" in value or value.isspace():
                    self._refuse(plan)
        for values in plan.lists(self):
            for value in values or ():
                if "\x00" in value:
                    self._refuse(plan)
        if plan.named[2]:
            for (_, wire), values in zip(plan.named[2], plan.nested(self), strict=True):
                for i, item in enumerate(values or ()):
                    try:
                        item._check_strings()
                    except msgspec.ValidationError as exc:
                        raise msgspec.ValidationError(f"{wire}[{i}].{exc}") from None

    def _refuse(self, plan: _Strings) -> None:
        scalars, lists, _ = plan.named
        bad = [
            (w, v) for n, w, b in scalars if isinstance(v := getattr(self, n), str) and _bad(v, b)
        ]
        bad += [
            (f"{w}[{i}]", v)
            for n, w, b in lists
            for i, v in enumerate(getattr(self, n) or ())
            if _bad(v, b)
        ]
        field, value = bad[0]
        if "\x00" in value:
            raise msgspec.ValidationError(f"{field} holds a NUL character")
        raise msgspec.ValidationError(f"{field} is only whitespace (it may not be empty)")


class Request(_Checked, tag_field="op", kw_only=True, forbid_unknown_fields=True):
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
    admin_token: Annotated[str, Meta(min_length=1, max_length=256, extra=OPAQUE)] | None = None
    # The agent session this connection belongs to (the MCP shim makes one per process);
    # memory_search's since_prior_session compares sessions. Absent: one per connection.
    session: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    # The agent's own credential (``recallctl agent add`` made it): once a name has one,
    # a hello claiming that name without it is refused (the admin token may act as anyone).
    agent_token: Annotated[str, Meta(min_length=1, max_length=256, extra=OPAQUE)] | None = None


class Ping(Request, tag="ping"):
    """Round trip with no work; used by health checks and benchmarks."""


class DependsOn(_Checked, kw_only=True, forbid_unknown_fields=True):
    """A link from one memory to another it relies on, with why."""

    id: MemoryId
    note: Note | None = None


class MemoryStore(Request, tag="memory_store"):
    """Store one memory (an entry, or a canonical fact about a subject).

    Acknowledged only after its transaction has committed; a fact's supersession or contest
    is decided in that same transaction.
    """

    text: Text
    tags: Tags = []
    source: Source | None = None
    session: Annotated[str, Meta(max_length=200)] | None = None
    # When the remembered thing happened (unix seconds); defaults to the time of capture.
    ts: Annotated[float, Meta(ge=0)] | None = None
    ttl_s: Annotated[float, Meta(gt=0)] | None = None
    # A retried request with the same key returns the first request's result.
    idempotency_key: IdempotencyKey | None = None
    # Overrides the hello's workspace for this one record (bulk import, benchmarks).
    workspace: Path | None = None
    kind: MemoryKind = "entry"
    # The entity a fact is about; required for facts, refused for entries.
    subject: Subject | None = None
    scopes: Labels = []
    bands: Labels = []
    episodes: Labels = []
    authority: Authority = "first-party"
    # "constraint": a fact its subject is bound by; served first and marked pinned.
    distortion_tolerance: DistortionTolerance | None = None
    supersedes: Annotated[list[MemoryId], Meta(max_length=16)] = []
    depends_on: Annotated[list[DependsOn], Meta(max_length=16)] = []
    # Paths the memory's claims rest on (claim-anchored); paths in the text are found too.
    paths: CitedPaths = []
    # Where the memory was written. Unset, the daemon asks the workspace's git.
    origin_repo: Path | None = None
    origin_commit: Commit | None = None
    # No origin: the memory passes every auto_scope filter (user-wide preferences).
    global_scope: bool = False
    # Who sees it in a shared (team) database; unset: the daemon's configured default.
    visibility: Visibility | None = None


class MemoryUpdate(Request, tag="memory_update"):
    """Correct a memory in place; every field left unset keeps its value.

    An update is also a verification: last_verified_at moves to now.
    """

    memory_id: MemoryId
    text: Text | None = None
    tags: Tags | None = None
    source: Source | None = None
    subject: Subject | None = None
    scopes: Labels | None = None
    bands: Labels | None = None
    episodes: Labels | None = None
    authority: Authority | None = None
    distortion_tolerance: DistortionTolerance | Literal["none"] | None = None
    depends_on: Annotated[list[DependsOn], Meta(max_length=16)] | None = None
    paths: CitedPaths | None = None
    ttl_s: Annotated[float, Meta(gt=0)] | None = None


class MemoryVerify(Request, tag="memory_verify"):
    """Attest that a memory still holds: last_verified_at and the verified commit move to now."""

    memory_id: MemoryId
    # Paths checked and found to hold; attesting anchors them (their loss escalates later).
    verified_paths: CitedPaths = []
    note: Note | None = None


class MemoryShow(Request, tag="memory_show"):
    """One memory in full: metadata, links, outcomes, and path and commit drift."""

    memory_id: MemoryId


class MemoryRecordUse(Request, tag="memory_record_use"):
    """Record what became of surfaced memories: used, ignored, contradicted or corrected."""

    # From a memory_search hit; names the memory and the search it came from.
    use_token: Annotated[str, Meta(min_length=1, max_length=512, extra=OPAQUE)] | None = None
    memory_ids: Annotated[list[MemoryId], Meta(max_length=50)] = []
    # Unset with a use_token: recorded as "used" (the hit was surfaced and not rejected).
    outcome: Outcome | None = None
    note: Note | None = None


class MemoryFactResolve(Request, tag="memory_fact_resolve"):
    """Settle a contested fact: adopt the contender, keep the current value, or pick one."""

    subject: Subject
    # True adopts the newest contender; False discards the contenders. Or name the winner.
    accept: bool | None = None
    keep_id: MemoryId | None = None


class MemorySearch(Request, tag="memory_search"):
    """Search memories and canonical facts (seeds 003 and 004 in one request)."""

    query: Query
    limit: Annotated[int, Meta(ge=1, le=50)] = 5
    # keyword: term-coverage ranking; bm25: FTS5 bm25; hybrid: bm25 and meaning fused.
    # Unset follows the daemon's config (package default hybrid).
    mode: Literal["keyword", "bm25", "hybrid"] | None = None
    tags: Tags = []
    # Search this workspace instead of the hello's (recallctl --in).
    workspace: Path | None = None
    sources: Labels = []
    bands: Labels = []
    episodes: Labels = []
    scopes: Labels = []
    # The writer's declared actor from its hello, matched exactly.
    client: Annotated[str, Meta(min_length=1, max_length=64)] | None = None
    model: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    # Tri-state: None follows the daemon's config.
    bm25: bool | None = None
    rerank: bool | None = None
    # Unset: the 0.25 floor.
    min_score: Annotated[float, Meta(ge=0, le=1)] | None = None
    disable_recency_boost: bool = False
    explain: bool = False
    verbose: bool = False
    expand_top: bool = False
    auto_scope: bool = True
    since_prior_session: bool = False


# Where a listing goes on: the ts and id of the last item a page returned, as
# ``"<ts>:<id>"`` (a reply's ``next_before``). Clients pass it back as they got it.
ListCursor = Annotated[str, Meta(min_length=3, max_length=200, pattern=r"^[0-9.e+-]+:\S+$")]
# A listed memory's text is whole up to this many characters; longer ones are cut (truncated).
LIST_TEXT = 2_000


class MemoryList(Request, tag="memory_list"):
    """Memories newest first under memory_search's reader contract, for browsing (recallctl
    memories, the web page): no query, no ranking; each filter narrows.

    Newest first is by ``ts`` (when the remembered thing happened), then by id. A page holds
    at most ``limit`` items; with ``staleness`` it may hold fewer, even none, while
    ``next_before`` is still set (a request examines a bounded number of memories).
    """

    # List this workspace instead of the hello's (needs admin:workspace, as memory_search's).
    workspace: Path | None = None
    # Every workspace (as memory_search's auto_scope false); False: the workspace and the
    # global memories (stored with no origin), as memory_search shows them.
    all_workspaces: bool = False
    kind: MemoryKind | None = None
    # A fact's subject, compared as facts are (case and spacing do not matter).
    subject: Subject | None = None
    # Any of these tags; any of these sources (as memory_search's tags and sources).
    tags: Tags = []
    sources: Labels = []
    # The agent that wrote it, and the writer's declared client and model (its hello's).
    agent: Name | None = None
    client: Annotated[str, Meta(min_length=1, max_length=64)] | None = None
    model: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    # Unix seconds, inclusive, on the memory's ts.
    since: Seconds | None = None
    until: Seconds | None = None
    # Only memories with this staleness verdict (computed as memory_search computes it).
    staleness: StalenessVerdict | None = None
    # False: only current memories (superseded facts left out); True shows them, marked.
    include_superseded: bool = True
    # The previous reply's next_before: the page after it.
    before: ListCursor | None = None
    limit: Annotated[int, Meta(ge=1, le=200)] = 50


class Status(Request, tag="status"):
    """The daemon's introspection report."""

    # Wait up to this long for the embedding model to finish loading before answering;
    # lets a client (or a test) wait for readiness without polling.
    wait_model_s: Annotated[float, Meta(ge=0, le=600)] = 0.0
    # Wait up to this long for the pipeline to settle first: every write committed and
    # evaluated, every vector embedded and indexed (StatusReport.settled says if it did).
    wait_settled_s: Annotated[float, Meta(ge=0, le=600)] = 0.0


# ---- work episodes (seed 001): capture, work_search, work_result; forget (any record)

SessionId = Annotated[str, Meta(min_length=1, max_length=200)]
Label = Annotated[str, Meta(min_length=1, max_length=64)]
UnitScore = Annotated[float, Meta(ge=0, le=1)]


# An episode's statuses that count as success: it is eligible once captured (the daemon's
# policy), and the web page counts the others as failures.
SUCCESS_STATUSES = frozenset({"ok", "success", "succeeded", "completed", "done", "passed"})


class CaptureEpisode(Request, tag="capture_episode"):
    """Record one thing an agent did. Captured ``pending``; the evaluation actor settles it."""

    summary: Text
    session_id: SessionId | None = None
    # Free text to the ingest stage (redacted): hooks report whatever a tool was called.
    tool: Annotated[str, Meta(min_length=1, max_length=128, extra=FREE_TEXT)] | None = None
    # SUCCESS_STATUSES count as success; anything else (error, timeout, denied) waits for
    # a verdict before it becomes eligible (see recalld.domain.policy).
    status: Label = "ok"
    error_code: Annotated[str, Meta(min_length=1, max_length=128, extra=FREE_TEXT)] | None = None
    duration_ms: Annotated[float, Meta(ge=0)] | None = None
    result_size: Annotated[int, Meta(ge=0)] | None = None
    # How the episode reached recalld (mcp, hook, cli, api) and what kind of step it was.
    channel: Label = "api"
    episode_type: Label = "tool_call"
    tags: Tags = []
    # A verdict already known at capture (0 = the task failed .. 1 = it succeeded).
    task_result: UnitScore | None = None
    # Where the summary's words came from (web, tool_output, user, ...); trust weighs it.
    source: Source | None = None
    ts: Annotated[float, Meta(ge=0)] | None = None
    ttl_s: Annotated[float, Meta(gt=0)] | None = None
    idempotency_key: IdempotencyKey | None = None
    # Overrides the hello's workspace for this one episode (a hook reports its own cwd).
    workspace: Path | None = None
    # Files the step touched (a hook's tool_input.file_path); a session's roll-up into an
    # experience lists those inside the workspace.
    files: Annotated[list[FilePath], Meta(max_length=64)] = []


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
    # Legacy alias of response_format (terse = concise, full = detailed); loses to it. Its values
    # in the order of work_search's argument: typing caches ``X | None`` by equality and two
    # Literals of the same values are equal in any order, so the one made first would give the
    # tool's inputSchema its enum order, and the listing would change with import order.
    verbosity: Literal["full", "terse"] | None = None


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


# ---- experiences and lessons (seed 000)

ExperienceStatus = Literal["success", "failure", "unknown"]
# Experiences and lessons are named by their public record id (exp_..., les_...). The wire
# field is ``record_id`` because ``id`` is every request's own id.
RecordId = Annotated[str, Meta(min_length=1, max_length=64)]
ExperienceQuery = Annotated[str, Meta(min_length=1, max_length=1_000)]
LessonText = Annotated[str, Meta(min_length=1, max_length=1_000, extra=FREE_TEXT)]
Description = Annotated[str, Meta(min_length=1, max_length=20_000, extra=FREE_TEXT)]
Strategy = Annotated[str, Meta(min_length=1, max_length=2_000, extra=FREE_TEXT)]
TaskClass = Annotated[str, Meta(min_length=1, max_length=64, extra=FREE_TEXT)]
# Files an experience touched: project-relative once stored; the cap keeps a record compact.
MAX_EXPERIENCE_FILES = 100


class RecordExperience(Request, tag="record_experience"):
    """Record one finished task with its outcome and the lessons drawn from it."""

    description: Description
    status: ExperienceStatus = "unknown"
    strategy: Strategy | None = None
    # ``class`` on the wire (the seed's name); a Python keyword, hence the attribute name.
    task_class: TaskClass = msgspec.field(default="general", name="class")
    tool_calls: Annotated[int, Meta(ge=0, le=10_000_000)] = 0
    minutes: Annotated[float, Meta(ge=0, le=525_600)] = 0.0
    files: Annotated[list[FilePath], Meta(max_length=MAX_EXPERIENCE_FILES)] = []
    lessons: Annotated[list[LessonText], Meta(max_length=20)] = []
    session: Annotated[str, Meta(max_length=200)] | None = None
    # When the task ended (unix seconds); defaults to now. Import keeps the original time.
    ts: Annotated[float, Meta(ge=0)] | None = None
    # A retried request with the same key returns the first request's result.
    idempotency_key: IdempotencyKey | None = None
    # Who sees it (and its lessons) in a shared database; unset: the configured default.
    visibility: Visibility | None = None


class SearchExperience(Request, tag="search_experience"):
    """Past experiences of the caller's workspace similar to ``query``, and their lessons."""

    query: ExperienceQuery
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

    record_id: RecordId
    query: ExperienceQuery | None = None


class ForgetExperience(Request, tag="forget_experience"):
    """Tombstone one experience; its lessons lose its support."""

    record_id: RecordId


class GetExecutionContext(Request, tag="get_execution_context"):
    """Lessons and similar past experiences that apply to a new task, compact for a prompt."""

    task: Annotated[str, Meta(min_length=1, max_length=4_000)]
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


class Import(Request, tag="import"):
    """Store exported records again as they were (``recallctl import``): ids, times, facts'
    supersession, uses, episodes' chains, lessons' support. Admin only: rows may name any
    agent and workspace. Each row passes the ingest stage like any write."""

    records: Annotated[list[ExportedRecord], Meta(min_length=1, max_length=1_000)]


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


class AgentEnroll(Request, tag="agent_enroll"):
    """Give an agent name its own credential; the reply carries the token (shown only once)."""

    agent: Name
    # Replace the name's existing credential (the old token stops working).
    rotate: bool = False


class AgentRevoke(Request, tag="agent_revoke"):
    """Withdraw an agent name's credential: the name is claimable without a token again."""

    agent: Name


class AgentList(Request, tag="agent_list"):
    """The agent names that have a credential."""


OpsRequests = (
    Export
    | Import
    | Reindex
    | Doctor
    | WorkspaceApprove
    | WorkspaceRevoke
    | WorkspaceList
    | AgentEnroll
    | AgentRevoke
    | AgentList
)

Requests = (
    Hello
    | Ping
    | MemoryStore
    | MemorySearch
    | MemoryList
    | MemoryUpdate
    | MemoryVerify
    | MemoryShow
    | MemoryRecordUse
    | MemoryFactResolve
    | Status
    | CaptureEpisode
    | WorkSearch
    | WorkResult
    | Forget
    | RecordExperience
    | SearchExperience
    | ExperienceList
    | ExplainNode
    | ForgetExperience
    | GetExecutionContext
    | RollUpExperience
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


class MemoryStored(Stored, tag="memory_stored"):
    """A memory that has committed, with what storing it did to its subject's facts."""

    kind: MemoryKind = "entry"
    # inserted | superseded (it replaced older memories) | contested (parked beside the
    # current fact until memory_fact_resolve) | historical (an older fact than the current)
    action: str = "inserted"
    subject: str | None = None
    superseded: list[str] = []
    contested: bool = False
    contested_with: list[str] = []
    authority: Authority = "first-party"
    trust: float = 1.0
    cited_paths: list[str] = []
    origin_repo: str | None = None
    origin_commit: str | None = None


class MemoryChanged(Reply, tag="memory_changed"):
    """A memory_update or memory_verify that has committed."""

    memory_id: str
    updated_at: float
    last_verified_at: float
    verified_commit: str | None = None
    changed: list[str] = []


class RecordedUse(Struct, kw_only=True):
    memory_id: str
    outcome: Outcome


class UseRecorded(Reply, tag="use_recorded"):
    recorded: list[RecordedUse]


class Contender(Struct, kw_only=True):
    id: str
    text: str
    authority: Authority = "first-party"
    ts: float = 0.0


class FactResolved(Reply, tag="fact_resolved"):
    resolved: bool
    subject: str
    accepted: bool | None = None
    current: str | None = None
    current_text: str | None = None
    superseded: list[str] = []
    reason: str | None = None


class PathDrift(Struct, kw_only=True):
    """Cited paths checked on this machine: which are gone, which were attested and hold."""

    checked: list[str]
    missing: list[str]
    verified: list[str]


class CommitDrift(Struct, kw_only=True, omit_defaults=True):
    repo: str
    head: str | None = None
    since_commit: str | None = None
    count: int = 0
    # Of those commits, the ones that touched a cited path.
    touching_cited_paths: int = 0
    reason: str | None = None


class DependsOnResolved(Struct, kw_only=True):
    id: str
    scopes: list[str]
    summary: str
    link_note: str | None = None


class NegativeOutcome(Struct, kw_only=True, omit_defaults=True):
    outcome: Outcome
    ts: float
    note: str | None = None


class MemoryHit(Struct, kw_only=True, omit_defaults=True):
    """One ranked memory. Compact fields always; the rest when set, or when verbose."""

    id: str
    score: float
    text: str
    snippet: str
    ts: float
    tags: list[str]
    source: str | None = None
    kind: MemoryKind = "entry"
    subject: str | None = None
    relevance: Relevance = "low"
    match_terms: list[str] = []
    staleness_verdict: StalenessVerdict = "fresh"
    path_drift_missing: int = 0
    path_drift: PathDrift | None = None
    claim_anchored_missing: list[str] = []
    commit_drift_count: int | None = None
    depends_on_resolved: list[DependsOnResolved] | None = None
    recent_negative_outcomes: list[NegativeOutcome] | None = None
    superseded: bool = False
    superseded_by: str | None = None
    superseded_by_text: str | None = None
    pinned: bool = False
    contested: bool = False
    authority: Authority = "first-party"
    low_trust: bool = False
    use_token: str = ""
    # Set on the top hit by expand_top: full text and drift detail inlined.
    expanded: bool = False
    truncated: bool = False
    commit_drift: CommitDrift | None = None
    # verbose
    distortion_tolerance: DistortionTolerance | None = None
    scopes: list[str] | None = None
    bands: list[str] | None = None
    episodes: list[str] | None = None
    trust: float | None = None
    created_at: float | None = None
    updated_at: float | None = None
    last_verified_at: float | None = None
    origin_repo: str | None = None
    origin_commit: str | None = None
    agent: str | None = None
    client: str | None = None
    model: str | None = None
    # explain
    trace: dict[str, Any] | None = None


class CortexFact(Struct, kw_only=True):
    """The current answer for one subject: deduped, contested and pinned flags set."""

    id: str
    subject: str
    text: str
    score: float
    contested: bool = False
    pinned: bool = False
    authority: Authority = "first-party"
    ts: float = 0.0
    contenders: list[Contender] = []


class MemoryEvent(Struct, kw_only=True):
    """A memory in the time window a temporal cue named, for a timeline (oldest first)."""

    id: str
    ts: float
    text: str


class MemorySearchResult(Reply, tag="memory_search_result"):
    query: str
    hits: list[MemoryHit]
    semantic_used: bool
    mode: str
    took_ms: float
    count: int = 0
    cortex: list[CortexFact] = []
    low_confidence: bool = False
    events: list[MemoryEvent] | None = None
    trace: dict[str, Any] | None = None


class MemoryItem(Struct, kw_only=True, omit_defaults=True):
    """One memory as memory_list shows it: what a browser needs, and how far to trust it."""

    id: str
    kind: MemoryKind
    # Whole up to LIST_TEXT characters, else its start (truncated; memory_show has it all).
    text: str
    truncated: bool = False
    subject: str | None = None
    ts: float
    created_at: float
    updated_at: float
    tags: list[str] = []
    source: str | None = None
    agent: str
    client: str | None = None
    model: str | None = None
    workspace: str
    # True for a memory stored with no origin (global_scope): every workspace sees it.
    global_scope: bool = False
    eligibility: str
    staleness_verdict: StalenessVerdict = "fresh"
    path_drift_missing: int = 0
    superseded: bool = False
    superseded_by: str | None = None
    contested: bool = False
    pinned: bool = False
    authority: Authority = "first-party"
    trust: float
    low_trust: bool = False
    visibility: Visibility = "private"


class MemoryListResult(Reply, tag="memory_list_result"):
    items: list[MemoryItem]
    # Pass as ``before`` for the next page; None when this was the last one.
    next_before: str | None = None
    # Workspaces holding live memories, and how many each: every workspace for a caller
    # with admin:workspace, else only its own (whatever the request's filters).
    workspaces: dict[str, int] = {}


class CitedPath(Struct, kw_only=True):
    path: str
    anchored: bool
    exists: bool


class MemoryLink(Struct, kw_only=True, omit_defaults=True):
    id: str
    summary: str
    note: str | None = None
    exists: bool = True


class MemoryDetail(Struct, kw_only=True):
    """Everything recalld holds about one memory (memory_show)."""

    id: str
    kind: MemoryKind
    text: str
    subject: str | None
    source: str | None
    tags: list[str]
    scopes: list[str]
    bands: list[str]
    episodes: list[str]
    authority: Authority
    distortion_tolerance: DistortionTolerance | None
    pinned: bool
    trust: float
    low_trust: bool
    eligibility: str
    ts: float
    created_at: float
    updated_at: float
    last_verified_at: float
    expires_at: float | None
    workspace: str
    origin: str | None
    origin_repo: str | None
    origin_commit: str | None
    verified_commit: str | None
    agent: str
    client: str | None
    model: str | None
    session: str | None
    superseded: bool
    superseded_by: str | None
    superseded_by_text: str | None
    supersedes: list[str]
    contested: bool
    contenders: list[Contender]
    depends_on: list[MemoryLink]
    depended_on_by: list[MemoryLink]
    cited_paths: list[CitedPath]
    path_drift: PathDrift
    path_drift_missing: int
    claim_anchored_missing: list[str]
    commit_drift: CommitDrift | None
    commit_drift_count: int | None
    staleness_verdict: StalenessVerdict
    outcomes: dict[str, int]
    recent_outcomes: list[NegativeOutcome]


class MemoryShown(Reply, tag="memory_shown"):
    memory: MemoryDetail


class RunState(enum.StrEnum):
    """Where the daemon is in its life (a str: ``report.state == "running"`` holds)."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class ActorStatus(Struct, kw_only=True):
    """One stage of the pipeline, from what it records of its own work."""

    name: str
    state: str
    queue_depth: int
    queue_capacity: int
    processed: int
    errors: int
    batches: int = 0
    last_batch: int = 0
    # Items processed per second over the last minute.
    per_s: float = 0.0
    # Group commits that failed whole (the writer).
    commit_failures: int = 0
    last_error: str | None = None


class ModelStatus(Struct, kw_only=True):
    name: str
    state: Literal["disabled", "loading", "ready", "failed"]
    reason: str | None = None
    dim: int | None = None
    load_s: float | None = None
    backend: str | None = None  # onnxruntime | sentence-transformers | hash


class IndexStatus(Struct, kw_only=True):
    """The vector index; ``type`` is None while it is not open (no model yet)."""

    type: str | None = None
    size: int = 0
    dim: int | None = None
    model: str | None = None
    rebuilt_reason: str | None = None
    # Records waiting for a vector.
    embedding_backlog: int = 0
    # Committed changes (vectors written, records forgotten) not in the index yet, and the
    # last change that failed to get there (the index is rebuilt from the store at start).
    pending_changes: int = 0
    last_error: str | None = None


class ConnectedAgent(Struct, kw_only=True):
    agent: str
    client: str
    workspace: str
    pid: int
    connected_s: float
    requests: int


class Latency(Struct, kw_only=True):
    """Milliseconds; None before any request was timed."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class DatabaseStatus(Struct, kw_only=True):
    """The store the daemon uses and whether it answers."""

    engine: Literal["sqlite", "postgresql"]
    # The database file, or the server's URL without its password.
    location: str
    state: Literal["ok", "unavailable"] = "ok"
    # Since when it is in that state (unix seconds), and the last error while unavailable.
    since: float | None = None
    error: str | None = None
    # Records are visible to their owner only unless shared with the team (a shared
    # database); the role this daemon connects as.
    role: str | None = None


class StatusReport(Struct, kw_only=True):
    state: RunState
    version: str
    pid: int
    uptime_s: float
    socket: str
    data_dir: str
    model: ModelStatus
    semantic_search: bool
    actors: list[ActorStatus]
    # kind -> eligibility (and "total") -> records.
    records: dict[str, dict[str, int]]
    index: IndexStatus
    # Every connected agent with the admin token; otherwise the caller's own agent's.
    agents: list[ConnectedAgent]
    search_latency_ms: Latency
    # No work in hand: every write committed and evaluated, every vector embedded and indexed.
    settled: bool = False
    database: DatabaseStatus | None = None


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


# ---- experiences and lessons (seed 000)


class ExperienceInfo(Struct, kw_only=True):
    """One experience as search, explain and context return it."""

    id: str
    score: float
    description: str
    task_class: str = msgspec.field(name="class")
    agent: str
    strategy: str | None
    status: str
    tool_calls: int
    minutes: float
    files: list[str]
    ts: float
    session: str | None = None


class LessonInfo(Struct, kw_only=True):
    """A lesson with its live support (experiences behind it) and confidence in 0..1."""

    id: str
    text: str
    confidence: float
    support: int


class RecordedLesson(LessonInfo, kw_only=True):
    # True when the lesson said the same as one already stored and was merged into it.
    merged: bool


class ExperienceRecorded(Reply, tag="experience_recorded"):
    record_id: str
    # True when the same experience (description, status, strategy, session) was already
    # recorded in the workspace; record_id is that one and nothing new was written.
    duplicate: bool = False
    replayed: bool = False
    lessons: list[RecordedLesson] = []


class ExperienceSearchResult(Reply, tag="experience_search_result"):
    query: str
    experiences: list[ExperienceInfo]
    lessons: list[LessonInfo]
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
    id: str
    ts: float
    text: str


class Ranking(Struct, kw_only=True):
    """Why an experience ranked (or did not) for a query: each channel's say and the floor's."""

    query: str
    rank: int | None  # 1-based among the results search_experience would return; None if cut
    score: float
    lexical_rank: int | None
    semantic_rank: int | None
    cosine: float | None
    matched_terms: list[str]
    query_terms: list[str]
    passed_floor: bool
    reason: str


class NodeExplained(Reply, tag="node_explained"):
    experience: ExperienceInfo
    episodes: list[EpisodeRef]
    lessons: list[LessonInfo]
    ranking: Ranking | None = None


class ExperienceForgotten(Reply, tag="experience_forgotten"):
    record_id: str
    already_forgotten: bool = False
    # Lessons that lost this experience's support but keep others.
    lessons_weakened: int = 0
    # Lessons left with no support: tombstoned with it, they no longer surface.
    lessons_retired: int = 0


class ExecutionContext(Reply, tag="execution_context"):
    task: str
    lessons: list[LessonInfo]
    experiences: list[ExperienceInfo]
    # The same, rendered as a short block ready to put in a prompt ("" when nothing applies).
    context: str
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


# --------------------------------------------------------------------------- operations replies

# The export row is the record as the store holds it: one field per column of its tables
# (the store builds its export and import statements from these fields, and a test checks
# them against the live schema), the rows attached to it nested by kind. What is left out
# is the install's own or made from the rest: rowids, the uid and owner that wrote it,
# whether its vector is made, its content hash, idempotency keys, use-token nonces (see
# recalld.store.sql.operations.NOT_EXPORTED).
# Bounds are the write requests': import decodes a row as an Import request and the ingest
# stage sanitises it like any write.

RecordKind = Literal["memory", "episode", "experience", "lesson"]
# A session as a record keeps it (a write may have named it empty).
StoredSession = Annotated[str, Meta(max_length=200)]
# Lists a record gathers over its life (uses, events, lesson links): bounded by this, and
# by the frame one export page or import request travels in.
MAX_HISTORY = 10_000


class ExportedLink(Struct, kw_only=True, forbid_unknown_fields=True):
    """A ``memory_links`` row: this memory depends on, or supersedes, the memory ``dst_id``."""

    rel: Literal["depends_on", "supersedes"]
    dst_id: MemoryId
    note: Note | None = None


class ExportedPath(Struct, kw_only=True, forbid_unknown_fields=True):
    """A ``memory_paths`` row: 0 found in the prose, 1 given, 2 attested."""

    # One found in the prose is as long as the prose lets it be.
    path: Annotated[str, Meta(min_length=1, max_length=100_000, extra=FREE_TEXT)]
    anchored: Annotated[int, Meta(ge=0, le=2)]


class ExportedUse(Struct, kw_only=True, forbid_unknown_fields=True):
    """A ``memory_uses`` row: what became of the memory once surfaced."""

    outcome: Outcome
    ts: Seconds
    agent: Name
    session: StoredSession | None = None
    note: Note | None = None


class ExportedEvent(Struct, kw_only=True, forbid_unknown_fields=True):
    """A ``memory_events`` row (since_prior_session reads them)."""

    ts: Seconds
    session: StoredSession
    agent: Name
    event: Label


class ExportedMemory(Struct, kw_only=True, forbid_unknown_fields=True):
    """What only a memory has: its ``memory_meta`` row, labels, links, paths, uses, events."""

    kind: MemoryKind = "entry"
    subject: Subject | None = None
    authority: Authority = "first-party"
    distortion_tolerance: DistortionTolerance | None = None
    # The workspace it was written in; None: global (passes every auto_scope filter).
    origin: Path | None = None
    origin_repo: Path | None = None
    origin_commit: Commit | None = None
    verified_commit: Commit | None = None
    last_verified_at: Seconds
    writer_client: Annotated[str, Meta(min_length=1, max_length=64)] | None = None
    writer_model: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    # The memory that replaced this one (a fact's supersession); None while current.
    superseded_by: MemoryId | None = None
    trust_reasons: Annotated[list[Label], Meta(max_length=32)] = []
    scopes: Labels = []
    bands: Labels = []
    episodes: Labels = []
    links: Annotated[list[ExportedLink], Meta(max_length=64)] = []
    # Given ones (64 at most) and those found in the text (fewer than its characters / 5).
    paths: Annotated[list[ExportedPath], Meta(max_length=20_064)] = []
    uses: Annotated[list[ExportedUse], Meta(max_length=MAX_HISTORY)] = []
    events: Annotated[list[ExportedEvent], Meta(max_length=MAX_HISTORY)] = []


class ExportedEpisode(Struct, kw_only=True, forbid_unknown_fields=True):
    """What only an episode has: its ``episodes`` row (its chain, its verdict)."""

    channel: Label
    episode_type: Label
    tool: Annotated[str, Meta(min_length=1, max_length=128, extra=FREE_TEXT)] | None = None
    status: Label
    error_code: Annotated[str, Meta(min_length=1, max_length=128, extra=FREE_TEXT)] | None = None
    duration_ms: Annotated[float, Meta(ge=0)] | None = None
    result_size: Annotated[int, Meta(ge=0, le=2**53)] | None = None
    task_result: UnitScore | None = None
    verdict_at: Seconds | None = None
    blocked: bool = False
    # The session's previous episode.
    prev_id: RecordId | None = None
    files: Annotated[list[FilePath], Meta(max_length=64)] = []


class ExportedLessonLink(Struct, kw_only=True, forbid_unknown_fields=True):
    """A ``lesson_support`` row, seen from either end: the record at the other end, and when
    the link was made. Both ends carry it, so import links them whichever comes first."""

    id: RecordId
    created_at: Seconds


class ExportedRollup(Struct, kw_only=True, forbid_unknown_fields=True):
    """An ``experience_rollups`` row: the session an experience was rolled up from."""

    workspace: Path
    session: SessionId
    # Fields a caller gave (kept at later roll-ups).
    given: Annotated[list[Label], Meta(max_length=8)] = []
    episodes: Annotated[int, Meta(ge=0, le=2**53)]
    rolled_up_at: Seconds


class ExportedExperience(Struct, kw_only=True, forbid_unknown_fields=True):
    """What only an experience has: its ``experiences`` row, roll-up and lesson links."""

    task_class: TaskClass = msgspec.field(name="class")
    strategy: Strategy | None = None
    status: ExperienceStatus
    tool_calls: Annotated[int, Meta(ge=0, le=10_000_000)] = 0
    minutes: Annotated[float, Meta(ge=0, le=525_600)] = 0.0
    files: Annotated[list[FilePath], Meta(max_length=MAX_EXPERIENCE_FILES)] = []
    rollup: ExportedRollup | None = None
    # The lessons it supports.
    lessons: Annotated[list[ExportedLessonLink], Meta(max_length=MAX_HISTORY)] = []


class ExportedLesson(Struct, kw_only=True, forbid_unknown_fields=True):
    """A lesson's support: ``support`` and ``confidence`` are what its live experiences
    make of it (import derives them again from the links)."""

    support: int = 0
    confidence: float = 0.0
    # The experiences behind it (forgotten ones too: a link outlives its experience; only
    # live ones count towards support).
    experiences: Annotated[list[ExportedLessonLink], Meta(max_length=MAX_HISTORY)] = []


class ExportedRecord(Struct, kw_only=True, forbid_unknown_fields=True):
    """One record as ``recallctl export`` writes it (a JSON Lines row) and import reads
    it: its ``records`` row, and the part of its kind."""

    id: RecordId
    kind: RecordKind
    # Every kind's text is free text (a memory's, an episode's summary, a lesson's).
    text: Text
    workspace: Path
    agent: Name
    ts: Seconds
    created_at: Seconds
    updated_at: Seconds
    session: StoredSession | None = None
    source: Source | None = None
    tags: Tags = []
    trust: UnitScore
    eligibility: Label
    expires_at: Seconds | None = None
    # When it was forgotten: it is never served again, and kept (as in the store) so that
    # what links to it stays explainable and searches rank the others as before.
    tombstoned_at: Seconds | None = None
    visibility: Visibility = "private"
    # The part of its kind (UNSET fields are left out of the encoding).
    memory: ExportedMemory | msgspec.UnsetType = msgspec.UNSET
    episode: ExportedEpisode | msgspec.UnsetType = msgspec.UNSET
    experience: ExportedExperience | msgspec.UnsetType = msgspec.UNSET
    lesson: ExportedLesson | msgspec.UnsetType = msgspec.UNSET


class ExportPage(Reply, tag="export_page"):
    records: list[ExportedRecord]
    # Pass as ``after`` for the next page; None when this was the last one.
    next_after: int | None = None
    # Records to export in all; only on the first page (``after`` = 0).
    total: int | None = None


ImportOutcome = Literal["new", "present", "duplicate"]


class Imported(Reply, tag="imported"):
    """What one Import request did, row by row in its order."""

    # "new", "present" (its id is there already), or "duplicate" (the same live content
    # under another id: left alone).
    outcomes: list[ImportOutcome]
    # Rows the ingest stage changed (a secret redacted, a NUL replaced).
    redacted: int = 0


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


class AgentEnrolled(Reply, tag="agent_enrolled"):
    agent: str
    # The credential: give it to this agent's launcher only (recall-mcp --agent-token-file).
    # recalld keeps a digest of it, never the token.
    token: str
    created_at: float
    # True when an earlier credential of the name was replaced.
    rotated: bool = False


class AgentChanged(Reply, tag="agent_changed"):
    agent: str
    enrolled: bool
    # False when the name already was in the state asked for.
    changed: bool


class AgentCredential(Struct, kw_only=True):
    agent: str
    created_at: float


class AgentListResult(Reply, tag="agent_list_result"):
    agents: list[AgentCredential]


OpsReplies = (
    ExportPage
    | Imported
    | ReindexStarted
    | DoctorResult
    | WorkspaceChanged
    | WorkspaceListResult
    | AgentEnrolled
    | AgentChanged
    | AgentListResult
)

Replies = (
    Error
    | Welcome
    | Pong
    | Stored
    | MemoryStored
    | MemoryChanged
    | UseRecorded
    | FactResolved
    | MemorySearchResult
    | MemoryListResult
    | MemoryShown
    | StatusResult
    | EpisodeCaptured
    | WorkSearchResult
    | VerdictSet
    | Forgotten
    | ExperienceRecorded
    | ExperienceSearchResult
    | ExperienceListResult
    | NodeExplained
    | ExperienceForgotten
    | ExecutionContext
    | ExperienceRolledUp
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
    req: Request = _request_decoder.decode(body)
    req._check_strings()
    return req


def decode_reply(body: bytes) -> Reply:
    """Decode a reply body. Raises msgspec.DecodeError or msgspec.ValidationError."""
    return _reply_decoder.decode(body)


def peek_request_id(body: bytes) -> int:
    """Best-effort request id of a body that failed validation, so its error reply can name it."""
    try:
        value = _id_decoder.decode(body).id
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        # RecursionError: skipping a deeply nested field; msgspec reports that depth as
        # Python's recursion limit rather than as a DecodeError.
        return 0
    return value if isinstance(value, int) and 0 <= value <= 2**53 else 0
