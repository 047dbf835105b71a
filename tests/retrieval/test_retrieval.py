"""Retrieval internals: query processing, fusion, session context, on a real store."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recalld.pipeline.model import HashEmbedder
from recalld.retrieval import fusion, ranker, session_context, terms
from recalld.store.port import Filter, Reader
from recalld.store.sql.candidates import LEXICAL_BUDGET
from recalld.store.sqlite import retrieval as sqlite_retrieval
from recalld.store.sqlite import vector_index
from recalld.store.sqlite.engine import SqliteStore
from recalld.store.sqlite.readers import reader_on
from recalld.store.sqlite.retrieval import LexicalPlan, fts_query, lexical_plan
from recalld.store.sqlite.schema import open_reader

from tests.support.store import memory, write


def visible(workspace: str) -> Filter:
    return Filter(kind="memory", now=time.time(), workspace=workspace)


def test_query_terms_drop_stop_words_and_repeats_but_keep_an_all_stop_word_query() -> None:
    assert terms.query_terms("When did Ana adopt the dog, the DOG?") == ["ana", "adopt", "dog"]
    assert terms.query_terms("what is it") == ["what", "is", "it"]
    assert terms.query_terms("?!") == []


def test_fts_query_quotes_every_term_so_no_query_syntax_leaks_in() -> None:
    assert fts_query(['say "hi"', "NEAR"]) == '"say ""hi""" OR "NEAR"'
    assert fts_query([]) is None


def test_fuse_normalises_each_channel_and_weighs_them() -> None:
    lexical = [(1, 12.0), (2, 6.0), (3, 2.0)]
    semantic = [(3, 0.9), (4, 0.5), (1, 0.4)]
    fused = fusion.fuse([(lexical, 0.7), (semantic, 0.3)], depth=3)
    assert fused[1] == pytest.approx(0.7 * 1.0 + 0.3 * 0.0)
    assert fused[2] == pytest.approx(0.7 * 0.4)
    assert fused[3] == pytest.approx(0.7 * 0.0 + 0.3 * 1.0)
    assert fused[4] == pytest.approx(0.3 * 0.2)


def test_fuse_with_one_channel_keeps_that_channels_order_on_a_full_scale() -> None:
    lexical = [(7, 9.0), (8, 3.0), (9, 1.0)]
    fused = fusion.fuse([(lexical, 1.0)])
    assert sorted(fused, key=lambda r: -fused[r]) == [7, 8, 9]
    assert fused[7] == pytest.approx(1.0)
    # A channel that ran and found nothing keeps its share of the weight.
    assert fusion.fuse([([], 0.7), ([(3, 0.9), (4, 0.1)], 0.3)], depth=2)[3] == pytest.approx(0.3)
    # Cut short of its depth, a channel's floor is 0, not its weakest candidate.
    assert fusion.fuse([([(3, 8.0), (4, 6.0)], 1.0)])[4] == pytest.approx(0.75)
    assert fusion.fuse([([(5, 2.0)], 0.7)]) == {5: 1.0}


def test_in_context_lifts_a_turn_whose_neighbours_match_and_leaves_loners_alone() -> None:
    scores = {1: 1.0, 3: 1.0, 9: 0.6}
    neighbours = {1: [2], 2: [1, 3], 3: [2], 9: []}
    ranked = session_context.in_context(scores, neighbours, 0.5)
    # Turn 2 matched nothing itself, but sits between two that did.
    assert ranked[2] == pytest.approx((0 + 0.5 * 2.0) / (1 + 0.5 * 2))
    assert ranked[1] == pytest.approx((1.0 + 0.5 * 0.0) / 1.5)
    # No session, no neighbours: its own score, unchanged.
    assert ranked[9] == pytest.approx(0.6)
    # Records the neighbour map does not cover are not scored.
    assert set(session_context.in_context(scores, {1: [2]}, 0.5)) == {1}
    # A candidate at the bottom of its channel (normalised to 0) is kept, a bare neighbour not.
    assert session_context.in_context({5: 0.0}, {5: [6], 6: [5]}, 0.5) == {5: 0.0}


