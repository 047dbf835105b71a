"""Real git repositories under a test's tmp dir (the git program, as a user runs it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """git's output in ``repo``, committing as "t"; raises CalledProcessError if it fails."""
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def try_git(repo: Path, *args: str) -> str:
    """git's output whatever its exit status, with the caller's GIT_* variables left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    out = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    return out.stdout.strip()


def checkout(path: Path, origin: str | None = None) -> Path:
    """A repository at ``path`` with two commits, and ``origin`` as its origin remote."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README.md").write_text("app\n")
    git(path, "add", ".")
    git(path, "commit", "-qm", "one")
    (path / "README.md").write_text("app, two\n")
    git(path, "commit", "-qam", "two")
    if origin is not None:
        git(path, "remote", "add", "origin", origin)
    return path
