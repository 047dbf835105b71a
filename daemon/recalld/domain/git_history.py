"""Reading git repositories in-process with libgit2 (pygit2): the git program never runs.

A memory's origin is a directory a client named. Running ``git`` there would run whatever
that repository's own config says: a partial clone's lazy fetch runs ``core.sshCommand``,
``core.fsmonitor`` runs a hook, and so on. Whoever can write one directory (a downloaded
archive with a ``.git`` will do) could make the daemon run code. libgit2 runs nothing: it
reads refs and objects, fetches nothing, executes no config and ignores ``GIT_*`` variables
of the daemon's environment. On top of that, a repository that declares a partial clone or
a promisor remote is refused outright (libgit2 already refuses one owned by another user),
so no answer ever depends on objects that are not there.

Every walk through history is bounded (:data:`MAX_WALK` commits, and a per-search
:class:`WalkBudget`) and every answer cached: a workspace's top level for half a minute
(bounded LRU), a HEAD until the repository's HEAD reflog changes, a count for as long as the
HEAD it was counted against stays the same.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import pygit2
from pygit2.enums import RepositoryOpenFlag, SortMode

__all__ = [
    "MAX_WALK",
    "Count",
    "WalkBudget",
    "cached_top_level",
    "count_commits",
    "head",
    "top_level",
]

log = logging.getLogger(__name__)

# Commits one count walks at most: past it the answer is "at least this many".
MAX_WALK = 10_000
TOP_TTL = 30.0
HEAD_TTL = 2.0
TOP_CACHE = 1024
HEAD_CACHE = 1024
COUNT_CACHE = 4096
# A time-based count ("since the verification's time") stops after this many commits in a
# row older than that time (history is only roughly ordered by date).
TIME_SLOP = 8

_TRUE = frozenset({"true", "yes", "on", "1"})


@dataclass(slots=True)
class WalkBudget:
    """History walking one request may do: commits visited and a deadline (monotonic)."""

    commits: int = 20_000
    deadline: float = field(default_factory=lambda: time.monotonic() + 0.25)

    def spent(self) -> bool:
        return self.commits <= 0 or time.monotonic() >= self.deadline


@dataclass(frozen=True, slots=True)
class Count:
    """Commits since a base: how many, how many touched the given paths, whether capped."""

    commits: int
    touching: int
    capped: bool


K = TypeVar("K")
V = TypeVar("V")


class _LRU(Generic[K, V]):
    """A small thread-safe LRU map (the search workers share these caches)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)


# workspace -> (when looked up, top level or None)
_tops: _LRU[str, tuple[float, str | None]] = _LRU(TOP_CACHE)
# top level -> (reflog stamp, when read, git dir, HEAD or None)
_heads: _LRU[str, tuple[tuple[int, int] | None, float, str, str | None]] = _LRU(HEAD_CACHE)
# (repo, base, head, paths) -> Count, or None when the base is unknown
_counts: _LRU[tuple[str, str, str, tuple[str, ...]], tuple[Count | None]] = _LRU(COUNT_CACHE)


def _lazy_fetching(repo: pygit2.Repository) -> bool:
    """Whether the repository says objects may be fetched on demand (a partial clone)."""
    for entry in repo.config:
        name = entry.name.lower()
        if name == "extensions.partialclone":
            return True
        if name.startswith("remote.") and name.endswith(".promisor"):
            if (entry.value or "").strip().lower() in _TRUE:
                return True
    return False


