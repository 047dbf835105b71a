"""The work-episode MCP tools through the official SDK's stdio client and a real daemon:
work_search's inputSchema and outputSchema against seed 001, and every parameter called."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import jsonschema  # type: ignore[import-untyped]
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.daemon import BIN, DaemonProcess
from tests.support.episodes import settled
from tests.support.light import daemon_side_loaded
from tests.support.mcp_client import text_of

pytestmark = pytest.mark.both_backends

# Seed 001's parameter table: name -> (JSON type, default, bounds/enum).
SEED_PARAMETERS: dict[str, tuple[str, Any, dict[str, Any]]] = {
    "query": ("string", None, {"minLength": 1}),
    "tool": ("string", None, {}),
    "session_id": ("string", None, {}),
    "since": ("integer", None, {"minimum": 1}),
    "until": ("integer", None, {"minimum": 1}),
    "k": ("integer", 20, {"minimum": 1, "maximum": 200}),
    "min_trust": ("number", 0.3, {"minimum": 0, "maximum": 1}),
    "include_pending": ("boolean", False, {}),
    "any_caller": ("boolean", False, {}),
    "semantic": ("boolean", False, {}),
    "response_format": ("string", None, {"enum": ["concise", "detailed"]}),
    "verbosity": ("string", None, {"enum": ["full", "terse"]}),
}
# Seed 001's result fields; the always-present ones are required.
SEED_FIELDS = [
    "id",
    "ts",
    "vault",
    "session_id",
    "caller",
    "channel",
    "episode_type",
    "task_result",
    "verdict_at",
    "tool",
    "status",
    "error_code",
    "duration_ms",
    "result_size",
    "summary",
    "tags",
    "trust",
    "eligibility",
    "blocked",
    "prev_id",
]
SEED_REQUIRED = {"id", "ts", "status", "eligibility"}
CONCISE_DROPS = {"vault", "caller", "channel", "episode_type", "duration_ms", "result_size"}


def shim(socket: str, *args: str, agent: str = "mcp-agent") -> StdioServerParameters:
    keep = ("PATH", "HOME", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["RECALLD_SOCKET"] = socket
    # Never start a daemon from here: one started for an absent socket would outlive the test
    # and use the real data directory.
    env["RECALLD_AUTOSTART"] = "0"
    return StdioServerParameters(
        command=str(BIN / "recall-mcp"),
        args=["--agent", agent, "--workspace", "/ws/mcp", *args],
        env=env,
    )


def _branch(schema: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of an optional parameter's schema."""
    for option in schema.get("anyOf", [schema]):
        if option.get("type") != "null":
            return option  # type: ignore[no-any-return]
    raise AssertionError(schema)


async def _tools(d: DaemonProcess) -> dict[str, Any]:
    async with Client(shim(str(d.socket))) as client:
        return {t.name: t for t in (await client.list_tools()).tools}


async def test_the_work_tools_are_listed_with_accurate_annotations(
    running_daemon: DaemonProcess,
) -> None:
    tools = await _tools(running_daemon)
    assert {"capture_episode", "work_search", "work_result", "forget"} <= set(tools)
    hints = {
        name: (
            t.annotations.read_only_hint,
            t.annotations.destructive_hint,
            t.annotations.idempotent_hint,
        )
        for name, t in tools.items()
        if name in {"capture_episode", "work_search", "work_result", "forget"}
    }
    assert hints == {
        "capture_episode": (False, False, False),
        "work_search": (True, False, False),
        "work_result": (False, False, True),
        "forget": (False, True, True),
    }
    for name in hints:
        description = tools[name].description or ""
        for part in ("Returns:", "Use when:", "Not for:", "Side effects:", "Errors:"):
            assert part in description, (name, part)
        assert tools[name].output_schema is not None, name


async def test_work_search_parameters_are_the_seeds(running_daemon: DaemonProcess) -> None:
    schema = (await _tools(running_daemon))["work_search"].input_schema
    props = schema["properties"]
    assert set(props) == set(SEED_PARAMETERS)
    assert not schema.get("required")
    for name, (json_type, default, bounds) in SEED_PARAMETERS.items():
        branch = _branch(props[name])
        assert branch.get("type", json_type) == json_type, name
        assert props[name].get("default") == default, name
        for key, value in bounds.items():
            assert branch[key] == value, (name, key)
        assert props[name].get("description"), name


