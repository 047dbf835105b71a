"""Experiences and lessons (seed 000) through a real daemon: record, search, explain, forget."""

from __future__ import annotations

import pytest
from recall_client import protocol as p
from recall_client.client import RecallClient, RemoteError

from tests.support.daemon import DaemonFactory, DaemonProcess
from tests.support.episodes import database_bytes

pytestmark = pytest.mark.both_backends

LOGIN = "Fixed the login bug where an expired token was accepted after logout"
CI = "Cut CI build time by caching pip wheels between GitHub Actions runs"
DOCKER = "Reduced the container image size with a multi-stage Dockerfile"


@pytest.fixture
async def running_daemon(running_daemon: DaemonProcess) -> DaemonProcess:
    """The shared fixture's daemon once its model is up: it answers READY before the model
    loads, and merging lessons by meaning and the semantic channel need the model."""
    report = await running_daemon.status(wait_model_s=30)
    assert report.model.state == "ready", report.model.reason
    return running_daemon


async def record(rc: RecallClient, description: str, **kw: object) -> p.ExperienceRecorded:
    return await rc.call(p.RecordExperience(description=description, **kw), p.ExperienceRecorded)  # type: ignore[arg-type]


async def search(rc: RecallClient, query: str, limit: int = 5) -> p.ExperienceSearchResult:
    return await rc.call(p.SearchExperience(query=query, limit=limit), p.ExperienceSearchResult)


async def test_search_returns_the_matching_experience_first_with_every_seed_field(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        login = await record(
            rc,
            LOGIN,
            status="success",
            strategy="reproduce with a stale token, then fix the check",
            task_class="bugfix",
            tool_calls=42,
            minutes=17.5,
            files=["src/auth.py", "tests/test_auth.py"],
            lessons=["Check token expiry on every request, not only at login."],
        )
        await record(rc, CI, status="success", task_class="ops")
        await record(rc, DOCKER, status="failure", task_class="ops")
        result = await search(rc, "expired token login bug")
    assert result.experiences, "nothing found"
    top = result.experiences[0]
    assert top.id == login.record_id
    assert (top.description, top.task_class, top.agent, top.status) == (
        LOGIN,
        "bugfix",
        "tester",
        "success",
    )
    assert top.strategy == "reproduce with a stale token, then fix the check"
    assert (top.tool_calls, top.minutes) == (42, 17.5)
    assert top.files == ["src/auth.py", "tests/test_auth.py"]
    assert 0 < top.score <= 1
    assert [e.score for e in result.experiences] == sorted(
        (e.score for e in result.experiences), reverse=True
    )
    assert [lesson.text for lesson in result.lessons] == [
        "Check token expiry on every request, not only at login."
    ]
    lesson = result.lessons[0]
    assert lesson.support == 1
    assert lesson.confidence == pytest.approx(2 / 3, abs=1e-4)


async def test_limit_caps_the_experiences_returned(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        for i in range(7):
            await record(rc, f"Fixed flaky upload test number {i} by retrying on timeout")
        assert len((await search(rc, "flaky upload test")).experiences) == 5  # the default
        assert len((await search(rc, "flaky upload test", limit=2)).experiences) == 2
        assert len((await search(rc, "flaky upload test", limit=20)).experiences) == 7


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": 21}, "limit"),
        ({"query": ""}, "query"),
        ({"query": "x" * 1001}, "query"),
    ],
)
async def test_out_of_range_search_input_is_a_typed_error_and_the_daemon_stays_up(
    running_daemon: DaemonProcess, fields: dict[str, object], complaint: str
) -> None:
    async with running_daemon.client() as rc:
        with pytest.raises(RemoteError) as info:
            await rc.call(_unchecked(p.SearchExperience, **fields), p.ExperienceSearchResult)
        assert info.value.code == "invalid_request"
        assert complaint in info.value.message
        ok = await search(rc, "x" * 1000, limit=20)
    assert ok.experiences == []


def _unchecked(cls: type[p.Request], **fields: object) -> p.Request:
    """A request Struct holding out-of-range values (msgspec checks bounds on decode only)."""
    return cls(**fields)  # type: ignore[arg-type]


