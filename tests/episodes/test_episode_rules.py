"""capture_episode's and work_result's rules, run in process against a real SQLite store (no
daemon): the session's chain, the same event stored once, replay, and what a verdict
changes. The same through a daemon are test_episodes_capture.py's."""

from __future__ import annotations

from typing import Any

import pytest
from recall_client import protocol as p
from recalld.domain.policy import Assessment
from recalld.domain.principal import Principal
from recalld.errors import RecallError
from recalld.handlers.episodes import capture_episode, judge
from recalld.handlers.memory_writes import store_memory
from recalld.store.port import EpisodeRow, WriteTx
from recalld.store.sqlite.engine import SqliteStore

from tests.support.store import run

WS = "/ws/episodes"
WHO = Principal(agent="t", workspace=WS, uid=0, pid=0)
TRUSTED = Assessment(1.0, False)


def _capture(
    store: SqliteStore, who: Principal = WHO, **fields: Any
) -> tuple[p.EpisodeCaptured, int | None]:
    req = p.CaptureEpisode(**{"summary": "ran pytest; 3 failed", "session_id": "s1", **fields})

    def capture(tx: WriteTx, now: float) -> tuple[p.EpisodeCaptured, int | None]:
        return capture_episode(tx, who, req, TRUSTED, now)

    result: tuple[p.EpisodeCaptured, int | None] = run(store, capture)
    return result


def _judge(
    store: SqliteStore, who: Principal = WHO, **fields: Any
) -> tuple[p.VerdictSet, list[int]]:
    req = p.WorkResult(**fields)
    result: tuple[p.VerdictSet, list[int]] = run(store, lambda tx, now: judge(tx, who, req, now))
    return result


def _row(store: SqliteStore, record_id: str) -> EpisodeRow:
    reader = store.reader()
    try:
        row = reader.episodes.find(record_id)
    finally:
        store.close_reader(reader)
    assert row is not None
    return row


def test_a_session_s_episodes_are_one_chain_and_another_agent_s_are_another(
    store: SqliteStore,
) -> None:
    first, _ = _capture(store, ts=1.0)
    second, _ = _capture(store, ts=2.0)
    other, _ = _capture(store, Principal(agent="u", workspace=WS, uid=0, pid=0), ts=3.0)
    alone, _ = _capture(store, session_id=None, ts=4.0)
    assert first.prev_id is None and second.prev_id == first.record_id
    assert other.prev_id is None and alone.prev_id is None
    assert _row(store, second.record_id).prev_id == first.record_id


def test_the_same_event_twice_is_stored_once_and_the_same_words_later_are_another(
    store: SqliteStore,
) -> None:
    first, rowid = _capture(store, ts=10.0, status="error", tool="pytest")
    # The status is compared as stored: trimmed and lower case.
    again, again_rowid = _capture(store, ts=10.0, status=" Error ", tool="pytest")
    later, later_rowid = _capture(store, ts=11.0, status="error", tool="pytest")
    assert rowid is not None and again_rowid is None and later_rowid is not None
    assert again.duplicate and not again.replayed and again.record_id == first.record_id
    assert later.record_id != first.record_id and not later.duplicate
    assert _row(store, first.record_id).status == "error"


def test_a_replayed_key_answers_with_its_episode_and_a_memory_s_key_is_refused(
    store: SqliteStore,
) -> None:
    first, _ = _capture(store, ts=1.0, idempotency_key="k1")
    again, rowid = _capture(store, ts=2.0, summary="other words", idempotency_key="k1")
    assert rowid is None and again.replayed and not again.duplicate
    assert (again.record_id, again.eligibility) == (first.record_id, "pending")
    # A duplicate notes its key too: the key replays the episode the event was stored as.
    dup, _ = _capture(store, ts=1.0, idempotency_key="k2")
    assert dup.duplicate and _capture(store, ts=5.0, idempotency_key="k2")[0].replayed

    req = p.MemoryStore(text="a memory", idempotency_key="k3")
    stored, _ = run(
        store,
        lambda tx, now: store_memory(tx, WHO, req, repo=None, commit=None, trust=TRUSTED, now=now),
    )
    with pytest.raises(RecallError) as caught:
        _capture(store, ts=6.0, idempotency_key="k3")
    assert caught.value.code == "invalid_request"
    assert caught.value.message.endswith(f"{stored.record_id}, which is not an episode")


def test_a_verdict_at_capture_is_dated_then_and_files_are_kept_once(store: SqliteStore) -> None:
    judged, _ = _capture(store, ts=1.0, task_result=0.0, files=["a.py", "b.py", "a.py"])
    row = _row(store, judged.record_id)
    assert row.task_result == 0.0 and row.verdict_at is not None
    assert _row(store, _capture(store, ts=2.0)[0].record_id).verdict_at is None
    reader = store.reader()
    try:
        (episode,) = [e for e in reader.episodes.of_session(WS, "s1", 0, None, 1e12) if e.ts == 1.0]
    finally:
        store.close_reader(reader)
    assert episode.files == ["a.py", "b.py"]


def test_the_same_verdict_again_changes_nothing_not_even_its_time(store: SqliteStore) -> None:
    first, _ = _capture(store, ts=1.0, status="error")
    _capture(store, ts=2.0, status="error", task_result=1.0)
    reply, changed = _judge(store, session_id="s1", task_result=1.0, verdict_at=50.0)
    assert (reply.matched, reply.updated, reply.verdict_at) == (2, 1, 50.0)
    assert changed == [_row(store, first.record_id).rowid]
    again, changed = _judge(store, episode_id=first.record_id, task_result=1.0, verdict_at=60.0)
    assert (again.matched, again.updated, changed) == (1, 0, [])
    assert _row(store, first.record_id).verdict_at == 50.0


def test_a_verdict_finds_only_the_caller_s_episodes_unless_any_caller(
    store: SqliteStore,
) -> None:
    mine, _ = _capture(store, ts=1.0)
    other = Principal(agent="u", workspace=WS, uid=0, pid=0)
    with pytest.raises(RecallError) as caught:
        _judge(store, other, episode_id=mine.record_id, task_result=0.0)
    assert caught.value.code == "not_found"
    assert caught.value.message == (
        f"no episode {mine.record_id} of agent 'u' in workspace {WS} to judge"
    )
    elsewhere = Principal(agent="t", workspace="/ws/other", uid=0, pid=0)
    with pytest.raises(RecallError, match="no session s1 in workspace /ws/other"):
        _judge(store, elsewhere, session_id="s1", task_result=0.0, any_caller=True)
    reply, _ = _judge(store, other, episode_id=mine.record_id, task_result=0.0, any_caller=True)
    assert reply.updated == 1 and _row(store, mine.record_id).task_result == 0.0
