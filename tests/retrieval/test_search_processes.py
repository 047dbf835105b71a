"""memory_search in search processes: the same answers as in the daemon's threads, a process
that dies replaced with its search answered, and no process outliving the daemon."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest
from recall_client import protocol as p
from recall_client.client import RecallClient, RemoteError, connect
from recall_client.paths import read_admin_token

from tests.support.daemon import DaemonFactory, DaemonProcess, pid_alive, wait_pid_exit
from tests.support.memories import search, settled, store

TEXTS = [
    "the build cache lives in ~/.cache/bazel and is pruned weekly",
    "retries of flaky integration tests are capped at three",
    "the payments service talks to postgres through pgbouncer",
    "deploys go out on tuesdays after the release freeze lifts",
    "pin numpy below 2 for the legacy analytics jobs",
    "the staging database is refreshed from production every night",
    "lint runs ruff and mypy strict before the tests in CI",
    "the frontend bundles with vite and ships source maps to sentry",
]
QUERIES = [
    ("how are flaky tests retried", {}),
    ("database refresh", {"mode": "bm25"}),
    ("when do deploys happen", {"mode": "keyword"}),
    ("what does CI run first", {"explain": True}),
    ("numpy version for analytics", {"limit": 2, "verbose": True}),
    ("nothing about this at all", {}),
]


def search_processes(daemon_pid: int) -> list[int]:
    """The daemon's search processes (its children running the search entry)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == daemon_pid and b"recalld.retrieval.search_child" in cmdline:
            found.append(int(entry.name))
    return sorted(found)


def _pid(d: DaemonProcess) -> int:
    assert d.proc is not None
    return d.proc.pid


def _answer(result: p.MemorySearchResult) -> list[tuple[object, ...]]:
    """What a search answered, without what differs from one asking to the next (use tokens
    carry the time, took_ms the clock; the recency factor moves scores by ~1e-7 a second)."""
    return [
        (h.id, round(h.score, 2), h.relevance, tuple(h.match_terms), h.staleness_verdict, h.text)
        for h in result.hits
    ] + [(result.low_confidence, result.mode, result.semantic_used, len(result.cortex))]


async def _answers(d: DaemonProcess) -> list[list[tuple[object, ...]]]:
    async with d.client() as rc:
        return [_answer(await search(rc, q, **kw)) for q, kw in QUERIES]  # type: ignore[arg-type]


async def test_searches_in_processes_answer_as_the_threads_do(
    daemon_factory: DaemonFactory,
) -> None:
    # One worker: once it has its process, every memory_search runs there.
    d = await _one_worker_holding_texts(daemon_factory)
    async with d.client() as rc:
        workers = await _until_a_process(d, rc, "deploys")
        # A request the search refuses comes back typed from the process, which stays up.
        with pytest.raises(RemoteError) as refused:
            await search(rc, "deploys", mode="bm25", bm25=False)
        assert refused.value.code == "invalid_request"
        assert search_processes(_pid(d)) == workers
    in_processes = await _answers(d)
    assert any(hits[:-1] for hits in in_processes), "no search found anything"
    async with d.client() as rc:
        hit = (await search(rc, "flaky tests retried")).hits[0]
        used = await rc.call(p.MemoryRecordUse(use_token=hit.use_token), p.UseRecorded)
        assert [u.id for u in used.recorded] == [hit.id], (
            "a use token a search process issued is not the daemon's"
        )
    # The use also taught the store's relevance calibration: back to the prior (an admin's
    # reset), so both sides rank by the same one.
    async with connect(
        agent="tester", workspace="/ws/test", path=d.socket, admin_token=read_admin_token()
    ) as admin:
        await admin.call(p.RelevanceReset(), p.RelevanceCleared)
    assert await d.stop() == 0
    assert not [w for w in workers if pid_alive(w)], "a search process outlived a clean stop"

    d.extra_env["RECALLD_SEARCH_PROCESSES"] = "false"
    await d.start()
    await settled(d)
    in_threads = await _answers(d)
    assert search_processes(_pid(d)) == []
    # The use recorded above moves nothing the first query ranks by beyond its outcome
    # factor, which both sides see the same way now: compare from the second search on.
    assert in_processes[1:] == in_threads[1:]
    await d.stop()


async def test_a_killed_search_process_is_replaced_and_no_search_fails(
    daemon_factory: DaemonFactory,
) -> None:
    d = await _one_worker_holding_texts(daemon_factory)
    async with d.client() as rc:
        (first,) = await _until_a_process(d, rc, "payments postgres")
        os.kill(first, signal.SIGKILL)
        # The search that finds the process gone runs again in the worker's thread.
        again = await search(rc, "payments postgres")
        assert again.hits and again.hits[0].text == TEXTS[2]
        assert "search process lost" in d.log()
        (second,) = await _until_a_process(d, rc, "payments postgres")
        assert second != first
    await d.stop()


async def _one_worker_holding_texts(daemon_factory: DaemonFactory) -> DaemonProcess:
    """A daemon with one search worker, TEXTS stored and embedded."""
    d = daemon_factory(extra_env={"RECALLD_SEARCH_WORKERS": "1"})
    await d.start()
    async with d.client() as rc:
        for text in TEXTS:
            await store(rc, text)
    await settled(d)
    return d


async def _until_a_process(d: DaemonProcess, rc: RecallClient, query: str) -> list[int]:
    """Search until the daemon has a search process: the first searches of a worker (and
    those a few seconds after its process was lost) run in its thread while one starts."""
    with anyio.fail_after(20):
        while not (found := search_processes(_pid(d))):
            assert (await search(rc, query)).hits
            await anyio.sleep(0.1)
    return found


async def test_no_search_process_outlives_a_daemon_killed_by_kill_9(
    daemon_factory: DaemonFactory,
) -> None:
    d = daemon_factory()
    await d.start()
    async with d.client() as rc:
        await store(rc, TEXTS[0])
        await settled(d)
        workers = await _until_a_process(d, rc, "build cache")
    d.kill()
    for worker in workers:
        await wait_pid_exit(worker, within_s=10)


async def test_a_search_process_outlives_the_daemon_threads_that_come_and_go(
    daemon_factory: DaemonFactory,
) -> None:
    # anyio ends a worker thread idle for 10 s, and Linux sends a process its parent-death
    # signal when the thread that started it ends. Twice: quiet past that, then a burst of
    # reads and writes from a few connections (a burst takes threads, and ends idle ones).
    d = await _one_worker_holding_texts(daemon_factory)
    async with d.client() as rc:
        (first,) = await _until_a_process(d, rc, "deploys")

    async def burst(k: int) -> None:
        async with d.client() as rc:
            for i in range(3):
                await store(rc, f"burst {k}.{i}: the release freeze lifts on thursdays")
                assert (await search(rc, "release freeze")).hits

    for _ in range(2):
        await anyio.sleep(11)
        async with anyio.create_task_group() as tg:
            for k in range(4):
                tg.start_soon(burst, k)
    assert "search process lost" not in d.log()
    assert search_processes(_pid(d)) == [first]
    await d.stop()