async def test_nothing_similar_enough_gives_two_empty_lists(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        empty = await search(rc, "expired token login bug")
        await record(rc, LOGIN, status="success", lessons=["Check token expiry on every request."])
        await record(rc, CI, status="success", lessons=["Cache pip wheels in CI."])
        unrelated = await search(rc, "translate the README into French")
        one_word_of_four = await search(rc, "kubernetes helm chart token")
    assert (empty.experiences, empty.lessons) == ([], [])
    assert (unrelated.experiences, unrelated.lessons) == ([], [])
    assert unrelated.semantic_used
    assert (one_word_of_four.experiences, one_word_of_four.lessons) == ([], [])


async def test_a_search_sees_only_its_own_workspace(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(workspace="/ws/a") as a:
        await record(a, LOGIN, lessons=["Check token expiry on every request."])
    async with running_daemon.client(workspace="/ws/b") as b:
        result = await search(b, "expired token login bug")
    assert (result.experiences, result.lessons) == ([], [])


async def test_lessons_merge_by_text_and_by_meaning_and_confidence_follows_the_outcomes(
    running_daemon: DaemonProcess,
) -> None:
    lesson = "Pin the numpy version before upgrading torch."
    async with running_daemon.client() as rc:
        first = await record(
            rc, "Upgraded torch to 2.13 in the training image", status="success", lessons=[lesson]
        )
        # Same words, other case and punctuation: merged by the normalised text.
        second = await record(
            rc,
            "Upgraded torch in the inference image",
            status="success",
            lessons=["pin the NumPy version, before upgrading torch"],
        )
        # Same words in another order: not equal as text, equal in meaning (cosine 1.0 under
        # the test embedder): merged by meaning.
        third = await record(
            rc,
            "Tried upgrading torch in the notebook image",
            status="failure",
            lessons=[
                "Before upgrading torch, pin the numpy version",
                "Notebook images need the CUDA-free torch wheel.",
            ],
        )
        result = await search(rc, "upgrading torch image")

    (l1,) = first.lessons
    # pytest.approx is typed apart from the float it compares equal to.
    assert (l1.merged, l1.support, l1.confidence) == (False, 1, pytest.approx(2 / 3, abs=1e-4))  # type: ignore[comparison-overlap]
    (l2,) = second.lessons
    assert l2.id == l1.id and l2.merged and l2.text == lesson
    assert (l2.support, l2.confidence) == (2, 0.75)  # (2 + 1) / (2 + 2)
    l3, other = third.lessons
    assert l3.id == l1.id and l3.merged
    assert (l3.support, l3.confidence) == (3, 0.6)  # (2 successes + 1) / (3 + 2)
    assert not other.merged and other.id != l1.id
    # pytest.approx is typed apart from the float it compares equal to.
    assert (other.support, other.confidence) == (1, pytest.approx(1 / 3, abs=1e-4))  # type: ignore[comparison-overlap]

    assert len(result.experiences) == 3
    by_text = {x.text: x for x in result.lessons}
    assert set(by_text) == {lesson, "Notebook images need the CUDA-free torch wheel."}
    assert (by_text[lesson].support, by_text[lesson].confidence) == (3, 0.6)


async def test_one_experience_repeating_a_lesson_supports_it_once(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        rec = await record(
            rc,
            "Cleaned up the release script",
            status="success",
            lessons=[
                "Tag after the changelog is merged.",
                "tag after the changelog is merged",
                "After the changelog is merged, tag.",
            ],
        )
    assert len(rec.lessons) == 1
    assert rec.lessons[0].support == 1


async def test_without_a_model_lessons_merge_by_normalised_text_only(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(embedder="none")
    await d.start()
    async with d.client() as rc:
        a = await record(
            rc, "Upgraded torch", status="success", lessons=["Pin numpy before upgrading torch."]
        )
        b = await record(
            rc,
            "Upgraded torch again",
            status="success",
            lessons=["pin  NUMPY before upgrading torch"],
        )
        c = await record(
            rc,
            "Upgraded torch once more",
            status="success",
            lessons=["Before upgrading torch pin numpy"],
        )
        result = await search(rc, "upgraded torch")
    assert b.lessons[0].id == a.lessons[0].id and b.lessons[0].merged
    assert c.lessons[0].id != a.lessons[0].id and not c.lessons[0].merged
    assert not result.semantic_used
    assert len(result.experiences) == 3
    assert sorted(x.support for x in result.lessons) == [1, 2]
    assert await d.stop() == 0


async def test_forget_experience_takes_its_support_away(running_daemon: DaemonProcess) -> None:
    shared, only = "Run the migrations before the tests.", "Seed the test database from fixtures."
    async with running_daemon.client() as rc:
        e1 = await record(
            rc, "Added the orders table and its tests", status="success", lessons=[shared, only]
        )
        e2 = await record(
            rc, "Added the invoices table and its tests", status="failure", lessons=[shared]
        )
        before = await search(rc, "added table tests")
        gone = await rc.call(p.ForgetExperience(record_id=e1.record_id), p.ExperienceForgotten)
        after = await search(rc, "added table tests")
        again = await rc.call(p.ForgetExperience(record_id=e1.record_id), p.ExperienceForgotten)
        with pytest.raises(RemoteError) as explained:
            await rc.call(p.ExplainNode(record_id=e1.record_id), p.NodeExplained)
        with pytest.raises(RemoteError) as unknown:
            await rc.call(p.ForgetExperience(record_id="exp_nothing"), p.ExperienceForgotten)
        # The retired lesson comes back as a new one when a new experience carries it.
        e3 = await record(rc, "Added the refunds table", status="success", lessons=[only])
    async with running_daemon.client(workspace="/ws/elsewhere") as other:
        with pytest.raises(RemoteError) as foreign:
            await other.call(p.ForgetExperience(record_id=e2.record_id), p.ExperienceForgotten)

    assert {x.text: x.support for x in before.lessons} == {shared: 2, only: 1}
    assert (gone.already_forgotten, gone.lessons_weakened, gone.lessons_retired) == (False, 1, 1)
    assert [e.id for e in after.experiences] == [e2.record_id]
    assert [(x.text, x.support) for x in after.lessons] == [(shared, 1)]
    assert after.lessons[0].confidence == pytest.approx(1 / 3, abs=1e-4)  # the failure is left
    assert again.already_forgotten
    assert explained.value.code == unknown.value.code == foreign.value.code == "not_found"
    assert e3.lessons[0].id != e1.lessons[1].id and not e3.lessons[0].merged


async def test_explain_node_shows_the_experience_its_lessons_and_why_it_ranked(
    running_daemon: DaemonProcess,
) -> None:
    files = [f"/ws/test/src/mod{i}.py" for i in range(12)]
    async with running_daemon.client() as rc:
        login = await record(
            rc,
            LOGIN,
            status="success",
            session="s-1",
            files=files,
            lessons=["Check token expiry on every request."],
        )
        await record(rc, CI)
        plain = await rc.call(p.ExplainNode(record_id=login.record_id), p.NodeExplained)
        ranked = await rc.call(
            p.ExplainNode(record_id=login.record_id, query="expired token login bug"),
            p.NodeExplained,
        )
        missed = await rc.call(
            p.ExplainNode(record_id=login.record_id, query="pip wheels cache"), p.NodeExplained
        )
        found = await search(rc, "expired token login bug")

    assert plain.experience.id == login.record_id
    assert plain.experience.session == "s-1"
    assert plain.experience.files == [f"src/mod{i}.py" for i in range(12)]  # all, relative
    assert found.experiences[0].files == [f"src/mod{i}.py" for i in range(10)]  # capped
    assert plain.episodes == []  # no episodes captured for session s-1
    assert [x.text for x in plain.lessons] == ["Check token expiry on every request."]
    assert plain.ranking is None

    r = ranked.ranking
    assert r is not None
    assert r.rank == 1 and r.passed_floor and r.lexical_rank == 1
    assert set(r.matched_terms) == {"expired", "token", "login", "bug"}
    assert r.score == found.experiences[0].score == ranked.experience.score
    assert "cosine" in r.reason

    m = missed.ranking
    assert m is not None
    assert m.rank is None and not m.passed_floor and m.matched_terms == []
    assert "below the relevance floor" in m.reason


async def test_files_must_be_inside_the_workspace(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(workspace="/ws/test") as rc:
        ok = await record(
            rc, "Touched files", files=["./a/b.py", "/ws/test/c.py", "a/./b.py", "d/../e.py"]
        )
        shown = await rc.call(p.ExplainNode(record_id=ok.record_id), p.NodeExplained)
        for bad in ("/etc/passwd", "../outside.py", "a/../../x.py", "/ws/test"):
            with pytest.raises(RemoteError) as info:
                await record(rc, f"Touched {bad}", files=[bad])
            assert info.value.code == "invalid_request"
            assert bad in info.value.message
        with pytest.raises(RemoteError) as too_many:
            await rc.call(
                _unchecked(
                    p.RecordExperience,
                    description="x",
                    files=[f"f{i}" for i in range(p.MAX_EXPERIENCE_FILES + 1)],
                ),
                p.ExperienceRecorded,
            )
    assert shown.experience.files == ["a/b.py", "c.py", "e.py"]
    assert too_many.value.code == "invalid_request"


async def test_secrets_are_redacted_before_storage(running_daemon: DaemonProcess) -> None:
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    async with running_daemon.client() as rc:
        rec = await record(
            rc,
            f"Rotated the deploy token {secret} after the leak",
            strategy=f"export GITHUB_TOKEN={secret}",
            lessons=[f"Never paste {secret} into chat."],
        )
        shown = await rc.call(p.ExplainNode(record_id=rec.record_id), p.NodeExplained)
    assert await running_daemon.stop() == 0
    assert secret not in shown.experience.description
    assert "[REDACTED:github_token]" in shown.experience.description
    assert shown.experience.strategy is not None and secret not in shown.experience.strategy
    assert secret not in shown.lessons[0].text
    assert secret.encode() not in database_bytes(running_daemon)


async def test_a_retried_record_is_stored_once(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        first = await record(
            rc, LOGIN, status="success", lessons=["Check expiry."], idempotency_key="k"
        )
        replay = await record(
            rc, LOGIN, status="success", lessons=["Check expiry."], idempotency_key="k"
        )
        duplicate = await record(rc, LOGIN, status="success", lessons=["Check expiry."])
        retried_later = await record(rc, LOGIN, status="failure", lessons=["Check expiry."])
        result = await search(rc, "expired token login")
    assert replay.replayed and replay.record_id == first.record_id
    assert duplicate.duplicate and duplicate.record_id == first.record_id
    assert not retried_later.duplicate and retried_later.record_id != first.record_id
    assert len(result.experiences) == 2
    assert [(x.support, x.confidence) for x in result.lessons] == [(2, 0.5)]


async def test_execution_context_gathers_lessons_and_similar_tasks_for_a_prompt(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        login = await record(
            rc,
            LOGIN,
            status="success",
            strategy="reproduce first",
            tool_calls=30,
            minutes=12,
            lessons=["Check token expiry on every request."],
        )
        await record(rc, CI, status="success", lessons=["Cache pip wheels in CI."])
        # A lesson whose own words match the task, from a task described differently.
        await record(
            rc,
            "Hardened the session middleware",
            status="success",
            lessons=["Expired token checks belong in the middleware, not the login view."],
        )
        ctx = await rc.call(
            p.GetExecutionContext(task="fix another expired token login bug"), p.ExecutionContext
        )
        nothing = await rc.call(
            p.GetExecutionContext(task="translate the README into French"), p.ExecutionContext
        )
    assert ctx.experiences[0].id == login.record_id
    texts = [x.text for x in ctx.lessons]
    assert "Check token expiry on every request." in texts
    assert "Expired token checks belong in the middleware, not the login view." in texts
    assert "Cache pip wheels in CI." not in texts
    assert "Check token expiry on every request." in ctx.context
    assert login.record_id in ctx.context and "[success]" in ctx.context
    assert len(ctx.context) <= 2000
    assert (nothing.lessons, nothing.experiences, nothing.context) == ([], [], "")
