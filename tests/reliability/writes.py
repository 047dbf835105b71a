"""Every way a record can be written, in one place, so each reliability test covers them all.

Two lists:

- ``SOCKET_WRITES``: the captures a client makes over the socket. The crash, concurrency,
  disk-full and soak loads draw from it, and check each acknowledged write by its text.
- ``WRITE_PATHS``: every path a user's text takes into the daemon end to end (the socket
  client, the MCP shim, recallctl). The secrets test pushes its corpus through each.

A new write (experiences, facts, ...) joins by adding an entry here; the tests pick it up.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from recall_client import protocol as p

from tests.support.daemon import BIN, DaemonProcess

__all__ = ["SOCKET_WRITES", "WRITE_PATHS", "SocketWrite", "WritePath"]


@dataclass(frozen=True, slots=True)
class SocketWrite:
    """One kind of capture over the socket, as the load generators use it."""

    name: str
    # (text, idempotency key) -> the request.
    request: Callable[[str, str | None], p.Request]
    reply: type[p.Reply]
    # The record id in the acknowledgement.
    record_id: Callable[[p.Reply], str]
    # SQL selecting the ids of the records holding a given text (one ``?``): an
    # acknowledged write must be found exactly once.
    locate: str
    # A search for one word of the text, and the record ids in its reply: an acknowledged
    # write is searchable (lexically) at once.
    search: Callable[[str], p.Request]
    hit_ids: Callable[[p.Reply], list[str]]


SOCKET_WRITES: tuple[SocketWrite, ...] = (
    SocketWrite(
        name="memory_store",
        request=lambda text, key: p.MemoryStore(text=text, idempotency_key=key),
        reply=p.Stored,
        record_id=lambda r: r.record_id,  # type: ignore[attr-defined]
        locate="SELECT id FROM records WHERE kind = 'memory' AND text = ?",
        search=lambda word: p.MemorySearch(query=word, mode="bm25"),
        hit_ids=lambda r: [h.id for h in r.hits],  # type: ignore[attr-defined]
    ),
    SocketWrite(
        name="capture_episode",
        request=lambda text, key: p.CaptureEpisode(summary=text, idempotency_key=key),
        reply=p.EpisodeCaptured,
        record_id=lambda r: r.record_id,  # type: ignore[attr-defined]
        locate="SELECT id FROM records WHERE kind = 'episode' AND text = ?",
        # Episodes are captured pending and partitioned by agent: the writer's own search,
        # including those not yet evaluated.
        search=lambda word: p.WorkSearch(query=word, include_pending=True),
        hit_ids=lambda r: [e.id for e in r.results],  # type: ignore[attr-defined]
    ),
    SocketWrite(
        name="record_experience",
        request=lambda text, key: p.RecordExperience(
            description=text, status="success", idempotency_key=key
        ),
        reply=p.ExperienceRecorded,
        record_id=lambda r: r.record_id,  # type: ignore[attr-defined]
        locate="SELECT id FROM records WHERE kind = 'experience' AND text = ?",
        search=lambda word: p.SearchExperience(query=word),
        hit_ids=lambda r: [e.id for e in r.experiences],  # type: ignore[attr-defined]
    ),
)


@dataclass(frozen=True, slots=True)
class WritePath:
    """One end-to-end path a user's text takes: ``store(daemon, texts, workspace)``."""

    name: str
    store: Callable[[DaemonProcess, Sequence[str], str], Awaitable[None]]
    # How many corpus texts one capture carries. A process per capture costs a second on a
    # busy machine, so the command-line paths take a pasted document of several.
    per_capture: int = 1


