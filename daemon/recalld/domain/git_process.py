"""Every read that reaches libgit2 runs in a git reader process, under a hard deadline.

A repository is data someone else wrote (a clone, an archive), and libgit2 opens whatever its
files name: a FIFO as ``HEAD``, a ref or a loose object blocks its ``open()`` for ever. In a
thread that would not be enough: pygit2 holds the GIL while libgit2 opens a repository
(measured: a thread blocked in ``pygit2.Repository()`` on a FIFO stopped every other thread
of its process, the event loop's too). So each read is sent to a process of this pool and
waited for, GIL released, until :attr:`GitReaders.deadline_s`; past it the process is killed,
the read answers ``unavailable`` and its repository is set aside for
:attr:`GitReaders.set_aside_s` (its reads answer ``unavailable`` at once meanwhile). A
repository has at most one read in flight (its others wait their turn), so one hostile
repository holds at most one process: the others go on serving every other repository.

A search process has no pool of its own: it sends its reads to the daemon's
(:class:`Relayed`), so there is one pool and one list of repositories set aside.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from socket import socketpair
from typing import Any, Protocol, TypeVar

import msgspec

from ..errors import RecallError

__all__ = [
    "DEADLINE_S",
    "ENTRY",
    "Answer",
    "GitReaders",
    "Read",
    "Relayed",
    "Runner",
    "answer",
    "call",
    "main",
    "use",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEADLINE_S = 5.0
# How long a repository whose read overran stays set aside, and how many are remembered
# (the oldest forgotten first: at worst it costs one more process killed).
SET_ASIDE_S = 120.0
SET_ASIDE_MAX = 1024
PROCESSES = 4
STOP_GRACE_S = 1.0

_PR_SET_PDEATHSIG = 1


class Runner(Protocol):
    def call(self, key: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a git reader process, ``key`` the repository it reads.

        Raises:
            RecallError: ``unavailable`` (retryable) when the read overran its deadline, the
                repository is set aside, or no process was free in time.
        """
        ...


@dataclass(frozen=True, slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]


@dataclass(eq=False, slots=True)
class _Child:
    proc: subprocess.Popen[bytes]
    pipe: Connection


def _unavailable(message: str) -> RecallError:
    return RecallError("unavailable", message, retryable=True)


class GitReaders:
    """A pool of up to ``processes`` git reader processes, started when first needed."""

    def __init__(
        self,
        *,
        processes: int = PROCESSES,
        deadline_s: float = DEADLINE_S,
        set_aside_s: float = SET_ASIDE_S,
    ) -> None:
        self.processes = processes
        self.deadline_s = deadline_s
        self.set_aside_s = set_aside_s
        self._cond = threading.Condition()
        self._idle: list[_Child] = []
        self._children: set[_Child] = set()
        self._starting = 0
        self._running: set[str] = set()
        self._aside: OrderedDict[str, float] = OrderedDict()
        self._closed = False
        # Processes are started from this one long-lived thread: Linux sends a child its
        # parent-death signal when the *thread* that started it ends.
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="git reader start")

    def call(self, key: str, fn: Callable[..., T], *args: Any) -> T:
        deadline = time.monotonic() + self.deadline_s
        with self._cond:
            while True:
                self._check_aside(key)
                if self._closed:
                    raise _unavailable("recalld is shutting down")
                free = self._idle or len(self._children) + self._starting < self.processes
                if key not in self._running and free:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _unavailable(f"reading the repository at {key} is busy; retry shortly")
                self._cond.wait(left)
            self._running.add(key)
            child = self._idle.pop() if self._idle else None
            if child is None:
                self._starting += 1
        try:
            if child is None:
                try:
                    child = self._starter.submit(_spawn).result()
                except (OSError, RuntimeError) as exc:  # no interpreter, no fds, shut down
                    raise _unavailable(f"no git reader could start: {exc}") from exc
                finally:
                    with self._cond:
                        self._starting -= 1
                        if child is not None:
                            self._children.add(child)
            result: T = self._ask(child, key, _Call(fn, args), deadline)
            return result
        finally:
            with self._cond:
                self._running.discard(key)
                self._cond.notify_all()

    def _ask(self, child: _Child, key: str, job: _Call, deadline: float) -> Any:
        try:
            child.pipe.send(job)
            if child.pipe.poll(max(0.0, deadline - time.monotonic())):
                ok, value = child.pipe.recv()
            else:
                ok, value = None, f"no answer within {self.deadline_s:g} s"
        except (EOFError, OSError) as exc:
            ok, value = None, f"the git reader died ({type(exc).__name__})"
        if ok is None:
            self._lose(child)
            self._set_aside(key)
            log.warning("reading the repository at %s: %s; set aside", key, value)
            raise _unavailable(
                f"the repository at {key} could not be read in time; it is set aside for "
                f"{self.set_aside_s:g} s"
            )
        with self._cond:
            if self._closed:
                self._children.discard(child)
                _stop(child, 0.0)
            else:
                self._idle.append(child)
        if not ok:
            raise RuntimeError(f"git read failed: {value}")
        return value

    def _check_aside(self, key: str) -> None:
        until = self._aside.get(key)
        if until is None:
            return
        if time.monotonic() < until:
            raise _unavailable(
                f"the repository at {key} is set aside (a read of it overran); retry later"
            )
        del self._aside[key]

    def _set_aside(self, key: str) -> None:
        with self._cond:
            self._aside[key] = time.monotonic() + self.set_aside_s
            self._aside.move_to_end(key)
            while len(self._aside) > SET_ASIDE_MAX:
                self._aside.popitem(last=False)

    def _lose(self, child: _Child) -> None:
        with self._cond:
            self._children.discard(child)
        _stop(child, 0.0)

    def close(self) -> None:
        """Stop every process (a read in flight answers ``unavailable``)."""
        with self._cond:
            self._closed = True
            children, self._idle = list(self._children), []
            self._children.clear()
            self._cond.notify_all()
        for child in children:
            _stop(child, STOP_GRACE_S)
        self._starter.shutdown(wait=True)


