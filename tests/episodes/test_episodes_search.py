"""work_search (seed 001): every clause of the reader contract and every parameter, through
a real daemon."""

from __future__ import annotations

import time

import anyio
import msgspec
import pytest
from recall_client import protocol as p
from recall_client.client import RemoteError, connect
from recall_client.paths import read_admin_token
from recalld.retrieval.work_reader import shape

from tests.support.daemon import DaemonFactory, DaemonProcess, unchecked_call
from tests.support.episodes import HIJACK, LOW_TRUST, capture, embedded, ids, search, settled

pytestmark = pytest.mark.both_backends

# ----------------------------------------------------------------- the reader contract


async def test_only_eligible_episodes_by_default_and_include_pending_adds_the_rest(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        failed = await capture(rc, "terraform apply failed: state lock held", status="error")
        ok = await capture(rc, "terraform plan shows 2 changes")
        await settled(running_daemon, ok.record_id)
        default = await search(rc, query="terraform")
        pending = await search(rc, query="terraform", include_pending=True)
    assert ids(default) == [ok.record_id]
    assert default.floor == p.WorkFloor(min_trust=0.3, include_pending=False, semantic_used=False)
    assert set(ids(pending)) == {ok.record_id, failed.record_id}
    by_id = {ep.id: ep.eligibility for ep in pending.results}
    assert by_id == {ok.record_id: "eligible", failed.record_id: "pending"}
    assert pending.floor is not None and pending.floor.include_pending


async def test_include_pending_is_still_trust_floored(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        risky = await capture(rc, LOW_TRUST, status="error")
        assert risky.trust < 0.3
        floored = await search(rc, include_pending=True)
        lowered = await search(rc, include_pending=True, min_trust=0.1)
    assert risky.record_id not in ids(floored)
    assert ids(lowered) == [risky.record_id]
    assert lowered.results[0].eligibility == "pending"


async def test_the_trust_floor_excludes_high_risk_content(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        risky = await capture(rc, LOW_TRUST)
        safe = await capture(rc, "pushed the release branch after review")
        await settled(running_daemon, risky.record_id, safe.record_id)
        default = await search(rc, query="push main release")
        lowered = await search(rc, query="push main release", min_trust=0.1)
        strict = await search(rc, query="push main release", min_trust=1.0)
    assert ids(default) == [safe.record_id]
    assert set(ids(lowered)) == {risky.record_id, safe.record_id}
    assert {ep.id: ep.trust for ep in lowered.results}[risky.record_id] == pytest.approx(0.25)
    assert ids(strict) == [safe.record_id]
    assert default.floor is not None and default.floor.min_trust == 0.3
    assert lowered.floor is not None and lowered.floor.min_trust == 0.1


async def test_blocked_episodes_never_surface_once_settled(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        hijack = await capture(rc, HIJACK)
        await settled(running_daemon, hijack.record_id)
        for params in (
            {},
            {"query": "API keys"},
            {"include_pending": True, "min_trust": 0.0},
            {"query": "admin", "semantic": True, "min_trust": 0.0},
        ):
            assert hijack.record_id not in ids(await search(rc, **params)), params


async def test_tombstoned_episodes_never_surface(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        gone = await capture(rc, "dropped the staging database by mistake")
        await settled(running_daemon, gone.record_id)
        await embedded(running_daemon, 1)
        await rc.call(p.Forget(record_id=gone.record_id), p.Forgotten)
        for params in (
            {},
            {"query": "staging database"},
            {"query": "staging database", "semantic": True},
            {"include_pending": True, "min_trust": 0.0},
        ):
            assert (await search(rc, **params)).results == [], params
    token = read_admin_token()
    async with connect(
        agent="admin", workspace="/ws/test", path=running_daemon.socket, admin_token=token
    ) as admin:
        assert (
            await search(admin, any_caller=True, include_pending=True, min_trust=0)
        ).results == []


async def test_expired_episodes_never_surface(running_daemon: DaemonProcess) -> None:
    ttl = 2.0
    async with running_daemon.client() as rc:
        started = time.time()
        brief = await capture(rc, "temporary note about the flaky runner", ttl_s=ttl)
        lasting = await capture(rc, "permanent note about the flaky runner")
        await settled(running_daemon, brief.record_id, lasting.record_id)
        assert set(ids(await search(rc, query="flaky runner"))) == {
            brief.record_id,
            lasting.record_id,
        }
        # Let the ttl run out: time passing is the thing under test.
        await anyio.sleep(max(0.0, started + ttl + 0.1 - time.time()))
        for params in (
            {"query": "flaky runner"},
            {"include_pending": True, "min_trust": 0.0},
            {"query": "flaky runner", "semantic": True},
        ):
            assert ids(await search(rc, **params)) == [lasting.record_id], params


async def test_results_are_partitioned_to_the_calling_agent(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(agent="agent-a") as a:
        mine = await capture(a, "bumped the openssl pin in requirements.txt", session_id="s")
    async with running_daemon.client(agent="agent-b") as b:
        theirs = await capture(b, "bumped the openssl pin in Dockerfile", session_id="s")
        await settled(running_daemon, mine.record_id, theirs.record_id)
        await embedded(running_daemon, 2)
        for params in (
            {},
            {"query": "openssl pin"},
            {"query": "openssl pin", "semantic": True},
            {"session_id": "s"},
            {"include_pending": True, "min_trust": 0.0},
        ):
            assert ids(await search(b, **params)) == [theirs.record_id], params
    async with running_daemon.client(agent="agent-a") as a:
        assert ids(await search(a, query="openssl")) == [mine.record_id]


async def test_results_are_confined_to_the_callers_workspace(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(workspace="/ws/one") as one:
        here = await capture(one, "regenerated the protobuf stubs")
    async with running_daemon.client(workspace="/ws/two") as two:
        there = await capture(two, "regenerated the protobuf stubs too")
        await settled(running_daemon, here.record_id, there.record_id)
        assert ids(await search(two, query="protobuf")) == [there.record_id]


async def test_any_caller_is_forbidden_without_the_admin_scope(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        assert rc.welcome is not None and "admin:workspace" not in rc.welcome.scopes
        with pytest.raises(RemoteError) as err:
            await search(rc, any_caller=True)
    assert err.value.code == "forbidden"
    assert "admin:workspace" in err.value.message


async def test_any_caller_with_the_admin_token_crosses_the_partition(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client(agent="agent-a") as a:
        ra = await capture(a, "profiled the slow checkout endpoint")
    async with running_daemon.client(agent="agent-b") as b:
        rb = await capture(b, "profiled the slow search endpoint")
    await settled(running_daemon, ra.record_id, rb.record_id)
    token = read_admin_token()
    assert token, "the daemon writes its admin token at start"
    async with connect(
        agent="auditor", workspace="/ws/test", path=running_daemon.socket, admin_token=token
    ) as admin:
        assert admin.welcome is not None and "admin:workspace" in admin.welcome.scopes
        everyone = await search(admin, query="profiled endpoint", any_caller=True)
        own = await search(admin, query="profiled endpoint")
    assert {(ep.id, ep.caller) for ep in everyone.results} == {
        (ra.record_id, "agent-a"),
        (rb.record_id, "agent-b"),
    }
    assert own.results == []


async def test_a_wrong_admin_token_is_refused_at_hello(running_daemon: DaemonProcess) -> None:
    with pytest.raises(RemoteError) as err:
        async with connect(agent="x", path=running_daemon.socket, admin_token="guess"):
            pass
    assert err.value.code == "forbidden"


async def test_the_admin_token_file_is_private(running_daemon: DaemonProcess) -> None:
    from recall_client.paths import admin_token_path

    path = admin_token_path()
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(path.read_text().strip()) >= 32


async def test_the_semantic_channel_sees_no_more_than_lexical_could(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client(agent="a") as a:
        visible = await capture(a, "compiled the rust workspace in release mode")
        pending = await capture(a, "compiled the rust workspace, linker crashed", status="error")
        risky = await capture(a, LOW_TRUST + " compiled the rust workspace")
        gone = await capture(a, "compiled the rust workspace for wasm")
    async with running_daemon.client(agent="b") as b:
        other = await capture(b, "compiled the rust workspace in debug mode")
    await settled(
        running_daemon, visible.record_id, risky.record_id, gone.record_id, other.record_id
    )
    await embedded(running_daemon, 4)
    async with running_daemon.client(agent="a") as a:
        await a.call(p.Forget(record_id=gone.record_id), p.Forgotten)
        for query in ("compiled the rust workspace", "rust release build", "linker crash wasm"):
            fused = await search(a, query=query, semantic=True, k=200)
            assert fused.floor is not None and fused.floor.semantic_used
            assert set(ids(fused)) <= {visible.record_id}, query
        listing = await search(a, k=200)
    assert ids(listing) == [visible.record_id]
    assert pending.record_id not in ids(listing)


# ----------------------------------------------------------------- parameters


async def test_query_matches_the_summary_best_first(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        one = await capture(rc, "upgraded django to 5.1; ran the migrations")
        two = await capture(
            rc, "django admin css broke after the upgrade to 5.1, pinned whitenoise"
        )
        three = await capture(rc, "wrote the changelog")
        await settled(running_daemon, one.record_id, two.record_id, three.record_id)
        result = await search(rc, query="django whitenoise")
    assert ids(result)[0] == two.record_id
    assert set(ids(result)) == {one.record_id, two.record_id}
    assert result.message and "2 episodes" in result.message


async def test_without_a_query_the_newest_are_listed_first(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        made = [await capture(rc, f"step number {n}", ts=1_700_000_000.0 + n) for n in range(5)]
        await settled(running_daemon, *(r.record_id for r in made))
        result = await search(rc)
    assert ids(result) == [r.record_id for r in reversed(made)]
    assert result.message and "newest first" in result.message


async def test_tool_filter(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        bash = await capture(rc, "listed the pods", tool="Bash")
        edit = await capture(rc, "edited the pod spec", tool="Edit")
        await settled(running_daemon, bash.record_id, edit.record_id)
        assert ids(await search(rc, tool="Bash")) == [bash.record_id]
        assert ids(await search(rc, query="pod", tool="Edit")) == [edit.record_id]
        assert ids(await search(rc, tool="Write")) == []


async def test_session_id_filter(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        a = await capture(rc, "bisected the regression", session_id="monday")
        b = await capture(rc, "bisected another regression", session_id="tuesday")
        await settled(running_daemon, a.record_id, b.record_id)
        assert ids(await search(rc, session_id="monday")) == [a.record_id]
        assert ids(await search(rc, query="bisected", session_id="tuesday")) == [b.record_id]


async def test_since_and_until_are_inclusive_unix_seconds(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        made = {
            t: await capture(rc, f"nightly job at {t}", ts=float(t)) for t in (1000, 2000, 3000)
        }
        await settled(running_daemon, *(r.record_id for r in made.values()))
        assert ids(await search(rc, since=2000)) == [made[3000].record_id, made[2000].record_id]
        assert ids(await search(rc, until=2000)) == [made[2000].record_id, made[1000].record_id]
        assert ids(await search(rc, query="nightly", since=1500, until=2500)) == [
            made[2000].record_id
        ]
        with pytest.raises(p.RequestRuleError, match="since"):
            p.WorkSearch(since=3000, until=1000)
        backwards = {"op": "work_search", "since": 3000, "until": 1000}
        refused = await unchecked_call(running_daemon, backwards)
        assert isinstance(refused, p.Error) and refused.code == "invalid_request"
        assert "since" in refused.message


async def test_k_defaults_to_20_and_caps_the_results(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        made = [await capture(rc, f"lint pass {n}") for n in range(25)]
        await settled(running_daemon, *(r.record_id for r in made))
        assert len((await search(rc)).results) == 20
        assert len((await search(rc, k=5)).results) == 5
        assert len((await search(rc, query="lint pass", k=3)).results) == 3
        assert len((await search(rc, k=200)).results) == 25


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"query": ""}, "query"),
        ({"k": 0}, "k"),
        ({"k": 201}, "k"),
        ({"min_trust": -0.1}, "min_trust"),
        ({"min_trust": 1.1}, "min_trust"),
        ({"since": 0}, "since"),
        ({"until": 0}, "until"),
        ({"response_format": "brief"}, "response_format"),
        ({"verbosity": "loud"}, "verbosity"),
    ],
)
async def test_out_of_range_parameters_are_refused_with_a_clear_error(
    running_daemon: DaemonProcess, params: dict[str, object], field: str
) -> None:
    async with running_daemon.client() as rc:
        with pytest.raises(RemoteError) as err:
            await rc.call(p.WorkSearch(**params), p.WorkSearchResult)  # type: ignore[arg-type]
        assert err.value.code == "invalid_request"
        assert field in err.value.message
        assert isinstance(await rc.call(p.Ping()), p.Pong)


async def test_semantic_is_opt_in_and_needs_a_query(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        r = await capture(rc, "flushed the redis cache before the load test")
        await settled(running_daemon, r.record_id)
        await embedded(running_daemon, 1)
        lexical = await search(rc, query="redis cache")
        fused = await search(rc, query="redis cache", semantic=True)
        no_query = await search(rc, semantic=True)
    assert lexical.floor is not None and not lexical.floor.semantic_used
    assert fused.floor is not None and fused.floor.semantic_used
    assert ids(fused) == ids(lexical) == [r.record_id]
    assert no_query.floor is not None and not no_query.floor.semantic_used
    assert ids(no_query) == [r.record_id]


async def test_semantic_degrades_silently_without_an_embedder(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(embedder="none")
    await d.start()
    async with d.client() as rc:
        r = await capture(rc, "restarted the celery workers")
        await settled(d, r.record_id)
        result = await search(rc, query="celery workers", semantic=True)
    assert result.available
    assert result.floor is not None and not result.floor.semantic_used
    assert ids(result) == [r.record_id]
    assert await d.stop() == 0


async def test_semantic_degrades_silently_when_the_model_fails(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(
        embedder="minilm", extra_env={"RECALLD_MODEL_PATH": "/nonexistent/model"}
    )
    await d.start()
    assert (await d.status(wait_model_s=60)).model.state == "failed"
    async with d.client() as rc:
        r = await capture(rc, "restarted the celery workers")
        await settled(d, r.record_id)
        result = await search(rc, query="celery workers", semantic=True)
    assert result.floor is not None and not result.floor.semantic_used
    assert ids(result) == [r.record_id]
    assert await d.stop() == 0


# ----------------------------------------------------------------- response_format


DROPPED = {"vault", "caller", "channel", "episode_type", "duration_ms", "result_size"}


async def _one_of_each(d: DaemonProcess) -> str:
    async with d.client() as rc:
        r = await capture(
            rc,
            "ran the smoke tests",
            tool="Bash",
            duration_ms=1500.0,
            result_size=300,
            session_id="s-fmt",
            episode_type="tool_call",
        )
        await settled(d, r.record_id)
    return r.record_id


def _fields(ep: p.WorkEpisode) -> dict[str, object]:
    return msgspec.to_builtins(ep)  # type: ignore[no-any-return]


async def test_detailed_returns_every_field_including_nulls(running_daemon: DaemonProcess) -> None:
    await _one_of_each(running_daemon)
    async with running_daemon.client() as rc:
        result = await search(rc, response_format="detailed")
    assert result.response_format == "detailed"
    fields = _fields(result.results[0])
    assert set(fields) == set(p.WorkEpisode.__struct_fields__)
    assert fields["task_result"] is None and fields["blocked"] is False


async def test_concise_drops_low_signal_and_empty_fields(running_daemon: DaemonProcess) -> None:
    record_id = await _one_of_each(running_daemon)
    async with running_daemon.client() as rc:
        result = await search(rc, response_format="concise")
        await rc.call(p.WorkResult(episode_id=record_id, task_result=0.0), p.VerdictSet)
        judged = await search(rc, response_format="concise")
    assert result.response_format == "concise"
    fields = _fields(result.results[0])
    assert not DROPPED & set(fields)
    # null and empty are gone (task_result, verdict_at, error_code, tags), and so is a false
    # blocked flag; trust and eligibility stay.
    assert set(fields) == {
        "id",
        "ts",
        "session_id",
        "tool",
        "status",
        "summary",
        "trust",
        "eligibility",
    }
    # A verdict of 0 is a value, not an empty field.
    assert _fields(judged.results[0])["task_result"] == 0.0


def test_concise_keeps_trust_eligibility_and_a_true_blocked_flag() -> None:
    # A blocked episode surfaces only while it is pending (the evaluator settles it blocked
    # within milliseconds), so the shaping is checked directly.
    values = dict(
        id="ep_1",
        ts=1.0,
        vault="/ws",
        session_id=None,
        caller="a",
        channel="hook",
        episode_type="tool_call",
        task_result=None,
        verdict_at=None,
        tool=None,
        status="ok",
        error_code=None,
        duration_ms=None,
        result_size=None,
        summary="s",
        tags=[],
        trust=0.0,
        eligibility="pending",
        blocked=True,
        prev_id=None,
    )
    concise = _fields(shape(values, "concise"))
    assert concise == {
        "id": "ep_1",
        "ts": 1.0,
        "status": "ok",
        "summary": "s",
        "trust": 0.0,
        "eligibility": "pending",
        "blocked": True,
    }
    assert _fields(shape(values, "detailed")) == values


async def test_verbosity_is_a_legacy_alias_and_response_format_wins(
    running_daemon: DaemonProcess,
) -> None:
    await _one_of_each(running_daemon)
    async with running_daemon.client() as rc:
        terse = await search(rc, verbosity="terse")
        full = await search(rc, verbosity="full")
        both = await search(rc, verbosity="terse", response_format="detailed")
    assert terse.response_format == "concise" and "vault" not in _fields(terse.results[0])
    assert full.response_format == "detailed" and "vault" in _fields(full.results[0])
    assert both.response_format == "detailed"


async def test_the_servers_default_response_format_applies_when_none_is_named(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory(extra_env={"RECALLD_RESPONSE_FORMAT": "concise"})
    await d.start()
    await _one_of_each(d)
    async with d.client() as rc:
        default = await search(rc)
        asked = await search(rc, response_format="detailed")
    assert default.response_format == "concise" and "vault" not in _fields(default.results[0])
    assert asked.response_format == "detailed"
    assert await d.stop() == 0
