"""Re-keying a store's path-keyed rows by workspace identity, once, at the daemon's start.

Before schema 12 (SQLite) / 3 (PostgreSQL) a workspace was the path of its checkout. Each
path this install's rows are keyed by is identified on this machine now, as a hello's path
would be (:func:`recalld.domain.workspace_identity.identify`), and its rows move to that
identity in a transaction of their own, with the path noted as the workspace's alias. A
start cut short resumes with the paths not done; a path that is no checkout here (any more)
keeps its rows, now an identity by path. It runs before the daemon serves anything, so no
request sees a workspace half moved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..domain.workspace_identity import Workspace
from ..errors import RecallError
from .port import Store, WriteTx

__all__ = ["rekey_workspaces"]

log = logging.getLogger(__name__)


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
    _run(store, lambda tx, now: tx.ops.rekey_done())
    return moved
