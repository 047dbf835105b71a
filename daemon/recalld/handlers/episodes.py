"""Work episodes (seed 001): capture, verdicts, and work_search.

An episode is captured ``pending``: the ingest stage redacted and trust-scored it, the store
chains it to its session's previous episode, and the evaluation actor settles it by the
policy (:func:`recalld.domain.policy.settle_episode`). ``blocked`` and ``ineligible`` are
final; a later verdict does not reopen them. work_search reads under the reader contract of
:mod:`recalld.retrieval.work_reader`.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Literal

from recall_client import protocol as p

from ..domain.principal import Principal
from ..pipeline.intake import RequestJob
from ..retrieval import work_reader
from ..store.port import WriteTx
from .services import Services

__all__ = ["capture", "capture_job", "search", "set_verdict"]


class _Capture(RequestJob[p.EpisodeCaptured]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.EpisodeCaptured:
        assert self.clean.trust is not None
        reply, rowid = tx.episodes.capture(
            self.principal, self.clean.request, self.clean.trust, now
        )
        if rowid is not None:
            self.new_rowids.append(rowid)
        # Kinds of secret the ingest stage redacted from the episode, e.g. ["aws_key"].
        reply.redacted = self.clean.redacted
        return reply


class _Verdict(RequestJob[p.VerdictSet]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.VerdictSet:
        reply, changed = tx.episodes.set_verdict(self.principal, self.clean.request, now)
        # Wakes the evaluation actor: episodes waiting for this verdict can settle now.
        self.new_rowids.extend(changed)
        return reply


def capture_job(services: Services, who: Principal, req: p.CaptureEpisode) -> _Capture:
    """capture_episode's write job (nothing to read before it)."""
    return _Capture(who, req)


async def capture(services: Services, who: Principal, req: p.CaptureEpisode) -> p.EpisodeCaptured:
    """capture_episode; returns once it has committed."""
    return await services.write(capture_job(services, who, req))


async def set_verdict(services: Services, who: Principal, req: p.WorkResult) -> p.VerdictSet:
    """work_result: judge one episode or a session.

    Raises:
        RecallError: ``not_found``.
    """
    return await services.write(_Verdict(who, req))


def _response_format(services: Services, req: p.WorkSearch) -> Literal["concise", "detailed"]:
    if req.response_format is not None:
        return req.response_format
    if req.verbosity is not None:
        return "concise" if req.verbosity == "terse" else "detailed"
    return services.settings().response_format


async def search(services: Services, who: Principal, req: p.WorkSearch) -> p.WorkSearchResult:
    """work_search under the reader contract.

    Raises:
        RecallError: ``busy`` / ``unavailable``.
    """
    started = time.perf_counter()
    # Without a model, or when it fails, the search degrades to lexical.
    async with services.query_vector(req.query if req.semantic else None) as qvec:
        result: p.WorkSearchResult = await services.read(
            partial(
                work_reader.search,
                who=who,
                req=req,
                qvec=qvec,
                response_format=_response_format(services, req),
            )
        )
    result.took_ms = round((time.perf_counter() - started) * 1000, 3)
    return result
