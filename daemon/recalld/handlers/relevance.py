"""The relevance calibration a store learned from use: shown (relevance_show) and reset
(relevance_reset, admin). What it learns, and how, is ``retrieval.learned_relevance``; the
lessons themselves are taught by memory_record_use (``handlers.memories``)."""

from __future__ import annotations

from functools import partial

from recall_client import protocol as p

from ..domain.principal import Principal
from ..pipeline.intake import RequestJob
from ..retrieval import learned_relevance
from ..retrieval.relevance import PRIOR
from ..store.port import Reader, WriteTx
from .services import Services

__all__ = ["reset", "show"]


def _shown(reader: Reader, who: Principal) -> p.RelevanceShown:
    rows = reader.memories.calibrations(who.workspace, who.uid)
    prior = learned_relevance.Learned(PRIOR, "prior", 0, 0)
    return p.RelevanceShown(
        workspace=who.workspace,
        calibration=learned_relevance.ranking(rows, who.workspace).shown(),
        prior=prior.shown(),
    )


async def show(services: Services, who: Principal, req: p.RelevanceShow) -> p.RelevanceShown:
    """relevance_show: what the caller's workspace's searches rank by."""
    result: p.RelevanceShown = await services.read(partial(_shown, who=who))
    return result


class _Reset(RequestJob[p.RelevanceCleared]):
    __slots__ = ()

    def apply(self, tx: WriteTx, now: float) -> p.RelevanceCleared:
        req: p.RelevanceReset = self.clean.request
        who = self.principal
        # The caller's own rows: their uid's, and in a team database their role's (its
        # row-level security), so no one's reset touches another's calibration.
        cleared = tx.memories.clear_calibrations(
            who.uid, who.workspace if req.workspace_only else None
        )
        return p.RelevanceCleared(cleared=cleared)


async def reset(services: Services, who: Principal, req: p.RelevanceReset) -> p.RelevanceCleared:
    """relevance_reset: forget what the caller's stores learned; the prior ranks again."""
    return await services.write(_Reset(who, req))
