"""Admin requests recallctl sends (export, import, reindex, doctor, workspace approval,
agent credentials) and their replies, with the export's rows."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from .base import (
    FIRST_PARTY,
    FREE_TEXT,
    Authority,
    Commit,
    DistortionTolerance,
    FilePath,
    Labels,
    MemoryId,
    MemoryKind,
    Name,
    Note,
    Path,
    RecordId,
    Reply,
    Request,
    Seconds,
    SessionId,
    Source,
    StoredOutcome,
    Subject,
    Tags,
    Text,
    Visibility,
    _Checked,
)
from .experience import MAX_EXPERIENCE_FILES, ExperienceStatus, Strategy, TaskClass
from .work import Label, UnitScore

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


class RelevanceReset(Request, tag="relevance_reset"):
    """Forget the relevance calibrations the caller's stores learned (``recallctl relevance
    reset``): memory_search ranks by the prior again. Only the caller's own rows: in a team
    database, no member's reset touches another's."""

    # Only the calibration of the caller's workspace (or of ``workspace``); else the user's
    # and every workspace's.
    workspace_only: bool = False
    workspace: Path | None = None


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
    | RelevanceReset
    | WorkspaceApprove
    | WorkspaceRevoke
    | WorkspaceList
    | AgentEnroll
    | AgentRevoke
    | AgentList
)

# --------------------------------------------------------------------------- operations replies

# The export row is the record as the store holds it: one field per column of its tables
# (the daemon reads and writes those columns by these fields, and a test checks them
# against the live schema), the rows attached to it nested by kind. What is left out is
# the install's own or made from the rest: rowids, the uid and owner that wrote it,
# whether its vector is made, its content hash, idempotency keys, use-token nonces (see
# recalld.handlers.export_format.NOT_EXPORTED).
# Bounds are the write requests': import decodes a row as an Import request and the ingest
# stage sanitises it like any write.

RecordKind = Literal["memory", "episode", "experience", "lesson"]
# A session as a record keeps it: a store written before session ids became one type may
# hold an empty one.
StoredSession = Annotated[str, Meta(max_length=200)]
# Lists a record gathers over its life (uses, events, lesson links): bounded by this, and
# by the frame one export page or import request travels in.
MAX_HISTORY = 10_000


class ExportedLink(_Checked, kw_only=True, forbid_unknown_fields=True):
    """A ``memory_links`` row: this memory depends on, or supersedes, the memory ``dst_id``."""

    rel: Literal["depends_on", "supersedes"]
    dst_id: MemoryId
    note: Note | None = None


class ExportedPath(_Checked, kw_only=True, forbid_unknown_fields=True):
    """A ``memory_paths`` row: 0 found in the prose, 1 given, 2 attested."""

    # One found in the prose is as long as the prose lets it be.
    path: Annotated[str, Meta(min_length=1, max_length=100_000, extra=FREE_TEXT)]
    anchored: Annotated[int, Meta(ge=0, le=2)]


class ExportedUse(_Checked, kw_only=True, forbid_unknown_fields=True):
    """A ``memory_uses`` row: what became of the memory once surfaced."""

    outcome: StoredOutcome
    ts: Seconds
    agent: Name
    session: StoredSession | None = None
    note: Note | None = None


class ExportedEvent(_Checked, kw_only=True, forbid_unknown_fields=True):
    """A ``memory_events`` row (since_prior_session reads them)."""

    ts: Seconds
    session: StoredSession
    agent: Name
    event: Label


class ExportedMemory(_Checked, kw_only=True, forbid_unknown_fields=True):
    """What only a memory has: its ``memory_meta`` row, labels, links, paths, uses, events."""

    kind: MemoryKind = "entry"
    subject: Subject | None = None
    authority: Authority = FIRST_PARTY
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


class ExportedEpisode(_Checked, kw_only=True, forbid_unknown_fields=True):
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


class ExportedLessonLink(_Checked, kw_only=True, forbid_unknown_fields=True):
    """A ``lesson_support`` row, seen from either end: the record at the other end, and when
    the link was made. Both ends carry it, so import links them whichever comes first."""

    id: RecordId
    created_at: Seconds


class ExportedRollup(_Checked, kw_only=True, forbid_unknown_fields=True):
    """An ``experience_rollups`` row: the session an experience was rolled up from."""

    workspace: Path
    session: SessionId
    # Fields a caller gave (kept at later roll-ups).
    given: Annotated[list[Label], Meta(max_length=8)] = []
    episodes: Annotated[int, Meta(ge=0, le=2**53)]
    rolled_up_at: Seconds


class ExportedExperience(_Checked, kw_only=True, forbid_unknown_fields=True):
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


class ExportedLesson(_Checked, kw_only=True, forbid_unknown_fields=True):
    """A lesson's support: ``support`` and ``confidence`` are what its live experiences
    make of it (import derives them again from the links)."""

    support: int = 0
    confidence: float = 0.0
    # The experiences behind it (forgotten ones too: a link outlives its experience; only
    # live ones count towards support).
    experiences: Annotated[list[ExportedLessonLink], Meta(max_length=MAX_HISTORY)] = []


class ExportedRecord(_Checked, kw_only=True, forbid_unknown_fields=True):
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
    # Rows the ingest stage changed (a secret redacted).
    redacted: int = 0


class ReindexStarted(Reply, tag="reindex_started"):
    """Every live record was queued for embedding; status' embedding_backlog shows progress."""

    queued: int
    model: str


class RelevanceCleared(Reply, tag="relevance_cleared"):
    # The calibrations deleted (a workspace's, the user's).
    cleared: int


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


class KnownWorkspace(Struct, kw_only=True):
    """A workspace this install holds records of or has seen a checkout of."""

    # The identity (see Welcome.workspace).
    workspace: str
    # The local paths it was seen at here (checkouts, worktrees), newest first.
    aliases: list[str] = []
    # Live records filed under it that this install may read.
    records: int = 0


class WorkspaceListResult(Reply, tag="workspace_list_result"):
    require_approval: bool
    approved: list[WorkspaceApproval]
    # Workspaces whose requests were refused since the daemon started (not approved yet).
    refused: list[RefusedWorkspace] = []
    # Every workspace by identity, with its aliases (recallctl workspaces).
    workspaces: list[KnownWorkspace] = []


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
    | RelevanceCleared
    | WorkspaceChanged
    | WorkspaceListResult
    | AgentEnrolled
    | AgentChanged
    | AgentListResult
)
