"""Drift of a memory against the world: cited paths gone, commits landed since it was verified.

The daemon runs git itself, in the memory's origin repository (the workspace's git top
level, recorded at store time): the daemon is the same user as its clients, and computing
drift where the memories are ranked keeps every client simple. Every git call is bounded by a
timeout and its answer cached: a workspace's top level for half a minute, a HEAD until the
repository's HEAD reflog changes, a commit count for as long as the HEAD it was counted
against stays the same.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from recall_client import protocol as p

__all__ = [
    "CitedPath",
    "GitOrigin",
    "cached_origin",
    "check_paths",
    "commit_drift",
    "git_head",
    "git_origin",
    "scrape_paths",
    "staleness_verdict",
]

log = logging.getLogger(__name__)

GIT_TIMEOUT = 3.0
HEAD_TTL = 2.0
TOP_TTL = 30.0
# Calendar ageing of a verification.
RECOMMEND_AFTER_DAYS = 30
REQUIRE_AFTER_DAYS = 180
# So many commits on the origin since the last verification: the project moved on.
COMMIT_DRIFT_RECOMMEND = 25

# Paths in prose: ./x, ../x, ~/x, /abs/x, or rel/dir/file.ext. Slash-joined words without an
# extension ("and/or", "TCP/IP") are not paths; URLs are skipped.
_PATH = re.compile(
    r"(?<![\w:/.-])((?:~|\.{1,2})?/[\w.@+-]+(?:/[\w.@+-]+)*|[\w@+-][\w.@+-]*(?:/[\w.@+-]+)+)"
)
_EXT = re.compile(r"\.[A-Za-z0-9]{1,8}$")


def scrape_paths(text: str) -> list[str]:
    """File paths a memory's text mentions, in order, deduped."""
    found: list[str] = []
    for match in _PATH.finditer(text):
        path = match.group(1).rstrip(".,;:)")
        end = match.end(1)
        if text[end:end + 3] == "://":
            continue
        if path.startswith(("./", "../", "~/")):
            pass
        elif path.startswith("/"):
            if path.count("/") < 2:
                continue  # "/api", "/s": too short to be a claim about a file
        elif not _EXT.search(path.rsplit("/", 1)[-1]):
            continue
        found.append(path)
    return list(dict.fromkeys(found))


@dataclass(frozen=True, slots=True)
class GitOrigin:
    repo: str
    commit: str | None


