"""recall-mcp answers every method, notification and error with the bytes it always has.

Each session below is replayed against a fresh shim and compared, line for line, with
tests/fixtures/mcp_wire/<session>.json: what the shim answered when it was built on the SDK's
MCPServer, before it was made light. Both protocol eras are covered (the initialize handshake at
every version the SDK negotiates, and the 2026-07-28 per-request envelope), as are the tool
listing at each version, argument errors, the daemon being absent, and each tool's answer from a
real daemon, and the prompt and the resources on it.

The daemon session pins the daemon's answers too (ids, tokens and clocks aside). After a change
that is meant to show on the wire, in the shim or in what the daemon answers, record the
sessions anew with ``RECALL_RECORD_WIRE=1 scripts/test tests/mcp/test_mcp_wire.py`` and review the
diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from recall_client.mcp.server import LISTING

from tests.support.daemon import BIN, DaemonProcess
from tests.support.mcp_client import shim_env
from tests.support.mcp_wire import MODERN, Message, Open, envelope, normalized, run_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_wire"
RECORD = os.environ.get("RECALL_RECORD_WIRE") == "1"


def request(n: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": n, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def initialize(n: int, version: str) -> dict[str, Any]:
    return request(
        n,
        "initialize",
        {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "wire-test", "version": "1"},
        },
    )


def call(name: str, arguments: object, **extra: object) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, **extra}


# One valid call of every tool: with no daemon each is a clear tool error (or, for work_search,
# an answer that says so).
EVERY_TOOL = [
    call("memory_store", {"text": "The wire test stores this."}),
    call("memory_search", {"query": "wire test"}),
    call("memory_update", {"id": "mem_0", "text": "Corrected."}),
    call("memory_verify", {"id": "mem_0"}),
    call("memory_show", {"id": "mem_0"}),
    call("memory_record_use", {"memory_ids": ["mem_0"], "outcome": "used"}),
    call("memory_fact_resolve", {"subject": "release owner", "accept": True}),
    call("capture_episode", {"summary": "ran the wire test"}),
    call("work_search", {"query": "wire"}),
    call("work_result", {"task_result": 1, "session_id": "s1"}),
    call("forget", {"id": "ep_0"}),
    call("record_experience", {"description": "Ran the wire test."}),
    call("search_experience", {"query": "wire test"}),
    call("explain_node", {"id": "exp_0"}),
    call("forget_experience", {"id": "exp_0"}),
    call("get_execution_context", {"task": "run the wire test"}),
    call("memory_share", {"id": "mem_0"}),
]

# tools/call as a model gets it wrong: each one is refused, with the SDK's or the shim's words.
WRONG_CALLS = [
    call("no_such_tool", {}),
    call("memory_search", {"query": "x", "top_k": 51}),
    call("memory_search", {"query": ""}),
    call("memory_search", {}),
    call("memory_search", {"query": "x", "outcome": "used"}),
    call("memory_search", {"query": "x", "outcome": "used", "limit": 3}),
    call("memory_search", {"query": "x", "top_k": "many"}),
    call("memory_search", {"query": "x", "tags": '["a", "b"]'}),
    call("memory_search", {"query": "x", "tags": "not json"}),
    call("memory_store", {"text": "x", "depends_on": [{"id": "mem_0", "why": "?"}]}),
    call("memory_store", {"text": "x", "kind": "rumour"}),
    call("memory_record_use", {}),
    call("work_search", {"k": 0}),
    call("search_experience", {"query": "x", "limit": 21}),
    call("memory_search", {"query": "x"}, requestState="opaque"),
    call("memory_search", {"query": "x"}, requestState=7),
    call("memory_search", {"query": "x"}, requestState=None),
    call("memory_search", "not an object"),
    {"arguments": {"query": "x"}},
]


COMPLETION = {"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}


def legacy_session(version: str) -> list[Message]:
    """The handshake era at ``version``: lifecycle, every method, every tool, every error."""
    n = iter(range(1, 1000))
    return [
        request(next(n), "ping"),
        request(next(n), "tools/list"),
        notification("notifications/initialized"),
        initialize(next(n), version),
        notification("notifications/initialized"),
        request(next(n), "ping"),
        request(next(n), "tools/list"),
        request(next(n), "tools/list", {"cursor": "next"}),
        request(next(n), "resources/list"),
        request(next(n), "resources/templates/list"),
        request(next(n), "resources/read", {"uri": "file:///nothing/here"}),
        request(next(n), "resources/subscribe", {"uri": "file:///nothing/here"}),
        request(next(n), "prompts/list"),
        request(next(n), "prompts/get", {"name": "nothing"}),
        request(next(n), "prompts/get", {"name": "recall", "arguments": {"topic": "wire"}}),
        request(next(n), "completion/complete", COMPLETION),
        request(next(n), "logging/setLevel", {"level": "debug"}),
        request(next(n), "server/discover"),
        request(next(n), "subscriptions/listen", {}),
        request(next(n), "no/such/method"),
        request(next(n), "tools/call"),
        *(request(next(n), "tools/call", params) for params in WRONG_CALLS),
        *(request(next(n), "tools/call", params) for params in EVERY_TOOL),
        request(next(n), "tools/list", envelope()),
        initialize(next(n), version),
        notification("notifications/cancelled", {"requestId": 999, "reason": "changed my mind"}),
        notification("notifications/roots/list_changed"),
        notification("notifications/no_such_thing"),
        {"jsonrpc": "2.0", "id": 777, "result": {}},
        {"jsonrpc": "2.0", "id": 778, "error": {"code": -1, "message": "stray"}},
        "this line is not JSON",
        "[]",
        '{"jsonrpc": "2.0"}',
        '{"jsonrpc": "1.0", "id": 900, "method": "ping"}',
        request(next(n), "ping"),
    ]


def older_legacy_session(version: str) -> list[Message]:
    """An older handshake version: what its per-version surface could show differently."""
    n = iter(range(1, 1000))
    return [
        initialize(next(n), version),
        notification("notifications/initialized"),
        request(next(n), "tools/list"),
        request(next(n), "resources/list"),
        request(next(n), "prompts/list"),
        request(next(n), "tools/call", WRONG_CALLS[1]),
        request(next(n), "tools/call", EVERY_TOOL[8]),
        request(next(n), "ping"),
    ]


def modern_session() -> list[Message]:
    """The 2026-07-28 era: every request carries its own envelope; no handshake."""
    n = iter(range(1, 1000))
    return [
        request(next(n), "server/discover", envelope()),
        request(next(n), "ping", envelope()),
        request(next(n), "tools/list", envelope()),
        request(next(n), "tools/list", envelope({"cursor": "next"})),
        request(next(n), "resources/list", envelope()),
        request(next(n), "resources/templates/list", envelope()),
        request(next(n), "resources/read", envelope({"uri": "file:///nothing/here"})),
        request(next(n), "prompts/list", envelope()),
        request(next(n), "prompts/get", envelope({"name": "nothing"})),
        request(next(n), "prompts/get", envelope({"name": "recall"})),
        request(next(n), "resources/read", envelope({"uri": "recalld://memory/mem_0"})),
        request(next(n), "completion/complete", envelope(COMPLETION)),
        request(next(n), "logging/setLevel", envelope({"level": "debug"})),
        request(next(n), "no/such/method", envelope()),
        Open(
            request(
                100, "subscriptions/listen", envelope({"notifications": {"toolsListChanged": True}})
            )
        ),
        request(next(n), "subscriptions/listen", envelope({})),
        notification("notifications/cancelled", {"requestId": 100}),
        request(next(n), "tools/call", envelope()),
        *(request(next(n), "tools/call", envelope(params)) for params in WRONG_CALLS),
        *(request(next(n), "tools/call", envelope(params)) for params in EVERY_TOOL),
        request(next(n), "tools/list"),
        request(next(n), "tools/list", envelope(version="2025-11-25")),
        request(next(n), "tools/list", envelope(version="2099-01-01")),
        initialize(next(n), "2025-11-25"),
        notification("notifications/cancelled", {"requestId": 999}),
        notification("notifications/initialized"),
        "this line is not JSON",
        request(next(n), "server/discover", envelope()),
    ]


def daemon_session() -> list[Message]:
    """Every tool answering from a real daemon (2026-07-28), on the records the session writes."""
    n = iter(range(1, 1000))

    def tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return request(next(n), "tools/call", envelope(call(name, arguments)))

    return [
        request(next(n), "server/discover", envelope()),
        tool("memory_search", {"query": "deploy"}),
        tool(
            "memory_store",
            {"text": "The deploy script needs the VPN up.", "tags": ["deploy"], "paths": ["/x"]},
        ),
        tool("memory_store", {"text": "The deploy script needs the VPN up.", "tags": ["deploy"]}),
        tool("memory_search", {"query": "deploy script VPN"}),
        tool("memory_search", {"query": "deploy script VPN", "verbose": True, "expand_top": True}),
        tool("memory_show", {"id": "<mem>"}),
        tool("memory_update", {"id": "<mem>", "tags": ["deploy", "vpn"]}),
        tool("memory_verify", {"id": "<mem>", "note": "checked"}),
        tool("memory_search", {"query": "deploy VPN"}),
        tool("memory_record_use", {"use_token": "<token>"}),
        tool("memory_record_use", {"memory_ids": ["<mem>"], "outcome": "ignored", "note": "n/a"}),
        tool("memory_store", {"text": "Alice owns releases.", "kind": "fact", "subject": "owner"}),
        tool("memory_fact_resolve", {"subject": "owner", "accept": True}),
        # A failed step stays pending until judged: what work_search shows does not race the
        # evaluator.
        tool(
            "capture_episode",
            {"summary": "ran the deploy script", "status": "error", "error_code": "exit_1"},
        ),
        tool("work_search", {"include_pending": True}),
        tool("work_search", {"query": "deploy", "response_format": "concise"}),
        tool("work_result", {"task_result": 1, "episode_id": "<ep>"}),
        tool("forget", {"id": "<ep>"}),
        tool("record_experience", {"description": "Fixed the deploy script.", "lessons": ["VPN"]}),
        tool("search_experience", {"query": "deploy script"}),
        tool("explain_node", {"id": "<exp>"}),
        tool("get_execution_context", {"task": "fix the deploy script"}),
        tool("forget_experience", {"id": "<exp>"}),
        # The prompt and the resources, on what the session stored.
        request(next(n), "prompts/list", envelope()),
        request(
            next(n), "prompts/get", envelope({"name": "recall", "arguments": {"topic": "VPN"}})
        ),
        request(next(n), "resources/templates/list", envelope()),
        request(next(n), "resources/list", envelope()),
        # This daemon's store is local: no team to share with, a clear tool error.
        tool("memory_share", {"id": "<mem>"}),
        tool("forget", {"id": "<mem>"}),
        tool("memory_show", {"id": "<mem>"}),
        tool("memory_show", {"id": "mem_000000000000000000"}),
    ]


SESSIONS: dict[str, tuple[list[Message], bool]] = {
    **{
        f"legacy-{v}": (older_legacy_session(v), False)
        for v in ("2024-11-05", "2025-03-26", "2025-06-18")
    },
    "legacy-2025-11-25": (legacy_session("2025-11-25"), False),
    f"modern-{MODERN}": (modern_session(), True),
}


async def replay(name: str, messages: list[Message], modern: bool, socket: str) -> None:
    env = shim_env()
    env["RECALLD_SOCKET"] = socket
    env["RECALLD_AUTOSTART"] = "0"
    command = [str(BIN / "recall-mcp"), "--agent", "wire", "--workspace", "/ws/wire"]
    records = await run_session(command, env, messages, modern=modern)
    for record in records:
        record["receive"] = [listing_elided(normalized(line, socket)) for line in record["receive"]]
    fixture = FIXTURES / f"{name}.json"
    if RECORD:
        fixture.parent.mkdir(parents=True, exist_ok=True)
        fixture.write_text(json.dumps(records, indent=1) + "\n")
        pytest.skip(f"recorded {fixture.name}")
    expected = json.loads(fixture.read_text())
    assert [r["send"] for r in records] == [r["send"] for r in expected]
    for got, want in zip(records, expected, strict=True):
        sent = json.dumps(want["send"])[:300]
        assert got == want, f"after sending {sent}:\n{_first_difference(got, want)}"


def listing_elided(line: str) -> str:
    """``line`` with the tools a tools/list result carries as a placeholder, once they are seen
    to be mcp/tools.json's: the listing is the protocol's (tests/mcp/test_mcp_shim.py holds the file
    to it), the rest of the line is the wire's."""
    at = line.find(_TOOLS)
    if at < 0:
        return line
    start = at + len(_TOOLS) - 1
    tools, end = json.JSONDecoder().raw_decode(line, start)
    assert tools == json.loads(LISTING.read_text()), "tools/list answered another listing"
    return f'{line[:start]}"<mcp/tools.json>"{line[end:]}'


_TOOLS = '"tools":['


def _first_difference(got: dict[str, Any], want: dict[str, Any]) -> str:
    """Where the first differing line differs, with some context: the lines run to 60 KB."""
    if len(got["receive"]) != len(want["receive"]):
        return f"{len(got['receive'])} lines, not {len(want['receive'])}: {got['receive']}"
    for line, wanted in zip(got["receive"], want["receive"], strict=True):
        if line != wanted:
            at = next(
                (i for i, (a, b) in enumerate(zip(line, wanted, strict=False)) if a != b),
                min(len(line), len(wanted)),
            )
            return f"got  ...{line[at - 200 : at + 200]}\nwant ...{wanted[at - 200 : at + 200]}"
    return f"exit {got.get('exit')}, not {want.get('exit')}"


@pytest.mark.parametrize("name", sorted(SESSIONS))
async def test_the_shim_answers_as_it_always_has(name: str, tmp_path: Path) -> None:
    messages, modern = SESSIONS[name]
    await replay(name, messages, modern, str(tmp_path / "absent.sock"))


async def test_every_tool_answers_from_a_daemon_as_it_always_has(
    running_daemon: DaemonProcess,
) -> None:
    await replay("daemon", daemon_session(), True, str(running_daemon.socket))
