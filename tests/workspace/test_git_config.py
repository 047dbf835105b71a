"""recalld reads a repository's config as git does, so an include cannot hide from it.

Each config of the corpus is read three ways: by :mod:`recalld.domain.git_config`, by the
git program (``git config --file F --list -z``, which lists an include without following
it) and by libgit2 (what opens repositories). Where recalld reads a config it reads the
same entries as git; where it refuses one, that is never a config libgit2 would take an
include from unnoticed. And the reading is linear in the config, however hostile.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pygit2
import pytest
from recalld.domain import git_config

INCLUDE = b"[include]\n\tpath = /tmp/never-there.fifo\n"

# Every way a byte before, inside or around a section header could hide an include.
HOSTILE = [
    b"\xef\xbb\xbf" + INCLUDE,
    b"\v" + INCLUDE,
    b"\r" + INCLUDE,
    b"\f" + INCLUDE,
    b" \t\v\r\n" + INCLUDE,
    b"[core]\n\tbare = false\n" + INCLUDE,
    b"[core]\r\n\tbare = false\r\n[include]\r\n\tpath = x\r\n",
    b"[InClUdE]\n\tPATH = x\n",
    b"[ include]\npath = x\n",
    b"[include] path = x\n",
    b'[includeIf "gitdir:/srv/"]\n\tpath = x\n',
    b'[IncludeIf\t"onbranch:main"]\n\tpath = x\n',
    b"[include.x]\npath = x\n",
    b'[core]\n\tx = "a\n[include]\npath = x\n',
    b"[core] ; [include]\n[include]path=x\n",
    b"# comment\n; comment\n" + INCLUDE,
    b"[extensions]\n\tpartialClone = origin\n",
    b'[remote "origin"]\n\tpromisor = yes\n',
    b"\xef\xbb\xbf\xef\xbb\xbf" + INCLUDE,
    b"[core]\n\x00" + INCLUDE,
]

BENIGN = [
    b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n",
    b'[remote "origin"]\n\turl = https://github.com/acme/include-what-you-use.git\n',
    b'[remote "origin"]\n\turl = "git@github.com:a/b.git" ; a comment\n\tfetch = x\n',
    b'[a "s\\"q"]\n k = "v # not a comment" # a comment\n',
    b"[core]\n k = a\\tb\\nc\n",
    b"[core]\n bool\n",
    b"[core]\nk=a\\\n b\n",
    b"[core] x = 1 ; c\n",
    b'[a  "x"]\nk=1\n',
    b"[core]\nk =\n",
    b"[Remote.Origin]\nURL = /srv/git/app\n",
    b'[branch "Main"]\n\tremote = origin\n',
    b"\xef\xbb\xbf[core]\r\n\tbare = false\r\n",
    # A continued value swallows the line that looks like a section, in git and libgit2.
    b"[core]\n\tx = a\\\n[include]\npath = x\n",
    b"",
]


def git_entries(path: Path) -> list[tuple[str, str | None]] | None:
    """The entries git lists from the file at ``path`` (includes not followed); None when
    git refuses the file."""
    done = subprocess.run(
        ["git", "config", "--file", str(path), "--list", "-z"],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        return None
    out: list[tuple[str, str | None]] = []
    for item in done.stdout.split(b"\0")[:-1]:
        name, newline, value = item.partition(b"\n")
        out.append((name.decode(), value.decode() if newline else None))
    return out


def ours(data: bytes) -> list[tuple[str, str | None]] | None:
    try:
        entries = git_config.parse(data)
    except git_config.ConfigSyntax:
        return None
    return [
        (".".join(x for x in (e.section, e.subsection, e.key) if x is not None), e.value)
        for e in entries
    ]


def libgit2_names(path: Path) -> list[str] | None:
    try:
        return [entry.name.lower() for entry in pygit2.Config(str(path))]
    except pygit2.GitError:
        return None


@pytest.mark.parametrize("data", HOSTILE + BENIGN)
def test_recalld_reads_what_git_reads(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "config"
    path.write_bytes(data)
    mine = ours(data)
    if mine is not None:
        assert mine == git_entries(path)


@pytest.mark.parametrize("data", HOSTILE)
def test_an_include_or_a_lazy_fetch_is_refused_however_it_is_written(
    tmp_path: Path, data: bytes
) -> None:
    try:
        why = git_config.unsafe(git_config.parse(data))
    except git_config.ConfigSyntax:
        why = "not a config git reads"
    assert why is not None


@pytest.mark.parametrize("data", BENIGN)
def test_a_plain_config_is_read(tmp_path: Path, data: bytes) -> None:
    assert git_config.unsafe(git_config.parse(data)) is None
    path = tmp_path / "config"
    path.write_bytes(data)
    names = libgit2_names(path)
    assert names is not None
    assert not [n for n in names if n.startswith("include")]


def test_the_origin_url_is_git_s(tmp_path: Path) -> None:
    data = (
        b'\xef\xbb\xbf[remote "origin"]\r\n\turl = git@github.com:a/first.git\r\n'
        b'[remote "Origin"]\n\turl = git@github.com:a/not-origin.git\n'
        b'[remote.origin]\n\turl = "git@github.com:a/last.git" # the last one wins\n'
    )
    urls = [
        e.value
        for e in git_config.parse(data)
        if (e.section, e.subsection, e.key) == ("remote", "origin", "url")
    ]
    assert urls[-1] == "git@github.com:a/last.git"
    path = tmp_path / "config"
    path.write_bytes(data)
    assert (
        subprocess.run(
            ["git", "config", "--file", str(path), "remote.origin.url"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        == "git@github.com:a/last.git"
    )


@pytest.mark.parametrize(
    "unit",
    [b"\\\n", b'[a "', b"[core]\nk = " + b'"' * 1, b"\v", b"[a]\nk=v\n", b";#"],
)
def test_reading_is_linear_in_the_config(unit: bytes) -> None:
    """A hostile config four times longer takes about four times as long to read (a
    quadratic reading would take sixteen)."""

    def took(n: int) -> float:
        # This thread's CPU time: a busy machine that deschedules the reading (CI measured
        # 0.11 s -> 0.97 s by the wall clock) does not stretch it.
        data = b"[core]\nk = " + unit * n
        start = time.thread_time()
        try:
            git_config.parse(data)
        except git_config.ConfigSyntax:
            pass
        return time.thread_time() - start

    took(1000)
    small, large = min(took(20_000) for _ in range(3)), min(took(80_000) for _ in range(3))
    assert large < small * 8 + 0.01
