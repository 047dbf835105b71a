"""A store's own relevance calibration, learned from what its agents did with the hits.

memory_search scores a hit by :class:`~.relevance.Calibration` (a bias and a weight for each
channel's evidence). Every store starts from :data:`~.relevance.PRIOR`; each outcome
recorded with a use token (memory_record_use, or the context hook's items) that carries the
hit's evidence as it was served is one step of online logistic regression on it: "used" is
a 1, "ignored" a 0 of half the weight (an agent passes over hits it never needed), and
"contradicted" or "corrected" a 0.

Two calibrations learn from each outcome, both keyed by the user (``uid``; in a team
database also the member's role, which row-level security holds to its own rows):

- the **user's** (workspace ``""``), from all their outcomes, pulled toward the prior;
- the **workspace's**, from the outcomes in it, pulled toward the user's.

Each step is bounded: its rate shrinks as the updates add up, an L2 pull draws the weights
back toward the fallback, and the weights stay in a box (a channel's weight is never
negative: more evidence never lowers relevance). A search ranks by the workspace's
calibration blended with the user's by how many updates each has (a few outcomes move it a
little), the user's likewise with the prior. ``recallctl relevance reset`` deletes the rows:
the prior ranks again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from recall_client import protocol as p

from ..domain.use_tokens import Evidence
from ..store.port import CalibrationRow
from .relevance import PRIOR, Calibration

__all__ = ["USER", "Learned", "blend", "ranking", "step", "taught"]

# The workspace key of a user's own calibration, learned from all their outcomes.
USER = ""
# Updates at which a calibration counts as much as its fallback in the blend.
STRENGTH = 20.0
# The first step's rate; it halves by RATE_HALF updates.
RATE = 0.3
RATE_HALF = 300.0
# The L2 pull toward the fallback, a share of the distance per step (times the rate).
PULL = 0.02
# The box the weights stay in.
BIAS_RANGE = (-12.0, 2.0)
WEIGHT_RANGE = (0.0, 12.0)
# What an outcome says of the hit: its label and its weight.
LABELS: dict[str, tuple[float, float]] = {
    "used": (1.0, 1.0),
    "ignored": (0.0, 0.5),
    "contradicted": (0.0, 1.0),
    "corrected": (0.0, 1.0),
}

Source = Literal["workspace", "user", "prior"]


@dataclass(frozen=True, slots=True)
class Learned:
    """The calibration a search ranks by, where it comes from and how many updates it has."""

    calibration: Calibration
    source: Source
    updates: int
    user_updates: int

    def trace(self) -> dict[str, object]:
        """As explain's trace and memory_search's page show it."""
        c = self.calibration
        return {
            "source": self.source,
            "bias": round(c.bias, 3),
            "lexical": round(c.lexical, 3),
            "semantic": round(c.semantic, 3),
            "updates": self.updates,
            "user_updates": self.user_updates,
        }

    def shown(self) -> p.RelevanceCalibration:
        c = self.calibration
        return p.RelevanceCalibration(
            source=self.source,
            bias=round(c.bias, 4),
            lexical=round(c.lexical, 4),
            semantic=round(c.semantic, 4),
            updates=self.updates,
            user_updates=self.user_updates,
        )


def _of(row: CalibrationRow) -> Calibration:
    return Calibration(row.bias, row.lexical, row.semantic)


def blend(own: Calibration, updates: int, fallback: Calibration) -> Calibration:
    """``own`` weighed by its ``updates`` against ``fallback``."""
    share = updates / (updates + STRENGTH)
    return Calibration(
        share * own.bias + (1 - share) * fallback.bias,
        share * own.lexical + (1 - share) * fallback.lexical,
        share * own.semantic + (1 - share) * fallback.semantic,
    )


def _user(rows: Mapping[str, CalibrationRow]) -> Calibration:
    row = rows.get(USER)
    return PRIOR if row is None else blend(_of(row), row.updates, PRIOR)


def ranking(rows: Mapping[str, CalibrationRow], workspace: str) -> Learned:
    """The calibration a search of ``workspace`` ranks by, from the user's ``rows`` (by
    workspace, :data:`USER` for the user's own)."""
    user_row, own = rows.get(USER), rows.get(workspace) if workspace != USER else None
    user_updates = user_row.updates if user_row else 0
    if own is not None and own.updates:
        return Learned(
            blend(_of(own), own.updates, _user(rows)), "workspace", own.updates, user_updates
        )
    if user_updates:
        return Learned(_user(rows), "user", 0, user_updates)
    return Learned(PRIOR, "prior", 0, 0)


def _clip(value: float, bounds: tuple[float, float]) -> float:
    return min(bounds[1], max(bounds[0], value))


def step(
    current: Calibration,
    anchor: Calibration,
    updates: int,
    evidence: Evidence,
    label: float,
    weight: float,
) -> Calibration:
    """One bounded SGD step of logistic regression on (``evidence`` -> ``label``), pulled
    toward ``anchor``, its rate shrinking with the ``updates`` already made."""
    lexical, semantic = evidence
    error = label - current.relevance(lexical, semantic)
    rate = weight * RATE / (1.0 + updates / RATE_HALF)

    def moved(w: float, x: float, a: float) -> float:
        return w + rate * (error * x - PULL * (w - a))

    return Calibration(
        _clip(moved(current.bias, 1.0, anchor.bias), BIAS_RANGE),
        _clip(moved(current.lexical, lexical, anchor.lexical), WEIGHT_RANGE),
        _clip(moved(current.semantic, semantic, anchor.semantic), WEIGHT_RANGE),
    )


def taught(
    rows: Mapping[str, CalibrationRow],
    workspace: str,
    uid: int,
    evidence: Evidence,
    outcome: str,
    now: float,
) -> list[CalibrationRow]:
    """The user's and the workspace's rows after one ``outcome`` of a hit served with
    ``evidence``; none for an outcome that says nothing of relevance ("injected")."""
    if outcome not in LABELS or not all(math.isfinite(v) for v in evidence):
        return []
    label, weight = LABELS[outcome]
    out = []
    user_row = rows.get(USER)
    user_now = PRIOR if user_row is None else _of(user_row)
    user_n = user_row.updates if user_row else 0
    user_next = step(user_now, PRIOR, user_n, evidence, label, weight)
    out.append(CalibrationRow(USER, uid, *_fields(user_next), user_n + 1, now))
    if workspace != USER:
        # The workspace's fallback is the user's calibration as a search would blend it.
        anchor = blend(user_now, user_n, PRIOR)
        own = rows.get(workspace)
        own_now = anchor if own is None else _of(own)
        own_n = own.updates if own else 0
        own_next = step(own_now, anchor, own_n, evidence, label, weight)
        out.append(CalibrationRow(workspace, uid, *_fields(own_next), own_n + 1, now))
    return out


def _fields(c: Calibration) -> tuple[float, float, float]:
    return c.bias, c.lexical, c.semantic
