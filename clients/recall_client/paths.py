"""Where the daemon's socket, data and config live; one place for daemon and clients alike."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "admin_token_path",
    "config_dir",
    "config_file",
    "data_dir",
    "find_workspace",
    "read_admin_token",
    "runtime_dir",
    "socket_path",
]


def runtime_dir() -> Path:
    """The per-user runtime directory (``$XDG_RUNTIME_DIR``, else a private dir under /tmp)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg)
    return Path(f"/tmp/recalld-{os.getuid()}")


def socket_path() -> Path:
    """``$RECALLD_SOCKET``, else ``$XDG_RUNTIME_DIR/recalld/recalld.sock``."""
    explicit = os.environ.get("RECALLD_SOCKET")
    if explicit:
        return Path(explicit)
    return runtime_dir() / "recalld" / "recalld.sock"


def data_dir() -> Path:
    """``$RECALLD_DATA_DIR``, else ``$XDG_DATA_HOME/recalld``."""
    explicit = os.environ.get("RECALLD_DATA_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "recalld"


def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/recalld``."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "recalld"


def config_file() -> Path:
    return config_dir() / "config.toml"


def admin_token_path() -> Path:
    """``$RECALLD_ADMIN_TOKEN_FILE``, else ``$XDG_CONFIG_HOME/recalld/admin.token``.

    The daemon creates it (0600) at start; whoever can read it may act with the
    admin:workspace scope (recallctl, ``recall-mcp --admin``).
    """
    explicit = os.environ.get("RECALLD_ADMIN_TOKEN_FILE")
    if explicit:
        return Path(explicit)
    return config_dir() / "admin.token"


def read_admin_token() -> str | None:
    """The admin token, or None when the file is missing or unreadable."""
    try:
        token = admin_token_path().read_text().strip()
    except OSError:
        return None
    return token or None


def find_workspace(start: Path | None = None) -> str:
    """The git root above ``start`` (default: the working directory), else ``start`` itself.

    Walks up looking for ``.git`` (a directory, or a file in worktrees) instead of running git,
    which would cost a subprocess on every shim start.
    """
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return str(candidate)
    return str(here)