@pytest.fixture
def dialogue(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Two sessions of one workspace, a session-less note, and a turn elsewhere."""
    store = SqliteStore(tmp_path, durability="normal")
    turns = [
        "We adopted a beagle last weekend.",
        "Where did you find him?",
        "At the shelter by the lake.",
        "Lovely people there.",
        "He chewed my shoes already.",
    ]
    s1 = write(store, *[memory("/home", t, "s1", 100.0 + i) for i, t in enumerate(turns)])
    # Same timestamp twice: capture order (rowid) decides.
    s2 = write(
        store,
        *[memory("/home", t, "s2", 500.0) for t in ("Flying to Lisbon.", "Eat custard tarts.")],
    )
    [note, other] = write(
        store,
        memory("/home", "The spare key is under the pot.", None, 50.0),
        memory("/work", "A beagle visits the office.", "s1", 101.5),
    )
    reader = store.reader()
    yield {"store": store, "reader": reader, "s1": s1, "s2": s2, "note": note, "other": other}
    store.close_reader(reader)
    store.close()


def test_neighbours_are_the_window_around_each_record_within_its_own_session(
    dialogue: dict[str, Any],
) -> None:
    s1, s2 = dialogue["s1"], dialogue["s2"]
    near = session_context.neighbours(
        dialogue["reader"], [s1[0], s2[1], dialogue["note"]], 2, test_order=False
    )
    assert near[s1[0]] == [s1[1], s1[2]]  # the session starts here
    assert near[s1[2]] == [s1[0], s1[1], s1[3], s1[4]]  # a neighbour's own full window
    assert near[s2[1]] == [s2[0]]  # same ts: capture order
    assert near[dialogue["note"]] == []
    assert dialogue["other"] not in {n for lst in near.values() for n in lst}


def test_retrieve_finds_a_turn_through_its_context_but_never_a_hidden_one(
    dialogue: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Five turns are too few for the order test to find order; here it is granted.
    monkeypatch.setattr(session_context, "ordered", lambda conn, workspace, kind: True)
    s1, reader = dialogue["s1"], dialogue["reader"]
    words = terms.query_terms("adopted beagle shelter lake")
    plain = fusion.retrieve(reader, words, None, visible("/home"), limit=10, context_window=0)
    assert {c.rowid for c in plain} == {s1[0], s1[2]}
    found = fusion.retrieve(reader, words, None, visible("/home"), limit=10)
    by_id = {c.rowid: c for c in found}
    # "Where did you find him?" shares no word with the query: its context brought it.
    assert s1[1] in by_id and by_id[s1[1]].lexical_rank is None
    assert all(0.0 < c.score <= 1.0 for c in found)
    assert dialogue["other"] not in by_id

    store = dialogue["store"]
    [turn_id] = [r.id for r in reader.memories.by_rowid([s1[1]]).values()]
    write(store, lambda tx, now: tx.records.forget(turn_id, now))
    again = fusion.retrieve(reader, words, None, visible("/home"), limit=10)
    assert s1[1] not in {c.rowid for c in again}


def _embedded(dialogue: dict[str, Any]) -> HashEmbedder:
    """Give every record of ``dialogue`` its vector; the embedder that made them."""
    reader, store = dialogue["reader"], dialogue["store"]
    rows = reader.records.unembedded(0, 100)
    embedder = HashEmbedder()
    store.open_vectors(embedder.name, embedder.dim)
    store.vectors_added(
        np.array([r for r, _ in rows], dtype=np.int64), embedder.encode([t for _, t in rows])
    )
    return embedder


def test_retrieve_fuses_the_semantic_channel_under_the_same_visibility(
    dialogue: dict[str, Any],
) -> None:
    reader, embedder = dialogue["reader"], _embedded(dialogue)
    query = "custard tarts Lisbon"
    qvec = embedder.encode([query])[0]
    found = fusion.retrieve(reader, terms.query_terms(query), qvec, visible("/home"), limit=3)
    assert found[0].rowid in dialogue["s2"]
    assert found[0].cosine is not None and found[0].lexical_rank is not None
    assert dialogue["other"] not in {c.rowid for c in found}


def test_the_semantic_side_threads_live_only_inside_their_block_and_change_no_result(
    dialogue: dict[str, Any],
) -> None:
    reader, embedder = dialogue["reader"], _embedded(dialogue)
    query = "custard tarts Lisbon"
    words, qvec = terms.query_terms(query), embedder.encode([query])[0]

    def ours() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("recalld semantic")]

    def ranked(on: Reader) -> list[tuple[int, float, float | None]]:
        found = fusion.retrieve(on, words, qvec, visible("/home"), limit=5)
        return [(c.rowid, c.score, c.cosine) for c in found]

    inline = ranked(reader)
    with fusion.semantic_threads() as threads:
        beside = reader_on(
            open_reader(dialogue["store"].data_dir), dialogue["store"].index, threads
        )
        try:
            found = ranked(beside)
            assert ours(), "the semantic channel ran beside the lexical one in no thread of its own"
        finally:
            beside.db.close()
    assert found == inline
    assert not ours()


def test_a_vector_still_being_embedded_is_waited_for_and_a_failed_one_leaves_lexical_only(
    dialogue: dict[str, Any],
) -> None:
    reader, embedder = dialogue["reader"], _embedded(dialogue)
    query = "custard tarts Lisbon"
    words = terms.query_terms(query)
    qvec = embedder.encode([query])[0]
    ready = fusion.retrieve(reader, words, qvec, visible("/home"), limit=5)
    # Filled from another thread while retrieve runs its lexical channel.
    pending = fusion.PendingVector()
    timer = threading.Timer(0.2, pending.set, (qvec,))
    timer.start()
    later = fusion.retrieve(reader, words, pending, visible("/home"), limit=5)
    timer.join()
    assert [(c.rowid, c.score, c.cosine) for c in later] == [
        (c.rowid, c.score, c.cosine) for c in ready
    ]
    failed = fusion.PendingVector()
    failed.set(None)
    lexical = fusion.retrieve(reader, words, failed, visible("/home"), limit=5)
    assert lexical and all(c.cosine is None and c.lexical_rank is not None for c in lexical)


def test_the_lexical_channel_skips_better_scored_records_the_reader_may_not_see(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path, durability="normal")
    # Another workspace's records say "zebra" most often, so bm25 ranks all of them first.
    hidden = write(
        store, *[memory("/other", f"zebra zebra zebra {i}", None, float(i)) for i in range(40)]
    )
    mine = write(
        store,
        *[memory("/w", f"a zebra among many words {i}", None, 100.0 + i) for i in range(8)],
    )
    reader = store.reader()
    try:
        found = reader.search.lexical(["zebra"], visible("/w"), 5)
        assert len(found) == 5 and {r for r, _ in found} <= set(mine)
        assert not {r for r, _ in found} & set(hidden)
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
        assert len(reader.search.lexical(["zebra"], visible("/w"), 100)) == len(mine)
    finally:
        store.close_reader(reader)
        store.close()


TOPICS = (
    "beagle",
    "lisbon",
    "violin",
    "marathon",
    "sourdough",
    "kayak",
    "chess",
    "orchid",
    "telescope",
    "pottery",
    "tango",
    "glacier",
    "saxophone",
    "vineyard",
    "origami",
)


def _conversation(seed: int) -> list[str]:
    """Turns of one session that talk about one thing at a time, three turns a topic."""
    rng = np.random.default_rng(seed)
    fillers = ["really", "think", "went", "great", "weekend", "friend", "tried", "later", "love"]
    return [f"{TOPICS[i // 3]} {' '.join(rng.choice(fillers, 3))}" for i in range(3 * len(TOPICS))]


@pytest.fixture
def ordered_and_shuffled(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The same turns twice: in their order in /talk, shuffled inside the session in /mixed."""
    store = SqliteStore(tmp_path, durability="normal")
    turns = _conversation(1)
    talk = write(store, *[memory("/talk", t, "s", 1000.0 + i) for i, t in enumerate(turns)])
    order = [int(k) for k in np.random.default_rng(2).permutation(len(turns))]
    stored = write(
        store, *[memory("/mixed", turns[k], "s", 1000.0 + i) for i, k in enumerate(order)]
    )
    mixed = dict(zip(order, stored, strict=True))
    reader = store.reader()
    yield {"reader": reader, "talk": talk, "mixed": [mixed[k] for k in range(len(turns))]}
    store.close_reader(reader)
    store.close()


def test_the_order_test_finds_order_in_a_conversation_and_none_when_it_is_shuffled(
    ordered_and_shuffled: dict[str, Any],
) -> None:
    reader = ordered_and_shuffled["reader"]
    talk = session_context.order_test(reader, "/talk", "memory", 0.0)
    mixed = session_context.order_test(reader, "/mixed", "memory", 0.0)
    assert talk.ordered and talk.t >= session_context.ORDER_T and talk.pairs >= 40
    assert not mixed.ordered and mixed.t < session_context.ORDER_T
    # Too few records are no evidence of order.
    nothing = session_context.order_test(reader, "/nowhere", "memory", 0.0)
    assert not nothing.ordered and nothing.pairs == 0


def test_context_ranks_only_where_sessions_are_ordered(
    ordered_and_shuffled: dict[str, Any],
) -> None:
    reader, talk, mixed = (ordered_and_shuffled[k] for k in ("reader", "talk", "mixed"))
    words = terms.query_terms("violin great")
    for workspace, ids in (("/talk", talk), ("/mixed", mixed)):
        plain = fusion.retrieve(reader, words, None, visible(workspace), limit=10, context_window=0)
        found = fusion.retrieve(reader, words, None, visible(workspace), limit=10)
        if workspace == "/talk":
            # The three violin turns lead; context lifted them over the loners that only
            # said "great".
            assert {c.rowid for c in found[:3]} == set(ids[6:9])
            assert [c.score for c in found] != [c.score for c in plain]
        else:
            assert [(c.rowid, c.score) for c in found] == [(c.rowid, c.score) for c in plain]


@pytest.fixture
def common_words(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """60 records that all say "deploy" and "script", 20 that also say "staging", one "zebra"."""
    store = SqliteStore(tmp_path, durability="normal")
    rows = write(
        store,
        *[
            memory(
                "/w",
                f"the deploy script run {i}" + (" on staging" if i % 3 == 0 else ""),
                None,
                float(i),
            )
            for i in range(60)
        ],
    )
    [zebra] = write(store, memory("/w", "the zebra deploy script", None, 60.0))
    reader = store.reader()
    yield {"reader": reader, "rows": rows, "zebra": zebra}
    store.close_reader(reader)
    store.close()


def test_lexical_plan_is_exact_while_the_terms_fit_the_budget(common_words: dict[str, Any]) -> None:
    conn = common_words["reader"].db
    plan = lexical_plan(conn, ["deploy", "staging", "zebra"], budget=1000)
    assert plan == LexicalPlan('"deploy" OR "staging" OR "zebra"')
    assert lexical_plan(conn, []) is None


def test_lexical_plan_keeps_the_rare_terms_that_fit_and_drops_the_common_ones(
    common_words: dict[str, Any],
) -> None:
    # df: zebra 1, staging 20, deploy 61. A budget of 30 holds zebra and staging only.
    plan = lexical_plan(common_words["reader"].db, ["deploy", "staging", "zebra"], budget=30)
    assert plan == LexicalPlan('"staging" OR "zebra"')
    found = fusion.retrieve(
        common_words["reader"], ["deploy", "zebra"], None, visible("/w"), limit=5, context_window=0
    )
    assert found[0].rowid == common_words["zebra"]


def test_lexical_plan_scores_only_recent_records_when_every_term_is_common(
    common_words: dict[str, Any],
) -> None:
    reader = common_words["reader"]
    # Nothing holds "unicorn"; deploy and script are in all 61 records, over a budget of 10.
    plan = lexical_plan(reader.db, ["unicorn", "deploy", "script"], budget=10)
    assert plan is not None and plan.match == '"unicorn" OR "deploy" OR "script"'
    newest = sorted([*common_words["rows"], common_words["zebra"]])[-10:]
    assert plan.min_rowid == newest[0]
    found = fusion.retrieve(
        reader, ["deploy", "script"], None, visible("/w"), limit=100, context_window=0
    )
    assert len(found) == 61  # the default budget holds them all


def test_when_every_term_is_common_the_window_ranks_by_the_terms_held_then_newest(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path, durability="normal")
    # Both words in more records than one search scores: every record says "deploy", every
    # other one "staging" too, and a few at the start (outside the window) "staging" twice.
    n = 2 * LEXICAL_BUDGET + 200
    rows = write(
        store,
        *[
            memory(
                "/w" if i % 7 else "/other",
                f"deploy run {i}" + (" staging" if i % 2 == 0 else "") + (" staging" * 5 * (i < 9)),
                None,
                float(i),
            )
            for i in range(n)
        ],
    )
    reader = store.reader()
    try:
        plan = lexical_plan(reader.db, ["deploy", "staging"])
        assert plan is not None and plan.terms == ("deploy", "staging")
        assert plan.min_rowid == rows[-LEXICAL_BUDGET]
        found = reader.search.lexical(["deploy", "staging"], visible("/w"), 100)
        window = [r for i, r in enumerate(rows) if r >= plan.min_rowid and i % 7]
        both = [r for r in window if (r - rows[0]) % 2 == 0]
        # Those holding both words first, newest first, then those with "deploy" alone;
        # none from the other workspace, none older than the window.
        want = sorted(both, reverse=True) + sorted(set(window) - set(both), reverse=True)
        assert [r for r, _ in found] == want[:100]
        tail = reader.search.lexical(["deploy", "staging"], visible("/w"), len(window) + 50)
        assert [r for r, _ in tail] == want
        assert tail[0][1] > tail[-1][1] > 0
    finally:
        store.close_reader(reader)
        store.close()


def test_fts_tokens_stem_words_as_fts5s_porter_tokenizer_indexes_them(tmp_path: Path) -> None:
    words = (
        "caresses ponies ties caress cats feed agreed plastered bled motoring sing conflated"
        " troubled sized hopping tanned falling hissing fizzed failing filing happy sky"
        " relational conditional rational valenci hesitanci digitizer conformabli radicalli"
        " differentli vileli analogousli vietnamization predication operator feudalism"
        " decisiveness hopefulness callousness formaliti sensitiviti sensibiliti triplicate"
        " formative formalize electriciti electrical hopeful goodness revival allowance"
        " inference airliner gyroscopic adjustable defensible irritant replacement adjustment"
        " dependent adoption homologou communism activate angulariti homologous effective"
        " bowdlerize probate rate cease controll roll geology horribly us is a Café naïve"
        " don't e-mail LGBTQ 2023 x_y"
    )
    import sqlite3

    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE VIRTUAL TABLE t USING fts5(text, tokenize='porter unicode61 remove_diacritics 2')"
    )
    db.execute("INSERT INTO t VALUES (?)", (words,))
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'row')")
    indexed = {row[0] for row in db.execute("SELECT term FROM v")}
    assert set(terms.fts_tokens(words)) == indexed
    assert terms.fts_tokens("Adopting the puppies") == ["adopt", "the", "puppi"]


