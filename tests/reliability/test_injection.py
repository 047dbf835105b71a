"""Texts that give their reader orders are low trust and flagged with what makes them so: an
explicit search still finds them, each hit carrying its instruction signals, except those that
move secrets out, kept below the floor and never served; ordinary notes phrased as advice stay
trusted and unflagged."""

from __future__ import annotations

import sqlite3

import pytest
from recall_client import protocol as p
from recalld.domain.instructions import instruction_signals
from recalld.domain.policy import TRUST_FLOOR as DEFAULT_TRUST_FLOOR
from recalld.ingest.trust import assess
from recalld.retrieval.memory_rows import LOW_TRUST

from tests.support.corpus import BENIGN_NOTES, INJECTIONS
from tests.support.daemon import DaemonProcess

from .harness import FIGURES


@pytest.mark.parametrize("text", INJECTIONS)
def test_an_instruction_to_the_reader_is_low_trust(text: str) -> None:
    trust, _blocked, reasons = assess(text)
    assert trust < LOW_TRUST and reasons, (trust, reasons)


@pytest.mark.parametrize("text", BENIGN_NOTES)
def test_advice_between_colleagues_stays_trusted(text: str) -> None:
    assert assess(text) == (1.0, False, [])


async def test_stored_injections_are_found_flagged_unless_they_move_secrets(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    async with d.client(agent="reader", workspace="/ws/inject") as rc:
        ids = {}
        for text in INJECTIONS + BENIGN_NOTES:
            ids[text] = (await rc.call(p.MemoryStore(text=text), p.Stored)).record_id
        served: dict[str, p.MemoryHit] = {}
        for text in INJECTIONS + BENIGN_NOTES:
            for mode in ("bm25", "hybrid"):
                result = await rc.call(
                    p.MemorySearch(query=text[:200], mode=mode, limit=50), p.MemorySearchResult
                )
                served |= {hit.id: hit for hit in result.hits}

    with sqlite3.connect(f"file:{d.data_dir / 'recalld.db'}?mode=ro", uri=True) as db:
        rows = {
            r[0]: (r[1], r[2]) for r in db.execute("SELECT id, trust, eligibility FROM records")
        }
    hidden = 0
    for text in INJECTIONS:
        trust, eligibility = rows[ids[text]]
        signals = instruction_signals(text)
        if "exfiltration" in signals:
            hidden += 1
            assert trust < DEFAULT_TRUST_FLOOR and eligibility in ("ineligible", "blocked"), text
            assert ids[text] not in served, f"a search served an exfiltration: {text!r}"
        else:
            assert DEFAULT_TRUST_FLOOR <= trust < LOW_TRUST and eligibility == "eligible", text
            hit = served.get(ids[text])
            assert hit is not None, f"an explicit search did not find {text!r}"
            assert hit.low_trust and tuple(hit.instruction_signals) == signals, text
    for text in BENIGN_NOTES:
        trust, eligibility = rows[ids[text]]
        assert trust >= DEFAULT_TRUST_FLOOR and eligibility == "eligible", text
        hit = served.get(ids[text])
        assert hit is not None, f"an ordinary note was not found: {text!r}"
        assert not hit.low_trust and hit.instruction_signals == [], text
    FIGURES["injection: instructions to the reader found flagged"] = len(INJECTIONS) - hidden
    FIGURES["injection: secrets moved out, kept below the floor"] = hidden
