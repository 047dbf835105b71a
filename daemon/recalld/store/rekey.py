"""Re-keying a store's path-keyed rows by workspace identity, once, at the daemon's start.

Before schema 12 (SQLite) / 3 (PostgreSQL) a workspace was the path of its checkout. Each
path this install's rows are keyed by is identified on this machine now, as a hello's path
would be (:func:`recalld.domain.workspace_identity.identify`), and its rows move to that
identity in a transaction of their own, with the path noted as the workspace's alias. A
start cut short resumes with the paths not done; a path that is no checkout here (any more)
keeps its rows, now an identity by path. It runs before the daemon serves anything, so no
request sees a workspace half moved.

Schema 14 (SQLite) / 5 (PostgreSQL) runs it once more for identities: until then a remote's
identity folded the path's case, the port and the ssh user, so two repositories could share
one (``file:/srv/git/payments`` was ``Payments.git`` and ``payments.git``). Each such
workspace is moved to the identity its checkouts here have now, when they all agree on one
that the old rule folded to it. When they do not (two repositories did share it), which
memory was whose cannot be told from the rows: they move to ``ambiguous:`` and the old
identity, which no checkout derives and an admin can still name. When none is a checkout
here any more, its rows keep the old identity.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..domain.workspace_identity import Workspace
from ..errors import RecallError
from .port import Store, WriteTx

__all__ = ["AMBIGUOUS", "folded_as_before", "rekey_workspaces"]

log = logging.getLogger(__name__)

# The prefix of a workspace whose rows two repositories shared under schema 13's identities.
AMBIGUOUS = "ambiguous:"


class _Job:
    """A write of the daemon's own, for :meth:`Store.apply_batch`."""

    def __init__(self, apply: Callable[[WriteTx, float], Any]) -> None:
        self._apply = apply
        self.result: Any = None
        self.error: BaseException | None = None

    def apply(self, tx: WriteTx, now: float) -> Any:
        return self._apply(tx, now)

    def rolled_back(self) -> None:
        self.result = None


def _run(store: Store, apply: Callable[[WriteTx, float], Any]) -> Any:
    job = _Job(apply)
    store.apply_batch([job], time.time())
    if job.error is not None:
        raise job.error
    return job.result


def rekey_workspaces(store: Store, identify: Callable[[str], Workspace]) -> int:
    """Move every path-keyed row of this install to its workspace's identity; how many
    records moved. Blocking (it reads repositories and writes): run in a thread.

    Raises:
        StorageFailure, RecallError: a transaction failed; the paths done so far stay done.
    """
    reader = store.reader()
    try:
        pending = reader.ops.rekey_pending()
    finally:
        store.close_reader(reader)
    moved = 0
    for path in pending:
        try:
            ws = identify(path)
        except RecallError as exc:  # a repository set aside: its rows keep their path
            log.warning("workspace %s keeps its path as its identity: %s", path, exc.message)
            ws = Workspace(id=path, path=path, basis="path")

        def move(tx: WriteTx, now: float, path: str = path, workspace: str = ws.id) -> int:
            return tx.ops.rekey(path, workspace, now)

        count: int = _run(store, move)
        moved += count
        if ws.id != path:
            log.info("workspace %s is now %s (%d records, by its %s)", path, ws.id, count, ws.basis)
    moved += _reidentify(store, _pending(store), identify)
    _run(store, lambda tx, now: tx.ops.rekey_done())
    return moved


def _pending(store: Store) -> dict[str, list[str]]:
    reader = store.reader()
    try:
        return reader.ops.reidentify_pending()
    finally:
        store.close_reader(reader)


def folded_as_before(identity: str) -> str:
    """``identity`` as schema 13's rule folded remotes: all in lower case, without an ssh
    user or a port (a root commit's or a path's identity is never re-derived)."""
    where, slash, path = identity.partition("/")
    if where == "file:":
        return identity.lower()
    host = where.rpartition("@")[2]
    host = host.split("]", 1)[0] + "]" if host.startswith("[") else host.split(":", 1)[0]
    return f"{host}{slash}{path}".lower()


def _reidentify(
    store: Store, pending: dict[str, list[str]], identify: Callable[[str], Workspace]
) -> int:
    moved = 0
    for old, paths in pending.items():
        now_is: dict[str, list[str]] = {}
        for path in paths:
            try:
                ws = identify(path)
            except RecallError:
                continue  # set aside: no evidence either way
            if ws.basis == "origin" and folded_as_before(ws.id) == old:
                now_is.setdefault(ws.id, []).append(path)
        if len(now_is) > 1:
            # Different repositories shared it: whose row is whose cannot be told, so
            # neither checkout gets them (the one whose identity did not change would read
            # the other's); the new key is one no checkout derives.
            log.warning(
                "workspace %s was %s, different repositories: its rows are now under %s%s",
                old,
                ", ".join(sorted(now_is)),
                AMBIGUOUS,
                old,
            )
            now_is = {AMBIGUOUS + old: []}
        for new, seen in now_is.items():
            if new == old:
                continue

            def move(
                tx: WriteTx, now: float, old: str = old, new: str = new, seen: list[str] = seen
            ) -> int:
                return tx.ops.reidentify(old, new, seen, now)

            count: int = _run(store, move)
            moved += count
            log.info("workspace %s is now %s (%d records)", old, new, count)
    return moved
