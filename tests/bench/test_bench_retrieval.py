"""bench_retrieval end to end on a tiny dataset folder, with the hash embedder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from inject_bench import evidence_precision
from recalld.retrieval.terms import fts_tokens
from retrieval_bench import METRICS, in_categories, load_dataset, score
from retrieval_variants import (
    PARAPHRASES,
    SYNONYMS,
    drop_letter,
    nearest_words,
    paraphrase,
    write_variant,
)

from tests.support.daemon import REPO

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_dialogue"
BENCH = str(REPO / "scripts" / "retrieval_bench.py")


def test_a_hit_on_a_deduplicated_record_counts_for_every_id_it_stands_for() -> None:
    ranked = [["a"], ["b", "c"], ["d"]]
    result = score(ranked, ["c", "b", "z"])
    assert result["recall@5"] == pytest.approx(2 / 3)
    assert result["mrr@10"] == pytest.approx(1 / 2)
    assert score([], ["a"]) == dict.fromkeys(METRICS, 0.0)


def test_the_first_hit_and_any_or_all_evidence_in_the_top_10_are_counted_per_query() -> None:
    ranked = [["x"], ["a"], *([f"n{i}"] for i in range(8)), ["b"]]  # "b" is 11th
    one_of_two = score(ranked, ["a", "b"])
    assert one_of_two["p@1"] == 0.0 and one_of_two["mrr@10"] == 0.5
    assert one_of_two["recall@10"] == 0.5
    assert one_of_two["recall_any@10"] == 1.0 and one_of_two["recall_all@10"] == 0.0
    first = score(ranked, ["x", "n7"])
    assert first["p@1"] == 1.0 and first["recall_all@10"] == 1.0
    # The first hit stands for two deduplicated ids: relevant if either is.
    assert score([["c", "a"], ["b"]], ["a"])["p@1"] == 1.0
    assert score(ranked, ["z"])["recall_any@10"] == 0.0


def test_a_block_s_precision_is_the_share_of_its_records_standing_for_evidence() -> None:
    ids = {"mem_1": ["a"], "mem_2": ["b", "c"], "mem_3": ["d"]}
    assert evidence_precision(["mem_1", "mem_2", "mem_3"], ids, ["c"]) == pytest.approx(1 / 3)
    assert evidence_precision(["mem_2", "mem_1"], ids, ["a", "b"]) == 1.0
    assert evidence_precision(["mem_3"], ids, ["a"]) == 0.0
    assert evidence_precision([], ids, ["a"]) is None


def test_categories_are_chosen_whole_or_by_locomo_s_number() -> None:
    wanted = frozenset({"1", "4", "temporal"})
    assert in_categories("1-multi-hop", wanted) and in_categories("4-single-hop", wanted)
    assert not in_categories("5-adversarial", wanted) and not in_categories("10-x", wanted)
    assert in_categories("temporal", wanted) and in_categories("anything", None)
    data = load_dataset(FIXTURE, categories=frozenset({"multi-hop"}))
    assert [q.qid for q in data.queries] == ["q2", "q7"] and len(data.none) == 2


def test_the_dataset_loader_skips_queries_without_evidence_and_keeps_ids_as_strings() -> None:
    data = load_dataset(FIXTURE)
    assert len(data.memories) == 15 and len(data.queries) == 7 and data.skipped == 1
    note = next(m for m in data.memories if m.id == "note-x")
    assert note.session is None and note.speaker is None and note.scope == "home"
    # queries_none.jsonl: kept apart, never among the queries scored for recall.
    assert [(q.qid, q.relevant_ids, q.category) for q in data.none] == [
        ("n1", (), "none"),
        ("n2", (), "none"),
    ]


@pytest.mark.parametrize("mode", ["hybrid", "bm25"])
def test_bench_retrieval_loads_a_folder_through_a_daemon_and_reports_json(mode: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            BENCH,
            str(FIXTURE),
            "--mode",
            mode,
            "--embedder",
            "hash",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {"overall", "by_category", "latency_ms", "none"}
    assert set(result["overall"]) == {*METRICS, "n"}
    assert set(result["none"]) == {"top_hit_claims", "not_low_confidence", "any_hit", "n"}
    assert result["none"]["n"] == 2
    assert all(0.0 <= v <= 1.0 for k, v in result["none"].items() if k != "n")
    assert set(result["latency_ms"]) == {"p50", "p95"}
    assert result["overall"]["n"] == 7
    assert {c: s["n"] for c, s in result["by_category"].items()} == {
        "multi-hop": 2,
        "single-hop": 5,
    }
    # Every question but one shares a content word with its evidence. That one ("What
    # should Ben eat in Lisbon?") needs its session's context, and ten turns are too few for
    # the order test to grant context; in hybrid mode the semantic channel ranks every record
    # of a store this small.
    assert result["overall"]["recall@10"] == pytest.approx(1.0 if mode == "hybrid" else 6 / 7)
    # Every query has one relevant id but q4 ("Thanks!" twice, stored once): all = any.
    assert result["overall"]["recall_all@10"] == result["overall"]["recall_any@10"]
    assert 0.0 < result["overall"]["p@1"] <= result["overall"]["mrr@10"]
    assert 0.0 < result["overall"]["mrr@10"] <= 1.0
    assert 0.0 < result["latency_ms"]["p50"] <= result["latency_ms"]["p95"]


def test_several_modes_run_over_one_store_and_print_one_result_each() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            BENCH,
            str(FIXTURE),
            "--mode",
            "bm25,hybrid",
            "--embedder",
            "hash",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert set(results) == {"bm25", "hybrid"}
    for result in results.values():
        assert set(result) == {"overall", "by_category", "latency_ms", "none"}
        assert result["overall"]["n"] == 7


def test_an_unknown_mode_is_refused_before_anything_starts() -> None:
    proc = subprocess.run(
        [sys.executable, BENCH, str(FIXTURE), "--mode", "bm25,fuzzy"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "unknown --mode fuzzy" in proc.stderr


def test_bench_retrieval_compares_both_backends_on_the_same_data() -> None:
    """--backend both: the same folder into a SQLite daemon and a PostgreSQL one (a real
    server the bench starts), scored side by side."""
    proc = subprocess.run(
        [
            sys.executable,
            BENCH,
            str(FIXTURE),
            "--backend",
            "both",
            "--embedder",
            "hash",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) >= {"sqlite", "postgres", "difference"}
    for backend in ("sqlite", "postgres"):
        assert result[backend]["overall"]["n"] == 7
    # The two stores find the same evidence (the order of ties may differ).
    difference = result["difference"]
    assert abs(difference["overall"]["recall@10"]) <= 0.02, difference
    assert difference["recall@10_within_tolerance"] is True


def test_the_paraphrased_variant_rewords_content_words_and_keeps_names_and_evidence(
    tmp_path: Path,
) -> None:
    # "name" and "dog" have synonyms; "Ana" is a name, "what", "is", "the", "of" function words.
    assert paraphrase("What is the name of Ana's dog?") == "What is the title of Ana's hound?"
    # A word of the second map, capitalised at the start.
    assert paraphrase("Sunrise photos") == "Daybreak snapshots"
    # No word of the second map is replaced by one holding a token of it as FTS5 stems it
    # (the lexical channel cannot match it through stemming), nor has an entry in both maps.
    assert not set(SYNONYMS) & set(PARAPHRASES)
    for word, repl in PARAPHRASES.items():
        assert not set(fts_tokens(word)) & set(fts_tokens(repl)), (word, repl)
    folder = write_variant(FIXTURE, tmp_path, "paraphrased")
    source, variant = load_dataset(FIXTURE), load_dataset(folder)
    assert variant.memories == source.memories
    assert [(q.qid, q.relevant_ids) for q in variant.queries] == [
        (q.qid, q.relevant_ids) for q in source.queries
    ]
    assert [q.query for q in variant.queries] == [paraphrase(q.query) for q in source.queries]
    changed = [a.query != b.query for a, b in zip(variant.queries, source.queries, strict=True)]
    assert sum(changed) >= 5


def test_dropping_a_letter_keeps_the_word_s_ends_and_is_the_same_every_run() -> None:
    assert drop_letter("dog") == "dog" and drop_letter("lake") == "lake"
    for word in ("support", "group", "sunrise", "Caroline"):
        dropped = drop_letter(word)
        assert len(dropped) == len(word) - 1
        assert dropped[0] == word[0] and dropped[-2:] == word[-2:]
        assert dropped == drop_letter(word)


def test_a_neighboured_word_is_the_nearest_one_fts5_cannot_match_for_it() -> None:
    # Hand-made unit vectors: "painting" is nearest "paint" but stems to the same FTS5
    # token, so the next nearest, "drawing", replaces it; "the" is a function word, never
    # a replacement; "sunset" has no neighbour but itself and is left out.
    vectors = {
        "paint": (1.0, 0.0, 0.0),
        "painting": (0.99, 0.14, 0.0),
        "the": (0.98, 0.2, 0.0),
        "drawing": (0.9, 0.44, 0.0),
        "sunset": (0.0, 0.0, 1.0),
        "lake": (0.0, 1.0, 0.0),
    }

    def embed(words: list[str]) -> np.ndarray:
        rows = np.array([vectors[w] for w in words])
        unit: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return unit

    table = nearest_words(["Paint", "lake"], ["painting", "the", "drawing", "lake"], embed)
    assert table == {"paint": "drawing", "lake": "drawing"}
    assert nearest_words(["sunset"], ["sunset"], embed) == {}
    assert nearest_words([], ["lake"], embed) == {}


def test_bench_retrieval_inject_reports_evidence_recall_at_each_budget() -> None:
    proc = subprocess.run(
        [sys.executable, BENCH, str(FIXTURE), "--embedder", "hash", "--inject", "60,300", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {"search", "inject"} and result["search"]["overall"]["n"] == 7
    inject = result["inject"]
    assert set(inject) == {"60", "300", "latency_ms"}
    for budget in (60, 300):
        at = inject[str(budget)]
        assert at["n"] == 7 and set(at["by_category"]) == {"multi-hop", "single-hop"}
        for side in ("injected", "top_k"):
            assert 0 <= at[side]["evidence_recall"] <= 1
            assert 0 <= at[side]["precision"] <= 1
            assert 0 <= at[side]["empty"] <= 7
            assert 0 <= at[side]["tokens_mean"] <= budget
        assert at["none"]["n"] == 2
        assert 0 <= at["none"]["injected_any"] <= 1 and 0 <= at["none"]["top_k_any"] <= 1
    # A tighter budget holds fewer memories, on both sides; the loose one finds evidence (the
    # hash embedder says nothing of meaning: only what shares a prompt's words is relevant
    # enough to inject), and no memory for a prompt nothing answers.
    assert inject["60"]["injected"]["items_mean"] < inject["300"]["injected"]["items_mean"]
    assert inject["60"]["top_k"]["items_mean"] < inject["300"]["top_k"]["items_mean"]
    assert inject["300"]["injected"]["evidence_recall"] > 0.25
    assert inject["300"]["none"]["injected_any"] == 0
    # 60 tokens hold the preamble and no memory: every block empty, so no precision to take.
    assert inject["60"]["injected"]["empty"] == 7 and inject["60"]["injected"]["precision"] == 0
    assert inject["300"]["injected"]["precision"] > 0


def test_bench_retrieval_refuses_a_budget_that_is_not_a_positive_number() -> None:
    proc = subprocess.run(
        [sys.executable, BENCH, str(FIXTURE), "--inject", "0,abc"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--inject" in proc.stderr


def test_bench_replay_teaches_half_the_queries_and_measures_the_other_half() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_replay.py"),
            str(FIXTURE),
            "--embedder",
            "hash",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["taught"] + out["measured"] == 7
    assert out["taught"] >= 1
    # Every hit of a taught query got an outcome, and each taught its workspace's
    # calibration: the workspace ranks by its own, with one update per outcome.
    recorded = out["outcomes"]["used"] + out["outcomes"]["ignored"]
    assert out["outcomes"]["used"] >= 1
    assert out["outcomes"]["ignored"] >= 1
    learned = [c for c in out["calibrations"].values() if c["source"] == "workspace"]
    assert sum(c["updates"] for c in learned) == recorded
    assert out["cleared"] >= 1
    for name in ("before", "after", "outcomes_only"):
        assert out[name]["n"] == out["measured"]
        assert all(0.0 <= out[name][k] <= 1.0 for k in ("recall@10", "mrr@10", "p@1"))
    for k in ("recall@10", "mrr@10", "p@1"):
        assert out["lift"][k] == pytest.approx(out["after"][k] - out["before"][k])
        assert out["learned_lift"][k] == pytest.approx(out["after"][k] - out["outcomes_only"][k])
