"""Reliability-suite fixtures, and the figures the suite prints at the end of a run."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator

import pytest

from .harness import FIGURES

PEER_USER = "recalld-peer"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("reliability figures")
        for name, value in sorted(FIGURES.items()):
            terminalreporter.write_line(f"{name:<40} {value}")


@pytest.fixture(scope="session")
def other_user() -> Iterator[tuple[int, int]]:
    """(uid, gid) of a second local user, created for the run with useradd (needs root)."""
    if os.getuid() != 0:
        pytest.skip("creating and becoming a second user needs root")
    created = False
    try:
        entry = pwd.getpwnam(PEER_USER)
    except KeyError:
        try:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    PEER_USER,
                ],
                check=True,
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.CalledProcessError):
            # No useradd here: the kernel needs no passwd entry to run as a uid.
            yield 64_999, 64_999
            return
        created = True
        entry = pwd.getpwnam(PEER_USER)
    try:
        yield entry.pw_uid, entry.pw_gid
    finally:
        if created:
            subprocess.run(["userdel", PEER_USER], capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def peer_python(other_user: tuple[int, int]) -> str:
    """A python the other user can run (ours may live under root's 0700 home)."""
    uid, gid = other_user
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if (
            os.path.exists(candidate)
            and subprocess.run(
                [candidate, "-I", "-c", "pass"],
                user=uid,
                group=gid,
                extra_groups=[],
                capture_output=True,
                timeout=30,
            ).returncode
            == 0
        ):
            return candidate
    pytest.skip("no python the second user may run")
