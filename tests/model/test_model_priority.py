"""The model's lanes: the backlog's batches on a thread of the lowest CPU priority, a query
on a normal thread, never waiting behind a batch that is running."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence

import anyio
import numpy as np
import pytest
from recalld.pipeline.low_priority import LOWEST
from recalld.pipeline.model import Model

pytestmark = pytest.mark.anyio


class _Probe:
    """An embedder that notes the priority of the thread each call runs on; a call for
    "batch" holds its thread until ``release`` is set."""

    name = "probe"
    dim = 4

    def __init__(self) -> None:
        self.release = threading.Event()
        self.batch_running = threading.Event()
        self.nice: dict[str, int] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.nice[texts[0]] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        if texts[0] == "batch":
            self.batch_running.set()
            assert self.release.wait(10), "the test never released the batch"
        return np.zeros((len(texts), self.dim), dtype=np.float32)


async def test_a_query_runs_beside_a_batch_and_above_its_priority() -> None:
    model = Model("hash")
    await model.load()
    probe = _Probe()
    model.embedder = probe
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(model.embed_batch, ["batch"])
            with anyio.fail_after(5):
                assert await anyio.to_thread.run_sync(probe.batch_running.wait, 5)
                # The batch holds its thread: the query is answered all the same.
                assert await model.embed_query("query") is not None
            probe.release.set()
    finally:
        probe.release.set()
        model.close()
    if sys.platform == "linux":
        assert probe.nice["batch"] == LOWEST
        assert probe.nice["query"] == os.getpriority(os.PRIO_PROCESS, 0)