async def test_work_search_output_schema_carries_every_seed_field(
    running_daemon: DaemonProcess,
) -> None:
    schema = (await _tools(running_daemon))["work_search"].output_schema
    defs = schema.get("$defs", {})

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[1]]
        return node

    # The seed promises available alone; results is sent too, empty when nothing was found.
    assert schema["required"] == ["available", "results"]
    floor = resolve(schema["properties"]["floor"])
    assert set(floor["properties"]) == {"min_trust", "include_pending", "semantic_used"}
    item = resolve(schema["properties"]["results"]["items"])
    assert list(item["properties"]) == SEED_FIELDS
    assert set(item["required"]) == SEED_REQUIRED


async def _capture(client: Client, **args: Any) -> dict[str, Any]:
    result = await client.call_tool("capture_episode", args)
    assert not result.is_error, result.content
    content: dict[str, Any] = result.structured_content
    return content


async def test_capture_then_search_detailed_and_concise(running_daemon: DaemonProcess) -> None:
    async with Client(shim(str(running_daemon.socket))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        first = await _capture(
            client,
            summary="ran make docs; sphinx warnings fixed",
            tool="make",
            duration_ms=950.0,
            result_size=4096,
            tags=["docs"],
        )
        second = await _capture(client, summary="published the docs to the wiki")
        jsonschema.validate(first, tools["capture_episode"].output_schema)
        # Without a session_id, this MCP connection's session chains them.
        assert second["prev_id"] == first["id"] and first["eligibility"] == "pending"
        await settled(running_daemon, first["id"], second["id"])

        detailed = await client.call_tool("work_search", {"query": "sphinx docs"})
        concise = await client.call_tool(
            "work_search", {"query": "sphinx docs", "response_format": "concise"}
        )
        terse = await client.call_tool(
            "work_search", {"query": "sphinx docs", "verbosity": "terse"}
        )
    schema = tools["work_search"].output_schema
    for result in (detailed, concise, terse):
        assert not result.is_error, result.content
        jsonschema.validate(result.structured_content, schema)
    full = detailed.structured_content
    assert full["available"] is True
    assert full["floor"] == {"min_trust": 0.3, "include_pending": False, "semantic_used": False}
    top = full["results"][0]
    assert list(top) == SEED_FIELDS
    assert (top["id"], top["tool"], top["channel"], top["caller"], top["vault"]) == (
        first["id"],
        "make",
        "mcp",
        "mcp-agent",
        "/ws/mcp",
    )
    assert (top["duration_ms"], top["result_size"], top["tags"]) == (950.0, 4096, ["docs"])
    assert top["task_result"] is None and top["blocked"] is False
    for trimmed in (concise.structured_content, terse.structured_content):
        item = trimmed["results"][0]
        assert not CONCISE_DROPS & set(item)
        assert None not in item.values() and [] not in item.values()
        assert {"id", "ts", "status", "eligibility", "trust"} <= set(item)


async def test_every_seed_parameter_can_be_called_at_once(running_daemon: DaemonProcess) -> None:
    async with Client(shim(str(running_daemon.socket))) as client:
        captured = await _capture(
            client,
            summary="ran the integration suite",
            tool="Bash",
            session_id="sess-all",
            status="error",
        )
        await client.call_tool("work_result", {"session_id": "sess-all", "task_result": 1})
        await settled(running_daemon, captured["id"])
        now = int(time.time())
        result = await client.call_tool(
            "work_search",
            {
                "query": "integration suite",
                "tool": "Bash",
                "session_id": "sess-all",
                "since": 1,
                "until": now + 60,
                "k": 200,
                "min_trust": 0.0,
                "include_pending": True,
                "any_caller": False,
                "semantic": True,
                "response_format": "detailed",
                "verbosity": "full",
            },
        )
    assert not result.is_error, result.content
    out = result.structured_content
    assert [r["id"] for r in out["results"]] == [captured["id"]]
    assert out["floor"] == {"min_trust": 0.0, "include_pending": True, "semantic_used": True}
    assert out["results"][0]["task_result"] == 1.0


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ({"query": ""}, "query"),
        ({"k": 0}, "k"),
        ({"k": 201}, "k"),
        ({"min_trust": 1.5}, "min_trust"),
        ({"since": 0}, "since"),
        ({"until": 0}, "until"),
        ({"response_format": "brief"}, "response_format"),
        ({"verbosity": "loud"}, "verbosity"),
    ],
)
async def test_out_of_range_input_is_rejected_with_a_clear_error(
    running_daemon: DaemonProcess, args: dict[str, Any], name: str
) -> None:
    async with Client(shim(str(running_daemon.socket))) as client:
        result = await client.call_tool("work_search", args)
    assert result.is_error
    assert name in text_of(result)