def _spawn() -> _Child:
    """A new git reader: this interpreter afresh (forking a process with threads is unsafe),
    one end of a socket pair its only way to the daemon."""
    ours, theirs = socketpair()
    with theirs:
        proc = subprocess.Popen(
            # The daemon's log level now: a debug log reports each history walk's work.
            [sys.executable, "-c", ENTRY, str(theirs.fileno()), str(logging.root.level)],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
    return _Child(proc, Connection(ours.detach()))


def _stop(child: _Child, grace: float) -> None:
    """End ``child``: asked, then killed if it has not ended within ``grace`` seconds."""
    if grace > 0:
        try:
            child.pipe.send(None)
        except OSError:
            pass  # already gone
        try:
            child.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    if child.proc.poll() is None:
        child.proc.kill()
        child.proc.wait()
    child.pipe.close()


class Read(msgspec.Struct, frozen=True, tag="git"):
    """A read a search process relays to the daemon's pool: ``fn(*args)``, ``key`` the
    repository it reads."""

    key: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]


class Answer(msgspec.Struct, frozen=True, tag="git_answer"):
    """The daemon's answer to a :class:`Read`: its value, or why it is unavailable."""

    ok: bool
    value: Any = None
    message: str = ""


class Relayed:
    """The runner of a search process: each read is sent to the daemon's pool on ``pipe``
    as a :class:`Read`, and :func:`answer`'s :class:`Answer` comes back."""

    def __init__(self, pipe: Connection) -> None:
        self._pipe = pipe

    def call(self, key: str, fn: Callable[..., T], *args: Any) -> T:
        self._pipe.send(Read(key, fn, args))
        answered: Answer = self._pipe.recv()
        if not answered.ok:
            raise _unavailable(answered.message)
        result: T = answered.value
        return result


def answer(read: Read) -> Answer:
    """A relayed read run on this process's pool (not ok when it is unavailable)."""
    try:
        return Answer(True, call(read.key, read.fn, *read.args))
    except RecallError as exc:
        return Answer(False, message=exc.message)


_runner: Runner | None = None
_runner_lock = threading.Lock()


def use(runner: Runner | None) -> None:
    """Run this process's git reads on ``runner`` (None: a default pool, made when needed)."""
    global _runner
    _runner = runner


def call(key: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on this process's runner; raises as :meth:`Runner.call`."""
    global _runner
    runner = _runner
    if runner is None:
        with _runner_lock:
            if _runner is None:
                _runner = GitReaders()
            runner = _runner
    return runner.call(key, fn, *args)


# What the pool runs (``python -c ENTRY FD LEVEL``): FD is this process's end of the pipe,
# LEVEL the daemon's log level.
ENTRY = (
    "import sys; from recalld.domain.git_process import main; "
    "main(int(sys.argv[1]), int(sys.argv[2]))"
)


def main(fd: int, level: int = logging.WARNING) -> None:
    """Run reads from the pipe on ``fd`` until the daemon closes it (or sends None)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # Ended with the daemon, even by kill -9, though blocked in a read.
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the pipe's end still ends a process that is not blocked
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)-7s recalld git reader %(name)s: %(message)s"
    )
    pipe = Connection(fd)
    while True:
        try:
            job = pipe.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            pipe.send((True, job.fn(*job.args)))
        except Exception as exc:
            log.exception("git read failed")
            pipe.send((False, f"{type(exc).__name__}: {exc}"))