def test_the_learned_ranking_scores_in_zero_to_one_best_first_by_its_weighted_sum() -> None:
    rows = [[0.0] * len(ranker.FEATURES) for _ in range(3)]
    rows[1][ranker.FEATURES.index("coverage")] = 1.0
    rows[2][ranker.FEATURES.index("coverage")] = 0.5
    scores = ranker.rank(rows)
    assert scores[1] == 1.0 and scores[0] < scores[2] < scores[1]
    # The learned order, with the first stage's scores: how far apart they usually are.
    assert ranker.on_scale({1: 1.0, 2: 0.2, 3: 0.5}, {1: 0.1, 2: 0.9, 3: 0.4}) == {
        1: 0.9,
        3: 0.4,
        2: 0.1,
    }
    assert ranker.query_names("When did Caroline meet Mel in Paris?") == {
        "caroline",
        "mel",
        "paris",
    }


def test_learned_ranking_finds_a_turn_by_its_context_and_forgotten_text_never_counts(
    dialogue: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_context, "ordered", lambda conn, workspace, kind: True)
    reader, store, s1 = dialogue["reader"], dialogue["store"], dialogue["s1"]
    rows = reader.records.unembedded(0, 100)
    embedder = HashEmbedder()
    store.open_vectors(embedder.name, embedder.dim)
    store.vectors_added(
        np.array([r for r, _ in rows], dtype=np.int64), embedder.encode([t for _, t in rows])
    )
    query = "beagle shelter lake"
    words, qvec = terms.query_terms(query), embedder.encode([query])[0]

    def ranked() -> dict[int, fusion.Candidate]:
        found = fusion.retrieve(
            reader, words, qvec, visible("/home"), limit=10, query=query, learned=True
        )
        # The learned order, on the first stage's scale.
        scores = [c.score for c in found]
        assert all(0.0 <= x <= 1.0 for x in scores) and scores == sorted(scores, reverse=True)
        return {c.rowid: c for c in found}

    by_id = ranked()
    # "Where did you find him?" holds no word of the query; its neighbours hold them all.
    assert by_id[s1[1]].context_evidence == pytest.approx(1.0)
    assert dialogue["other"] not in by_id
    [turn_id] = [r.id for r in reader.memories.by_rowid([s1[2]]).values()]
    write(store, lambda tx, now: tx.records.forget(turn_id, now))
    by_id = ranked()
    # The forgotten turn's words ("shelter", "lake") no longer count for its neighbours.
    assert s1[2] not in by_id
    evidence = by_id[s1[1]].context_evidence
    assert evidence is not None and evidence < 0.5


