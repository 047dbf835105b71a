"""Scopes: what a connection may do, and the admin token that earns ``admin:workspace``.

Every peer of the daemon's own uid may read and write its workspace; the agent partition
(an agent reads only its own episodes) is an authorization boundary that only
``admin:workspace`` crosses. A connection earns that scope by presenting, in its hello, the
token the daemon keeps in a 0600 file in the config dir: reading that file takes the same
access as reading the user's own config, so a sandboxed agent that cannot read it cannot
cross the partition either.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import stat
from pathlib import Path

from ..errors import RecallError

__all__ = [
    "ADMIN",
    "BASE_SCOPES",
    "READ",
    "WRITE",
    "AdminTokenUnavailable",
    "ensure_admin_token",
    "grant",
    "require",
]

log = logging.getLogger(__name__)

READ = "read:workspace"
WRITE = "write:workspace"
ADMIN = "admin:workspace"
BASE_SCOPES = frozenset({READ, WRITE})


class AdminTokenUnavailable(OSError):
    """No admin token file could be read or written; the message says where and why."""


def ensure_admin_token(path: Path) -> str:
    """The admin token from ``path``, creating the file (0600, 256 random bits) if missing.

    A file that is not a regular file of this user, or that others may read, is replaced
    by a fresh token: a token anyone could have read proves nothing.

    Raises:
        AdminTokenUnavailable: no token file can be read or made (a read-only config dir,
            say); then no connection gets ``admin:workspace``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            st = path.lstat()
        except FileNotFoundError:
            pass
        else:
            private = (
                stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077
            )
            token = path.read_text().strip() if private else ""
            if token:
                return token
            log.warning("%s is empty or not private to this user; writing a new admin token", path)
            path.unlink()
        token = secrets.token_urlsafe(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            # Another daemon starting at the same moment won the race; use its token.
            token = path.read_text().strip()
            if not token:
                raise AdminTokenUnavailable(f"the admin token file {path} is empty") from None
            return token
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
        log.info("admin token written to %s", path)
        return token
    except AdminTokenUnavailable:
        raise
    except OSError as exc:
        raise AdminTokenUnavailable(
            f"no admin token: {path} could not be read or written ({exc.strerror or exc})"
        ) from exc


def grant(presented: str | None, admin_token: str | None) -> frozenset[str]:
    """The scopes a hello earns.

    Raises:
        RecallError: ``forbidden`` when a token was presented and does not match.
    """
    if presented is None:
        return BASE_SCOPES
    # Bytes, not str: compare_digest refuses a str with non-ASCII characters (TypeError).
    if admin_token is None:
        raise RecallError(
            "forbidden",
            "this daemon has no admin token: it could not write its admin.token "
            "(`recallctl status` says where and why)",
        )
    if not hmac.compare_digest(presented.encode(), admin_token.encode()):
        raise RecallError("forbidden", "the admin token does not match this daemon's admin.token")
    return BASE_SCOPES | {ADMIN}


def require(scopes: frozenset[str], scope: str, what: str) -> None:
    """Raise ``forbidden`` unless ``scope`` is among ``scopes``; ``what`` names the action."""
    if scope not in scopes:
        raise RecallError(
            "forbidden",
            f"{what} needs the {scope} scope: connect with the admin token "
            "(recallctl does when it can read it; recall-mcp needs --admin)",
        )