def _open(path: str) -> pygit2.Repository | None:
    """The non-bare repository at ``path`` (a top level or a git dir), or None (and why, in
    the debug log) when it is not one or is refused."""
    try:
        repo = pygit2.Repository(path, RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
        log.debug("no repository at %s: %s", path, exc)
        return None
    if repo.is_bare or repo.workdir is None:
        return None
    if _lazy_fetching(repo):
        log.warning("refusing %s: it declares a partial clone or promisor remote", path)
        return None
    return repo


def top_level(workspace: str) -> str | None:
    """The top level of the git work tree holding ``workspace``; None outside a repository
    (or in one that is refused). Cached for TOP_TTL seconds."""
    known, top = cached_top_level(workspace)
    if known:
        return top
    top = None
    if workspace and os.path.isdir(workspace):
        try:
            gitdir = pygit2.discover_repository(workspace)
        except (pygit2.GitError, ValueError, OSError):
            gitdir = None
        repo = _open(gitdir) if gitdir else None
        if repo is not None and repo.workdir is not None:
            top = repo.workdir.rstrip("/") or "/"
    _tops.put(workspace, (time.monotonic(), top))
    return top


def cached_top_level(workspace: str) -> tuple[bool, str | None]:
    """``(True, top)`` when :func:`top_level` would answer from its cache, else (False, None)."""
    cached = _tops.get(workspace)
    if cached is None or time.monotonic() - cached[0] >= TOP_TTL:
        return False, None
    return True, cached[1]


def _reflog_stamp(gitdir: str) -> tuple[int, int] | None:
    """Size and mtime of the HEAD reflog: every commit, checkout or reset appends to it."""
    try:
        st = os.stat(os.path.join(gitdir, "logs", "HEAD"))
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def cached_head(top: str) -> tuple[bool, str | None]:
    """``(True, head)`` when :func:`head` would answer without opening the repository."""
    cached = _heads.get(top)
    if cached is None:
        return False, None
    stamp, when, gitdir, value = cached
    now_stamp = _reflog_stamp(gitdir)
    if (now_stamp is not None and now_stamp == stamp) or (
        now_stamp is None and time.monotonic() - when < HEAD_TTL
    ):
        return True, value
    return False, None


def head(top: str) -> str | None:
    """HEAD of the repository at ``top`` (None without commits, or when refused).

    Cached until the HEAD reflog changes; where there is none to watch (reflogs off), for a
    couple of seconds.
    """
    known, value = cached_head(top)
    if known:
        return value
    repo = _open(top)
    if repo is None:
        return None
    gitdir = repo.path
    stamp = _reflog_stamp(gitdir)
    value = None
    try:
        if not repo.head_is_unborn:
            value = str(repo.head.target)
    except (pygit2.GitError, KeyError, ValueError):
        value = None
    _heads.put(top, (stamp, time.monotonic(), gitdir, value))
    return value


def _entry(tree: pygit2.Tree, path: str) -> pygit2.Oid | None:
    try:
        return tree[path].id
    except (KeyError, ValueError):
        return None


def _touches(commit: pygit2.Commit, paths: Sequence[str]) -> bool:
    """Whether ``commit`` changed one of ``paths``: unlike every parent (git's TREESAME rule,
    so a merge that only brings in a side's change does not count twice)."""
    mine = [_entry(commit.tree, path) for path in paths]
    parents = commit.parents
    if not parents:
        return any(oid is not None for oid in mine)
    return all(
        any(_entry(parent.tree, path) != oid for path, oid in zip(paths, mine, strict=True))
        for parent in parents
    )


def count_commits(
    top: str,
    head_hex: str,
    *,
    since_commit: str | None,
    since_ts: float | None,
    paths: Sequence[str],
    budget: WalkBudget,
) -> Count | None:
    """Commits reachable from ``head_hex`` since a base, and how many touched ``paths``.

    The base is ``since_commit`` (commits not reachable from it, as ``git rev-list
    since..head``), else ``since_ts`` (commits made after it, as ``--since``). None when the
    base commit is unknown here or the budget is spent; the caller then says so.
    """
    rel = tuple(paths)
    key = (top, since_commit or f"@{since_ts}", head_hex, rel)
    cached = _counts.get(key)
    if cached is not None:
        return cached[0]
    if budget.spent():
        return None
    repo = _open(top)
    if repo is None:
        return None
    try:
        walker = repo.walk(pygit2.Oid(hex=head_hex), SortMode.TIME)
        if since_commit is not None:
            base = repo.get(since_commit)
            if not isinstance(base, pygit2.Commit):
                _counts.put(key, (None,))
                return None
            walker.hide(base.id)
    except (pygit2.GitError, KeyError, ValueError):
        _counts.put(key, (None,))
        return None
    commits = touching = older = 0
    capped = False
    try:
        for commit in walker:
            budget.commits -= 1
            if budget.commits < 0 or (commits & 63 == 0 and budget.spent()):
                return None  # not cached: another search may have the budget to finish
            if since_ts is not None and commit.commit_time <= since_ts:
                older += 1
                if older >= TIME_SLOP:
                    break
                continue
            older = 0
            if commits == MAX_WALK:
                capped = True
                break
            commits += 1
            if rel and _touches(commit, rel):
                touching += 1
    except pygit2.GitError as exc:
        log.debug("walking %s failed: %s", top, exc)
        return None
    result = Count(commits=commits, touching=touching, capped=capped)
    _counts.put(key, (result,))
    return result
