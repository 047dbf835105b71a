"""The storage port: every read and write the daemon makes of its records, as typed methods.

Handlers, readers and actors speak only these protocols; no SQL (and no engine) is visible
above the store package. Two sides:

- :class:`WriteTx`: one group-commit transaction on the writer. A write job's ``apply``
  gets it; everything the job does commits, or rolls back, with its batch.
- :class:`Reader`: one read connection (each search worker owns one). Retrieval asks it for
  candidates under a :class:`Filter` (the reader contract, typed), and for rows.

:class:`Store` is the engine's lifecycle: readers, batches, the vector index it keeps.
Two implementations: SQLite with FAISS (``store.sqlite``, the embedded default) and
PostgreSQL with pgvector (``store.postgres``, team memory); the SQL they share is written
once (``store.sql``). The shapes are the engine's business, not the callers'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
from recall_client.vocabulary import (
    Authority,
    DistortionTolerance,
    MemoryKind,
    StoredOutcome,
    Visibility,
)

from ..domain.policy import Assessment
from ..domain.principal import Principal

__all__ = [
    "ApprovalRow",
    "BatchJob",
    "CalibrationRow",
    "ContextReads",
    "ContextWrites",
    "CredentialRow",
    "DatabaseFigures",
    "DoctorFigures",
    "EpisodeInsert",
    "EpisodeReads",
    "EpisodeRow",
    "EpisodeWrites",
    "ExperienceFields",
    "ExperienceReads",
    "ExperienceRecord",
    "ExperienceRow",
    "ExperienceWrites",
    "Fact",
    "Filter",
    "IndexFigures",
    "InjectedItem",
    "InjectionRow",
    "LessonRow",
    "MemoryChange",
    "MemoryInsert",
    "MemoryReads",
    "MemoryRow",
    "MemoryTarget",
    "MemoryWrites",
    "NewRecord",
    "OperationReads",
    "OperationWrites",
    "Ownership",
    "ProcessReaders",
    "Reader",
    "RecordReads",
    "RecordRows",
    "RecordWrites",
    "RetrievalReads",
    "SessionEpisode",
    "SessionRollup",
    "StorageFailure",
    "Store",
    "StoreUnreachable",
    "Tombstone",
    "UseRow",
    "VectorSearch",
    "WriteTx",
]


class StoreUnreachable(RuntimeError):
    """The store's server does not answer, or refuses the connection: opening it again
    later may succeed (a database still starting, a network back), unlike a store at the
    wrong schema version, which stops the daemon."""


class StorageFailure(Exception):
    """The engine could not commit (disk full, I/O error, locked): nothing of the batch is
    stored. The writer answers its jobs ``unavailable``."""


@dataclass(frozen=True, slots=True)
class Filter:
    """Which records a search may see: the reader contract as data, for every channel alike.

    Every field narrows; the engine translates it to its own query language.
    """

    kind: str
    now: float
    # None: every workspace (memory_search with auto_scope off).
    workspace: str | None = None
    # With workspace: also memories that have no origin (global ones).
    or_global: bool = False
    eligibility: tuple[str, ...] = ("eligible",)
    min_trust: float | None = None
    uid: int | None = None
    agent: str | None = None
    session: str | None = None
    since: float | None = None
    until: float | None = None
    tool: str | None = None
    tags: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    # ((label kind, values), ...): scope / band / episode labels a memory must carry.
    labels: tuple[tuple[str, tuple[str, ...]], ...] = ()
    writer_client: str | None = None
    writer_model: str | None = None
    updated_after: float | None = None


@dataclass(slots=True)
class MemoryRow:
    rowid: int
    id: str
    text: str
    ts: float
    tags: list[str]
    source: str | None
    trust: float
    created_at: float
    updated_at: float
    agent: str
    workspace: str
    session: str | None
    eligibility: str
    expires_at: float | None
    kind: MemoryKind
    subject: str | None
    subject_key: str | None
    authority: Authority
    distortion_tolerance: DistortionTolerance | None
    origin: str | None
    origin_repo: str | None
    origin_commit: str | None
    verified_commit: str | None
    last_verified_at: float
    writer_client: str | None
    writer_model: str | None
    superseded_by: str | None
    visibility: Visibility
    # The database role that wrote it; None where the database is one user's.
    owner: str | None = None
    # Whether it is this connection's database role's own (always where the database is
    # one user's): another person's team memory is not.
    mine: bool = True
    labels: dict[str, list[str]] = field(default_factory=dict)
    # (path, anchored) of every cited path.
    paths: list[tuple[str, bool]] = field(default_factory=list)

    @property
    def pinned(self) -> bool:
        return self.distortion_tolerance == "constraint" and self.superseded_by is None


@dataclass(frozen=True, slots=True)
class Fact:
    rowid: int
    id: str
    authority: Authority
    ts: float
    created_at: float
    text: str
    subject: str
    distortion_tolerance: str | None
    visibility: Visibility


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A ``records`` row as a writer inserts it, each field its column (a default is the
    schema's). Every kind of record is one of these plus its own rows."""

    id: str
    # The kind of record: memory, episode, experience, lesson.
    kind: str
    ts: float
    created_at: float
    workspace: str
    agent: str
    uid: int
    session: str | None
    source: str | None
    text: str
    content_hash: bytes
    tags: Sequence[str] = ()
    trust: float = 1.0
    eligibility: str = "pending"
    expires_at: float | None = None
    embed_state: int = 0
    # The handlers pass what the writer chose (policy.record_visibility); an episode, the
    # daemon's own, stays private.
    visibility: Visibility = "private"


