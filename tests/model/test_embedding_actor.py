"""The embedding actor gives way to client writes, but never for good."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import anyio
import pytest
from recalld.pipeline import embedding
from recalld.pipeline.model import Model
from recalld.pipeline.writer import WriteJob
from recalld.store.port import Reader

pytestmark = pytest.mark.anyio


async def _submit_nothing(job: WriteJob[object]) -> None:
    """The actor's submit; the wait before a batch never calls it."""


async def _wait(last_client_write: Callable[[], float]) -> None:
    """Run the actor's wait before a batch, with client writes as ``last_client_write`` says."""
    send, nudges = anyio.create_memory_object_stream[list[int]](1)
    with send, nudges:
        # The wait touches neither the model nor the reader: neither is opened for it.
        actor = embedding.EmbeddingActor(
            cast(Model, None),
            nudges,
            cast(Reader, None),
            _submit_nothing,
            batch=8,
            last_client_write=last_client_write,
            next_client_write=anyio.sleep_forever,
        )
        await actor._let_writes_pass()


async def test_a_batch_goes_at_once_when_no_client_is_writing() -> None:
    started = anyio.current_time()
    await _wait(lambda: -1e9)
    assert anyio.current_time() - started < embedding.WRITE_PAUSE_S


async def test_a_batch_waits_for_a_pause_in_the_writes() -> None:
    started = anyio.current_time()
    # Clients write for 0.3 s, then stop.
    await _wait(lambda: min(anyio.current_time(), started + 0.3))
    waited = anyio.current_time() - started
    assert 0.3 + embedding.WRITE_PAUSE_S <= waited < embedding.WRITE_YIELD_MAX_S


async def test_under_endless_writes_a_batch_still_goes_every_so_often(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embedding, "WRITE_YIELD_MAX_S", 0.4)
    started = anyio.current_time()
    await _wait(anyio.current_time)
    assert 0.4 <= anyio.current_time() - started < 0.8
