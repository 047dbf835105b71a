"""The pure cores memory_search is built of, each on its own: the time cues of a query and
the judgement of a memory's uses."""

from __future__ import annotations

import calendar
import math

import pytest
from recalld.retrieval.memory_rows import summary
from recalld.retrieval.time_cues import temporal_window
from recalld.retrieval.use_outcomes import judge_uses
from recalld.store.port import UseRow

DAY = 86400.0
# 2026-06-15 12:00 UTC
NOW = float(calendar.timegm((2026, 6, 15, 12, 0, 0)))
MIDNIGHT = float(calendar.timegm((2026, 6, 15, 0, 0, 0)))


@pytest.mark.parametrize(
    ("query", "window"),
    [
        ("what did we decide yesterday", (MIDNIGHT - DAY, MIDNIGHT)),
        ("what broke today", (MIDNIGHT, NOW)),
        ("the deploy 3 days ago", (NOW - 4 * DAY, NOW - 2 * DAY)),
        ("changes in the past 2 weeks", (NOW - 14 * DAY, NOW)),
        ("what happened last month", (NOW - 60 * DAY, NOW - 30 * DAY)),
        (
            "the migration in 2025",
            (
                float(calendar.timegm((2025, 1, 1, 0, 0, 0))),
                float(calendar.timegm((2026, 1, 1, 0, 0, 0))),
            ),
        ),
        ("when did the cache move", (None, None)),
    ],
)
def test_a_time_cue_names_its_window(query: str, window: tuple[float | None, float | None]) -> None:
    has_cue, start, end = temporal_window(query, NOW)
    assert has_cue
    assert (start, end) == window


def test_a_query_without_a_time_cue_has_no_window() -> None:
    assert temporal_window("how is the cache keyed", NOW) == (False, None, None)
    # A word that only contains a cue is not one.
    assert temporal_window("the agony of the todays module", NOW)[0] is False
    assert temporal_window("the timelines of the project", NOW)[0] is True


def test_time_cues_are_linear_in_a_long_query() -> None:
    query = "last " * 20_000 + "x"
    assert temporal_window(query, NOW)[0] is False


def _use(rowid: int, outcome: str, ts: float, note: str | None = None) -> UseRow:
    return UseRow(rowid=rowid, outcome=outcome, ts=ts, note=note)  # type: ignore[arg-type]


def test_negative_uses_lower_the_factor_a_contradiction_twice_as_much() -> None:
    since = {1: 0.0, 2: 0.0, 3: 0.0}
    uses = [_use(1, "ignored", 30.0), _use(2, "contradicted", 20.0, "wrong port")]
    out = judge_uses(uses, since)
    assert out[1].factor == pytest.approx(1.0 - 0.3 * (1.0 - math.exp(-1 / 2)))
    assert out[2].factor == pytest.approx(1.0 - 0.3 * (1.0 - math.exp(-2 / 2)))
    assert out[3].factor == 1.0 and out[3].negatives == []
    assert not out[1].unresolved_contradiction and out[2].unresolved_contradiction
    assert [(n.outcome, n.note) for n in out[2].negatives] == [("contradicted", "wrong port")]


def test_a_later_use_clears_what_came_before_it() -> None:
    # Newest first: used at 50 clears the contradiction at 40.
    out = judge_uses([_use(1, "used", 50.0), _use(1, "contradicted", 40.0)], {1: 0.0})
    assert out[1].factor == 1.0 and not out[1].unresolved_contradiction
    # A contradiction after the use still counts.
    out = judge_uses([_use(1, "contradicted", 60.0), _use(1, "used", 50.0)], {1: 0.0})
    assert out[1].unresolved_contradiction


def test_injections_and_uses_before_since_say_nothing() -> None:
    uses = [_use(1, "injected", 50.0), _use(1, "ignored", 10.0)]
    out = judge_uses(uses, {1: 20.0})
    assert out[1].factor == 1.0 and out[1].negatives == []


def test_the_factor_saturates_and_two_negatives_are_reported() -> None:
    uses = [_use(1, "contradicted", 100.0 - i) for i in range(50)]
    uses += [_use(1, "ignored", 40.0 - i) for i in range(5)]
    out = judge_uses(uses, {1: 0.0})
    assert 0.7 <= out[1].factor < 0.701
    assert [n.outcome for n in out[1].negatives] == ["contradicted", "ignored"]


def test_a_summary_is_cut_with_an_ellipsis() -> None:
    assert summary("short") == "short"
    cut = summary("word " * 100, 20)
    assert len(cut) <= 20 and cut.endswith("…")
