"""Every string of every request, read or write, is refused at decode when it holds a NUL,
and when it is only whitespace where it may not be empty: a typed ``invalid_request`` that
names the field, never ``internal`` (PostgreSQL cannot hold a NUL), and nothing stored.

The requests come from the protocol itself: every request type, every string field of it,
nested ones and list elements included, so a field declared later is tried here too. They go
out as raw msgpack, as any client could send them.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import msgspec.inspect as mi
import pytest
from mcp import Client
from recall_client import protocol as p
from recall_client.paths import find_workspace

from tests.support.daemon import BIN, DaemonProcess
from tests.support.episodes import database_bytes

from .harness import RawConnection
from .writes import shim_params

pytestmark = pytest.mark.both_backends

NUL = "nul\x00here"
BLANK = " \t\n "


@dataclass(frozen=True)
class Case:
    op: str
    where: str  # the field as the error names it
    body: dict[str, Any]


def _members(t: mi.Type) -> list[mi.Type]:
    if isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.UnionType):
        return [m for u in t.types for m in _members(u) if not isinstance(m, mi.NoneType)]
    return [t]


def _valid(t: mi.Type) -> Any:
    """A value of type ``t`` that decodes (its meaning does not matter: decode refuses first)."""
    (t, *_) = _members(t)
    if isinstance(t, mi.StrType):
        if t.pattern is not None:
            # The two patterns of the protocol: a commit, and a listing's cursor.
            return "abcdef1" if "0-9a-f" in t.pattern else "1.5:mem_x"
        return "ok"
    if isinstance(t, (mi.IntType, mi.FloatType)):
        low = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else 1)
        return low if isinstance(t, mi.IntType) else float(low)
    if isinstance(t, mi.BoolType):
        return False
    if isinstance(t, mi.LiteralType):
        return t.values[0]
    if isinstance(t, mi.ListType):
        return []
    assert isinstance(t, mi.StructType), t
    return _required(t)


def _required(info: mi.StructType) -> dict[str, Any]:
    return {f.encode_name: _valid(f.type) for f in info.fields if f.required}


def _strings(info: mi.StructType) -> Iterator[tuple[str, Wrap, mi.StrType, str]]:
    """(wire field, how a string becomes its value, the string's declaration, what the error
    names) for every string a struct can carry."""
    for f in info.fields:
        for t in _members(f.type):
            if isinstance(t, mi.StrType):
                yield f.encode_name, _itself, t, f.encode_name
            elif isinstance(t, mi.ListType):
                for item in _members(t.item_type):
                    if isinstance(item, mi.StrType):
                        yield f.encode_name, _listed, item, f"{f.encode_name}[0]"
                    elif isinstance(item, mi.StructType):
                        for inner, wrap, decl, where in _strings(item):
                            yield f.encode_name, _in_struct(item, inner, wrap), decl, where


Wrap = typing.Callable[[str], Any]


def _itself(value: str) -> Any:
    return value


def _listed(value: str) -> Any:
    return [value]


def _in_struct(item: mi.StructType, field: str, wrap: Wrap) -> Wrap:
    return lambda value: [_required(item) | {field: wrap(value)}]


# What a request's own rule (its __post_init__, a RequestRuleError) needs beyond its required
# fields, so that the string under test is what decoding refuses. The field under test
# replaces its entry here; keep_id stands instead of accept, never beside it.
RULED: dict[str, dict[str, Any]] = {
    "memory_record_use": {"memory_ids": ["ok"], "outcome": "used"},
    "memory_fact_resolve": {"accept": True},
    "context_block": {"prompt": "ok"},
}


def _ruled(op: str, field: str) -> dict[str, Any]:
    if op == "memory_fact_resolve" and field == "keep_id":
        return {}
    return RULED.get(op, {})


def cases() -> Iterator[Case]:
    for cls in typing.get_args(p.Requests):
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        for field, wrap, decl, where in _strings(info):
            values = [NUL]
            # Blank where empty is refused (a pattern refuses it by itself).
            if (decl.min_length or 0) > 0 and decl.pattern is None:
                values.append(BLANK)
            for value in values:
                op = cls.__struct_config__.tag
                body = {"op": op, **_required(info), **_ruled(op, field), field: wrap(value)}
                yield Case(body["op"], where, body)


async def test_a_nul_or_a_blank_in_any_string_of_any_request_is_invalid_request(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    tried = list(cases())
    ops = {c.op for c in tried}
    # Every request type that carries a string is tried (Ping, Status and a few admin ones
    # carry none), in every string field: a walk that found few would prove nothing.
    assert {"hello", "memory_store", "memory_search", "memory_list", "work_search"} <= ops
    assert {"experience_list", "explain_node", "forget", "roll_up_experience"} <= ops
    assert len(tried) >= 150, len(tried)
    wrong: list[str] = []
    async with await RawConnection.open(d) as conn:
        for n, case in enumerate(tried, 2):
            body = msgspec.msgpack.encode({"id": n, **case.body})
            if case.op == "hello":
                # A hello is the first frame of a connection of its own.
                async with await RawConnection.open(d, hello=False) as fresh:
                    await fresh.send_body(body)
                    reply = await fresh.reply()
            else:
                await conn.send_body(body)
                reply = await conn.reply()
            ok = (
                isinstance(reply, p.Error)
                and reply.code == "invalid_request"
                and case.where in reply.message
                and reply.id == n
            )
            if not ok:
                wrong.append(f"{case.op}.{case.where}={case.body}: {reply}")
        # The daemon still answers, on this connection and on a new one.
        await conn.send(p.frame(p.Ping(id=1)))
        assert isinstance(await conn.reply(), p.Pong)
    assert not wrong, f"{len(wrong)} of {len(tried)} not refused as invalid_request:\n" + (
        "\n".join(wrong[:20])
    )
    async with d.client() as rc:
        await rc.call(p.MemoryStore(text="still answering"), p.MemoryStored)
        found = await rc.call(p.MemorySearch(query="still answering"), p.MemorySearchResult)
        assert [h.text for h in found.hits] == ["still answering"]
    if d.data_dir.joinpath("recall.db").exists():
        assert b"nul\xef\xbf\xbdhere" not in database_bytes(d)  # no U+FFFD stand-in stored


async def test_blank_text_is_refused_like_empty_text(running_daemon: DaemonProcess) -> None:
    d = running_daemon
    blank_requests: list[dict[str, Any]] = [
        {"op": "memory_store", "text": BLANK},
        {"op": "capture_episode", "summary": "\u3000\u2003 "},  # Unicode spaces are blank too
        {"op": "capture_episode", "summary": "ran it", "tool": " "},
        {"op": "memory_search", "query": " "},
        {"op": "work_search", "query": "\n"},
        {"op": "search_experience", "query": "\t"},
        {"op": "record_experience", "description": "  "},
        {"op": "record_experience", "description": "shipped it", "lessons": ["ok", " "]},
        {"op": "record_experience", "description": "shipped it", "strategy": " "},
    ]
    async with await RawConnection.open(d) as conn:
        for n, fields in enumerate(blank_requests, 2):
            await conn.send_body(msgspec.msgpack.encode({"id": n, **fields}))
            reply = await conn.reply()
            assert isinstance(reply, p.Error), (fields, reply)
            assert (reply.code, reply.id) == ("invalid_request", n), (fields, reply)
            assert "only whitespace" in reply.message, reply.message
    async with d.client(agent="raw", workspace="/ws/raw") as rc:
        listed = await rc.call(p.MemoryList(), p.MemoryListResult)
        assert listed.items == []
        episodes = await rc.call(p.WorkSearch(include_pending=True), p.WorkSearchResult)
        assert episodes.results == []
        # Text with words around its spaces is text.
        stored = await rc.call(p.MemoryStore(text="  padded words  "), p.MemoryStored)
        assert not stored.duplicate

    # The clients show the daemon's typed answer, naming the field: an agent through the MCP
    # SDK, and a user of recallctl (one line, no traceback).
    async with Client(shim_params(d, "/ws/raw")) as client:
        refused = await client.call_tool("memory_store", {"text": "   "})
    assert refused.is_error and "invalid_request: text is only whitespace" in str(refused.content)
    out = await anyio.run_process(
        [str(BIN / "recallctl"), "--socket", str(d.socket), "--workspace", "/ws/raw", "store", " "],
        check=False,
    )
    stderr = out.stderr.decode()
    assert out.returncode == 1 and stderr.count("\n") == 1, stderr
    assert "invalid_request: text is only whitespace" in stderr


async def test_a_hook_whose_tool_printed_a_nul_is_captured_not_lost(
    running_daemon: DaemonProcess, tmp_path: Path
) -> None:
    d = running_daemon
    hook = {
        "hook_event_name": "PostToolUse",
        "session_id": "s-binary",
        "cwd": str(tmp_path),
        "tool_name": "Bash",
        "tool_use_id": "toolu_1",
        "tool_input": {"command": "cat blob.bin"},
        "tool_response": {"stdout": "header\u0000payload", "stderr": "", "exit_code": 0},
    }
    out = await anyio.run_process(
        [str(BIN / "recallctl"), "--socket", str(d.socket), "capture"],
        input=json.dumps(hook).encode(),
        check=False,
    )
    assert out.returncode == 0, out.stderr.decode()
    async with d.client(agent="recallctl", workspace=str(find_workspace(tmp_path))) as rc:
        found = await rc.call(
            p.WorkSearch(session_id="s-binary", include_pending=True, min_trust=0),
            p.WorkSearchResult,
        )
    assert [e.summary for e in found.results] == ["Bash: cat blob.bin -> ok: header\ufffdpayload"]