@dataclass(frozen=True, slots=True)
class MemoryInsert:
    """A new memory as the store writes it: its record, its metadata, labels, paths, links."""

    # Its ``records`` row (kind ``memory``), trust and eligibility as scoring settled them.
    record: NewRecord
    # Why scoring trusted it as it did (memory_meta.trust_reasons).
    trust_reasons: Sequence[str]
    # entry or fact (memory_meta.kind), not the record's kind.
    memory_kind: str
    subject: str | None
    subject_key: str | None
    authority: str
    distortion_tolerance: str | None
    # None: a global memory.
    origin: str | None
    origin_repo: str | None
    origin_commit: str | None
    writer_client: str | None
    writer_model: str | None
    # Label kind (scope, band, episode) -> values.
    labels: dict[str, list[str]]
    # Path -> 1 when the writer named it (claim-anchored), 0 when its text mentions it.
    paths: dict[str, int]
    # (memory id, note) of each memory it depends on.
    depends_on: list[tuple[str, str | None]]
    # Why it waits for a person's check (policy.HELD), if it does.
    held: str | None


@dataclass(frozen=True, slots=True)
class MemoryTarget:
    """A live memory about to be changed in place, as the change's rules need it."""

    rowid: int
    text: str
    source: str | None
    workspace: str
    kind: str | None
    authority: str | None


@dataclass(slots=True)
class MemoryChange:
    """What memory_update writes of a memory; None leaves a field as it is."""

    subject: str | None = None
    subject_key: str | None = None
    text: str | None = None
    content_hash: bytes | None = None
    source: str | None = None
    held: str | None = None
    authority: str | None = None
    trust: Assessment | None = None
    tags: list[str] | None = None
    # Label kind -> its values, replacing the kind's earlier ones.
    labels: dict[str, list[str]] = field(default_factory=dict)
    # ``(value,)`` sets distortion_tolerance to value (None clears it).
    distortion_tolerance: tuple[str | None] | None = None
    depends_on: list[tuple[str, str | None]] | None = None
    # As MemoryInsert.paths; the paths a person attested stay.
    paths: dict[str, int] | None = None
    expires_at: float | None = None


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A record forgotten: when, and the rowid to take out of the vector index (None when
    it was forgotten before, and nothing changed)."""

    kind: str
    tombstoned_at: float
    rowid: int | None


@dataclass(frozen=True, slots=True)
class UseRow:
    rowid: int
    outcome: StoredOutcome
    ts: float
    note: str | None


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """A relevance calibration a user's outcomes taught (``retrieval.learned_relevance``):
    one workspace's, or the user's own (workspace "")."""

    workspace: str
    uid: int
    bias: float
    lexical: float
    semantic: float
    updates: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class EpisodeRow:
    rowid: int
    id: str
    ts: float
    workspace: str
    session: str | None
    agent: str
    channel: str
    episode_type: str
    task_result: float | None
    verdict_at: float | None
    tool: str | None
    status: str
    error_code: str | None
    duration_ms: float | None
    result_size: int | None
    text: str
    tags: list[str]
    trust: float
    eligibility: str
    blocked: bool
    prev_id: str | None


@dataclass(frozen=True, slots=True)
class EpisodeInsert:
    """A new episode as the store writes it: its record (``pending``) and its episode row."""

    # Its ``records`` row (kind ``episode``), left ``pending`` for the evaluation actor.
    record: NewRecord
    blocked: bool
    channel: str
    episode_type: str
    tool: str | None
    status: str
    error_code: str | None
    duration_ms: float | None
    result_size: int | None
    task_result: float | None
    verdict_at: float | None
    # The session's previous episode; None for its first, or without a session.
    prev_id: str | None
    files: list[str]


@dataclass(frozen=True, slots=True)
class ExperienceRow:
    """An experience as its readers read it: its record's columns and its own row."""

    rowid: int
    id: str
    text: str
    agent: str
    ts: float
    session: str | None
    fields: ExperienceFields


