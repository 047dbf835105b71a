"""The experience tools through recall-mcp, driven by the MCP SDK's stdio client, against a
real daemon: schemas as the seed states them, every result validated against its outputSchema."""

from __future__ import annotations

from typing import Any

import anyio
import jsonschema  # type: ignore[import-untyped]
import pytest
from mcp import Client

from tests.support.daemon import BIN, DaemonFactory, DaemonProcess
from tests.support.light import daemon_side_loaded
from tests.support.mcp_client import hints_of, shim, text_of

pytestmark = pytest.mark.both_backends


@pytest.fixture
async def running_daemon(running_daemon: DaemonProcess) -> DaemonProcess:
    """The shared fixture's daemon once its model is up: it answers READY before the model
    loads, and merging lessons by meaning and the semantic channel need the model."""
    report = await running_daemon.status(wait_model_s=30)
    assert report.model.state == "ready", report.model.reason
    return running_daemon


TOOLS = (
    "record_experience",
    "search_experience",
    "explain_node",
    "forget_experience",
    "get_execution_context",
)
# The seed's ExperienceSummary and LessonSummary, field by field.
EXPERIENCE_FIELDS = [
    "id",
    "score",
    "description",
    "class",
    "agent",
    "strategy",
    "status",
    "tool_calls",
    "minutes",
    "files",
]
LESSON_FIELDS = ["text", "confidence", "support"]


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref") or node.get("items", {}).get("$ref")
    return schema["$defs"][ref.rsplit("/", 1)[1]] if ref else node


async def test_the_tools_are_listed_as_the_seed_describes_them(
    running_daemon: DaemonProcess,
) -> None:
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/mcp")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(TOOLS) <= set(tools)

    search = tools["search_experience"]
    props = search.input_schema["properties"]
    assert search.input_schema["required"] == ["query"]
    assert (props["query"]["minLength"], props["query"]["maxLength"]) == (1, 1000)
    assert (props["limit"]["minimum"], props["limit"]["maximum"], props["limit"]["default"]) == (
        1,
        20,
        5,
    )
    out = search.output_schema
    assert out is not None and out["title"] == "SearchExperienceResult"
    assert sorted(out["required"]) == ["experiences", "lessons"]
    experience = _resolve(out, out["properties"]["experiences"])
    lesson = _resolve(out, out["properties"]["lessons"])
    assert experience["title"] == "ExperienceSummary" and lesson["title"] == "LessonSummary"
    assert experience["required"] == EXPERIENCE_FIELDS
    assert lesson["required"] == LESSON_FIELDS
    assert (
        lesson["properties"]["confidence"]["minimum"],
        lesson["properties"]["confidence"]["maximum"],
    ) == (0, 1)
    assert lesson["properties"]["support"]["minimum"] == 1
    assert experience["properties"]["tool_calls"]["minimum"] == 0
    assert experience["properties"]["minutes"]["minimum"] == 0

    hints = {name: hints_of(tools[name]) for name in TOOLS}
    assert all(h is not None for h in hints.values())
    assert hints["search_experience"].read_only_hint and hints["search_experience"].idempotent_hint
    assert hints["explain_node"].read_only_hint and hints["get_execution_context"].read_only_hint
    assert (
        not hints["record_experience"].read_only_hint
        and not hints["record_experience"].destructive_hint
    )
    assert (
        hints["forget_experience"].destructive_hint and hints["forget_experience"].idempotent_hint
    )
    assert "class" in tools["record_experience"].input_schema["properties"]
    for name in TOOLS:
        assert tools[name].output_schema is not None, name
        text = tools[name].description or ""
        marks = [
            text.find(m) for m in ("Returns:", "Use when:", "Not for:", "Side effects:", "Errors:")
        ]
        assert all(m > 0 for m in marks) and marks == sorted(marks), name


