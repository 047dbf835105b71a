"""kill -9 under load: every acknowledged write survives exactly once, and the vector index
is made whole from SQLite."""

from __future__ import annotations

import os
import random

from tests.support.daemon import DaemonFactory

from .harness import FIGURES, Ledger, crash_trial, integrity, snapshot_ids, vector_ids

TRIALS = 3
CLIENTS = 16


async def test_acknowledged_writes_survive_kill_9_exactly_once(
    daemon_factory: DaemonFactory,
) -> None:
    seed = int(os.environ.get("RECALLD_TEST_SEED", random.randrange(2**32)))
    print(f"seed {seed} (set RECALLD_TEST_SEED to replay)")
    rng = random.Random(seed)
    d = daemon_factory()
    ledger = Ledger()
    await d.start()
    for trial in range(TRIALS):
        retried, replayed = await crash_trial(d, ledger, rng, run=f"t{trial}", clients=CLIENTS)
        FIGURES["crash: unanswered writes retried"] += retried
        FIGURES["crash: ... of which had committed (replayed)"] += replayed
    assert not ledger.errors, ledger.errors[:5]

    # A clean stop writes the snapshot: it must hold exactly SQLite's vectors.
    assert await d.stop() == 0
    ids, embedded = vector_ids(d.data_dir)
    assert snapshot_ids(d.data_dir) == ids and len(ids) == embedded
    assert integrity(d.data_dir) == "ok"

    FIGURES["crash: kill -9 trials"] += TRIALS
    FIGURES["crash: clients per trial"] = CLIENTS
    FIGURES["crash: acknowledged writes checked"] += len(ledger.acked)
