"""Every tool recall-mcp lists, through the MCP SDK's stdio client, in a git workspace with
commits: memories cite paths in the repository, later commits touch some of them (commit drift
is non-zero), and each tool's structured content must be a success that validates against the
outputSchema the shim published for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from mcp import Client

from tests.support.daemon import DaemonProcess
from tests.support.git import git
from tests.support.mcp_client import shim
from tests.support.memories import settled

pytestmark = pytest.mark.both_backends


class Calls:
    """Runs tools, validating each result, and remembers which tools it ran."""

    def __init__(self, client: Client, schemas: dict[str, dict[str, Any]]) -> None:
        self.client = client
        self.schemas = schemas
        self.ran: set[str] = set()

    async def __call__(self, name: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(name, args)
        assert not result.is_error, (name, args, result.content)
        content = result.structured_content
        assert isinstance(content, dict), (name, content)
        jsonschema.validate(content, self.schemas[name])
        self.ran.add(name)
        return content


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "proj"
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "deploy.sh").write_text("echo deploy\n")
    (repo / "src" / "auth.py").write_text("TOKEN_TTL = 60\n")
    (repo / "README.md").write_text("proj\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    (repo / "README.md").write_text("proj, two\n")
    git(repo, "commit", "-qam", "two")
    return repo


async def test_every_tool_validates_in_a_git_workspace_with_commits(
    running_daemon: DaemonProcess, tmp_path: Path, backend: str
) -> None:
    repo = _repo(tmp_path)
    async with Client(shim(str(running_daemon.socket), "--workspace", str(repo))) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        schemas = {}
        for name, tool in listed.items():
            assert tool.output_schema is not None, name
            schemas[name] = tool.output_schema
        call = Calls(client, schemas)

        deploy = await call(
            "memory_store",
            text="Deploys run ./deploy.sh from the repo root.",
            tags=["deploy"],
            paths=["deploy.sh"],
        )
        auth = await call(
            "memory_store", text="Token lifetime is set in src/auth.py as TOKEN_TTL.", tags=["auth"]
        )
        assert deploy["origin_repo"] == str(repo) and auth["origin_commit"]
        fact = await call(
            "memory_store", text="Release owner is Ada.", kind="fact", subject="owner"
        )
        await call(
            "memory_store",
            text="Release owner is Grace.",
            kind="fact",
            subject="owner",
            ts=1.0,
            depends_on=[{"id": deploy["id"], "note": "ships with it"}],
        )
        await settled(running_daemon)
        # No commit since: the drift count is zero.
        fresh = await call("memory_show", id=deploy["id"])
        assert fresh["commit_drift"]["count"] == 0 and fresh["commit_drift_count"] == 0

        # Commits after the memories: one touches a cited path, one touches none.
        (repo / "deploy.sh").write_text("echo deploy --fast\n")
        git(repo, "commit", "-qam", "faster deploy")
        (repo / "README.md").write_text("proj, three\n")
        git(repo, "commit", "-qam", "three")

        shown = await call("memory_show", id=deploy["id"])
        assert shown["commit_drift"]["count"] == 2
        assert shown["commit_drift"]["touching_cited_paths"] == 1
        untouched = await call("memory_show", id=auth["id"])
        assert untouched["commit_drift"]["count"] == 2
        assert untouched["commit_drift"]["touching_cited_paths"] == 0
        await call("memory_show", id=fact["id"])

        for args in (
            {},
            {"verbose": True},
            {"explain": True},
            {"expand_top": True},
            {"expand_top": True, "verbose": True, "mode": "bm25"},
        ):
            found = await call("memory_search", query="deploys run deploy.sh", **args)
            assert found["entries"] and found["entries"][0]["commit_drift_count"] == 2, args
        top = (await call("memory_search", query="token lifetime auth", expand_top=True))[
            "entries"
        ][0]
        assert top["id"] == auth["id"]
        await call("memory_search", query="release owner", verbose=True)
        hit = (await call("memory_search", query="token lifetime"))["entries"][0]
        await call("memory_record_use", use_token=hit["use_token"], outcome="ignored")
        await call(
            "memory_update", id=auth["id"], text="Token lifetime is TOKEN_TTL in src/auth.py."
        )
        verified = await call("memory_verify", id=deploy["id"], verified_paths=["deploy.sh"])
        assert verified["verified_commit"] == git(repo, "rev-parse", "HEAD")
        await call("memory_fact_resolve", subject="owner", accept=True)
        if backend == "postgres":
            preview = await call("memory_share", id=auth["id"])
            assert preview["shared"] is False and preview["record"]["id"] == auth["id"]
        else:
            # A local store has no team: the tool answers so, as a typed tool error.
            refused = await client.call_tool("memory_share", {"id": auth["id"]})
            assert refused.is_error and "no team to share with" in str(refused.content)
            call.ran.add("memory_share")

        episode = await call(
            "capture_episode",
            summary="pytest tests/test_auth.py failed on the token expiry",
            tool="Bash",
            status="error",
            session_id="sess-git",
            error_code="exit_1",
        )
        await call("work_result", session_id="sess-git", task_result=0.5)
        await settled(running_daemon)
        await call("work_search", query="token expiry pytest", include_pending=True)
        await call("work_search", query="token expiry pytest", response_format="concise")
        await call("forget", id=episode["id"])

        recorded = await call(
            "record_experience",
            description="Fixed the token expiry bug in src/auth.py",
            status="success",
            files=[str(repo / "src" / "auth.py"), "deploy.sh"],
            lessons=["Check token expiry on every request."],
        )
        await call("search_experience", query="token expiry bug")
        await call("explain_node", id=recorded["id"], query="token expiry")
        await call("get_execution_context", task="another token expiry bug")
        await call("forget_experience", id=recorded["id"])

    assert call.ran == set(listed), set(listed) - call.ran