def _git(repo: str, *args: str) -> str | None:
    """Run one read-only git command in ``repo``; None when it fails or times out."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        out = subprocess.run(
            ["git", "-C", repo, "-c", "core.fsmonitor=false", *args],
            capture_output=True, text=True, timeout=GIT_TIMEOUT, env=env, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("git %s in %s failed: %s", args, repo, exc)
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip()


def git_origin(workspace: str) -> GitOrigin | None:
    """The git top level and HEAD of ``workspace``; None when it is not in a repository."""
    now = time.monotonic()
    with _cache_lock:
        cached = _tops.get(workspace)
    if cached is not None and now - cached[0] < TOP_TTL:
        top = cached[1]
    else:
        top = None
        if workspace and os.path.isdir(workspace):
            top = _git(workspace, "rev-parse", "--show-toplevel") or None
        with _cache_lock:
            _tops[workspace] = (now, top)
    return GitOrigin(repo=top, commit=git_head(top)) if top else None


def cached_origin(workspace: str) -> tuple[bool, GitOrigin | None]:
    """``(True, origin)`` when :func:`git_origin` would answer without running git, else
    ``(False, None)``: a store takes the cached answer on the event loop and hops to a thread
    only when git must run (a capture burst would otherwise pay a thread hop per record)."""
    now = time.monotonic()
    with _cache_lock:
        cached = _tops.get(workspace)
        if cached is None or now - cached[0] >= TOP_TTL:
            return False, None
        top = cached[1]
        if top is None:
            return True, None
        head = _heads.get(top)
    stamp = _reflog_stamp(top)
    if head is None or stamp is None or head[0] != stamp:
        return False, None
    return True, GitOrigin(repo=top, commit=head[2])


# workspace -> (when looked up, git top level or None). A folder rarely joins or leaves a
# repository, so the answer is kept for TOP_TTL seconds instead of one git run per store.
_tops: dict[str, tuple[float, str | None]] = {}
_heads: dict[str, tuple[tuple[int, int] | None, float, str | None]] = {}
_counts: OrderedDict[tuple[str, str, str, tuple[str, ...]], int | None] = OrderedDict()
_cache_lock = threading.Lock()


def _reflog_stamp(repo: str) -> tuple[int, int] | None:
    """Size and mtime of the HEAD reflog: every commit, checkout or reset appends to it."""
    try:
        st = os.stat(os.path.join(repo, ".git", "logs", "HEAD"))
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def git_head(repo: str) -> str | None:
    """HEAD of ``repo`` (None for a repository without commits).

    Cached until the HEAD reflog changes; where there is none to watch (a linked worktree,
    reflogs off), for a couple of seconds.
    """
    now = time.monotonic()
    stamp = _reflog_stamp(repo)
    with _cache_lock:
        cached = _heads.get(repo)
    if cached is not None and (
        (stamp is not None and cached[0] == stamp) or (stamp is None and now - cached[1] < HEAD_TTL)
    ):
        return cached[2]
    head = _git(repo, "rev-parse", "--verify", "-q", "HEAD") or None
    with _cache_lock:
        _heads[repo] = (stamp, now, head)
    return head


def _count(repo: str, since: str, head: str, paths: tuple[str, ...]) -> int | None:
    key = (repo, since, head, paths)
    with _cache_lock:
        if key in _counts:
            _counts.move_to_end(key)
            return _counts[key]
    if since.startswith("@"):
        args = ["rev-list", "--count", f"--since={since}", head]
    else:
        args = ["rev-list", "--count", f"{since}..{head}"]
    if paths:
        args += ["--", *paths]
    out = _git(repo, *args)
    value = int(out) if out and out.isdigit() else None
    with _cache_lock:
        _counts[key] = value
        while len(_counts) > 4096:
            _counts.popitem(last=False)
    return value


def commit_drift(
    repo: str | None, verified_commit: str | None, last_verified_at: float,
    anchored_paths: Sequence[str] = (),
) -> p.CommitDrift | None:
    """Commits on ``repo`` since the memory was last verified; None when not applicable.

    Counts from the commit that was HEAD at the last verification; when that commit is
    unknown or no longer reachable (history rewritten), from the verification's time.
    """
    if repo is None or not os.path.isdir(repo):
        return None
    head = git_head(repo)
    if head is None:
        return p.CommitDrift(repo=repo, reason="no commits, or not a git repository any more")
    rel = tuple(sorted(_relative(repo, path) for path in anchored_paths))
    since = verified_commit or ""
    count = _count(repo, since, head, ()) if since else None
    if count is None:
        since = f"@{int(last_verified_at)}"
        count = _count(repo, since, head, ())
    if count is None:
        return p.CommitDrift(repo=repo, head=head, reason="git could not count commits")
    touching = _count(repo, since, head, rel) if rel and count else 0
    return p.CommitDrift(
        repo=repo, head=head, since_commit=verified_commit, count=count,
        touching_cited_paths=touching or 0,
    )


def _relative(repo: str, path: str) -> str:
    resolved = os.path.normpath(os.path.join(repo, os.path.expanduser(path)))
    return os.path.relpath(resolved, repo)


@dataclass(frozen=True, slots=True)
class CitedPath:
    path: str
    anchored: bool


def check_paths(
    cited: Iterable[CitedPath], base: str | None
) -> tuple[p.PathDrift, list[str], list[p.CitedPath]]:
    """Check cited paths on this machine: (drift, claim-anchored missing, per-path detail).

    Relative paths resolve against ``base`` (the origin repository or workspace); without a
    base they cannot be checked and are left out.
    """
    checked: list[str] = []
    missing: list[str] = []
    verified: list[str] = []
    anchored_missing: list[str] = []
    detail: list[p.CitedPath] = []
    for item in cited:
        path = os.path.expanduser(item.path)
        if not os.path.isabs(path):
            if base is None:
                continue
            path = os.path.join(base, path)
        exists = os.path.exists(path)
        checked.append(item.path)
        detail.append(p.CitedPath(path=item.path, anchored=item.anchored, exists=exists))
        if not exists:
            missing.append(item.path)
            if item.anchored:
                anchored_missing.append(item.path)
        elif item.anchored:
            verified.append(item.path)
    return p.PathDrift(checked=checked, missing=missing, verified=verified), anchored_missing, detail


def staleness_verdict(
    now: float,
    last_verified_at: float,
    *,
    claim_anchored_missing: int,
    commit: p.CommitDrift | None,
    unresolved_contradiction: bool,
) -> p.StalenessVerdict:
    """Roll the drift signals up into one verdict.

    required: the memory was contradicted and not fixed since, or its verification is
    calendar-stale. recommended: a path its claims rest on is gone, a commit touched one, the
    project moved on by many commits, or the verification is ageing. Paths merely mentioned
    in the prose that are missing are evidence only (another machine's config, an example):
    they never move the verdict.
    """
    age_days = (now - last_verified_at) / 86400
    if unresolved_contradiction or age_days > REQUIRE_AFTER_DAYS:
        return "spot_check_required"
    if claim_anchored_missing or age_days > RECOMMEND_AFTER_DAYS:
        return "spot_check_recommended"
    if commit is not None and (
        commit.touching_cited_paths > 0 or commit.count >= COMMIT_DRIFT_RECOMMEND
    ):
        return "spot_check_recommended"
    return "fresh"