def test_a_small_workspace_in_a_large_graph_is_searched_by_its_own_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sizes lowered so that a test builds a graph: from 200 vectors, widened to 64 at most.
    monkeypatch.setattr(vector_index, "GRAPH_MIN", 200)
    monkeypatch.setattr(sqlite_retrieval, "GRAPH_WIDEN_MAX", 64)
    asked: list[int] = []
    search_sync = vector_index.VectorIndex.search_sync

    def spy(self: vector_index.VectorIndex, vec: np.ndarray, k: int) -> Any:
        asked.append(k)
        return search_sync(self, vec, k)

    monkeypatch.setattr(vector_index.VectorIndex, "search_sync", spy)
    store = SqliteStore(tmp_path, durability="normal")
    write(
        store,
        *[memory("/big", f"rollout note {i} on canary {i % 7}", None, i) for i in range(400)],
    )
    texts = ["custard tarts in Lisbon", "a beagle from the shelter by the lake", "consumer lag"]
    small = write(store, *[memory("/small", t, None, 1000.0 + i) for i, t in enumerate(texts)])
    reader = store.reader()
    try:
        rows = reader.records.unembedded(0, 1000)
        embedder = HashEmbedder()
        vecs = embedder.encode([t for _, t in rows])
        write(
            store,
            lambda tx, now: tx.records.store_vectors(
                embedder.name, list(zip([r for r, _ in rows], vecs, strict=True))
            ),
        )
        store.open_vectors(embedder.name, embedder.dim)
        status = store.index_status()
        assert status is not None and (status.type or "").startswith("IndexHNSWSQ(fp16")

        qvec = embedder.encode(["the beagle from the shelter"])[0]
        found = reader.search.semantic(qvec, visible("/small"), 10)
        # All three, nearest first, with their exact cosines...
        assert found[0][0] == small[1]
        assert {r for r, _ in found} == set(small)
        exact = {r: float(v @ qvec) for (r, _), v in zip(rows, vecs, strict=True)}
        assert all(cos == pytest.approx(exact[r], abs=1e-5) for r, cos in found)
        # ...without walking the graph for more than the widening bound.
        assert max(asked) <= 4 * 64 and max(asked) < 403
    finally:
        store.close_reader(reader)
        store.close()


def test_the_text_index_merges_its_segments_and_still_finds_every_record(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path, durability="normal")
    # Each batch commits a segment of its own.
    for b in range(6):
        write(store, *[memory("/ws", f"segment {b} note {i} canary", None, i) for i in range(5)])
    reader = store.reader()
    try:

        def segments() -> int:
            with sqlite3.connect(tmp_path / "recalld.db") as conn:
                return int(
                    conn.execute("SELECT count(DISTINCT segid) FROM records_fts_idx").fetchone()[0]
                )

        assert segments() > 1
        steps = 0
        while write(store, lambda tx, now: tx.records.merge_text_index(500))[0]:
            steps += 1
            assert steps < 50
        assert segments() == 1
        # Nothing was left to merge, and nothing was lost to the merge.
        assert write(store, lambda tx, now: tx.records.merge_text_index(500)) == [False]
        found = reader.search.lexical(["canary"], visible("/ws"), 100)
        assert len(found) == 30
    finally:
        store.close_reader(reader)
        store.close()
