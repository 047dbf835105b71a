"""A repository can make recalld slow for itself only.

Every hostile repository is made in the test's tmp dir with the git program and real FIFOs:
one whose config includes a FIFO behind a byte git skips (a plain ``git clone`` brings such
a directory, shaped as a bare repository), and one whose root commit's loose object is a
FIFO (no look ahead covers every object: the read is held until its deadline). While its
hello is held open (a thread blocked in the FIFO's open(), as /proc shows), another
workspace's connections, one open before and one opened after, are answered.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import anyio
import pytest
from recall_client import protocol as p
from recall_client.client import RecallClient, RemoteError, connect

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.git import checkout, git

DEADLINE_S = 8


async def started(daemon_factory: DaemonFactory) -> DaemonProcess:
    d = daemon_factory(extra_env={"RECALLD_GIT_READ_DEADLINE_S": str(DEADLINE_S)})
    await d.start()
    return d


def stalled_object(path: Path) -> Path:
    """A repository without a remote (its identity is its root commit, read from its
    objects) whose root commit's loose object is a FIFO; the FIFO."""
    checkout(path)
    root = git(path, "rev-list", "--max-parents=0", "HEAD")
    obj = path / ".git" / "objects" / root[:2] / root[2:]
    obj.unlink()
    os.mkfifo(obj)
    return obj


def _family(pid: int) -> set[int]:
    """``pid`` and every process descended from it (its git readers, search processes)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    family, todo = set(), [pid]
    while todo:
        family.add(todo[-1])
        todo.extend(parents.get(todo.pop(), []))
    return family


def blocked_on_a_fifo(pid: int) -> bool:
    """Whether a thread of ``pid`` or of a process under it waits in a FIFO's open() for a
    writer (the kernel's ``wait_for_partner``)."""
    for member in _family(pid):
        for wchan in Path(f"/proc/{member}/task").glob("*/wchan"):
            try:
                if wchan.read_text() == "wait_for_partner":
                    return True
            except OSError:
                continue
    return False


async def stuck(d: DaemonProcess) -> None:
    """Wait until the daemon (or a process of its) is blocked opening a FIFO. Polls /proc
    (under the caller's ``fail_after``): nothing else can tell, and a writer would free it."""
    assert d.proc is not None
    while True:
        if blocked_on_a_fifo(d.proc.pid):
            return
        await anyio.sleep(0.05)


def release(fifo: Path) -> None:
    """Let a reader blocked opening ``fifo`` go on (it then reads it as empty)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # no reader left
            raise


async def search(rc: RecallClient, query: str) -> list[str]:
    found = await rc.call(p.MemorySearch(query=query, mode="bm25"), p.MemorySearchResult)
    return [h.id for h in found.hits]


async def test_a_stalled_repository_holds_its_own_hello_and_no_one_else(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    d = await started(daemon_factory)
    other = checkout(tmp_path / "other", "git@github.com:acme/other.git")
    fifo = stalled_object(tmp_path / "hostile")
    outcome: list[BaseException | str] = []
    answered = anyio.Event()

    async def hostile_hello() -> None:
        try:
            async with connect(
                agent="t", workspace=str(tmp_path / "hostile"), path=d.socket, timeout=60
            ) as rc:
                outcome.append(rc.welcome.workspace if rc.welcome else "")
        except RemoteError as exc:
            outcome.append(exc)
        finally:
            answered.set()

    async with d.client(workspace=str(other)) as before:
        stored = await before.call(p.MemoryStore(text="Deploys go out on Tuesdays."), p.Stored)
        with anyio.fail_after(DEADLINE_S * 4):
            async with anyio.create_task_group() as tg:
                tg.start_soon(hostile_hello)
                try:
                    with anyio.fail_after(DEADLINE_S):
                        await stuck(d)
                    with anyio.fail_after(DEADLINE_S - 2):
                        assert stored.record_id in await search(before, "deploys tuesdays")
                        async with d.client(workspace=str(other)) as after:
                            assert stored.record_id in await search(after, "deploys tuesdays")
                    assert outcome == []  # answered while the hostile hello is still held
                    with anyio.fail_after(DEADLINE_S * 2):
                        await answered.wait()
                finally:
                    release(fifo)
    [error] = outcome
    assert isinstance(error, RemoteError)
    assert (error.code, error.retryable) == ("unavailable", True)
    # Set aside: asked again, it answers at once, without another read of it.
    with anyio.fail_after(DEADLINE_S - 1), pytest.raises(RemoteError) as again:
        async with connect(agent="t", workspace=str(tmp_path / "hostile"), path=d.socket):
            pass
    assert again.value.code == "unavailable"


def bare_looking(path: Path, lead: bytes, fifo: Path) -> Path:
    """A directory shaped as a bare repository whose config includes ``fifo`` after
    ``lead`` (bytes git skips before the first section)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "--bare")
    (path / "config").write_bytes(lead + b"[include]\n\tpath = " + bytes(fifo) + b"\n")
    return path