@dataclass(frozen=True, slots=True)
class LessonRow:
    rowid: int
    id: str
    text: str
    support: int
    confidence: float


@dataclass(frozen=True, slots=True)
class SessionEpisode:
    """An episode of a session, as a roll-up reads it."""

    ts: float
    agent: str
    text: str
    eligibility: str
    episode_type: str
    tool: str | None
    status: str
    task_result: float | None
    verdict_at: float | None
    files: list[str]


@dataclass(frozen=True, slots=True)
class InjectedItem:
    """An item of a block a context hook was given, in the block's order."""

    id: str
    section: str
    tokens: int
    drift: str | None
    contested: bool
    # The nonce of the use token a memory was injected with; None for a lesson or an episode.
    use_token: str | None
    # That use's outcome as it stands now: a read joins it in, a write leaves it None.
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class InjectionRow:
    """A block a context hook was given: the log keeps its ids, never its lines."""

    id: str
    ts: float
    workspace: str
    uid: int
    agent: str
    session: str
    event: str
    budget: int
    tokens: int
    items: list[InjectedItem]


@dataclass(frozen=True, slots=True)
class SessionRollup:
    """The experience an earlier roll-up of a session wrote."""

    rowid: int
    record_id: str
    forgotten: bool
    given: frozenset[str]
    description: str
    strategy: str | None
    task_class: str
    status: str


@dataclass(frozen=True, slots=True)
class Ownership:
    """What authorization needs to know of a record a request names."""

    kind: str
    workspace: str
    agent: str
    # The memory's origin; None: a global memory.
    origin: str | None
    # The caller's own (its owner's), as opposed to another member's team record.
    mine: bool


@dataclass(frozen=True, slots=True)
class ShareRow:
    """A memory or lesson as memory_share reviews it: its text and its provenance."""

    id: str
    kind: str  # memory | lesson
    memory_kind: MemoryKind
    text: str
    subject: str | None
    source: str | None
    tags: list[str]
    workspace: str
    agent: str
    writer_client: str | None
    writer_model: str | None
    created_at: float
    visibility: Visibility
    # The database role that wrote it; None where the database is one user's.
    owner: str | None
    paths: list[str]


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    workspace: str
    approved_at: float
    approved_by: str


@dataclass(frozen=True, slots=True)
class AliasRow:
    """A path a workspace was seen at here (its local alias), and when last."""

    path: str
    workspace: str
    seen_at: float


@dataclass(frozen=True, slots=True)
class CredentialRow:
    agent: str
    token_digest: bytes
    created_at: float


@dataclass(frozen=True, slots=True)
class DoctorFigures:
    problems: list[str]
    schema_version: int
    schema_expected: int
    # Ids of live records with a vector of the model, sorted; those marked embedded with
    # no vector of it; those waiting to be embedded.
    vector_ids: np.ndarray
    stale: int
    backlog: int


