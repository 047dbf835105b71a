"""Many clients at once: no error, no "database is locked", nothing lost or duplicated."""

from __future__ import annotations

import random

import anyio
from recall_client import protocol as p

from tests.support.daemon import DaemonProcess

from .harness import FIGURES, Attempt, Ledger, check_ledger, integrity, unique_text, unique_word
from .writes import SOCKET_WRITES

CLIENTS = 64
ROUNDS = 8
# Texts every client stores: concurrent identical captures must make one record.
SHARED = [f"shared note {i}: the staging database is rebuilt every night" for i in range(3)]


async def test_64_clients_mixing_captures_and_searches_lose_and_double_nothing(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    ledger = Ledger()
    shared: dict[str, list[p.Stored]] = {text: [] for text in SHARED}
    searches = 0

    async def client(n: int) -> None:
        nonlocal searches
        rng = random.Random(n)
        async with d.client(agent=f"mix-{n}", workspace="/ws/mix") as rc:
            for i in range(ROUNDS):
                write = SOCKET_WRITES[(n + i) % len(SOCKET_WRITES)]
                key = f"m-c{n}-w{i}"
                attempt = Attempt(write, f"mix-{n}", unique_text(rng, key), key)
                reply = await rc.call(write.request(attempt.text, key), write.reply)
                ledger.answered(attempt, write.record_id(reply))
                # Acknowledged means searchable at once, from the search workers' connections.
                found: p.Reply = await rc.call(write.search(unique_word(key)))
                assert write.record_id(reply) in write.hit_ids(found), key
                query = " ".join(rng.sample(attempt.text.split(), 3))
                await rc.call(p.MemorySearch(query=query, mode="hybrid"), p.MemorySearchResult)
                searches += 2
                if i % 3 == 0:
                    text = SHARED[i // 3]
                    shared[text].append(await rc.call(p.MemoryStore(text=text), p.Stored))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for n in range(CLIENTS):
                tg.start_soon(client, n)

    check_ledger(d.data_dir, ledger)
    assert len(ledger.acked) == CLIENTS * ROUNDS
    for text, replies in shared.items():
        assert len({r.record_id for r in replies}) == 1, f"{text!r} stored under several ids"
        assert sum(not r.duplicate for r in replies) == 1, f"{text!r} inserted more than once"
    log = d.log()
    assert "database is locked" not in log
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    assert integrity(d.data_dir) == "ok"
    FIGURES["concurrency: clients"] = CLIENTS
    acknowledged = len(ledger.acked) + sum(map(len, shared.values()))
    FIGURES["concurrency: captures acknowledged"] += acknowledged
    FIGURES["concurrency: searches answered"] += searches


async def test_one_idempotency_key_sent_at_once_from_many_connections_writes_once(
    running_daemon: DaemonProcess,
) -> None:
    replies: list[p.Stored] = []

    async def send() -> None:
        async with running_daemon.client(agent="twin", workspace="/ws/twin") as rc:
            replies.append(
                await rc.call(
                    p.MemoryStore(text="retry-safe capture", idempotency_key="same-key"), p.Stored
                )
            )

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(16):
                tg.start_soon(send)
    assert len({r.record_id for r in replies}) == 1
    assert sum(not r.replayed for r in replies) == 1
