"""The one judgement of a memory's staleness (memory_search, memory_show, memory_list and
the context hooks): its cited paths and commits checked in the reader's own checkout of its
workspace, and the verdict on them."""

from __future__ import annotations

from dataclasses import dataclass

from recall_client import protocol as p

from ..domain import drift, git_history
from ..domain.principal import Principal
from ..errors import RecallError
from ..store.port import MemoryRow, Reader

__all__ = ["Checkouts", "Staleness", "staleness"]


def _cited(row: MemoryRow) -> list[drift.CitedPath]:
    return [drift.CitedPath(path, anchored) for path, anchored in row.paths]


@dataclass(frozen=True, slots=True)
class Staleness:
    """A memory's drift against this machine and its repository, and the verdict on it."""

    path_drift: p.PathDrift
    anchored_missing: list[str]
    cited: list[p.CitedPath]
    commit: p.CommitDrift | None
    verdict: p.StalenessVerdict


class Checkouts:
    """Where the reader's own checkout of a memory's workspace is, to judge its drift there.

    A memory's ``origin_repo`` is the writer's checkout: on another person's machine (team
    memory) or after a move it is not where the reader's files are, so a cited
    ``src/x.py`` would read as gone, or be checked in someone else's tree. The reader's
    checkout is the connection's path when the memory is of the connection's workspace,
    else the newest path this install saw that workspace at (its aliases: a role's own on
    PostgreSQL), else, in a one-user store, the path it was written at.
    """

    def __init__(self, reader: Reader, who: Principal) -> None:
        self._reader, self._who = reader, who
        self._aliases: dict[str, str] | None = None

    def of(self, row: MemoryRow) -> str | None:
        """The directory ``row``'s relative cited paths and commits are read in; None when
        this install has no checkout of its workspace (they are then not checked)."""
        if row.origin is None:  # a global memory: no repository to read
            return None
        if row.origin == self._who.workspace and self._who.path:
            path: str | None = self._who.path
        else:
            path = self._alias(row.origin)
        if path is None:
            # A workspace keyed by its path (no repository) is its own checkout.
            if row.origin.startswith("/"):
                return row.origin
            return row.origin_repo if row.owner is None else None
        try:
            return git_history.top_level(path) or path
        except RecallError:  # set aside: its paths are still checked where they are
            return path

    def _alias(self, workspace: str) -> str | None:
        if self._aliases is None:
            newest: dict[str, tuple[float, str]] = {}
            for a in self._reader.ops.aliases():
                if a.workspace not in newest or a.seen_at > newest[a.workspace][0]:
                    newest[a.workspace] = (a.seen_at, a.path)
            self._aliases = {ws: path for ws, (_, path) in newest.items()}
        return self._aliases.get(workspace)


def staleness(
    row: MemoryRow,
    now: float,
    checkouts: Checkouts,
    *,
    unresolved_contradiction: bool,
    budget: git_history.WalkBudget | None = None,
) -> Staleness:
    """Path drift, commit drift and the staleness verdict of one memory: the one way
    memory_search, memory_show and memory_list judge it, in the reader's checkout of its
    workspace (``checkouts``). ``budget``: the history walking the request may still do
    (shared by all its memories; None: a budget of its own)."""
    checkout = checkouts.of(row)
    path_drift, anchored_missing, cited = drift.check_paths(_cited(row), checkout)
    commit = drift.commit_drift(
        checkout,
        row.verified_commit,
        row.last_verified_at,
        [path for path, anchored in row.paths if anchored],
        budget,
    )
    verdict = drift.staleness_verdict(
        now,
        row.last_verified_at,
        claim_anchored_missing=len(anchored_missing),
        commit=commit,
        unresolved_contradiction=unresolved_contradiction,
    )
    return Staleness(path_drift, anchored_missing, cited, commit, verdict)
