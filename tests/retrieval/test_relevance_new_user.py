"""What a new user meets on a small project store, with the real bundled all-MiniLM-L6-v2:
the right memory first, scores that say how relevant a hit is (not its rank), and a context
block only when a memory answers the prompt."""

from __future__ import annotations

import pytest
from recall_client import protocol as p

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.memories import search, settled, store

pytestmark = pytest.mark.real_model

NOTES = [
    "Run `make migrate` to apply the database migrations before starting the dev server.",
    "PostgreSQL 16 runs on port 5433 in the docker compose setup.",
    "CI runs on GitHub Actions; the workflow is .github/workflows/ci.yml.",
    "Tests live under tests/ and run with `pytest -q`.",
    "API keys are read from .env, which is never committed.",
]
RUFF = "Always use ruff format, never black."
FORMATTER = "Which formatter should I run before committing?"
UNANSWERED = "How do I rotate the TLS certificates of the staging load balancer?"


@pytest.fixture
async def project(daemon_factory: DaemonFactory) -> DaemonProcess:
    d = daemon_factory(embedder="minilm")
    await d.start(within_s=60)
    async with d.client(agent="a", workspace="/work/project") as rc:
        for text in NOTES:
            await store(rc, text)
        await store(rc, RUFF, kind="fact", subject="formatter")
    await settled(d)
    return d


async def test_the_formatter_fact_ranks_first_and_the_unrelated_notes_score_low(
    project: DaemonProcess,
) -> None:
    async with project.client(agent="a", workspace="/work/project") as rc:
        found = await search(rc, FORMATTER, min_score=0.0, verbose=True)
    assert found.hits[0].text == RUFF
    # Below the formatter fact, nothing claims to be relevant: no rank-normalised 1.000.
    assert all(h.score < 0.25 for h in found.hits[1:]), [(h.text, h.score) for h in found.hits]
    # A request's own words ("run", "should") are not what a memory matches on.
    assert all("should" not in h.match_terms for h in found.hits)


async def test_a_prompt_no_memory_answers_is_low_confidence_and_gets_no_block(
    project: DaemonProcess,
) -> None:
    async with project.client(agent="a", workspace="/work/project") as rc:
        found = await search(rc, UNANSWERED)
        block = await rc.call(
            p.ContextBlock(event="prompt", session_id="s1", prompt=UNANSWERED),
            p.ContextInjected,
        )
    assert found.low_confidence
    assert found.hits == [], [(h.text, h.score) for h in found.hits]
    assert block.items == [] and block.text == ""


async def test_the_prompt_block_injects_the_formatter_fact_and_nothing_unrelated(
    project: DaemonProcess,
) -> None:
    async with project.client(agent="a", workspace="/work/project") as rc:
        block = await rc.call(
            p.ContextBlock(event="prompt", session_id="s2", prompt=FORMATTER), p.ContextInjected
        )
    assert "ruff format" in block.text
    for unrelated in ("5433", "make migrate", "GitHub Actions", ".env"):
        assert unrelated not in block.text, block.text
