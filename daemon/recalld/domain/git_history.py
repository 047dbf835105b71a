"""Reading git repositories in-process with libgit2 (pygit2): the git program never runs.

A memory's origin is a directory a client named. Running ``git`` there would run whatever
that repository's own config says: a partial clone's lazy fetch runs ``core.sshCommand``,
``core.fsmonitor`` runs a hook, and so on. Whoever can write one directory (a downloaded
archive with a ``.git`` will do) could make the daemon run code. libgit2 runs nothing: it
reads refs and objects, fetches nothing, executes no config and ignores ``GIT_*`` variables
of the daemon's environment. On top of that, a repository that declares a partial clone or
a promisor remote is refused outright (libgit2 already refuses one owned by another user),
so no answer ever depends on objects that are not there.

A repository is also data someone else wrote, laid out to stall a reader: a config that
includes a FIFO, a ``HEAD`` that is one. Before libgit2 opens a repository its config is
parsed as git parses it (:mod:`.git_config`) and refused if it includes any other file, and
the files libgit2 reads at open (``HEAD``, the configs, ``commondir``, ``gitdir``,
``packed-refs``, ``shallow``, the alternates, ``objects`` and ``refs``) must be what they
should (regular files, real directories), not a FIFO, a device or a symlink. What no look
ahead can cover (a ref or an object that is a FIFO) the process the read runs in does:
every read that reaches libgit2 runs in a git reader process under a hard deadline
(:mod:`.git_process`), and only the caches live in the caller.

Every walk through history is bounded: at most :data:`MAX_WALK` commits counted, at most
:data:`MAX_PARENTS` parents of a commit followed, and a per-request :class:`WalkBudget` of
units of work and time, paid for before each read. The walk is this module's own (libgit2's
revwalk reads a commit's every parent, and with a commit hidden it walks the whole range
up front, out of reach of any budget). Every answer is cached, in bounded LRUs with small
keys: a workspace's top level for half a minute, a HEAD until the repository's HEAD reflog
changes, a count for as long as the HEAD it was counted against stays the same.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import math
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import pygit2
from pygit2.enums import ObjectType, RepositoryOpenFlag
from recall_client.files import read_regular

from . import git_config, git_process

__all__ = [
    "LRU",
    "MAX_CONFIG_BYTES",
    "MAX_PARENTS",
    "MAX_WALK",
    "Changes",
    "Count",
    "WalkBudget",
    "cached_top_level",
    "changes_since",
    "common_dir",
    "count_commits",
    "git_dir",
    "head",
    "root_commit",
    "top_level",
]

log = logging.getLogger(__name__)

# Commits one count walks at most: past it the answer is "at least this many".
MAX_WALK = 10_000
# Parents of one commit a walk follows at most. Real octopus merges have a few dozen (the
# largest in Linux has 66); one with more ends the walk there, and the count says so.
MAX_PARENTS = 100
# Reading an object costs a unit of the walk budget per this many bytes (at least one): a
# commit of a million parents or a tree of a million entries is parsed whole when read.
UNIT_BYTES = 1024
TOP_TTL = 30.0
HEAD_TTL = 2.0
TOP_CACHE = 1024
HEAD_CACHE = 1024
COUNT_CACHE = 4096
# History is only roughly ordered by date: a time-based count ("since the verification's
# time") stops after this many commits in a row older than that time, and a count from a
# base commit follows this many hidden commits past the oldest one it took.
TIME_SLOP = 8
# First parents followed at most to a root commit (a workspace's identity when it has no
# remote): a count, not a time, so every clone of one history answers alike.
MAX_ROOT_WALK = 100_000
ROOT_CACHE = 256
MAX_POINTER_BYTES = 4096
# A repository's own config read at most (real ones are a few KiB; one with thousands of
# branches a few hundred).
MAX_CONFIG_BYTES = 256 * 1024
_CONFIGS = ("config", "config.worktree")
# Files of a git dir libgit2 may read on opening it or reading HEAD: each regular, if there.
_FILES = ("HEAD", *_CONFIGS, "commondir", "gitdir", "packed-refs", "shallow", "info/grafts")
# Directories of the common dir, each a real directory (a symlink could lead anywhere).
_DIRS = ("objects", "refs")
ALTERNATES = "objects/info/alternates"
# Alternate object stores one repository may name, at most.
MAX_ALTERNATES = 16


@dataclass(slots=True)
class WalkBudget:
    """History walking one request may do: units of work, and a deadline (monotonic) for
    the walking itself (see :meth:`left`).

    A unit is one parent followed to a commit already read, or the reading of an object
    (a commit, or a tree on the way down a cited path) of up to :data:`UNIT_BYTES`, a unit
    more for each :data:`UNIT_BYTES` beyond. Each is paid for before it is done (the size
    comes from the object's header) and the clock is read at every payment, so a merge of
    many parents costs a unit per parent at least, and between two looks at the clock lies
    at most one object read.
    """

    units: int = 20_000
    deadline: float = field(default_factory=lambda: time.monotonic() + 0.25)

    def take(self, units: int = 1) -> bool:
        """Pay for ``units`` of work about to be done; False when the budget cannot, and
        then it is spent (so the request walks no more)."""
        if units > self.units or time.monotonic() >= self.deadline:
            self.units = 0
            return False
        self.units -= units
        return True

    def spent(self) -> bool:
        return self.units <= 0 or time.monotonic() >= self.deadline

    def left(self) -> tuple[int, float]:
        """What is left as it travels to a git reader: units, and seconds rather than a
        deadline (the wait for a reader and the repository's opening are not walking, and
        are bounded by the reader's own deadline)."""
        return self.units, max(0.0, self.deadline - time.monotonic())

    @classmethod
    def resumed(cls, left: tuple[int, float]) -> WalkBudget:
        """A budget of what :meth:`left` said, its time counted from now."""
        return cls(left[0], time.monotonic() + left[1])

    def settle(self, left: tuple[int, float]) -> None:
        """Take back what a git reader left of this budget."""
        self.units, self.deadline = left[0], time.monotonic() + left[1]


@dataclass(frozen=True, slots=True)
class Count:
    """Commits since a base: how many, and how many touched the given paths. ``cut``: why
    the walk stopped before the base, so both are lower bounds (None: they are exact)."""

    commits: int
    touching: int
    cut: str | None


K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
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
_tops: LRU[str, tuple[float, str | None]] = LRU(TOP_CACHE)
# top level -> (reflog stamp, when read, git dir, HEAD or None)
_heads: LRU[str, tuple[tuple[int, int] | None, float, str, str | None]] = LRU(HEAD_CACHE)
# (repo, base, head, digest of the paths) -> Count, or None when the base is unknown
_counts: LRU[tuple[str, str, str, bytes], tuple[Count | None]] = LRU(COUNT_CACHE)
# (top level, HEAD) -> the root commit of HEAD's first-parent chain, or None
_roots: LRU[tuple[str, str], tuple[str | None]] = LRU(ROOT_CACHE)


def common_dir(gitdir: str) -> str:
    """git's common dir of ``gitdir``: itself, or in a linked worktree the directory its
    ``commondir`` file names (relative to it, as git writes it)."""
    pointer = read_regular(os.path.join(gitdir, "commondir"), MAX_POINTER_BYTES)
    try:
        target = pointer.decode().strip() if pointer is not None else ""
    except UnicodeDecodeError:
        target = ""
    return os.path.normpath(os.path.join(gitdir, target)) if target else gitdir


def _regular_or_absent(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _alternates_refused(common: str) -> str | None:
    """Why the alternate object stores ``common`` names are refused; None when each is a
    real directory (not a FIFO, a device or a symlink), at most :data:`MAX_ALTERNATES`."""
    data = read_regular(os.path.join(common, ALTERNATES), MAX_POINTER_BYTES)
    if data is None:
        return "its alternates file is not a small regular file"
    lines = [line for line in data.splitlines() if line.strip() and not line.startswith(b"#")]
    if len(lines) > MAX_ALTERNATES:
        return "it names too many alternate object stores"
    objects = os.path.join(common, "objects")
    for line in lines:
        if not _real_dir(os.path.join(objects, os.fsdecode(line.strip()))):
            return "an alternate object store it names is not a directory"
    return None


def refusal(gitdir: str) -> str | None:
    """Why the repository whose git dir is ``gitdir`` must not be opened; None when it may.

    Refused: a file libgit2 reads at open that is not a regular file (a FIFO would block
    it for ever, a symlink could lead to one), a config git would not read, one that
    includes another file, declares a partial clone or a promisor remote, or is larger than
    :data:`MAX_CONFIG_BYTES`.
    """
    common = common_dir(gitdir)
    for d in dict.fromkeys((gitdir, common)):
        for name in _FILES:
            if not _regular_or_absent(os.path.join(d, name)):
                return f"its {name} is not a regular file"
    for name in _DIRS:
        if not _real_dir(os.path.join(common, name)):
            return f"its {name} is not a directory"
    if os.path.lexists(os.path.join(common, ALTERNATES)):
        why = _alternates_refused(common)
        if why is not None:
            return why
    for config in dict.fromkeys(os.path.join(d, n) for d in (gitdir, common) for n in _CONFIGS):
        if not os.path.lexists(config):
            continue
        data = read_regular(config, MAX_CONFIG_BYTES)
        if data is None:
            return f"its config {config} is not a regular file of at most {MAX_CONFIG_BYTES} bytes"
        try:
            why = git_config.unsafe(git_config.parse(data))
        except git_config.ConfigSyntax as exc:
            return f"its config {config} is not one git reads ({exc})"
        if why is not None:
            return why
    return None


def _open(path: str) -> pygit2.Repository | None:
    """The non-bare repository at ``path`` (a top level or a git dir), or None (and why, in
    the log) when it is not one or is refused. Runs in a git reader process."""
    try:
        gitdir = pygit2.discover_repository(path, False, path)
    except (pygit2.GitError, ValueError, OSError):
        gitdir = None
    if gitdir is None:
        return None  # not a repository
    why = refusal(gitdir.rstrip("/"))
    if why is not None:
        log.warning("refusing the repository at %s: %s", path, why)
        return None
    try:
        repo = pygit2.Repository(path, RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
        log.debug("no repository at %s: %s", path, exc)
        return None
    if repo.is_bare or repo.workdir is None:
        return None
    return repo


def top_level(workspace: str) -> str | None:
    """The top level of the git work tree holding ``workspace``; None outside a repository
    (or in one that is refused). Cached for TOP_TTL seconds.

    Raises:
        RecallError: ``unavailable``, as :func:`.git_process.call`.
    """
    known, top = cached_top_level(workspace)
    if known:
        return top
    top = None
    if workspace and os.path.isdir(workspace):
        top = git_process.call(workspace, _read_top_level, workspace)
    _tops.put(workspace, (time.monotonic(), top))
    return top


def _read_top_level(workspace: str) -> str | None:
    try:
        gitdir = pygit2.discover_repository(workspace)
    except (pygit2.GitError, ValueError, OSError):
        gitdir = None
    repo = _open(gitdir) if gitdir else None
    if repo is None or repo.workdir is None:
        return None
    return repo.workdir.rstrip("/") or "/"


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

    Raises:
        RecallError: ``unavailable``, as :func:`.git_process.call`.
    """
    known, value = cached_head(top)
    if known:
        return value
    read = git_process.call(top, _read_head, top)
    if read is None:
        return None
    gitdir, stamp, value = read
    _heads.put(top, (stamp, time.monotonic(), gitdir, value))
    return value


def _read_head(top: str) -> tuple[str, tuple[int, int] | None, str | None] | None:
    """(git dir, its reflog's stamp before HEAD was read, HEAD); None when refused."""
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
    return gitdir, stamp, value


def git_dir(top: str) -> str | None:
    """The git dir of the work tree at ``top`` (a linked worktree's own), as libgit2 opens
    it; None when refused.

    Raises:
        RecallError: ``unavailable``, as :func:`.git_process.call`.
    """
    return git_process.call(top, _read_git_dir, top)


def _read_git_dir(top: str) -> str | None:
    repo = _open(top)
    return repo.path.rstrip("/") if repo is not None else None


def root_commit(top: str) -> str | None:
    """The root of HEAD's first-parent chain at ``top``; None without commits, when an
    object is missing (a shallow clone), or past :data:`MAX_ROOT_WALK` commits. Cached per
    top level and HEAD: an unchanged HEAD keeps its root.

    Raises:
        RecallError: ``unavailable``, as :func:`.git_process.call`.
    """
    start = head(top)
    if start is None:
        return None
    key = (top, start)
    cached = _roots.get(key)
    if cached is not None:
        return cached[0]
    root = git_process.call(top, _read_root, top, start)
    _roots.put(key, (root,))
    return root


def _read_root(top: str, start: str) -> str | None:
    repo = _open(top)
    if repo is None:
        return None
    root: str | None = None
    try:
        oid = pygit2.Oid(hex=start)
        for _ in range(MAX_ROOT_WALK):
            commit = repo.get(oid)
            if not isinstance(commit, pygit2.Commit):
                break
            parents = commit.parent_ids
            if not parents:
                root = str(oid)
                break
            oid = parents[0]
    except (pygit2.GitError, KeyError, ValueError) as exc:
        log.debug("no root commit in %s: %s", top, exc)
    return root


class _Spent(Exception):
    """The request's budget cannot pay for the next unit of work."""


class _Walk:
    """The reading one count does, each piece paid for in the budget before it is done.

    Commits are visited newest first by commit time, as ``git rev-list`` does: a heap of
    the commits seen and not yet visited, each marked wanted (reachable from the head) or
    hidden (reachable from the base too). Everything it keeps is bounded by the units paid.
    """

    def __init__(self, repo: pygit2.Repository, paths: tuple[str, ...], budget: WalkBudget):
        self.repo = repo
        self.paths = paths
        self._steps = [tuple(path.split("/")) for path in paths]
        self.budget = budget
        self._heap: list[tuple[int, int, pygit2.Oid]] = []
        self._order = itertools.count()
        self._commits: dict[pygit2.Oid, pygit2.Commit] = {}
        self._hidden: set[pygit2.Oid] = set()
        self._queued: set[pygit2.Oid] = set()
        # Queued commits that are not hidden: once none is left, nothing more is wanted.
        self.wanted = 0
        # What each path names in a commit's tree (see _entries), and trees read on the way.
        self._entries_of: dict[pygit2.Oid, tuple[pygit2.Oid | None, ...]] = {}
        self._trees: dict[pygit2.Oid, pygit2.Tree | None] = {}
        # Units this walk has paid for (the debug log reports them).
        self.paid = 0

    def _pay(self, units: int = 1) -> None:
        if not self.budget.take(units):
            raise _Spent
        self.paid += units

    def _read(self, oid: pygit2.Oid) -> pygit2.Object | None:
        """The object ``oid``, paid for by its size before it is parsed; None if absent."""
        try:
            _, size = self.repo.odb.read_header(oid)
        except KeyError:  # pygit2's NotFoundError
            return None
        self._pay(1 + size // UNIT_BYTES)
        return self.repo.get(oid)

    def follow(self, oid: pygit2.Oid, *, hidden: bool) -> pygit2.Commit | None:
        """Reach the commit ``oid`` (read it, or a unit to find it read already): queue it
        when new, hide it (and so, when it is visited, its history) when ``hidden``. None
        when the object is absent (a shallow clone's boundary) or not a commit."""
        commit = self._commits.get(oid)
        if commit is None:
            found = self._read(oid)
            if not isinstance(found, pygit2.Commit):
                return None
            commit = self._commits[oid] = found
            if hidden:
                self._hidden.add(oid)
            self._push(commit)
            return commit
        self._pay()
        if hidden and oid not in self._hidden:
            self._hidden.add(oid)
            if oid in self._queued:
                self.wanted -= 1
            else:  # visited as wanted already (clock skew): its history is hidden still
                self._push(commit)
        return commit

    def _push(self, commit: pygit2.Commit) -> None:
        heapq.heappush(self._heap, (-commit.commit_time, next(self._order), commit.id))
        self._queued.add(commit.id)
        if commit.id not in self._hidden:
            self.wanted += 1

    def queued(self) -> bool:
        return bool(self._heap)

    def newest(self) -> int:
        """The commit time of the newest queued commit."""
        return -self._heap[0][0]

    def hidden(self, oid: pygit2.Oid) -> bool:
        return oid in self._hidden

    def pop(self) -> tuple[pygit2.Commit, bool]:
        """The newest queued commit, and whether it is hidden."""
        _, _, oid = heapq.heappop(self._heap)
        self._queued.discard(oid)
        hidden = oid in self._hidden
        if not hidden:
            self.wanted -= 1
        return self._commits[oid], hidden

    def _entries(self, commit: pygit2.Commit) -> tuple[pygit2.Oid | None, ...]:
        """What each path names in ``commit``'s tree (None: nothing), worked out once."""
        entries = self._entries_of.get(commit.id)
        if entries is None:
            root = commit.tree_id
            entries = tuple(self._lookup(root, steps) for steps in self._steps)
            self._entries_of[commit.id] = entries
        return entries

    def _lookup(self, oid: pygit2.Oid | None, steps: tuple[str, ...]) -> pygit2.Oid | None:
        """Down the tree ``oid`` by ``steps``, each tree on the way read (and paid) once."""
        for name in steps:
            if oid is None:
                return None
            if oid in self._trees:
                tree = self._trees[oid]
            else:
                found = self._read(oid)
                tree = self._trees[oid] = found if isinstance(found, pygit2.Tree) else None
            if tree is None:
                return None
            try:
                oid = tree[name].id
            except (KeyError, ValueError):
                return None
        return oid

    def touches(self, commit: pygit2.Commit, parents: Sequence[pygit2.Commit]) -> bool:
        """Whether ``commit`` changed one of the paths: unlike every parent (git's TREESAME
        rule, so a merge that only brings in a side's change does not count twice)."""
        mine = self._entries(commit)
        if not parents:
            return any(oid is not None for oid in mine)
        return all(self._entries(parent) != mine for parent in parents)


def _walk(walk: _Walk, head: pygit2.Oid, base: pygit2.Oid | None, since_ts: float | None) -> Count:
    """Count from ``head`` back to ``base`` (or, without one, to ``since_ts``).

    As ``git rev-list`` does, a commit taken may turn out later to be reachable from the
    base (commit times tie, or lie): the count is made once the walk is over, of the taken
    commits still not hidden; and the walk goes on past the last wanted commit while a
    hidden one may still reach a commit taken.

    Raises:
        _Spent: the budget ran out first.
    """
    if walk.follow(head, hidden=False) is None:
        raise KeyError(f"HEAD {head} is not a commit here")
    if base is not None:
        walk.follow(base, hidden=True)
    # Commits taken, with their parents (None: not followed, so whether it touched a path
    # is not known).
    taken: list[tuple[pygit2.Commit, list[pygit2.Commit] | None]] = []
    oldest = math.inf
    older = slop = 0
    cut = None
    while walk.queued():
        if not walk.wanted and walk.newest() < oldest:
            slop += 1  # hidden ones only, older than all taken: a few more, as git does
            if slop > TIME_SLOP:
                break
        commit, hidden = walk.pop()
        parent_ids = commit.parent_ids
        if len(parent_ids) > MAX_PARENTS:
            if not hidden:
                taken.append((commit, None))
            cut = (
                f"not measured past commit {commit.id}, a merge of {len(parent_ids)} parents "
                f"(a walk follows at most {MAX_PARENTS}); there may be more"
            )
            break
        if hidden:
            for oid in parent_ids:
                walk.follow(oid, hidden=True)
            continue
        if since_ts is not None and commit.commit_time <= since_ts:
            # Older than the base time: not counted, and its history not followed.
            older += 1
            if older >= TIME_SLOP:
                break
            continue
        older = 0
        if len(taken) == MAX_WALK:
            cut = f"counted up to {MAX_WALK} commits; there may be more"
            break
        parents = [p for oid in parent_ids if (p := walk.follow(oid, hidden=False)) is not None]
        taken.append((commit, parents))
        oldest = min(oldest, commit.commit_time)
    counted = [(commit, parents) for commit, parents in taken if not walk.hidden(commit.id)]
    touching = 0
    if walk.paths:
        touching = sum(
            1
            for commit, parents in counted
            if parents is not None and walk.touches(commit, parents)
        )
    return Count(commits=len(counted), touching=touching, cut=cut)


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

    Raises:
        RecallError: ``unavailable``, as :func:`.git_process.call`.
    """
    rel = tuple(paths)
    key = (top, since_commit or f"@{since_ts}", head_hex, _digest(rel))
    cached = _counts.get(key)
    if cached is not None:
        return cached[0]
    if budget.spent():
        return None
    result, keep, left = git_process.call(
        top, _read_count, top, head_hex, since_commit, since_ts, rel, budget.left()
    )
    budget.settle(left)
    if keep:
        _counts.put(key, (result,))
    return result


def _read_count(
    top: str,
    head_hex: str,
    since_commit: str | None,
    since_ts: float | None,
    rel: tuple[str, ...],
    left: tuple[int, float],
) -> tuple[Count | None, bool, tuple[int, float]]:
    """:func:`count_commits`'s walk: (the count, whether to cache it, the budget left)."""
    repo = _open(top)
    if repo is None:
        return None, False, left
    budget = WalkBudget.resumed(left)
    base = None
    if since_commit is not None:
        base = _commit_id(repo, since_commit, full=len(head_hex))
        if base is None:
            return None, True, budget.left()
    walk = _Walk(repo, rel, budget)
    try:
        result = _walk(walk, pygit2.Oid(hex=head_hex), base, since_ts)
    except _Spent:
        # Not cached: another request may have the budget to finish.
        log.debug("history walk in %s: %d units of work, then the budget was spent", top, walk.paid)
        return None, False, budget.left()
    except (pygit2.GitError, KeyError, ValueError) as exc:
        log.debug("walking %s failed after %d units of work: %s", top, walk.paid, exc)
        return None, False, budget.left()
    log.debug(
        "history walk in %s: %d units of work, %d commits%s",
        top,
        walk.paid,
        result.commits,
        f"; {result.cut}" if result.cut else "",
    )
    return result, True, budget.left()


def _commit_id(repo: pygit2.Repository, hex_id: str, *, full: int) -> pygit2.Oid | None:
    """The commit ``hex_id`` names (an id of ``full`` digits, or a prefix of one), or None.
    A full id is checked by its object's header, so that no object is parsed before the
    walk pays for it; a prefix is looked up (one object, where a client gave one)."""
    try:
        if len(hex_id) == full:
            kind, _ = repo.odb.read_header(hex_id)
            return pygit2.Oid(hex=hex_id) if kind == ObjectType.COMMIT else None
        found = repo.get(hex_id)
    except (pygit2.GitError, KeyError, ValueError):
        return None
    return found.id if isinstance(found, pygit2.Commit) else None


def _digest(paths: tuple[str, ...]) -> bytes:
    """A short key for a set of paths (64 paths of 4 KiB each would make a cache key of
    256 KiB)."""
    return hashlib.blake2b("\0".join(paths).encode(), digest_size=16).digest()


# Commits since a time whose changed paths a session start reads at most, and paths kept.
CHANGED_COMMITS = 50
CHANGED_PATHS = 200


@dataclass(frozen=True, slots=True)
class Changes:
    """A work tree's branch (None when HEAD is detached or unborn) and the paths that
    commits on it changed since a time, newest commit first, each once."""

    branch: str | None
    paths: tuple[str, ...]


def changes_since(top: str, since_ts: float | None, budget: WalkBudget | None = None) -> Changes:
    """The branch of the repository at ``top`` and the paths changed by its first-parent
    commits after ``since_ts`` (None: no paths; git's times are whole seconds, so a commit in
    the second of ``since_ts`` but after it is missed rather than an earlier one taken): at most
    :data:`CHANGED_COMMITS` commits and :data:`CHANGED_PATHS` paths, under ``budget``.

    Raises:
        RecallError: ``unavailable``, as :func:`.git_process.call`.
    """
    budget = budget or WalkBudget()
    changes, left = git_process.call(top, _read_changes, top, since_ts, budget.left())
    budget.settle(left)
    return changes


def _read_changes(
    top: str, since_ts: float | None, left: tuple[int, float]
) -> tuple[Changes, tuple[int, float]]:
    """:func:`changes_since`'s reading: (the changes, the budget left)."""
    repo = _open(top)
    if repo is None:
        return Changes(None, ()), left
    budget = WalkBudget.resumed(left)
    return _changes(repo, since_ts, budget), budget.left()


def _changes(repo: pygit2.Repository, since_ts: float | None, budget: WalkBudget) -> Changes:
    try:
        if repo.head_is_unborn:
            return Changes(None, ())
        branch = None if repo.head_is_detached else repo.head.shorthand
        commit = repo.get(repo.head.target)
    except (pygit2.GitError, KeyError, ValueError):
        return Changes(None, ())
    paths: dict[str, None] = {}
    if since_ts is not None:
        for _ in range(CHANGED_COMMITS):
            if not isinstance(commit, pygit2.Commit) or commit.commit_time <= since_ts:
                break
            if not budget.take(1 + len(paths) // 64):
                break
            parents = commit.parent_ids
            try:
                parent = repo.get(parents[0]) if parents else None
                diff = (
                    repo.diff(parent.tree, commit.tree)
                    if isinstance(parent, pygit2.Commit)
                    else commit.tree.diff_to_tree(swap=True)
                )
            except (pygit2.GitError, KeyError, ValueError):
                break
            for delta in diff.deltas:
                for path in (delta.new_file.path, delta.old_file.path):
                    paths.setdefault(path, None)
            if len(paths) >= CHANGED_PATHS:
                break
            commit = parent
    return Changes(branch, tuple(list(paths)[:CHANGED_PATHS]))
