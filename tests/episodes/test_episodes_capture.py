"""Work episodes: capture, the evaluation policy, verdicts and forget, through a real daemon."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from recall_client import protocol as p
from recall_client.client import RemoteError
from recalld.domain.policy import HARD_TRUST_FLOOR
from recalld.domain.policy import settle_episode as settle
from recalld.ingest.redact import redact
from recalld.store.port import WriteTx
from recalld.store.sqlite.engine import SqliteStore

from tests.support.daemon import DaemonFactory, DaemonProcess, unchecked_call
from tests.support.episodes import (
    HIJACK,
    LOW_TRUST,
    SAFE,
    capture,
    database_bytes,
    eligibility,
    embedded,
    ids,
    search,
    settled,
)

pytestmark = pytest.mark.both_backends

# ----------------------------------------------------------------- capture


async def test_a_captured_episode_comes_back_with_every_field(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client(agent="coder", workspace="/ws/shop") as rc:
        r = await capture(
            rc,
            "ran alembic upgrade head; 3 migrations applied",
            tool="Bash",
            status="ok",
            session_id="sess-1",
            duration_ms=812.5,
            result_size=2048,
            channel="mcp",
            episode_type="tool_call",
            tags=["db", "migration"],
            ts=1_700_000_000.0,
        )
        assert r.eligibility == "pending" and r.trust == 1.0 and not r.blocked
        assert (await settled(running_daemon, r.record_id)) == {r.record_id: "eligible"}
        result = await search(rc)
    [ep] = result.results
    assert ep == p.WorkEpisode(
        id=r.record_id,
        ts=1_700_000_000.0,
        vault="/ws/shop",
        session_id="sess-1",
        caller="coder",
        channel="mcp",
        episode_type="tool_call",
        task_result=None,
        verdict_at=None,
        tool="Bash",
        status="ok",
        error_code=None,
        duration_ms=812.5,
        result_size=2048,
        summary="ran alembic upgrade head; 3 migrations applied",
        tags=["db", "migration"],
        trust=1.0,
        eligibility="eligible",
        blocked=False,
        prev_id=None,
    )


async def test_episodes_of_a_session_are_chained_by_prev_id(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(agent="coder") as rc:
        first = await capture(rc, "opened the failing test", session_id="s-chain")
        other = await capture(rc, "unrelated step", session_id="s-other")
        second = await capture(rc, "fixed the off-by-one in pager.py", session_id="s-chain")
        third = await capture(rc, "tests green again", session_id="s-chain")
        alone = await capture(rc, "a step with no session")
    async with running_daemon.client(agent="reviewer") as rc:
        # Same session id, another agent: another partition, so another chain.
        theirs = await capture(rc, "reviewed pager.py", session_id="s-chain")
    assert first.prev_id is None
    assert second.prev_id == first.record_id
    assert third.prev_id == second.record_id
    assert other.prev_id is None and alone.prev_id is None
    assert theirs.prev_id is None


async def test_an_idempotency_key_and_a_repeated_event_are_stored_once(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        first = await capture(rc, "deployed v1.2", idempotency_key="deploy-1")
        retry = await capture(rc, "deployed v1.2", idempotency_key="deploy-1")
        event = await capture(rc, "built wheel", ts=1_700_000_100.0, session_id="s")
        again = await capture(rc, "built wheel", ts=1_700_000_100.0, session_id="s")
        later = await capture(rc, "built wheel", ts=1_700_000_200.0, session_id="s")
    assert retry.replayed and retry.record_id == first.record_id
    assert again.duplicate and again.record_id == event.record_id
    # The same words at another time are another episode.
    assert not later.duplicate and later.record_id != event.record_id
    assert later.prev_id == event.record_id


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"summary": ""}, "summary"),
        ({"summary": "x", "status": ""}, "status"),
        ({"summary": "x", "task_result": 1.5}, "task_result"),
        ({"summary": "x", "duration_ms": -1}, "duration_ms"),
        ({"summary": "x", "result_size": -1}, "result_size"),
        ({"summary": "x", "tags": ["t" * 65]}, "tags"),
    ],
)
async def test_bad_episode_fields_are_refused_and_nothing_is_stored(
    running_daemon: DaemonProcess, fields: dict[str, object], name: str
) -> None:
    async with running_daemon.client() as rc:
        with pytest.raises(RemoteError) as err:
            await rc.call(p.CaptureEpisode(**fields), p.EpisodeCaptured)  # type: ignore[arg-type]
        assert err.value.code == "invalid_request"
        assert name in err.value.message
        assert (await search(rc, include_pending=True, min_trust=0)).results == []
        assert isinstance(await rc.call(p.Ping()), p.Pong)


# ----------------------------------------------------------------- evaluation policy


@pytest.mark.parametrize(
    ("trust", "blocked", "status", "task_result", "expected"),
    [
        (1.0, True, "ok", 1.0, "blocked"),
        (0.05, False, "ok", None, "ineligible"),
        (0.15, False, "ok", None, "eligible"),
        (1.0, False, "ok", None, "eligible"),
        (1.0, False, "passed", None, "eligible"),
        (1.0, False, "error", None, None),
        (1.0, False, "timeout", None, None),
        (1.0, False, "error", 0.0, "eligible"),
        (1.0, False, "error", 1.0, "eligible"),
    ],
)
def test_the_evaluation_policy(
    trust: float, blocked: bool, status: str, task_result: float | None, expected: str | None
) -> None:
    assert settle(trust, blocked, status, task_result) == expected


def test_the_sql_mirror_of_the_policy_selects_exactly_the_settleable(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    conn = sqlite3.connect(tmp_path / "recalld.db")
    cases = [
        (trust, blocked, status, task_result)
        for trust in (0.0, HARD_TRUST_FLOOR, 0.5, 1.0)
        for blocked in (False, True)
        for status in ("ok", "done", "error", "denied")
        for task_result in (None, 0.0, 0.7)
    ]
    with conn:
        for n, (trust, blocked, status, task_result) in enumerate(cases):
            cur = conn.execute(
                "INSERT INTO records (id, kind, ts, created_at, updated_at, workspace, agent, uid,"
                " text, trust, content_hash)"
                " VALUES (?, 'episode', 0, 0, 0, '/w', 'a', 0, 'x', ?, ?)",
                (f"ep_{n}", trust, n.to_bytes(4, "big")),
            )
            conn.execute(
                "INSERT INTO episodes (rowid, channel, episode_type, status, task_result, blocked)"
                " VALUES (?, 'api', 'tool_call', ?, ?, ?)",
                (cur.lastrowid, status, task_result, int(blocked)),
            )
    conn.close()
    offered: list[tuple[float, bool, str, float | None]] = []

    def record(
        kind: str, trust: float, blocked: bool, status: str | None, task_result: float | None
    ) -> str:
        assert kind == "episode" and status is not None
        offered.append((trust, blocked, status, task_result))
        return "eligible"

    class Settle:
        result: object = None
        error: BaseException | None = None

        def apply(self, tx: WriteTx, now: float) -> int:
            return tx.records.settle_pending(len(cases), now, record)

        def rolled_back(self) -> None:
            pass

    store.apply_batch([Settle()], 0.0)
    store.close()
    assert sorted(offered, key=repr) == sorted(
        (case for case in cases if settle(*case) is not None), key=repr
    )


async def test_capture_settles_by_the_policy(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        ok = await capture(rc, SAFE)
        low = await capture(rc, LOW_TRUST)
        hijack = await capture(rc, HIJACK)
        failed = await capture(rc, "npm test failed: 2 snapshots obsolete", status="error")
        judged = await capture(
            rc, "npm ci failed: lockfile out of date", status="error", task_result=0.0
        )
        last = await capture(rc, "the last step, ok")
    assert low.trust == pytest.approx(0.25) and not low.blocked
    assert hijack.trust == 0.0 and hijack.blocked
    states = await settled(
        running_daemon,
        ok.record_id,
        low.record_id,
        hijack.record_id,
        judged.record_id,
        last.record_id,
    )
    assert states == {
        ok.record_id: "eligible",
        low.record_id: "eligible",
        hijack.record_id: "blocked",
        judged.record_id: "eligible",
        last.record_id: "eligible",
    }
    # A failed step with no verdict waits for one.
    assert eligibility(running_daemon, failed.record_id) == "pending"


# ----------------------------------------------------------------- verdicts


async def test_a_session_verdict_settles_its_waiting_failures(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        step = await capture(
            rc,
            "cargo build failed: missing feature flag",
            status="error",
            error_code="exit_101",
            session_id="s-v",
        )
        fix = await capture(rc, "enabled the tokio feature; cargo build ok", session_id="s-v")
        await settled(running_daemon, fix.record_id)
        assert ids(await search(rc, query="cargo")) == [fix.record_id]

        verdict = await rc.call(p.WorkResult(session_id="s-v", task_result=1.0), p.VerdictSet)
        assert (verdict.matched, verdict.updated, verdict.task_result) == (2, 2, 1.0)
        assert await settled(running_daemon, step.record_id) == {step.record_id: "eligible"}
        found = await search(rc, query="cargo build")
        assert set(ids(found)) == {step.record_id, fix.record_id}
        assert all(
            ep.task_result == 1.0 and ep.verdict_at == verdict.verdict_at for ep in found.results
        )

        again = await rc.call(p.WorkResult(session_id="s-v", task_result=1.0), p.VerdictSet)
        assert (again.matched, again.updated) == (2, 0)


async def test_a_verdict_on_one_episode_and_a_verdict_of_zero(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        a = await capture(
            rc, "tried rebasing onto main; conflicts", status="error", session_id="s-one"
        )
        b = await capture(rc, "second attempt; conflicts again", status="error", session_id="s-one")
        verdict = await rc.call(
            p.WorkResult(episode_id=a.record_id, task_result=0.0, verdict_at=1_700_000_000.0),
            p.VerdictSet,
        )
        assert (verdict.matched, verdict.updated, verdict.verdict_at) == (1, 1, 1_700_000_000.0)
        await settled(running_daemon, a.record_id)
        [ep] = (await search(rc, query="rebasing")).results
        assert (ep.id, ep.task_result, ep.verdict_at) == (a.record_id, 0.0, 1_700_000_000.0)
        assert eligibility(running_daemon, b.record_id) == "pending"


@pytest.mark.parametrize(
    "fields",
    [{"task_result": 1.0}, {"task_result": 1.0, "episode_id": "ep_x", "session_id": "s"}],
)
async def test_a_verdict_naming_neither_or_both_targets_is_refused_by_client_and_daemon(
    running_daemon: DaemonProcess, fields: dict[str, object]
) -> None:
    with pytest.raises(p.RequestRuleError, match="exactly one of episode_id or session_id"):
        p.WorkResult(**fields)  # type: ignore[arg-type]
    reply = await unchecked_call(running_daemon, {"op": "work_result", **fields})
    assert isinstance(reply, p.Error) and reply.code == "invalid_request"
    assert "exactly one of episode_id or session_id" in reply.message


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"task_result": 1.0, "episode_id": "ep_nope"}, "not_found"),
        ({"task_result": 1.0, "session_id": "no-such-session"}, "not_found"),
        ({"task_result": -0.1, "session_id": "s"}, "invalid_request"),
        ({"task_result": 1.0, "session_id": "s", "any_caller": True}, "forbidden"),
    ],
)
async def test_bad_verdicts_get_typed_errors(
    running_daemon: DaemonProcess, fields: dict[str, object], code: str
) -> None:
    async with running_daemon.client() as rc:
        await capture(rc, "a step", session_id="s")
        with pytest.raises(RemoteError) as err:
            await rc.call(p.WorkResult(**fields), p.VerdictSet)  # type: ignore[arg-type]
    assert err.value.code == code


async def test_an_agent_cannot_judge_another_agents_episode(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client(agent="a") as rc:
        mine = await capture(rc, "a step of agent a", session_id="shared")
    async with running_daemon.client(agent="b") as rc:
        with pytest.raises(RemoteError) as err:
            await rc.call(p.WorkResult(episode_id=mine.record_id, task_result=1.0), p.VerdictSet)
        assert err.value.code == "not_found"
        with pytest.raises(RemoteError) as err:
            await rc.call(p.WorkResult(session_id="shared", task_result=1.0), p.VerdictSet)
        assert err.value.code == "not_found"


# ----------------------------------------------------------------- redaction


SECRETS = {
    "aws_key": "AKIAIOSFODNN7EXAMPLE",
    "github_token": "ghp_" + "Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8",
    "url_password": "postgres://deploy:Tr0ub4dor3xyz@db.internal/main",
    "secret_assignment": "STRIPE_SECRET=whsec9f8e7d6c5b4a",
    "basic_auth": "curl -u admin:Swordfish99 https://ci.internal/api",
    "cli_secret_flag": "psql --password Hunter2Hunter2 -h db",
}
CORES = {
    "aws_key": "AKIAIOSFODNN7EXAMPLE",
    "github_token": SECRETS["github_token"],
    "url_password": "Tr0ub4dor3xyz",
    "secret_assignment": "whsec9f8e7d6c5b4a",
    "basic_auth": "Swordfish99",
    "cli_secret_flag": "Hunter2Hunter2",
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_command_lines_lose_their_secrets(name: str) -> None:
    text, found = redact(f"ran: {SECRETS[name]}")
    assert CORES[name] not in text
    assert name in found


@pytest.mark.parametrize(
    ("text", "name", "core"),
    [
        ("curl --user bob:Sw0rdfish9 https://x", "basic_auth", "Sw0rdfish9"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "basic_auth", "dXNlcjpwYXNzd29yZA=="),
        ("mysql -u root -pS3cr3tpw shop", "cli_password", "S3cr3tpw"),
        ('{"api_key": "k3y"}', "secret_assignment", "k3y"),
        ("SMTP_PASS=mailpass1", "secret_assignment", "mailpass1"),
        ("PRIVATE_KEY=abcdef123456", "secret_assignment", "abcdef123456"),
        ("redis://:p4ssw0rd@cache:6379", "url_password", "p4ssw0rd"),
    ],
)
def test_each_new_pattern_gets_past_the_prefilter(text: str, name: str, core: str) -> None:
    redacted, found = redact(text)
    assert core not in redacted and name in found


@pytest.mark.parametrize(
    "text",
    [
        "docker login --password-stdin",
        "gh auth token --token-file ~/.tok",
        "git log -u origin",
        "ls -p /tmp",
        "bypass=true",
    ],
)
def test_command_lines_without_secrets_are_left_alone(text: str) -> None:
    assert redact(text) == (text, [])


async def test_a_captured_secret_is_findable_by_no_search_and_absent_from_disk(
    daemon_factory: DaemonFactory,
) -> None:
    d: DaemonProcess = daemon_factory()
    await d.start()
    captured = []
    async with d.client() as rc:
        for name, secret in SECRETS.items():
            r = await capture(
                rc,
                f"set up {name} with {secret} for staging",
                tool="Bash",
                status="error",
                error_code=f"failed using {secret}",
                tags=["deploy"],
                task_result=1.0,
            )
            assert name in r.redacted
            captured.append(r.record_id)
        await settled(d, *captured)
        await embedded(d, len(captured))
        for core in CORES.values():
            for params in (
                {"query": core},
                {"query": core, "semantic": True},
                {"query": core, "include_pending": True, "min_trust": 0.0},
            ):
                for ep in (await search(rc, **params)).results:
                    assert core not in (ep.summary or "") + (ep.error_code or "")
        listing = await search(rc, include_pending=True, min_trust=0.0, k=200)
        assert set(ids(listing)) == set(captured)
        for ep in listing.results:
            assert "[REDACTED:" in (ep.summary or "") and "[REDACTED:" in (ep.error_code or "")
    assert await d.stop() == 0
    raw = database_bytes(d)
    assert b"[REDACTED:" in raw
    for name, core in CORES.items():
        assert core.encode() not in raw, name


# ----------------------------------------------------------------- forget


async def test_forget_tombstones_an_episode_and_drops_its_vector(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        keep = await capture(rc, "rotated the nginx logs")
        gone = await capture(rc, "rotated the postgres logs")
        await settled(running_daemon, keep.record_id, gone.record_id)
        await embedded(running_daemon, 2)
        forgotten = await rc.call(p.Forget(record_id=gone.record_id), p.Forgotten)
        assert (forgotten.kind, forgotten.already) == ("episode", False)
        for params in (
            {"query": "rotated logs"},
            {"query": "postgres", "semantic": True},
            {"include_pending": True, "min_trust": 0.0},
        ):
            assert gone.record_id not in ids(await search(rc, **params))
        assert keep.record_id in ids(await search(rc, query="rotated logs"))
        again = await rc.call(p.Forget(record_id=gone.record_id), p.Forgotten)
        assert again.already and again.tombstoned_at == forgotten.tombstoned_at
    report = await running_daemon.status()
    assert report.index.size == 1
    assert running_daemon.sql("SELECT count(*) FROM vectors") == [(1,)]


async def test_forget_works_on_memories_too(running_daemon: DaemonProcess) -> None:
    async with running_daemon.client() as rc:
        stored = await rc.call(
            p.MemoryStore(text="the staging VPN lives at vpn.example.org"), p.Stored
        )
        forgotten = await rc.call(p.Forget(record_id=stored.record_id), p.Forgotten)
        assert forgotten.kind == "memory"
        found = await rc.call(p.MemorySearch(query="staging VPN"), p.MemorySearchResult)
    assert found.hits == []


async def test_forget_of_an_unknown_or_unseen_record_is_not_found(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client(agent="a") as rc:
        mine = await capture(rc, "agent a's step")
        with pytest.raises(RemoteError) as err:
            await rc.call(p.Forget(record_id="ep_doesnotexist"), p.Forgotten)
        assert err.value.code == "not_found"
    async with running_daemon.client(agent="b") as rc:
        with pytest.raises(RemoteError) as err:
            await rc.call(p.Forget(record_id=mine.record_id), p.Forgotten)
        assert err.value.code == "not_found"
    assert eligibility(running_daemon, mine.record_id) in ("pending", "eligible")
