"""Experiences with the real bundled all-MiniLM-L6-v2: found by meaning, lessons merged by
meaning."""

from __future__ import annotations

import pytest
from recall_client import protocol as p

from tests.support.daemon import DaemonFactory, DaemonProcess

pytestmark = pytest.mark.real_model

LOGIN = "Fixed the login bug where an expired token was accepted after logout"
BILLING = "Migrated the billing service from MySQL to PostgreSQL"
OTHERS = [
    "Cut CI build time by caching pip wheels between GitHub Actions runs",
    "Reduced the container image size with a multi-stage Dockerfile",
]
# Paraphrases sharing no word with the description they mean (measured cosines 0.52, 0.47;
# every other description scores below 0.11).
ABOUT_LOGIN = "users stay signed in with stale credentials"
ABOUT_BILLING = "move payments off one relational database onto another"
# Rewordings of one lesson (cosine 0.87) and a different lesson on the same topic (0.52).
LESSON = "Run the database migrations before starting the test suite."
REWORDED = "Apply DB migrations prior to running the tests."
DIFFERENT = "Never run migrations against production without a backup."


async def test_a_paraphrase_finds_what_lexical_search_misses_and_lessons_merge_by_meaning(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(embedder="minilm")
    await d.start(within_s=60)
    report = await d.status(wait_model_s=120)
    assert report.model.state == "ready", report.model.reason
    async with d.client() as rc:
        login = await rc.call(
            p.RecordExperience(description=LOGIN, status="success", lessons=[LESSON]),
            p.ExperienceRecorded,
        )
        billing = await rc.call(
            p.RecordExperience(
                description=BILLING, status="success", lessons=[REWORDED, DIFFERENT]
            ),
            p.ExperienceRecorded,
        )
        for text in OTHERS:
            await rc.call(p.RecordExperience(description=text), p.ExperienceRecorded)
        # No waiting for the embedding actor: a recorded experience is embedded on the way in.
        found = await rc.call(p.SearchExperience(query=ABOUT_LOGIN), p.ExperienceSearchResult)
        why = await rc.call(
            p.ExplainNode(record_id=login.record_id, query=ABOUT_LOGIN), p.NodeExplained
        )
        unrelated = await rc.call(
            p.SearchExperience(query="translate the README into French"), p.ExperienceSearchResult
        )
        ctx = await rc.call(p.GetExecutionContext(task=ABOUT_BILLING), p.ExecutionContext)

    assert found.semantic_used
    assert [e.id for e in found.experiences] == [login.record_id]
    assert why.ranking is not None
    assert why.ranking.lexical_rank is None and why.ranking.matched_terms == []
    assert why.ranking.cosine is not None and why.ranking.cosine >= 0.30
    assert (unrelated.experiences, unrelated.lessons) == ([], [])

    merged, different = billing.lessons
    assert merged.merged and merged.id == login.lessons[0].id and merged.text == LESSON
    assert (merged.support, merged.confidence) == (2, 0.75)
    assert not different.merged and different.id != merged.id
    assert [e.id for e in ctx.experiences] == [billing.record_id]
    assert {x.text for x in ctx.lessons} == {LESSON, DIFFERENT}

    # The same data, lexical search only: the paraphrase finds nothing.
    assert await d.stop() == 0
    d.embedder = "none"
    await d.start(within_s=60)
    async with d.client() as rc:
        lexical = await rc.call(p.SearchExperience(query=ABOUT_LOGIN), p.ExperienceSearchResult)
        by_words = await rc.call(
            p.SearchExperience(query="expired token login"), p.ExperienceSearchResult
        )
    assert not lexical.semantic_used
    assert (lexical.experiences, lexical.lessons) == ([], [])
    assert [e.id for e in by_words.experiences] == [login.record_id]
    assert await d.stop() == 0
