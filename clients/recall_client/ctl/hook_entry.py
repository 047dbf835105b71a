"""A capture hook answers the host first: ``recallctl capture --host HOST --quiet --detach``.

A host without asynchronous hooks (Gemini CLI) waits for every capture before the
agent goes on, so the hook's cost is the agent's. The hook needs no answer, so the process
the host started reads the payload, forks, and exits 0 before importing anything of
recallctl's own; the child, in a session of its own (a host ending the hook's process group
does not end it) and with stdin, stdout and stderr off the host's pipes, runs the command as
usual: spool, send, roll up. This module is imported by ``recallctl``'s entry point before
anything else, so it imports only the standard library's small modules.

What the child has not yet spooled when the machine stops is lost: the window is the
child's start (a few hundred milliseconds); every later failure leaves the episodes in the
spool, as a synchronous capture does.
"""

from __future__ import annotations

import os
import select
import sys
import time

__all__ = ["FLAGS", "VALUE_OPTIONS", "answer_host_first", "detachable", "read_hook_input"]

# recallctl's own options (main._global_options), which a hook's command line may carry
# before or after ``capture``: those that take a value, and those that do not.
VALUE_OPTIONS = frozenset({"--socket", "--agent", "--workspace", "--agent-token-file"})
FLAGS = frozenset({"--no-admin"})
# How long a hook's payload may take to arrive. Claude Code may leave stdin open after
# writing it (SessionEnd), so reading stops at a whole JSON value, not only at EOF.
INPUT_WAIT_S = 5.0


def detachable(argv: list[str]) -> bool:
    """``argv`` is a capture run by a host's hook that prints nothing: ``capture`` with
    ``--host``, ``--quiet`` and ``--detach``, and otherwise only recallctl's own options.
    Anything else (``--json``, ``--verbose``, an option this module does not know) runs as usual."""
    command_at = _command_at(argv)
    if command_at is None or argv[command_at] != "capture":
        return False
    rest = argv[command_at + 1 :]
    seen: set[str] = set()
    i = 0
    while i < len(rest):
        name, has_value = _option(rest[i])
        if name in ("--quiet", "-q", "--detach") and not has_value:
            seen.add("--quiet" if name == "-q" else name)
        elif name in VALUE_OPTIONS | {"--host"}:
            if not has_value:
                i += 1
                if i == len(rest):
                    return False
            seen.add(name)
        elif name not in FLAGS or has_value:
            return False
        i += 1
    return {"--host", "--quiet", "--detach"} <= seen


def _command_at(argv: list[str]) -> int | None:
    """Where the command is: the first word after recallctl's own options."""
    i = 0
    while i < len(argv):
        name, has_value = _option(argv[i])
        if name in VALUE_OPTIONS:
            i += 1 if has_value else 2
        elif name in FLAGS and not has_value:
            i += 1
        elif name.startswith("-"):
            return None
        else:
            return i
    return None


def _option(word: str) -> tuple[str, bool]:
    """(--name, whether the word holds its value: --name=VALUE)."""
    if word.startswith("--") and "=" in word:
        return word.split("=", 1)[0], True
    return word, False


def read_hook_input(fd: int, wait_s: float = INPUT_WAIT_S, limit: int | None = None) -> bytes:
    """A hook's stdin: up to EOF, or a whole JSON value once the writer pauses, or what
    came within ``wait_s``, or its first ``limit`` bytes and one more (to tell it is over)."""
    data = bytearray()
    deadline = time.monotonic() + wait_s
    try:
        while True:
            # Whether more is there at once: a pause is when to look for a whole value.
            ready = select.select([fd], [], [], 0)[0]
            if not ready and data.rstrip().endswith((b"}", b"]")) and _whole_json(bytes(data)):
                break
            remaining = deadline - time.monotonic()
            if not ready and (remaining <= 0 or not select.select([fd], [], [], remaining)[0]):
                break
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            data += chunk
            if limit is not None and len(data) > limit:
                return bytes(data[: limit + 1])
    except (OSError, ValueError):
        pass  # no stdin (closed, or none given): what came is the input
    return bytes(data)


def _whole_json(data: bytes) -> bool:
    import json  # only once the writer pauses after a "}": EOF needs no parsing

    try:
        json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return False
    return True


def answer_host_first(argv: list[str]) -> None:
    """When ``argv`` is :func:`detachable`: read the payload, exit 0 in this process, and
    return in a detached child whose stdin holds the payload. Otherwise return at once,
    having done nothing; where fork fails, return in this process, stdin holding the
    payload, so the capture runs as usual."""
    if not detachable(argv):
        return
    data = read_hook_input(0)
    try:
        pid = os.fork()
    except OSError:
        _stdin_holding(data)
        return
    if pid:
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, sys.stdout.fileno())
    os.dup2(devnull, sys.stderr.fileno())
    os.close(devnull)
    _stdin_holding(data)


def _stdin_holding(data: bytes) -> None:
    """Make fd 0 a file holding ``data``, so the command reads it as it reads any stdin."""
    import tempfile

    with tempfile.TemporaryFile() as held:
        held.write(data)
        held.flush()
        held.seek(0)
        os.dup2(held.fileno(), 0)