@pytest.mark.parametrize("lead", [b"\xef\xbb\xbf", b"\v", b"\r", b" \f\t"])
async def test_a_config_that_includes_a_fifo_behind_a_skipped_byte_is_refused(
    daemon_factory: DaemonFactory, tmp_path: Path, lead: bytes
) -> None:
    d = await started(daemon_factory)
    fifo = tmp_path / "include.fifo"
    os.mkfifo(fifo)
    clone = checkout(tmp_path / "clone", "git@github.com:acme/clone.git")
    inner = bare_looking(clone / "vendor" / "mirror", lead, fifo)
    # A checkout whose own config hides the include the same way.
    hidden = checkout(tmp_path / "hidden", "git@github.com:acme/hidden.git")
    config = hidden / ".git" / "config"
    config.write_bytes(lead + b"[include]\n\tpath = " + bytes(fifo) + b"\n" + config.read_bytes())
    with anyio.fail_after(DEADLINE_S - 1):
        async with d.client(workspace=str(inner)) as rc:
            assert rc.welcome is not None
            assert rc.welcome.workspace == str(inner)  # not read: keyed by its path
        async with d.client(workspace=str(hidden)) as rc:
            assert rc.welcome is not None
            assert rc.welcome.workspace == str(hidden)  # not github.com/acme/hidden
        async with d.client(workspace=str(clone)) as rc:
            assert rc.welcome is not None
            assert rc.welcome.workspace == "github.com/acme/clone"


async def test_files_libgit2_opens_are_refused_unless_regular(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """HEAD, packed-refs, commondir as FIFOs, a config that is a symlink, alternates naming
    a FIFO: each repository is refused at once (keyed by its path), none is waited for."""
    d = await started(daemon_factory)
    made: list[Path] = []
    for name in ("HEAD", "packed-refs", "commondir"):
        repo = checkout(tmp_path / name.lower(), f"git@github.com:acme/{name.lower()}.git")
        target = repo / ".git" / name
        target.unlink(missing_ok=True)
        os.mkfifo(target)
        made.append(repo)
    linked = checkout(tmp_path / "linked", "git@github.com:acme/linked.git")
    config = linked / ".git" / "config"
    (tmp_path / "elsewhere.config").write_bytes(config.read_bytes())
    config.unlink()
    config.symlink_to(tmp_path / "elsewhere.config")
    made.append(linked)
    alternates = checkout(tmp_path / "alternates", "git@github.com:acme/alternates.git")
    os.mkfifo(tmp_path / "objects.fifo")
    (alternates / ".git" / "objects" / "info" / "alternates").write_text(
        f"{tmp_path / 'objects.fifo'}\n"
    )
    made.append(alternates)
    with anyio.fail_after(DEADLINE_S - 1):
        for repo in made:
            async with d.client(workspace=str(repo)) as rc:
                assert rc.welcome is not None
                assert rc.welcome.workspace == str(repo), repo.name