async def _via_socket(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    async with d.client(agent="secrets-socket", workspace=workspace) as rc:
        for text in texts:
            await rc.call(p.MemoryStore(text=text), p.Stored)


def shim_params(
    d: DaemonProcess, workspace: str, agent: str = "secrets-mcp"
) -> StdioServerParameters:
    """recall-mcp as an agent host spawns it, pointed at ``d``."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "XDG_RUNTIME_DIR")}
    env["RECALLD_SOCKET"] = str(d.socket)
    return StdioServerParameters(
        command=str(BIN / "recall-mcp"),
        args=["--agent", agent, "--workspace", workspace],
        env=env,
    )


async def _via_mcp(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    async with Client(shim_params(d, workspace)) as client:
        for text in texts:
            result = await client.call_tool("memory_store", {"text": text})
            assert not result.is_error, result.content


async def _facts_via_socket(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    async with d.client(agent="secrets-socket", workspace=workspace) as rc:
        for i, text in enumerate(texts):
            await rc.call(
                p.MemoryStore(text=text, kind="fact", subject=f"staging access {i}"), p.Stored
            )


async def _updates_via_mcp(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    # A harmless note, then corrected to hold the secret: memory_update is a write path too.
    async with Client(shim_params(d, workspace)) as client:
        for i, text in enumerate(texts):
            stored = await client.call_tool("memory_store", {"text": f"to be corrected {i}"})
            assert not stored.is_error, stored.content
            assert stored.structured_content is not None
            result = await client.call_tool(
                "memory_update", {"id": stored.structured_content["id"], "text": text}
            )
            assert not result.is_error, result.content


async def _experiences_via_socket(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    async with d.client(agent="secrets-socket", workspace=workspace) as rc:
        for text in texts:
            await rc.call(
                p.RecordExperience(
                    description=text, strategy=text, lessons=[text], status="success"
                ),
                p.ExperienceRecorded,
            )


async def _experiences_via_mcp(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    async with Client(shim_params(d, workspace)) as client:
        for text in texts:
            result = await client.call_tool(
                "record_experience",
                {"description": text, "strategy": text, "lessons": [text], "status": "failure"},
            )
            assert not result.is_error, result.content


async def _episodes_via_socket(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    async with d.client(agent="secrets-socket", workspace=workspace) as rc:
        for text in texts:
            await rc.call(p.CaptureEpisode(summary=text, tool="Bash"), p.EpisodeCaptured)


async def _episodes_via_mcp(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    async with Client(shim_params(d, workspace)) as client:
        for text in texts:
            result = await client.call_tool("capture_episode", {"summary": text, "tool": "Bash"})
            assert not result.is_error, result.content


async def _episodes_via_hooks(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    # What a Claude Code PostToolUse hook hands `recallctl capture`: the command it ran (with
    # whatever secret was on its command line) and what it printed.
    lines = [
        json.dumps(
            {
                "session_id": "secrets-session",
                "cwd": workspace,
                "hook_event_name": "PostToolUse",
                "tool_name": "Bash",
                "tool_use_id": f"toolu_{i:04}",
                "tool_input": {"command": text, "description": "set up credentials"},
                "tool_response": {"stdout": text, "stderr": "", "interrupted": False},
            }
        )
        for i, text in enumerate(texts)
    ]
    await anyio.to_thread.run_sync(
        partial(ctl, d, workspace, "--agent", "secrets-hook", "capture", stdin="\n".join(lines))
    )


def ctl(d: DaemonProcess, workspace: str, *args: str, stdin: str | None = None) -> str:
    """Run recallctl against ``d``; returns stdout, raises on failure. Global options (such
    as ``--agent``) may lead ``args``."""
    out = subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), "--workspace", workspace, *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )
    assert out.returncode == 0, f"recallctl {args[0]} failed: {out.stderr}"
    return out.stdout


async def _via_ctl_argv(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    # One process per text, as a hook would run it; a few at a time to bound the wall time.
    limiter = anyio.CapacityLimiter(4)
    async with anyio.create_task_group() as tg:
        for text in texts:
            # "--": a text may start with "-----BEGIN ..."; argparse must not read it as options.
            store = partial(ctl, d, workspace, "store", "--", text)
            tg.start_soon(partial(anyio.to_thread.run_sync, store, limiter=limiter))


async def _via_ctl_stdin(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    limiter = anyio.CapacityLimiter(4)
    async with anyio.create_task_group() as tg:
        for text in texts:
            store = partial(ctl, d, workspace, "store", "-", stdin=text)
            tg.start_soon(partial(anyio.to_thread.run_sync, store, limiter=limiter))


async def _via_ctl_import(d: DaemonProcess, texts: Sequence[str], workspace: str) -> None:
    # A JSON Lines file handed to `recallctl import -`, as a restore or a migration would.
    # Rows as export writes them (every field a record has), one id each.
    now = time.time()
    lines = "\n".join(
        json.dumps(
            {
                "id": f"mem_import{i}_{uuid.uuid4().hex[:8]}",
                "kind": "memory",
                "text": text,
                "workspace": workspace,
                "agent": "importer",
                "ts": now,
                "created_at": now,
                "updated_at": now,
                "trust": 1.0,
                "eligibility": "eligible",
                "memory": {"origin": workspace, "last_verified_at": now},
            }
        )
        for i, text in enumerate(texts)
    )
    await anyio.to_thread.run_sync(partial(ctl, d, workspace, "import", "-", stdin=lines))


WRITE_PATHS: tuple[WritePath, ...] = (
    WritePath("socket memory_store", _via_socket),
    WritePath("mcp memory_store", _via_mcp),
    WritePath("recallctl store TEXT", _via_ctl_argv, per_capture=8),
    WritePath("recallctl store - (stdin)", _via_ctl_stdin, per_capture=8),
    WritePath("socket memory_store (fact)", _facts_via_socket),
    WritePath("mcp memory_update", _updates_via_mcp),
    WritePath("socket record_experience", _experiences_via_socket),
    WritePath("mcp record_experience", _experiences_via_mcp),
    WritePath("socket capture_episode", _episodes_via_socket),
    WritePath("mcp capture_episode", _episodes_via_mcp),
    WritePath("recallctl capture (hook payloads)", _episodes_via_hooks),
    WritePath("recallctl import - (JSON Lines)", _via_ctl_import),
)