async def test_any_caller_needs_recall_mcp_admin(running_daemon: DaemonProcess) -> None:
    async with Client(shim(str(running_daemon.socket), agent="agent-b")) as b:
        theirs = await _capture(b, summary="rotated the TLS certificate")
        await settled(running_daemon, theirs["id"])
    async with Client(shim(str(running_daemon.socket), agent="agent-a")) as a:
        own = await a.call_tool("work_search", {"query": "TLS certificate"})
        refused = await a.call_tool("work_search", {"query": "TLS certificate", "any_caller": True})
    assert own.structured_content["results"] == []
    assert refused.is_error and "forbidden" in text_of(refused)
    async with Client(shim(str(running_daemon.socket), "--admin", agent="agent-a")) as admin:
        allowed = await admin.call_tool(
            "work_search", {"query": "TLS certificate", "any_caller": True}
        )
    assert not allowed.is_error, allowed.content
    [hit] = allowed.structured_content["results"]
    assert (hit["id"], hit["caller"]) == (theirs["id"], "agent-b")


async def test_work_result_and_forget_through_mcp(running_daemon: DaemonProcess) -> None:
    async with Client(shim(str(running_daemon.socket))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        failed = await _capture(
            client, summary="helm upgrade timed out", status="timeout", session_id="deploy-7"
        )
        verdict = await client.call_tool(
            "work_result", {"session_id": "deploy-7", "task_result": 0.5}
        )
        assert not verdict.is_error, verdict.content
        jsonschema.validate(verdict.structured_content, tools["work_result"].output_schema)
        assert (verdict.structured_content["matched"], verdict.structured_content["updated"]) == (
            1,
            1,
        )
        await settled(running_daemon, failed["id"])
        found = await client.call_tool("work_search", {"query": "helm"})
        assert [r["task_result"] for r in found.structured_content["results"]] == [0.5]

        forgotten = await client.call_tool("forget", {"id": failed["id"]})
        assert not forgotten.is_error, forgotten.content
        jsonschema.validate(forgotten.structured_content, tools["forget"].output_schema)
        assert forgotten.structured_content["kind"] == "episode"
        gone = await client.call_tool("work_search", {"query": "helm", "include_pending": True})
        assert gone.structured_content["results"] == []

        missing = await client.call_tool("work_result", {"episode_id": "ep_nope", "task_result": 1})
        both = await client.call_tool("work_result", {"task_result": 1})
        unknown = await client.call_tool("forget", {"id": "ep_nope"})
    assert missing.is_error and "not_found" in text_of(missing)
    assert both.is_error and "exactly one" in text_of(both)
    assert unknown.is_error and "not_found" in text_of(unknown)


async def test_without_a_daemon_work_search_says_unavailable(tmp_path: Path) -> None:
    async with Client(shim(str(tmp_path / "absent.sock"))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        with anyio.fail_after(10):
            result = await client.call_tool("work_search", {"query": "anything"})
    assert not result.is_error
    jsonschema.validate(result.structured_content, tools["work_search"].output_schema)
    assert result.structured_content["available"] is False
    assert "absent.sock" in result.structured_content["message"]


def test_the_work_modules_keep_the_client_light() -> None:
    loaded = daemon_side_loaded(
        "recall_client.mcp.work", "recall_client.ctl.episode_input", "recall_client.ctl.main"
    )
    assert loaded == []
