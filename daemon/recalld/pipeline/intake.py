"""The head of the write pipeline for clients' requests: ingest, vectors, the writer.

A handler builds a :class:`RequestJob` from a request and hands it to :meth:`Intake.write`,
which runs the ingest stage on the request (nothing of it reaches the job unsanitised), lets
the job prepare what it derives from the ingested request, embeds what the job must store
with vectors (an experience and its lessons: merging lessons by meaning happens in their
transaction) in the model's priority lane, queues it for the writer and waits for its COMMIT.
:meth:`Intake.write_now` does the same without a task to wait in, for the many small writes
that need no wait before they queue: the writer calls back once it has committed them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import numpy as np
from recall_client import protocol as p

from ..domain.principal import Principal
from ..ingest import stage
from .model import Model
from .writer import WriteJob

__all__ = ["INGEST_THREADS", "Intake", "RequestJob"]

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

# Requests ingested in worker threads at once (big ones; small ones are ingested inline).
INGEST_THREADS = 2


class RequestJob(WriteJob[R_co]):
    """A write job made from a client's request, ``R_co`` its result (what :meth:`Intake.write`
    returns). ``ingested`` is set before ``prepare``."""

    __slots__ = ("ingested", "model", "principal", "request", "vectors")

    def __init__(self, principal: Principal, request: p.Request) -> None:
        super().__init__()
        self.principal = principal
        self.request = request
        self.ingested: stage.Ingested | None = None
        # Vectors of embed_texts() (row i, text i), when the model is up; and its name.
        self.vectors: np.ndarray | None = None
        self.model: str | None = None

    @property
    def clean(self) -> stage.Ingested:
        assert self.ingested is not None, "the intake ingests a request before its job runs"
        return self.ingested

    def prepare(self) -> None:
        """Derive what the job needs from the ingested request (on the event loop; raise
        RecallError for a request that cannot be written)."""

    def embed_texts(self) -> list[str]:
        """Texts to embed before the write (the job then stores their vectors with it)."""
        return []


class Intake:
    def __init__(
        self,
        submit: Callable[[WriteJob[Any]], Awaitable[None]],
        submit_nowait: Callable[[WriteJob[Any]], bool],
        model: Model,
        vectors_ready: Callable[[], bool],
    ) -> None:
        self._submit = submit
        self._submit_nowait = submit_nowait
        self._model = model
        self._vectors_ready = vectors_ready
        self._limiter = anyio.CapacityLimiter(INGEST_THREADS)

    async def write(self, job: RequestJob[R]) -> R:
        """Ingest, prepare, embed, write; the job's result once committed. A job that
        :meth:`write_now` ingested already is not ingested again.

        Raises:
            RecallError: from the ingest stage, the job, or the writer (busy, unavailable).
        """
        if job.ingested is None:
            job.ingested = await stage.run(job.request, self._limiter)
            job.prepare()
        texts = job.embed_texts()
        if texts and self._vectors_ready():
            # The caller is waiting: the priority lane, not behind the backlog's batches. A
            # model failure (None) costs the merge by meaning, not the write; the embedding
            # actor embeds the records later.
            job.vectors = await self._model.embed_now(texts)
            job.model = self._model.name if job.vectors is not None else None
        await self._submit(job)
        return await job.wait()

    def write_now(self, job: RequestJob[R], done: Callable[[WriteJob[R]], None]) -> bool:
        """:meth:`write` without a wait, when none is needed: ingest and prepare inline, queue,
        and have the writer call ``done(job)`` once it is committed (or failed) instead of
        waking a waiter. False when something would have to wait (a request big enough for a
        worker thread, texts to embed first, a full queue): nothing is queued, and
        :meth:`write` takes the job from where it is.

        Raises:
            RecallError: from the ingest stage, the job, or the writer (unavailable).
        """
        if job.ingested is None:
            if not stage.inline(job.request):
                return False
            job.ingested = stage.ingest(job.request)
            job.prepare()
        # A job that embeds also waits for its vectors to reach the index (WriteJob.wait).
        if job.embed_texts():
            return False
        job.on_done = done
        if self._submit_nowait(job):
            return True
        job.on_done = None
        return False
