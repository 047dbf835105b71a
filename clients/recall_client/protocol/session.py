"""A connection's own frames: the hello and its welcome, ping, and the daemon's status."""

from __future__ import annotations

import enum
from typing import Annotated, Literal

from msgspec import Meta, Struct

from .base import OPAQUE, Name, Path, Reply, Request, SessionId


class Hello(Request, tag="hello"):
    """Opens a session: who is calling, from which workspace, speaking which version."""

    version: int
    agent: Name
    # An absolute path in the workspace; the daemon derives the workspace's identity from
    # the repository there (Welcome.workspace). Only a hello with the admin token may name
    # an identity itself.
    workspace: Path | None = None
    client: Annotated[str, Meta(max_length=64)] = ""
    # The writer's declared model (e.g. "claude-opus-4"); memory_search can filter on it.
    model: Annotated[str, Meta(max_length=128)] | None = None
    # The contents of the daemon's admin token file; grants the admin:workspace scope.
    # A token that does not match is refused (forbidden), never silently ignored.
    admin_token: Annotated[str, Meta(min_length=1, max_length=256, extra=OPAQUE)] | None = None
    # The agent session this connection belongs to (the MCP shim makes one per process);
    # memory_search's since_prior_session compares sessions. Absent: one per connection.
    session: SessionId | None = None
    # The agent's own credential (``recallctl agent add`` made it): once a name has one,
    # a hello claiming that name without it is refused (the admin token may act as anyone).
    agent_token: Annotated[str, Meta(min_length=1, max_length=256, extra=OPAQUE)] | None = None


class Ping(Request, tag="ping"):
    """Round trip with no work; used by health checks and benchmarks."""


class Status(Request, tag="status"):
    """The daemon's introspection report."""

    # Wait up to this long for the embedding model to finish loading before answering;
    # lets a client (or a test) wait for readiness without polling.
    wait_model_s: Annotated[float, Meta(ge=0, le=600)] = 0.0
    # Wait up to this long for the pipeline to settle first: every write committed and
    # evaluated, every vector embedded and indexed (StatusReport.settled says if it did).
    wait_settled_s: Annotated[float, Meta(ge=0, le=600)] = 0.0


class Welcome(Reply, tag="welcome"):
    """Answer to a hello: the identity the daemon will use for this connection."""

    version: int
    server: str
    agent: str
    # The workspace's identity: the normalised origin remote, git-root:<commit>, or a path.
    workspace: str
    uid: int
    pid: int
    # The workspace's local alias: the checkout's top level the hello's path is in.
    workspace_path: str | None = None
    # What this connection may do: read:workspace and write:workspace for every peer of
    # the daemon's uid, plus admin:workspace for one that presented the admin token.
    scopes: list[str] = []


class Pong(Reply, tag="pong"):
    pass


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
    # The workspace's local alias (the checkout it connected from).
    workspace_path: str | None = None


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
    # A shared database: the connections this daemon holds to it now, and its bound.
    connections: int | None = None
    connections_max: int | None = None


class SpoolStatus(Struct, kw_only=True):
    """The capture spool the daemon sees: episodes that wait for it, and what could not be
    kept (``recallctl capture`` tells the agent nothing of either)."""

    directory: str
    # Spooled files (one per capture) waiting to be sent, and the bytes the spool holds.
    waiting: int = 0
    waiting_bytes: int = 0
    # No room for another capture: the next ones are dropped (and counted below).
    full: bool = False
    # Files the replay could not send, moved to rejected/ with a reason; the newest reason.
    rejected: int = 0
    last_rejection: str | None = None
    # Episodes refused because the spool was full, and when the last one was.
    dropped: int = 0
    last_dropped_at: float | None = None


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
    spool: SpoolStatus | None = None
    # Why no connection can be granted admin:workspace (the admin token file could not be
    # read or written, and where), None while it is in place.
    admin_token_problem: str | None = None


class StatusResult(Reply, tag="status_result"):
    report: StatusReport