@dataclass(slots=True)
class RecordRows:
    """A record as its tables hold it, what export reads and import writes: each row a dict
    keyed by column (a JSON column as its list, a flag as a bool), of the columns the caller
    names (the export format's: ``handlers.export_format``)."""

    # Its ``records`` row.
    record: dict[str, Any]
    # The rows attached to it, by table: a memory's memory_meta, memory_links, memory_paths,
    # memory_uses, memory_events; an episode's episodes; an experience's experiences and
    # experience_rollups.
    attached: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # A memory's memory_labels: each kind's values.
    labels: dict[str, list[str]] = field(default_factory=dict)
    # Its lesson_support rows seen from this end: the other end's id, when they were linked.
    support: list[tuple[str, float]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ExperienceRecord:
    """A ``records`` row an experience write adds: the experience's or one of its lessons',
    with the vector it is stored with."""

    # Kind experience or lesson, source record_experience or experience_rollup; embed_state
    # is 1 when it comes with its vector.
    record: NewRecord
    # Its vector under ``model``; None when no model is up (the embedding actor embeds it).
    vector: np.ndarray | None
    model: str | None


@dataclass(frozen=True, slots=True)
class ExperienceFields:
    """An experience's own row (``experiences``), beside its record."""

    task_class: str
    strategy: str | None
    status: str
    tool_calls: int
    minutes: float
    files: list[str]


# --------------------------------------------------------------------------- reads


class RetrievalReads(Protocol):
    """Candidates for the channels, under the same :class:`Filter`."""

    def database_id(self) -> str: ...
    def lexical(self, terms: Sequence[str], f: Filter, depth: int) -> list[tuple[int, float]]:
        """(rowid, score) of the best ``depth`` records matching any of ``terms``, best
        first; the score is higher-is-better and unbounded."""
        ...

    def semantic(self, qvec: np.ndarray, f: Filter, depth: int) -> list[tuple[int, float]]:
        """(rowid, cosine) of the ``depth`` nearest vectors, nearest first ([] with no
        vector index)."""
        ...

    def has_vectors(self) -> bool: ...

    # Threads ``semantic`` may run in while ``lexical`` runs on this reader (it gains only
    # where the semantic search is not a statement on the same connection); None: the
    # channels run one after the other.
    beside: Executor | None

    def visible(self, rowids: Sequence[int], f: Filter) -> set[int]: ...
    def texts(self, rowids: Sequence[int]) -> dict[int, str]:
        """The text of each of ``rowids`` (the caller has checked they are visible)."""
        ...

    def newest(self, f: Filter, limit: int) -> list[int]: ...
    def neighbours(
        self, rowids: Sequence[int], span: int
    ) -> list[tuple[int, str, str, list[int], list[int]]]:
        """(rowid, workspace, kind, up to ``span`` session neighbours before it nearest
        first, after it nearest first) for each of ``rowids`` that has a session."""
        ...

    def session_sample(self, workspace: str, kind: str, limit: int) -> list[tuple[str, str]]:
        """(session, text) of the newest ``limit`` records of a workspace's kind that have a
        session, oldest first."""
        ...

    def matching(self, term: str, rowids: Sequence[int]) -> set[int]:
        """Those of ``rowids`` whose text holds ``term`` as the lexical channel matches it."""
        ...


class MemoryReads(Protocol):
    def by_rowid(self, rowids: Sequence[int]) -> dict[int, MemoryRow]: ...
    def live(self, ids: Sequence[str]) -> dict[str, MemoryRow]: ...
    def pinned_constraints(self, f: Filter) -> list[MemoryRow]: ...
    def current_facts(self, key: str, origin: str | None, now: float) -> list[Fact]: ...
    def texts(self, ids: Iterable[str]) -> dict[str, str]: ...
    def uses(self, rowids: Sequence[int]) -> list[UseRow]: ...
    def use_counts(self, rowid: int) -> dict[str, int]: ...
    def links_from(self, rowid: int) -> list[tuple[str, str, str | None]]: ...
    def depended_on_by(self, memory_id: str) -> list[tuple[str, str, str | None]]: ...
    def depends_on(self, rowids: Sequence[int]) -> dict[int, list[tuple[str, str | None]]]: ...
    def prior_session_boundary(self, session: str) -> float | None: ...
    def newest_facts(self, f: Filter, limit: int) -> list[MemoryRow]:
        """Up to ``limit`` current facts under ``f``, newest first."""
        ...

    def citing(self, paths: Sequence[str], f: Filter, limit: int) -> list[MemoryRow]:
        """Up to ``limit`` memories under ``f`` citing one of ``paths``, newest first."""
        ...

    def origin_repo(self, memory_id: str) -> str | None: ...
    def use_token_key(self) -> bytes: ...
    def token_outcome(self, nonce: str) -> str | None:
        """The outcome recorded under a use token's nonce (a ``StoredOutcome``), if any."""
        ...

    def calibrations(self, workspace: str, uid: int) -> dict[str, CalibrationRow]:
        """The relevance calibrations of ``uid`` for ``workspace`` and the user's own (""),
        by workspace: those this connection may read (a member's own in a team database)."""
        ...

    def newest_page(
        self,
        f: Filter,
        *,
        before: tuple[float, str] | None,
        limit: int,
        kind: MemoryKind | None = None,
        subject_key: str | None = None,
        current_only: bool = False,
    ) -> list[MemoryRow]:
        """Up to ``limit`` memories under ``f`` (and these narrowings) newest first, by
        (ts, id) descending, strictly after the (ts, id) ``before``."""
        ...

    def workspace_counts(self, f: Filter) -> dict[str, int]:
        """Records under ``f`` by workspace."""
        ...


class EpisodeReads(Protocol):
    def rows(self, rowids: Sequence[int]) -> dict[int, EpisodeRow]: ...
    def find(self, record_id: str) -> EpisodeRow | None:
        """The episode ``record_id`` (forgotten or not); None when it is no episode."""
        ...

    def of_session(
        self, workspace: str, session: str, uid: int, agent: str | None, now: float
    ) -> list[SessionEpisode]: ...
    def refs(
        self, workspace: str, session: str, agent: str | None, now: float, limit: int
    ) -> list[tuple[str, float, str]]: ...
    def last_session(
        self, workspace: str, uid: int, agent: str, session: str
    ) -> tuple[str, float] | None:
        """An agent's newest other session of the workspace, and its last episode's ts."""
        ...

    def unresolved(
        self,
        workspace: str,
        uid: int,
        agent: str,
        session: str,
        min_trust: float,
        now: float,
        limit: int,
    ) -> list[EpisodeRow]:
        """A session's failed steps no verdict has judged, newest first."""
        ...


class ExperienceReads(Protocol):
    def rows(self, rowids: Sequence[int]) -> dict[int, ExperienceRow]: ...
    def links(self, experience_rowids: Sequence[int]) -> list[tuple[int, int]]: ...
    def lessons(self, lesson_rowids: Sequence[int]) -> dict[int, LessonRow]: ...
    def find(self, record_id: str, f: Filter) -> tuple[int, str | None] | None: ...
    def vector(self, rowid: int, model: str) -> np.ndarray | None: ...
    def rollup_of(self, workspace: str, session: str) -> SessionRollup | None: ...
    def newest_page(
        self,
        f: Filter,
        *,
        before: tuple[float, str] | None,
        limit: int,
        status: str | None = None,
        task_class: str | None = None,
    ) -> list[int]:
        """Rowids of up to ``limit`` experiences under ``f`` newest first, by (ts, id)
        descending, strictly after the (ts, id) ``before``."""
        ...


class RecordReads(Protocol):
    def ownership(self, ids: Sequence[str]) -> dict[str, Ownership]: ...
    def shareable(self, record_id: str) -> ShareRow | None:
        """The live memory or lesson ``record_id`` as memory_share reviews it."""
        ...

    def has_pending(self) -> bool: ...
    def unembedded(self, after: int, limit: int) -> list[tuple[int, str]]: ...
    def counts(self) -> tuple[dict[str, dict[str, int]], int]: ...


class OperationReads(Protocol):
    def export_count(self, workspace: str | None, kind: str | None) -> int: ...
    def export_rows(
        self,
        after: int,
        limit: int,
        workspace: str | None,
        kind: str | None,
        columns: Mapping[str, Sequence[str]],
    ) -> dict[int, RecordRows]:
        """Up to ``limit`` records after the rowid ``after``, by rowid in order (forgotten
        and expired ones too), each with the rows attached to it: of each table, the
        ``columns`` named."""
        ...

    def lesson_stats(self, rowids: Sequence[int]) -> dict[int, tuple[int, float]]:
        """(support, confidence) of each lesson from the experiences that still surface;
        a lesson with none is absent."""
        ...

    def record_exists(self, record_id: str) -> bool: ...
    def live_content(self, workspace: str, kind: str, content_hash: bytes) -> bool:
        """Whether a live record of ``kind`` in ``workspace`` has ``content_hash``."""
        ...

    def rolled_up(self, workspace: str, session: str) -> bool:
        """Whether the session is rolled up into an experience, forgotten or not."""
        ...

    def doctor_figures(self, model: str | None) -> DoctorFigures: ...
    def approvals(self) -> list[ApprovalRow]: ...
    def credentials(self) -> list[CredentialRow]: ...
    def rekey_pending(self) -> list[str]:
        """The paths this install's rows are still keyed by and that have no alias yet,
        while the re-keying by identity (schema 12 / 3) is unfinished; else none."""
        ...

    def reidentify_pending(self) -> dict[str, list[str]]:
        """Each workspace keyed by a remote's identity with the paths this install saw it
        at, while the re-keying (schema 14 / 5) is unfinished; else none."""
        ...

    def aliases(self) -> list[AliasRow]: ...
    def workspace_records(self) -> dict[str, int]:
        """Live records per workspace this caller may read."""
        ...


class ContextReads(Protocol):
    def injections(
        self,
        *,
        workspace: str | None,
        uid: int,
        agent: str | None,
        session: str | None,
        memory_id: str | None,
        before: tuple[float, str] | None,
        limit: int,
    ) -> list[InjectionRow]:
        """Up to ``limit`` injections of ``uid`` (and of the workspace, agent and session
        where given; holding ``memory_id`` where given), newest first by (ts, id),
        strictly after the (ts, id) ``before``; each item with its use's outcome now."""
        ...


class Reader(Protocol):
    """One read connection's view of the store."""

    @property
    def search(self) -> RetrievalReads: ...
    @property
    def memories(self) -> MemoryReads: ...
    @property
    def episodes(self) -> EpisodeReads: ...
    @property
    def experiences(self) -> ExperienceReads: ...
    @property
    def records(self) -> RecordReads: ...
    @property
    def ops(self) -> OperationReads: ...
    @property
    def context(self) -> ContextReads: ...


class VectorSearch(Protocol):
    """The nearest stored vectors of a query vector (the engine's vector index)."""

    @property
    def ntotal(self) -> int: ...
    @property
    def graph(self) -> bool:
        """Whether it is an approximate graph (which a filter may make widen its walk)."""
        ...

    @property
    def model(self) -> str: ...
    def search_sync(self, vec: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (ids, cosine scores), best first (blocking)."""
        ...


class ProcessReaders(Protocol):
    """How a process of its own opens readers of this store: pickled into it, so it holds
    only what names the store (a path), never a connection."""

    def open(self, vectors: Callable[[], VectorSearch | None]) -> Reader:
        """A read-only reader whose semantic channel asks ``vectors``."""
        ...

    def close(self, reader: Reader) -> None: ...


# --------------------------------------------------------------------------- writes


class RecordWrites(Protocol):
    def replayed(self, who: Principal, key: str | None) -> str | None:
        """The record an earlier request of ``who`` with idempotency key ``key`` wrote."""
        ...

    def remember_key(self, who: Principal, key: str | None, record_id: str, now: float) -> None:
        """Note that ``who``'s request with ``key`` wrote ``record_id`` (none without a key)."""
        ...

    def forget(self, record_id: str, now: float) -> Tombstone:
        """Tombstone one record and drop its vector row.

        Raises:
            RecallError: ``not_found``.
        """
        ...

    def share(self, who: Principal, record_id: str, text: str, now: float) -> None:
        """Make the caller's own private ``record_id`` team memory, as long as its text is
        still ``text`` (what was reviewed), and log who shared it.

        Raises:
            RecallError: ``invalid_request`` when it changed since, is no longer private,
                or the same text is the caller's team memory already.
        """
        ...

    def settle_pending(
        self,
        limit: int,
        now: float,
        settle: Callable[[str, float, bool, str | None, float | None], str],
    ) -> int: ...
    def store_vectors(self, model: str, rows: Sequence[tuple[int, np.ndarray]]) -> list[int]: ...
    def mark_all_unembedded(self) -> int: ...
    def merge_text_index(self, pages: int) -> bool: ...
    def probe(self) -> None: ...


class MemoryWrites(Protocol):
    def require_live(self, ids: Sequence[str], what: str) -> None:
        """Raises:
        RecallError: ``not_found`` naming the first of ``ids`` that is no live memory
            (``what`` names the field that named it)."""
        ...

    def find_duplicate(
        self, workspace: str, content_hash: bytes, besides: int | None = None
    ) -> str | None:
        """The id of the workspace's live memory with this content hash (other than the
        row ``besides``), if there is one."""
        ...

    def insert(self, memory: MemoryInsert) -> int:
        """Write a new memory; its rowid."""
        ...

    def note_supersedes(self, rowid: int, record_id: str, target: str) -> None:
        """The memory ``rowid`` (public id ``record_id``) names ``target`` as what it
        supersedes: linked, and ``target`` superseded by it."""
        ...

    def lock_facts(self, key: str, origin: str | None, now: float) -> list[Fact]:
        """The current facts on a subject, oldest stored first, kept so until this
        transaction ends: another writer deciding on the subject waits for its COMMIT."""
        ...

    def supersede(self, rowid: int, by: str) -> None:
        """Mark the memory ``rowid`` superseded by the memory ``by``."""
        ...

    def event(self, who: Principal, record_id: str, event: str, now: float) -> None: ...
    def target(self, memory_id: str) -> MemoryTarget:
        """The live memory ``memory_id`` (a row loaded without metadata gets it now).

        Raises:
            RecallError: ``not_found``.
        """
        ...

    def anchored_paths(self, rowid: int) -> list[str]:
        """The paths its writer named (claim-anchored), not those a person attested."""
        ...

    def change(self, rowid: int, change: MemoryChange, head: str | None, now: float) -> None:
        """Write ``change``, and note the memory updated and verified now (at ``head``, the
        origin's commit, when known)."""
        ...

    def verify(
        self, who: Principal, memory_id: str, attested: Sequence[str], head: str | None, now: float
    ) -> float:
        """Note the memory verified now (at ``head``), ``attested`` paths as its anchors, and
        release what was held for a person when ``who`` is one; its updated_at.

        Raises:
            RecallError: ``not_found``.
        """
        ...

    def record_uses(
        self,
        who: Principal,
        targets: Sequence[tuple[str, str | None]],
        outcome: str,
        note: str | None,
        now: float,
    ) -> list[str]:
        """Record ``outcome`` for each (memory id, use token's nonce); the ids recorded.

        Raises:
            RecallError: ``not_found`` for an id that names no memory (unless injected).
        """
        ...

    def save_calibration(self, row: CalibrationRow) -> None:
        """Write ``row`` in place of the calibration of its (workspace, uid)."""
        ...

    def clear_calibrations(self, uid: int, workspace: str | None) -> int:
        """Delete ``uid``'s calibrations (only ``workspace``'s when given); how many."""
        ...


class EpisodeWrites(Protocol):
    def find_duplicate(self, workspace: str, content_hash: bytes) -> str | None:
        """The id of the workspace's live episode with this content hash, if there is one."""
        ...

    def lock_session(self, workspace: str, session: str, agent: str, uid: int) -> str | None:
        """The id of the newest episode of an agent's session in the workspace, kept so until
        this transaction ends: another writer capturing into the session waits for its
        COMMIT."""
        ...

    def insert(self, episode: EpisodeInsert) -> int:
        """Write a new episode; its rowid."""
        ...

    def verdict_targets(
        self,
        workspace: str,
        uid: int,
        agent: str | None,
        episode_id: str | None,
        session: str | None,
    ) -> list[tuple[int, float | None]]:
        """(rowid, task_result) of the live episode ``episode_id``, else of every live
        episode of ``session``, in the workspace of ``uid`` (and of ``agent`` when given)."""
        ...

    def set_verdict(
        self, rowids: Sequence[int], task_result: float, verdict_at: float, now: float
    ) -> None:
        """Judge the episodes ``rowids``: their task_result and verdict_at, updated now."""
        ...


class ExperienceWrites(Protocol):
    def find_duplicate(self, workspace: str, content_hash: bytes) -> str | None:
        """The id of the workspace's live experience with this content hash, if any."""
        ...

    def insert(self, record: ExperienceRecord, fields: ExperienceFields) -> int:
        """Write a new experience (its record, its row, its vector if it has one); its rowid."""
        ...

    def rewrite(
        self, rowid: int, record: ExperienceRecord, fields: ExperienceFields, now: float
    ) -> None:
        """Write the experience ``rowid`` as ``record`` and ``fields`` now say it (its text,
        ts, agent, trust, vector), noted updated now; what identifies it stays. Without a
        vector it waits for the embedding actor, which replaces the old one."""
        ...

    def find_lesson(self, workspace: str, content_hash: bytes) -> int | None:
        """The rowid of the workspace's live lesson with this content hash, if any."""
        ...

    def nearest_lesson(self, workspace: str, vec: np.ndarray) -> int | None:
        """The surfacing lesson of the workspace nearest ``vec`` in meaning, if it is within
        the policy's merge cosine (lessons this transaction wrote included)."""
        ...

    def insert_lesson(self, record: ExperienceRecord) -> int:
        """Write a new lesson; its rowid."""
        ...

    def link(self, lesson_rowid: int, experience_rowid: int, now: float) -> None:
        """Link the lesson to the experience (once), and note the lesson updated now."""
        ...

    def linked(self, record_id: str) -> list[int]:
        """The rowids of the lessons linked to the record ``record_id``, oldest link first."""
        ...

    def recorded(self, lesson_rowids: Sequence[int]) -> dict[int, LessonRow]:
        """Each of the lessons, surfacing or not, in the given order, with the support of
        the experiences that still surface (0 when none)."""
        ...

    def note_rollup(
        self,
        rowid: int,
        workspace: str,
        session: str,
        given: frozenset[str],
        episodes: int,
        now: float,
    ) -> None:
        """Note the experience ``rowid`` as the session's roll-up (the caller's ``given``
        fields, the ``episodes`` read), or update the note."""
        ...

    def find(self, workspace: str, record_id: str) -> tuple[int, bool] | None:
        """(rowid, forgotten) of the workspace's experience ``record_id``, if there is one."""
        ...

    def tombstone(self, rowid: int, now: float) -> bool:
        """Tombstone the record ``rowid`` and drop its vector row; False (and nothing done)
        when it was tombstoned already."""
        ...

    def live_support(self, lesson_rowid: int) -> int:
        """How many experiences not forgotten the lesson is linked to."""
        ...

    def touch(self, rowid: int, now: float) -> None:
        """Note the record ``rowid`` updated now."""
        ...


class OperationWrites(Protocol):
    def insert_rows(self, rows: RecordRows, uid: int) -> int | None:
        """Store a record's rows as given, owned by ``uid``; its rowid, or None when its id
        is taken by a record this database role cannot see (nothing is written then). A
        row given twice is stored once; a lesson support link, when its other end is here
        (the other end links those that come later)."""
        ...

    def approve(self, workspace: str, by: str, now: float) -> ApprovalRow | None: ...
    def revoke_approval(self, workspace: str) -> bool: ...
    def rekey(self, path: str, workspace: str, now: float) -> int:
        """File this install's rows keyed by ``path`` under ``workspace`` and note the path
        as its alias; how many records moved."""
        ...

    def reidentify(self, old: str, new: str, paths: list[str], now: float) -> int:
        """File this install's rows keyed by the identity ``old`` under ``new``, and note
        ``paths`` as its aliases; how many records moved."""
        ...

    def rekey_done(self) -> None: ...
    def note_alias(self, path: str, workspace: str, now: float) -> None: ...
    def enroll_agent(self, agent: str, token_digest: bytes, now: float) -> bool: ...
    def enrolled(self, agent: str) -> bool: ...
    def revoke_agent(self, agent: str) -> bool: ...


class ContextWrites(Protocol):
    def record_injection(self, injection: InjectionRow) -> None:
        """Log a block a context hook was given."""
        ...


class WriteTx(Protocol):
    """One job's part of a group-commit transaction: everything it writes commits, or rolls
    back, with it. ``read`` sees the transaction's own writes."""

    @property
    def read(self) -> Reader: ...
    @property
    def records(self) -> RecordWrites: ...
    @property
    def memories(self) -> MemoryWrites: ...
    @property
    def episodes(self) -> EpisodeWrites: ...
    @property
    def experiences(self) -> ExperienceWrites: ...
    @property
    def ops(self) -> OperationWrites: ...
    @property
    def context(self) -> ContextWrites: ...


class BatchJob(Protocol):
    """What the store runs in a batch (the writer's :class:`~recalld.pipeline.writer.WriteJob`)."""

    result: Any
    error: BaseException | None

    def apply(self, tx: WriteTx, now: float) -> Any: ...
    def rolled_back(self) -> None:
        """The job's savepoint (or its batch) was rolled back: it must leave nothing."""
        ...


@dataclass(frozen=True, slots=True)
class IndexFigures:
    """The vector index as the engine holds it."""

    type: str
    size: int
    dim: int
    model: str
    # Why it was rebuilt from the store at open rather than loaded, if it was.
    rebuilt_reason: str | None = None


@dataclass(frozen=True, slots=True)
class DatabaseFigures:
    """The engine and whether it answers, as last seen."""

    engine: Literal["sqlite", "postgresql"]
    # The database file, or the server's URL without its password.
    location: str
    answers: bool = True
    # Since when it answers (or not), and the last error while it does not.
    since: float | None = None
    error: str | None = None
    # A shared database: the role this daemon connects as, the connections it holds to it
    # now, and their bound.
    role: str | None = None
    connections: int | None = None
    connections_max: int | None = None


class Store(Protocol):
    """An engine: its readers, its group commits, and the vector index it keeps."""

    def reader(self) -> Reader:
        """A new read connection (each search worker owns one); close it with close_reader."""
        ...

    def close_reader(self, reader: Reader) -> None: ...
    def process_readers(self) -> ProcessReaders | None:
        """How search processes open readers of this store; None: it has none to give
        (its searches run in the daemon's threads)."""
        ...

    def vector_search(self) -> VectorSearch | None:
        """The vector index searches of other processes are answered from; None while it is
        not open."""
        ...

    def apply_batch(self, jobs: Sequence[BatchJob], now: float) -> None:
        """Apply ``jobs`` in one transaction, in order, and commit. A job that fails is rolled
        back alone, its error on the job, as if each ran in a savepoint of its own; a job may
        be run again (it must leave nothing behind once :meth:`BatchJob.rolled_back`).

        Raises:
            StorageFailure: the commit (or the engine) failed; no job of the batch is stored.
        """
        ...

    def open_vectors(self, model: str, dim: int) -> None:
        """Open the vector index for ``model`` (blocking: load or rebuild)."""
        ...

    def vectors_added(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        """Committed vectors, for the index (blocking; the embedding actor calls it)."""
        ...

    def vectors_removed(self, ids: np.ndarray) -> None: ...
    def index_ids(self) -> np.ndarray: ...
    def index_status(self) -> IndexFigures | None:
        """The vector index as status shows it; None while it is not open."""
        ...

    def snapshot(self) -> None:
        """Persist the vector index if it changed (blocking)."""
        ...

    def database(self) -> DatabaseFigures:
        """The engine and whether it answers, as last seen (no I/O: status calls it)."""
        ...

    def close(self) -> None: ...
