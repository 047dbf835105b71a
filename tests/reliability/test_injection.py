"""Texts that give their reader orders are marked low trust, below the default floor, and a
default search does not serve them; ordinary notes phrased as advice stay trusted."""

from __future__ import annotations

import sqlite3

import pytest
from recall_client import protocol as p
from recalld.domain.policy import TRUST_FLOOR as DEFAULT_TRUST_FLOOR
from recalld.ingest.trust import assess

from tests.support.corpus import BENIGN_NOTES, INJECTIONS
from tests.support.daemon import DaemonProcess

from .harness import FIGURES


@pytest.mark.parametrize("text", INJECTIONS)
def test_an_instruction_to_the_reader_scores_below_the_floor(text: str) -> None:
    trust, _blocked, reasons = assess(text)
    assert trust < DEFAULT_TRUST_FLOOR, (trust, reasons)


@pytest.mark.parametrize("text", BENIGN_NOTES)
def test_advice_between_colleagues_stays_trusted(text: str) -> None:
    trust, _blocked, reasons = assess(text)
    assert trust >= DEFAULT_TRUST_FLOOR, (trust, reasons)


async def test_stored_injections_are_kept_low_trust_and_not_served(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    async with d.client(agent="reader", workspace="/ws/inject") as rc:
        ids = {}
        for text in INJECTIONS + BENIGN_NOTES:
            ids[text] = (await rc.call(p.MemoryStore(text=text), p.Stored)).record_id
        served = set()
        for text in INJECTIONS + BENIGN_NOTES:
            for mode in ("bm25", "hybrid"):
                result = await rc.call(
                    p.MemorySearch(query=text[:200], mode=mode, limit=50), p.MemorySearchResult
                )
                served |= {hit.id for hit in result.hits}

    with sqlite3.connect(f"file:{d.data_dir / 'recalld.db'}?mode=ro", uri=True) as db:
        rows = {
            r[0]: (r[1], r[2]) for r in db.execute("SELECT id, trust, eligibility FROM records")
        }
    for text in INJECTIONS:
        trust, eligibility = rows[ids[text]]
        assert trust < DEFAULT_TRUST_FLOOR and eligibility in ("ineligible", "blocked"), text
        assert ids[text] not in served, f"a default search served an injection: {text!r}"
    for text in BENIGN_NOTES:
        trust, eligibility = rows[ids[text]]
        assert trust >= DEFAULT_TRUST_FLOOR and eligibility == "eligible", text
        assert ids[text] in served, f"an ordinary note was not found: {text!r}"
    FIGURES["injection: instructions to the reader kept below the floor"] = len(INJECTIONS)