async def test_record_search_explain_context_forget_round_trip(
    running_daemon: DaemonProcess,
) -> None:
    async with Client(shim(str(running_daemon.socket), "--workspace", "/ws/mcp")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}

        async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, args)
            assert not result.is_error, result.content
            jsonschema.validate(result.structured_content, tools[name].output_schema)
            assert result.structured_content is not None
            content: dict[str, Any] = result.structured_content
            return content

        login = await call(
            "record_experience",
            {
                "description": (
                    "Fixed the login bug where an expired token was accepted after logout"
                ),
                "status": "success",
                "strategy": "reproduce first",
                "class": "bugfix",
                "tool_calls": 40,
                "minutes": 12.5,
                "files": ["/ws/mcp/src/auth.py", "tests/test_auth.py"],
                "lessons": ["Check token expiry on every request."],
            },
        )
        again = await call(
            "record_experience",
            {
                "description": "Fixed token refresh after an expired session",
                "status": "failure",
                "lessons": ["check token expiry on every request"],
            },
        )
        found = await call("search_experience", {"query": "expired token login bug", "limit": 1})
        explained = await call(
            "explain_node", {"id": login["id"], "query": "expired token login bug"}
        )
        context = await call("get_execution_context", {"task": "another expired token login bug"})
        nothing = await call("search_experience", {"query": "translate the README into French"})
        forgotten = await call("forget_experience", {"id": login["id"]})
        after = await call("search_experience", {"query": "expired token login bug"})

        bad_limit = await client.call_tool("search_experience", {"query": "x", "limit": 21})
        bad_query = await client.call_tool("search_experience", {"query": ""})
        unknown = await client.call_tool("explain_node", {"id": "exp_nothing"})

    assert login["lessons"] == [
        {
            "text": "Check token expiry on every request.",
            "confidence": 0.6667,
            "support": 1,
            "merged": False,
        }
    ]
    assert again["lessons"][0]["merged"] and again["lessons"][0]["support"] == 2
    (top,) = found["experiences"]
    assert top["id"] == login["id"] and top["class"] == "bugfix" and top["agent"] == "shim-test"
    assert top["files"] == ["src/auth.py", "tests/test_auth.py"]
    assert found["lessons"] == [
        {"text": "Check token expiry on every request.", "confidence": 0.5, "support": 2}
    ]
    assert explained["ranking"]["rank"] == 1 and explained["ranking"]["passed_floor"]
    assert explained["experience"]["class"] == "bugfix"
    assert "Check token expiry on every request." in context["context"]
    assert nothing == {"experiences": [], "lessons": []}
    assert forgotten == {
        "id": login["id"],
        "already_forgotten": False,
        "lessons_weakened": 1,
        "lessons_retired": 0,
    }
    assert [e["id"] for e in after["experiences"]] == [again["id"]]
    assert after["lessons"][0]["support"] == 1
    assert bad_limit.is_error and "limit" in text_of(bad_limit)
    assert bad_query.is_error
    assert unknown.is_error and "not_found" in text_of(unknown)


def test_the_experience_tools_load_nothing_of_the_daemon_side() -> None:
    assert daemon_side_loaded("recall_client.mcp.experience") == []


async def test_the_experience_tools_wait_for_workspace_approval(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(extra_env={"RECALLD_REQUIRE_APPROVAL": "1"})
    await d.start()
    calls = {
        "record_experience": {"description": "Fixed the flaky upload test"},
        "search_experience": {"query": "flaky upload test"},
        "explain_node": {"id": "exp_any"},
        "forget_experience": {"id": "exp_any"},
        "get_execution_context": {"task": "fix another flaky test"},
    }
    async with Client(shim(str(d.socket), "--workspace", "/ws/gated")) as client:
        for name, args in calls.items():
            refused = await client.call_tool(name, args)
            assert refused.is_error, name
            assert "recallctl workspace approve /ws/gated" in text_of(refused), name
        with anyio.fail_after(60):
            approve = await anyio.run_process(
                [
                    str(BIN / "recallctl"),
                    "--socket",
                    str(d.socket),
                    "workspace",
                    "approve",
                    "/ws/gated",
                ],
                check=False,
            )
        assert approve.returncode == 0, approve.stderr
        recorded = await client.call_tool("record_experience", calls["record_experience"])
        found = await client.call_tool("search_experience", calls["search_experience"])
    assert not recorded.is_error and not found.is_error
    assert found.structured_content is not None
    assert [e["id"] for e in found.structured_content["experiences"]] == [
        recorded.structured_content["id"]
    ]
    assert await d.stop() == 0
