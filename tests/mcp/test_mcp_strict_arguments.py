"""Tools refuse arguments they do not declare: through recall-mcp, driven by the MCP SDK's stdio
client, on a real daemon. A misnamed argument is an error the model can fix, never a call that
quietly runs on the defaults."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from tests.support.daemon import DaemonProcess
from tests.support.mcp_client import shim, text_of
from tests.support.memories import settled

pytestmark = pytest.mark.both_backends

DESCRIPTION = "Moved the nightly backup job from cron to a systemd timer with persistent catch-up"
QUERY = "nightly backup systemd timer"


async def ok(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


async def refused(client: Client, name: str, args: dict[str, Any]) -> str:
    # A protocol error would raise here; a tool error comes back as a result.
    result = await client.call_tool(name, args)
    assert result.is_error, result.structured_content
    return text_of(result)


async def test_every_tool_lists_a_closed_input_schema(running_daemon: DaemonProcess) -> None:
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/strict")) as client:
        tools = (await client.list_tools()).tools
    assert {"memory_search", "record_experience", "work_search"} <= {t.name for t in tools}
    open_schemas = [
        t.name for t in tools if t.input_schema.get("additionalProperties") is not False
    ]
    assert open_schemas == []


async def test_record_experience_with_outcome_is_refused_and_stores_nothing(
    running_daemon: DaemonProcess,
) -> None:
    # Search matches by meaning too: wait for the model, as the experience tests do.
    report = await running_daemon.status(wait_model_s=30)
    assert report.model.state == "ready", report.model.reason
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/strict")) as client:
        message = await refused(
            client, "record_experience", {"description": DESCRIPTION, "outcome": "success"}
        )
        after_refusal = await ok(client, "search_experience", {"query": QUERY})
        # The Python name of ``class`` was ignored the same way.
        by_python_name = await refused(
            client, "record_experience", {"description": DESCRIPTION, "task_class": "ops"}
        )
        recorded = await ok(
            client,
            "record_experience",
            {"description": DESCRIPTION, "status": "success", "class": "ops"},
        )
        found = await ok(client, "search_experience", {"query": QUERY})

    assert message.startswith(
        "unknown argument 'outcome'; record_experience takes: description, status,"
    )
    assert "class" in message and "task_class" not in message
    assert after_refusal == {"experiences": [], "lessons": []}
    assert by_python_name.startswith("unknown argument 'task_class';")
    assert not recorded["duplicate"]
    [experience] = found["experiences"]
    assert experience["id"] == recorded["id"]
    assert (experience["status"], experience["class"]) == ("success", "ops")


async def test_an_unknown_argument_on_a_read_tool_is_refused(running_daemon: DaemonProcess) -> None:
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/strict")) as client:
        one = await refused(client, "memory_search", {"query": "backup timer", "limit": 3})
        two = await refused(client, "work_search", {"query": "backup", "limt": 3, "verbose": True})
        misnamed_id = await refused(client, "memory_show", {"memory_id": "mem_x"})

    assert one.startswith(
        "unknown argument 'limit'; memory_search takes: query, top_k, max_results,"
    )
    assert two.startswith("unknown arguments 'limt', 'verbose'; work_search takes: query,")
    assert " k," in two and "response_format" in two
    assert misnamed_id == "unknown argument 'memory_id'; memory_show takes: id"


async def test_declared_arguments_and_documented_aliases_still_work(
    running_daemon: DaemonProcess,
) -> None:
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/strict")) as client:
        note = {"text": "The nightly backup runs from a systemd timer.", "tags": ["backup"]}
        stored = await ok(client, "memory_store", note)
        await settled(running_daemon)
        by_top_k = await ok(client, "memory_search", {"query": "nightly backup timer", "top_k": 1})
        by_max_results = await ok(
            client, "memory_search", {"query": "nightly backup timer", "max_results": 1}
        )
        shown = await ok(client, "memory_show", {"id": stored["id"]})
        episodes = await ok(client, "work_search", {"verbosity": "terse", "k": 5})

    assert [e["id"] for e in by_top_k["entries"]] == [stored["id"]]
    assert [e["id"] for e in by_max_results["entries"]] == [stored["id"]]
    assert shown["tags"] == ["backup"]
    assert episodes["available"] is True
