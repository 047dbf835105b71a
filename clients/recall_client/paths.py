"""Where the daemon's socket, data and config live; one place for daemon and clients alike.

Each location is the environment variable if set, else the config file's key, else the
default, so a ``socket`` set in config.toml is where clients look too.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from pathlib import Path
from typing import Any

import msgspec

from . import running

__all__ = [
    "InsecureDirectory",
    "admin_token_path",
    "admin_token_problem",
    "autostart_enabled",
    "config_dir",
    "config_file",
    "data_dir",
    "default_data_dir",
    "default_socket_path",
    "ensure_private_dir",
    "file_config",
    "find_workspace",
    "log_file",
    "peer_credentials",
    "read_admin_token",
    "read_token_file",
    "runtime_dir",
    "socket_path",
    "state_dir",
]


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(uid, pid) of the process at the other end of a UNIX socket (SO_PEERCRED: the kernel
    vouches for it). The daemon checks its clients with it, every client its server."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return uid, pid


class InsecureDirectory(PermissionError):
    """A directory the daemon or a client would put its socket or lock in is not private."""


def ensure_private_dir(path: Path) -> None:
    """Make sure ``path`` is a directory only this user may use; create it (0700) if missing.

    Another local user who owns the socket's directory (or its parent, say a predictable
    ``/tmp/recalld-UID`` created before we came) could replace the socket with a listener
    of their own and capture what clients send. So the directory must be a real directory
    (not a symlink), owned by this user and writable by no one else; its parent must be
    this user's or root's and writable by no one else unless sticky (like /tmp). A
    directory of ours that others may only read or traverse is tightened to 0700.

    Raises:
        InsecureDirectory: the directory or its parent fails those checks (the message
            says which and why).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    uid = os.getuid()
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise InsecureDirectory(f"{path} is not a directory (a symlink?); refusing to use it")
    if st.st_uid != uid:
        raise InsecureDirectory(
            f"{path} belongs to uid {st.st_uid}, not to you (uid {uid}): another user could "
            "replace the socket there; remove it or set RECALLD_SOCKET to a directory of yours"
        )
    if st.st_mode & 0o022:
        raise InsecureDirectory(
            f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"run: chmod 700 {path}"
        )
    if st.st_mode & 0o077:
        # Readable or traversable by others, not writable: ours to tighten.
        os.chmod(path, 0o700)
    parent = os.stat(path.parent)
    if parent.st_uid not in (uid, 0) or (
        parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX
    ):
        raise InsecureDirectory(
            f"{path.parent} (which holds {path.name}) belongs to uid {parent.st_uid} or may be "
            "changed by others: they could swap the socket directory; use one under a "
            "directory of yours"
        )


def runtime_dir() -> Path:
    """The per-user runtime directory: ``$XDG_RUNTIME_DIR``, else the one systemd-logind
    makes (``/run/user/UID``, which is what that variable names when a host has not
    dropped it), else a private dir under /tmp."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg)
    uid = os.getuid()
    login = Path(f"/run/user/{uid}")
    try:
        st = os.lstat(login)
    except OSError:
        return Path(f"/tmp/recalld-{uid}")
    # Only as logind makes it: this user's own directory, closed to everyone else.
    if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077:
        return login
    return Path(f"/tmp/recalld-{uid}")


def socket_path() -> Path:
    """Where a client looks for the daemon: ``$RECALLD_SOCKET``, else the socket the daemon
    running on :func:`data_dir` recorded there, else the default config file's ``socket``,
    else :func:`default_socket_path`.

    The record comes before the defaults because they depend on variables a host may drop
    (Codex gives an MCP server only HOME, LANG, PATH, SHELL and TERM): a client without
    ``XDG_RUNTIME_DIR`` would look in /tmp, find nothing, and start a second daemon."""
    explicit = os.environ.get("RECALLD_SOCKET")
    if explicit:
        return Path(explicit)
    live = running.running(data_dir())
    if live is not None:
        return Path(live.socket)
    configured = _file_str("socket")
    return Path(configured) if configured else default_socket_path()


def default_socket_path() -> Path:
    """``$XDG_RUNTIME_DIR/recalld/recalld.sock``: the socket when neither the environment
    nor the config says otherwise. The daemon falls back to this, not to
    :func:`socket_path`: it has read its own config file (maybe ``--config``), and the
    default file's ``socket`` is not its to take."""
    return runtime_dir() / "recalld" / "recalld.sock"


def data_dir() -> Path:
    """Where a client finds the daemon's data: ``$RECALLD_DATA_DIR``, else the default
    config file's ``data_dir``, else :func:`default_data_dir`."""
    explicit = os.environ.get("RECALLD_DATA_DIR") or _file_str("data_dir")
    return Path(explicit) if explicit else default_data_dir()


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/recalld`` (the daemon's fallback, as :func:`default_socket_path`)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "recalld"


def state_dir() -> Path:
    """``$XDG_STATE_HOME/recalld``: where a daemon started by recall-mcp logs."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "recalld"


def log_file() -> Path:
    return state_dir() / "recalld.log"


def autostart_enabled() -> bool:
    """Whether recall-mcp may start a daemon: ``$RECALLD_AUTOSTART``, else config
    ``autostart``, else yes."""
    env = os.environ.get("RECALLD_AUTOSTART")
    if env:
        return env.strip().lower() not in {"0", "false", "no", "off"}
    value = file_config().get("autostart", True)
    return value if isinstance(value, bool) else True


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
    """The admin token, or None when the file is missing or unreadable
    (:func:`admin_token_problem` says why)."""
    token, _problem = _admin_token()
    return token


def admin_token_problem() -> str | None:
    """Why this client has no admin token to present (where it looked, what went wrong),
    None when it has one: said beside a ``forbidden`` the daemon answers for want of it."""
    _token, problem = _admin_token()
    return problem


def _admin_token() -> tuple[str | None, str | None]:
    path = admin_token_path()
    try:
        token = path.read_text().strip()
    except OSError as exc:
        return None, f"the admin token {path} could not be read ({exc.strerror or exc})"
    if not token:
        return None, f"the admin token file {path} is empty"
    return token, None


def read_token_file(path: Path) -> str:
    """An agent's token from the file ``recallctl agent add`` wrote.

    Raises:
        PermissionError: the file is missing, unreadable, empty, or readable by others (a
            token others may read proves nothing).
    """
    try:
        # O_NONBLOCK: a FIFO at the path must not hang the reader (a spool replay, say).
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise PermissionError(f"cannot read the agent token file {path}: {exc}") from exc
    with os.fdopen(fd) as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise PermissionError(f"the agent token file {path} is not a regular file")
        if mode & 0o077:
            raise PermissionError(
                f"the agent token file {path} is readable by others; run: chmod 600 {path}"
            )
        token = fh.read().strip()
    if not token:
        raise PermissionError(f"the agent token file {path} is empty")
    return token


def file_config() -> dict[str, Any]:
    """The config file's keys; empty when there is none or it does not parse (the daemon
    refuses a bad file with the reason, and `recallctl config` shows it)."""
    try:
        raw = msgspec.toml.decode(config_file().read_bytes())
    except (OSError, msgspec.DecodeError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _file_str(key: str) -> str | None:
    value = file_config().get(key)
    return value if isinstance(value, str) and value else None


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
