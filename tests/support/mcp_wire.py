"""recall-mcp's wire, line by line: scripted JSON-RPC sessions and the lines the shim answers.

A session is a list of messages written to the shim's stdin one at a time. After a request the
driver reads up to its response; after anything else (a notification, a stray response, a line
that is not JSON, a request that stays open like ``subscriptions/listen``) it sends a ``ping``
and reads up to the ping's answer, so whatever the message provoked, or nothing, is what lies
between. What the shim printed is kept as it came, byte for
byte, with the few values that change from run to run (the socket path, ids, clocks) replaced by
placeholders.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ["MODERN", "Message", "Open", "envelope", "normalized", "run_session"]


class Open(NamedTuple):
    """A request the shim keeps open (a subscription): read only what it provokes at once."""

    request: Mapping[str, Any]


Message = Mapping[str, Any] | Open | str

MODERN = "2026-07-28"


def envelope(params: Mapping[str, Any] | None = None, version: str = MODERN) -> dict[str, Any]:
    """``params`` with the 2026-07-28 per-request envelope, as the SDK's client stamps it."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": {"name": "wire-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {**(params or {}), "_meta": meta}


# Values a daemon hands out fresh each run: record ids, use tokens, sessions and the clock.
# They appear in structured content ("key":value) and in its JSON text ("key": value, escaped).
_IDS = re.compile(r"\b(mem|rec|ep|exp|les)_[0-9a-z]{18}\b")
_CLOCK_KEYS = "ts|created_at|updated_at|last_verified_at|verdict_at|tombstoned_at"
_CLOCK = re.compile(rf'(\\?"(?:{_CLOCK_KEYS})\\?": ?)\d+(?:\.\d+)?(?:e[+-]?\d+)?')
_TOKEN = re.compile(r'(\\?"use_token\\?": ?\\?")[^"\\]+')
# The owner of a record on the embedded store is the user the daemon runs as.
_OWNER = re.compile(r'(\\?"owner\\?": ?\\?")[^"\\]+')
_SESSION = re.compile(r"mcp-[0-9a-f]{32}")


def normalized(line: str, socket: str) -> str:
    """``line`` with the socket path, ids, tokens, owners, sessions and clocks as placeholders."""
    line = line.replace(socket, "<socket>")
    # The daemon's command is named by this install's absolute path.
    line = line.replace(str(Path(sys.executable).with_name("recalld")), "<recalld>")
    line = _IDS.sub(lambda m: f"<{m.group(1)}>", line)
    line = _TOKEN.sub(r"\g<1><token>", line)
    line = _OWNER.sub(r"\g<1><owner>", line)
    line = _SESSION.sub("<session>", line)
    return _CLOCK.sub(r"\g<1>0", line)


async def _read_until(
    lines: BufferedByteReceiveStream, request_id: object, seen: list[str]
) -> None:
    while True:
        raw = (await lines.receive_until(b"\n", 1 << 24)).decode()
        try:
            frame = json.loads(raw)
        except ValueError:
            seen.append(raw)
            continue
        if (
            isinstance(frame, dict)
            and frame.get("id") == request_id
            and ("result" in frame or "error" in frame)
        ):
            seen.append(raw)
            return
        seen.append(raw)


def _latest(lines: Sequence[str], latest: dict[str, str]) -> None:
    """Remember the last id of each kind and the last use token the shim printed."""
    for line in lines:
        for m in _IDS.finditer(line):
            latest[f"<{m.group(1)}>"] = m.group(0)
        for m in re.finditer(r'"use_token":"([^"]+)"', line):
            latest["<token>"] = m.group(1)


async def _exchange(
    proc: Process,
    lines: BufferedByteReceiveStream,
    message: Message,
    sync: dict[str, Any],
    latest: Mapping[str, str],
) -> list[str]:
    """What the shim printed for ``message``: up to its response, or up to ``sync``'s answer.

    A placeholder in ``message`` (``"<mem>"``, ``"<token>"``) stands for the latest such value
    the shim printed, so a session can show the memory it just stored.
    """
    assert proc.stdin is not None
    if isinstance(message, str):
        raw = message
    else:
        raw = json.dumps(message.request if isinstance(message, Open) else message)
    for placeholder, value in latest.items():
        raw = raw.replace(f'"{placeholder}"', json.dumps(value))
    await proc.stdin.send(raw.encode() + b"\n")
    seen: list[str] = []
    if isinstance(message, Mapping) and "method" in message and "id" in message:
        await _read_until(lines, message["id"], seen)
        return seen
    await proc.stdin.send(json.dumps(sync).encode() + b"\n")
    await _read_until(lines, sync["id"], seen)
    seen.pop()  # the ping's own answer: the same every time, and not this message's
    return seen


async def run_session(
    command: Sequence[str],
    env: Mapping[str, str],
    messages: Sequence[Message],
    *,
    modern: bool,
    within_s: float = 60.0,
) -> list[dict[str, Any]]:
    """Drive one shim process through ``messages``; one record per message, then the close.

    ``modern``: the sync pings carry the 2026-07-28 envelope (a legacy connection answers a
    bare ping before and after initialize).
    """
    records: list[dict[str, Any]] = []
    latest: dict[str, str] = {}
    with anyio.fail_after(within_s):
        async with await anyio.open_process(list(command), env=dict(env)) as proc:
            assert proc.stdout is not None and proc.stdin is not None
            lines = BufferedByteReceiveStream(proc.stdout)
            for n, message in enumerate(messages):
                sync: dict[str, Any] = {"jsonrpc": "2.0", "id": f"sync-{n}", "method": "ping"}
                if modern:
                    sync["params"] = envelope()
                answer = await _exchange(proc, lines, message, sync, latest)
                _latest(answer, latest)
                sent = message.request if isinstance(message, Open) else message
                records.append({"send": sent, "receive": answer})
            await proc.stdin.aclose()
            rest = []
            try:
                while True:
                    rest.append((await lines.receive_until(b"\n", 1 << 24)).decode())
            except (anyio.EndOfStream, anyio.IncompleteRead):
                pass
            records.append({"send": "<close stdin>", "receive": rest, "exit": await proc.wait()})
    return records
