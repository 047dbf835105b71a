"""A daemon that could not write its admin token, and a recallctl that cannot read one, say so
and where, beside the ``forbidden`` an admin command then gets (issue 40, point 6)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.daemon import BIN, DaemonFactory, DaemonProcess


def recallctl(d: DaemonProcess, token: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, RECALLD_ADMIN_TOKEN_FILE=str(token)),
    )


async def test_forbidden_for_want_of_an_admin_token_says_it_could_not_be_written_and_where(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    # A file where the token's directory should be: neither the daemon nor anyone can make it
    # (a read-only file system under a sandbox fails the same way, and root ignores modes).
    blocked = tmp_path / "config-is-a-file"
    blocked.write_text("not a directory\n")
    token = blocked / "admin.token"
    d = daemon_factory(extra_env={"RECALLD_ADMIN_TOKEN_FILE": str(token)})
    await d.start()

    report = await d.status()
    assert report.admin_token_problem is not None
    assert str(token) in report.admin_token_problem

    out = recallctl(d, token, "export", "--kind", "all")
    assert out.returncode == 1
    assert "forbidden" in out.stderr
    assert f"no admin token was presented: the admin token {token} could not be read" in (
        out.stderr
    )

    doctor = recallctl(d, token, "doctor")
    assert doctor.returncode == 1
    assert "forbidden" in doctor.stderr and f"the admin token {token}" in doctor.stderr

    status = recallctl(d, token, "status")
    assert status.returncode == 0, status.stderr
    assert f"admin    no admin token: {token} could not be read or written" in (status.stdout)
    assert await d.stop() == 0
