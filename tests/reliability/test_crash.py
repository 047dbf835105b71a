"""kill -9 under load: every acknowledged write survives exactly once, and the vector index
is made whole from SQLite."""

from __future__ import annotations

import os
import random
from functools import partial

import anyio

from ..conftest import DaemonProcess
from .harness import (
    FIGURES,
    Ledger,
    capture_load,
    check_ledger,
    integrity,
    retry_unacknowledged,
    snapshot_ids,
    vector_ids,
    wait_index_agrees,
)

TRIALS = 3
CLIENTS = 16


async def crash_trial(d: DaemonProcess, ledger: Ledger, rng: random.Random, run: str) -> None:
    """Capture from CLIENTS clients, kill -9 at a random moment, restart, check the ledger,
    retry what was never answered, check again, and wait for the index to agree."""
    kill_after = rng.uniform(0.05, 1.5)
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(capture_load, d.socket, ledger, clients=CLIENTS, run=run,
                              seed=rng.randrange(2**32)))
        await anyio.sleep(kill_after)
        d.kill()
    await d.start()
    check_ledger(d.data_dir, ledger)
    retried, replayed = await retry_unacknowledged(d.socket, ledger)
    FIGURES["crash: unanswered writes retried"] += retried
    FIGURES["crash: ... of which had committed (replayed)"] += replayed
    check_ledger(d.data_dir, ledger)
    await wait_index_agrees(d)


async def test_acknowledged_writes_survive_kill_9_exactly_once(daemon_factory) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("RECALLD_TEST_SEED", random.randrange(2**32)))
    print(f"seed {seed} (set RECALLD_TEST_SEED to replay)")
    rng = random.Random(seed)
    d = daemon_factory()
    ledger = Ledger()
    await d.start()
    for trial in range(TRIALS):
        before = len(ledger.acked)
        await crash_trial(d, ledger, rng, run=f"t{trial}")
        assert len(ledger.acked) > before, "the load acknowledged nothing before the kill"
    assert not ledger.errors, ledger.errors[:5]

    # A clean stop writes the snapshot: it must hold exactly SQLite's vectors.
    assert await d.stop() == 0
    ids, embedded = vector_ids(d.data_dir)
    assert snapshot_ids(d.data_dir) == ids and len(ids) == embedded
    assert integrity(d.data_dir) == "ok"

    FIGURES["crash: kill -9 trials"] += TRIALS
    FIGURES["crash: clients per trial"] = CLIENTS
    FIGURES["crash: acknowledged writes checked"] += len(ledger.acked)
