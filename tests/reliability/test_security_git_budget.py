"""A hostile repository must not buy a search more history walking than its budget.

The reviewer's repository: octopus merges of thousands of parents. Each merge counted once
against the budget while every parent's tree was read, and the clock was looked at every 64
commits, so one search walked for seconds. Now every parent followed and every tree lookup
is a unit of the budget, paid before it is done, and a commit of more than MAX_PARENTS
parents ends the walk, which the drift says.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from recall_client import protocol as p
from recalld.domain.git_history import MAX_PARENTS, WalkBudget, count_commits

from tests.support.daemon import DaemonFactory
from tests.support.git import try_git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")

# Merges of exactly MAX_PARENTS parents (followed in full), then one of more (not followed).
MERGES = 20
OCTOPUS = 3 * MAX_PARENTS
ROOTS = OCTOPUS


def build_history(repo: Path, base: str) -> None:
    """On top of ``base``: ROOTS root commits, an octopus of them all, then MERGES merges
    of MAX_PARENTS parents each, every one changing the cited file (so each is compared
    with every parent). One fast-import run: thousands of ``git commit`` would be slow."""
    out: list[str] = []
    when = 1_700_000_000

    def commit(mark: int, content: str, parents: list[str]) -> None:
        out.append(
            f"commit refs/heads/build\nmark :{mark}\ncommitter t <t@t> {when + mark} +0000\n"
            f"data 1\nm\n"
        )
        if parents:
            out.append(f"from {parents[0]}\n" + "".join(f"merge {q}\n" for q in parents[1:]))
        out.append(f"M 644 inline src/app.py\ndata {len(content)}\n{content}\n")

    roots = [f":{i}" for i in range(1, ROOTS + 1)]
    for i, _ in enumerate(roots, start=1):
        out.append("reset refs/heads/build\n")
        commit(i, f"root {i}", [])
    top = ROOTS + 1
    commit(top, "octopus", [base, *roots])
    for k in range(1, MERGES + 1):
        commit(top + k, f"merge {k}", [f":{top + k - 1}", *roots[: MAX_PARENTS - 1]])
    subprocess.run(
        ["git", "-C", str(repo), "fast-import", "--quiet"],
        input="".join(out),
        text=True,
        check=True,
        timeout=120,
    )
    try_git(repo, "update-ref", "refs/heads/main", "refs/heads/build")
    try_git(repo, "update-ref", "-d", "refs/heads/build")


def walked_units(log: str, repo: Path) -> list[int]:
    """Units of work of each history walk in ``repo`` the daemon's debug log reports."""
    return [
        int(n)
        for n in re.findall(rf"history walk in {re.escape(str(repo))}: (\d+) units of work", log)
    ]


async def test_octopus_merges_pay_for_every_parent_and_end_the_walk(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    repo = tmp_path / "octopus"
    (repo / "src").mkdir(parents=True)
    try_git(repo, "init", "-q", "-b", "main")
    (repo / "src" / "app.py").write_text("print('hi')\n")
    try_git(repo, "add", ".")
    try_git(repo, "commit", "-qm", "base")
    base = try_git(repo, "rev-parse", "HEAD")
    d = daemon_factory(extra_env={"RECALLD_LOG_LEVEL": "DEBUG"})
    await d.start()
    async with d.client(workspace=str(repo)) as rc:
        stored = await rc.call(
            p.MemoryStore(text="the entry point is src/app.py", paths=["src/app.py"]),
            p.MemoryStored,
        )
        assert stored.origin_commit == base
        build_history(repo, base)
        before = len(d.log())
        found = await rc.call(
            p.MemorySearch(query="entry point", expand_top=True), p.MemorySearchResult
        )
    log = d.log()[before:]
    assert await d.stop() == 0
    hit = found.hits[0]
    assert hit.id == stored.record_id and hit.commit_drift is not None
    drift = hit.commit_drift
    # The merges of MAX_PARENTS parents were counted, and each changed the cited file.
    assert drift.head is not None and drift.count == MERGES + 1
    assert drift.touching_cited_paths == MERGES
    # The octopus ended the measure, and the drift says so.
    assert drift.reason is not None
    assert f"a merge of {OCTOPUS + 1} parents" in drift.reason, drift.reason
    assert "not measured" in drift.reason
    # What the walk did, in units: every parent of every merge it followed was paid for,
    # and all of it within one search's budget.
    units = walked_units(log, repo)
    assert units, log[-4000:]
    assert MERGES * MAX_PARENTS <= sum(units) <= WalkBudget().units


def test_the_walk_counts_as_git_does_across_merges(tmp_path: Path) -> None:
    """The walk is recalld's own (libgit2's reads every parent up front): on a history of
    branches and merges it counts what ``git rev-list`` counts, from every base."""
    repo = tmp_path / "branchy"
    repo.mkdir()
    try_git(repo, "init", "-q", "-b", "main")
    (repo / "src").mkdir()

    def change(name: str, label: str) -> None:
        (repo / "src" / name).write_text(f"{name} {label}\n")
        try_git(repo, "add", "-A")
        try_git(repo, "commit", "-qm", f"{name} {label}")

    change("app.py", "0")
    for i in range(1, 4):
        try_git(repo, "checkout", "-q", "-b", f"side{i}", "main")
        for k in range(i + 1):
            change("app.py" if k % 2 else f"side{i}.txt", f"{i}.{k}")
        try_git(repo, "checkout", "-q", "main")
        change("main.txt", str(i))
        try_git(repo, "merge", "-q", "--no-edit", f"side{i}")
    head = try_git(repo, "rev-parse", "HEAD")
    top = str(repo)
    bases = try_git(repo, "rev-list", "--all").split()
    assert len(bases) == 16
    for base in bases:
        count = count_commits(
            top,
            head,
            since_commit=base,
            since_ts=None,
            paths=["src/app.py"],
            budget=WalkBudget(units=10**6, deadline=math.inf),
        )
        assert count is not None and count.cut is None
        assert count.commits == int(try_git(repo, "rev-list", "--count", f"{base}..{head}"))
        # No merge here changes src/app.py itself, so the commits that touched it are the
        # non-merges git lists for the path.
        touched = try_git(
            repo,
            "rev-list",
            "--count",
            "--full-history",
            "--no-merges",
            f"{base}..{head}",
            "--",
            "src/app.py",
        )
        assert count.touching == int(touched), base
