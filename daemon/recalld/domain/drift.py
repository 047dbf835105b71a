"""Drift of a memory against the world: cited paths gone, commits landed since it was verified.

The daemon reads the memory's origin repository itself (the workspace's git top level,
recorded at store time), in-process and read-only through :mod:`.git_history`, which never
runs git and so never runs anything a repository's config names. Computing drift where the
memories are ranked keeps every client simple; every history walk is bounded and cached.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from recall_client import protocol as p

from ..errors import RecallError
from . import git_history

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

# Calendar ageing of a verification.
RECOMMEND_AFTER_DAYS = 30
REQUIRE_AFTER_DAYS = 180
# So many commits on the origin since the last verification: the project moved on.
COMMIT_DRIFT_RECOMMEND = 25

# Paths in prose: ./x, ../x, ~/x, /abs/x, or rel/dir/file.ext. Slash-joined words without an
# extension ("and/or", "TCP/IP") are not paths; URLs are skipped. A match starts only where
# no path character precedes (so a run of them is scanned once, not once per position) and
# its runs are possessive: linear in the text, however hostile.
_PATH = re.compile(
    r"(?<![\w:/.@+~-])((?:~|\.{1,2})?/[\w.@+-]++(?:/[\w.@+-]++)*+"
    r"|[\w@+-][\w.@+-]*+(?:/[\w.@+-]++)++)"
)
_EXT = re.compile(r"\.[A-Za-z0-9]{1,8}$")


def scrape_paths(text: str) -> list[str]:
    """File paths a memory's text mentions, in order, deduped."""
    if "/" not in text:
        return []  # every path the pattern finds has one (a store's hot path: most have none)
    found: list[str] = []
    for match in _PATH.finditer(text):
        path = match.group(1).rstrip(".,;:)")
        end = match.end(1)
        if text[end : end + 3] == "://":
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


def git_origin(workspace: str) -> GitOrigin | None:
    """The git top level and HEAD of ``workspace``; None when it is not in a repository
    (or in one git_history refuses)."""
    top = git_history.top_level(workspace)
    return GitOrigin(repo=top, commit=git_history.head(top)) if top else None


def cached_origin(workspace: str) -> tuple[bool, GitOrigin | None]:
    """``(True, origin)`` when :func:`git_origin` would answer from its caches, else
    ``(False, None)``: a store takes the cached answer on the event loop and hops to a thread
    only when a repository must be read (a capture burst would otherwise pay a thread hop
    per record)."""
    known, top = git_history.cached_top_level(workspace)
    if not known:
        return False, None
    if top is None:
        return True, None
    known, head = git_history.cached_head(top)
    return (True, GitOrigin(repo=top, commit=head)) if known else (False, None)


def git_head(repo: str) -> str | None:
    """HEAD of ``repo`` now (None without commits or when the repository is refused)."""
    return git_history.head(repo)


def commit_drift(
    repo: str | None,
    verified_commit: str | None,
    last_verified_at: float,
    anchored_paths: Sequence[str] = (),
    budget: git_history.WalkBudget | None = None,
) -> p.CommitDrift | None:
    """Commits on ``repo`` since the memory was last verified; None when not applicable.

    Counts from the commit that was HEAD at the last verification; when that commit is
    unknown here (history rewritten, another clone), from the verification's time. A count
    that the request's ``budget`` of history walking cannot pay for is not made: the drift
    then says so and has no head (so no count is reported). A count the walk cut short (too
    many commits, a merge of too many parents) is a lower bound, and its reason says why.
    """
    if repo is None or not os.path.isdir(repo):
        return None
    try:
        head = git_head(repo)
        if head is None:
            return p.CommitDrift(repo=repo, reason="no commits, or not a readable git repository")
        budget = budget or git_history.WalkBudget()
        count = _count(repo, head, verified_commit, last_verified_at, anchored_paths, budget)
    except RecallError:  # unavailable: this repository is set aside, not the whole read
        return p.CommitDrift(repo=repo, reason="not counted: the repository could not be read")
    if count is None:
        why = (
            "not counted: this request's budget for walking history is spent"
            if budget.spent()
            else "the history could not be read"
        )
        return p.CommitDrift(repo=repo, reason=why)
    return p.CommitDrift(
        repo=repo,
        head=head,
        since_commit=verified_commit,
        count=count.commits,
        touching_cited_paths=count.touching,
        reason=count.cut,
    )


def _count(
    repo: str,
    head: str,
    verified_commit: str | None,
    last_verified_at: float,
    anchored_paths: Sequence[str],
    budget: git_history.WalkBudget,
) -> git_history.Count | None:
    rel = tuple(sorted({r for path in anchored_paths if (r := _relative(repo, path))}))
    count = None
    if verified_commit:
        count = git_history.count_commits(
            repo, head, since_commit=verified_commit, since_ts=None, paths=rel, budget=budget
        )
    if count is None and not budget.spent():
        count = git_history.count_commits(
            repo, head, since_commit=None, since_ts=last_verified_at, paths=rel, budget=budget
        )
    return count


def _relative(repo: str, path: str) -> str | None:
    """``path`` relative to the repository's top level; None when it lies outside."""
    resolved = os.path.normpath(os.path.join(repo, os.path.expanduser(path)))
    rel = os.path.relpath(resolved, repo)
    return None if rel == "." or rel.startswith("..") else rel


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
    return (
        p.PathDrift(checked=checked, missing=missing, verified=verified),
        anchored_missing,
        detail,
    )


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
        (commit.touching_cited_paths or 0) > 0 or (commit.count or 0) >= COMMIT_DRIFT_RECOMMEND
    ):
        return "spot_check_recommended"
    return "fresh"
