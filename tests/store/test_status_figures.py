"""The engines' status figures are the status reply's fields by name: each figure the port
declares reaches the reply unchanged (a renamed figure or reply field fails here)."""

from __future__ import annotations

import dataclasses

from recalld.handlers.status import database_status, index_status
from recalld.store.port import DatabaseFigures, IndexFigures


def test_every_index_figure_reaches_the_reply() -> None:
    figures = IndexFigures(type="hnsw", size=7, dim=384, model="m", rebuilt_reason="stale")
    shown = index_status(figures)
    for f in dataclasses.fields(IndexFigures):
        assert getattr(shown, f.name) == getattr(figures, f.name), f.name
    assert index_status(None).size == 0


def test_every_database_figure_reaches_the_reply_and_answers_is_its_state() -> None:
    figures = DatabaseFigures(
        engine="postgresql",
        location="postgresql://db/x",
        answers=False,
        since=1.5,
        error="refused",
        role="alice",
        connections=3,
        connections_max=9,
    )
    shown = database_status(figures)
    for f in dataclasses.fields(DatabaseFigures):
        if f.name != "answers":
            assert getattr(shown, f.name) == getattr(figures, f.name), f.name
    assert shown.state == "unavailable"
    assert database_status(dataclasses.replace(figures, answers=True)).state == "ok"
