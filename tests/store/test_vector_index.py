"""The FAISS index over a large collection: an HNSW graph with record ids, removals,
re-embeds and its snapshot, on real FAISS over a real SQLite vectors table (the size at which
the graph takes over is lowered so that a test builds one in a second)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from recalld.store.sqlite import vector_index
from recalld.store.sqlite.schema import MIGRATIONS
from recalld.store.sqlite.vector_index import (
    SNAPSHOT_LABELS,
    SNAPSHOT_META,
    VectorIndex,
    latest_change,
)

DIM = 32
MODEL = "test-model"
N = 1_200


@pytest.fixture(autouse=True)
def small_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_index, "GRAPH_MIN", 500)


def clustered(n: int, seed: int) -> np.ndarray:
    """Vectors around 40 centres, as sentence embeddings gather by topic."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, DIM))
    vecs = centres[rng.integers(0, 40, n)] + rng.normal(0, 0.3, (n, DIM))
    out: np.ndarray = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    return out


def vectors_table(path: Path, vecs: np.ndarray) -> sqlite3.Connection:
    conn = sqlite3.connect(path / "v.db")
    conn.execute("CREATE TABLE records (rowid INTEGER PRIMARY KEY, tombstoned_at REAL)")
    conn.execute("CREATE TABLE vectors (rowid INTEGER PRIMARY KEY, model TEXT, vec BLOB)")
    conn.executescript(MIGRATIONS[10])  # 11: vector_changes and the triggers that fill it
    # Rowids from 1, with gaps, so that a label mix-up would show.
    for i, v in enumerate(vecs):
        conn.execute("INSERT INTO records (rowid) VALUES (?)", (3 * i + 1,))
        conn.execute("INSERT INTO vectors VALUES (?, ?, ?)", (3 * i + 1, MODEL, v.tobytes()))
    conn.commit()
    return conn


def rowid(i: int) -> int:
    return 3 * i + 1


def opened(path: Path, conn: sqlite3.Connection) -> VectorIndex:
    index = VectorIndex(path, DIM, MODEL)
    index.open(conn)
    return index


def snapshot(index: VectorIndex, conn: sqlite3.Connection) -> None:
    index.snapshot_sync(latest_change(conn))


def top(index: VectorIndex, vec: np.ndarray, k: int = 10) -> list[int]:
    ids, _ = index.search_sync(vec, k)
    return [int(i) for i in ids]


def test_a_large_collection_is_a_graph_that_finds_what_an_exact_scan_finds(tmp_path: Path) -> None:
    vecs = clustered(N, seed=1)
    index = opened(tmp_path, vectors_table(tmp_path, vecs))
    assert index.kind.startswith("IndexHNSWSQ(fp16") and index.ntotal == N
    assert index.rebuilt_reason == "no snapshot"
    queries = clustered(50, seed=2)
    exact = np.argsort(-(queries @ vecs.T), axis=1)[:, :10]
    recall = np.mean(
        [
            len(set(top(index, q)) & {rowid(int(i)) for i in want}) / 10
            for q, want in zip(queries, exact, strict=True)
        ]
    )
    assert recall >= 0.95
    # Scores are the cosines, best first.
    ids, scores = index.search_sync(vecs[7], 5)
    assert int(ids[0]) == rowid(7) and scores[0] == pytest.approx(1.0, abs=1e-5)
    assert list(scores) == sorted(scores, reverse=True)


def test_removed_and_re_embedded_records_leave_the_graph_s_answers(tmp_path: Path) -> None:
    vecs = clustered(N, seed=3)
    index = opened(tmp_path, vectors_table(tmp_path, vecs))
    gone = np.array([rowid(i) for i in range(0, 40, 2)], dtype=np.int64)
    index.remove_sync(gone)
    assert index.ntotal == N - len(gone)
    assert "dead=20" in index.kind
    for i in range(0, 40, 2):
        assert rowid(i) not in top(index, vecs[i], 50)
    assert rowid(1) == top(index, vecs[1])[0]
    assert not set(gone.tolist()) & set(index.ids_sync().tolist())
    # Nothing lost to the threshold search either.
    found, _ = index.range_search_sync(vecs[1], 0.999)
    assert rowid(1) in found.tolist() and rowid(0) not in found.tolist()

    # A re-embedded record: its new vector answers, its old one no longer does, and it is one
    # record, not two.
    new = clustered(1, seed=4)[0]
    index.add_sync(np.array([rowid(5)], dtype=np.int64), new[None, :])
    assert index.ntotal == N - len(gone)
    assert top(index, new)[0] == rowid(5)
    old_hits = top(index, vecs[5], 50)
    assert old_hits[0] != rowid(5)
    assert top(index, new, 200).count(rowid(5)) == 1

    # New records, added a few at a time, are found at once.
    fresh = clustered(9, seed=5)
    fresh_ids = np.arange(10_000, 10_009, dtype=np.int64)
    index.add_sync(fresh_ids, fresh)
    assert [top(index, v)[0] for v in fresh] == fresh_ids.tolist()
    assert index.ntotal == N - len(gone) + 9


def test_a_graph_s_snapshot_keeps_its_labels_and_removals(tmp_path: Path) -> None:
    vecs = clustered(N, seed=6)
    conn = vectors_table(tmp_path, vecs)
    index = opened(tmp_path, conn)
    gone = [rowid(i) for i in range(3)]
    index.remove_sync(np.array(gone, dtype=np.int64))
    conn.executemany("DELETE FROM vectors WHERE rowid = ?", [(r,) for r in gone])
    conn.commit()
    snapshot(index, conn)
    before = [top(index, v) for v in vecs[3:13]]

    again = opened(tmp_path, conn)
    assert again.rebuilt_reason is None, again.rebuilt_reason
    assert again.kind == index.kind and again.ntotal == N - 3
    assert [top(again, v) for v in vecs[3:13]] == before
    assert rowid(0) not in top(again, vecs[0], 50)

    # The labels are covered by the checksum: damage there rebuilds too.
    labels = tmp_path / SNAPSHOT_LABELS
    raw = bytearray(labels.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    labels.write_bytes(bytes(raw))
    third = opened(tmp_path, conn)
    assert "checksum" in (third.rebuilt_reason or "")
    assert third.ntotal == N - 3 and third.kind.endswith("dead=0)")


def test_a_snapshot_a_few_vectors_behind_sqlite_is_brought_up_to_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As after a kill -9: SQLite committed vectors the last snapshot never saw, and removed
    # some it holds.
    vecs = clustered(N, seed=9)
    conn = vectors_table(tmp_path, vecs)
    snapshot(opened(tmp_path, conn), conn)
    later = clustered(5, seed=10)
    for j, v in enumerate(later):
        conn.execute("INSERT INTO records (rowid) VALUES (?)", (50_000 + j,))
        conn.execute("INSERT INTO vectors VALUES (?, ?, ?)", (50_000 + j, MODEL, v.tobytes()))
    conn.execute("UPDATE records SET tombstoned_at = 1 WHERE rowid IN (?, ?)", (rowid(0), rowid(1)))
    conn.commit()
    again = opened(tmp_path, conn)
    assert again.rebuilt_reason is None
    assert again.kind.endswith("dead=2)") and again.ntotal == N - 2 + 5
    assert [top(again, v)[0] for v in later] == list(range(50_000, 50_005))
    assert rowid(0) not in top(again, vecs[0], 50)
    want = sorted({rowid(i) for i in range(2, N)} | set(range(50_000, 50_005)))
    assert again.ids_sync().tolist() == want

    # Too far behind (half of it, with the bound lowered to the test's size): rebuilt.
    monkeypatch.setattr(vector_index, "RECONCILE_MAX", 100)
    conn.execute("DELETE FROM vectors WHERE rowid < ?", (rowid(N // 2),))
    conn.commit()
    third = opened(tmp_path, conn)
    assert "vectors, SQLite" in (third.rebuilt_reason or "")


def test_a_vector_replaced_after_the_snapshot_is_read_again_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As after a kill -9 that followed a re-embed: the snapshot holds the record's old vector
    # under the same id, so its ids match SQLite's.
    vecs = clustered(N, seed=11)
    conn = vectors_table(tmp_path, vecs)
    snapshot(opened(tmp_path, conn), conn)
    new = clustered(2, seed=12)
    conn.execute("UPDATE vectors SET vec = ? WHERE rowid = ?", (new[0].tobytes(), rowid(5)))
    conn.commit()
    again = opened(tmp_path, conn)
    assert again.rebuilt_reason is None
    assert top(again, new[0])[0] == rowid(5)
    assert top(again, vecs[5])[0] != rowid(5)
    assert top(again, new[0], 200).count(rowid(5)) == 1 and again.ntotal == N

    # A snapshot vouches for the changes the snapshot before it read (a change reaches the
    # index a moment after its commit): the next one re-reads them, the one after does not.
    # As the store writes a re-embed (an upsert), twice for one record: one change, the last.
    for vec in (vecs[8], new[1]):
        conn.execute(
            "INSERT INTO vectors (rowid, model, vec) VALUES (?, ?, ?) ON CONFLICT (rowid)"
            " DO UPDATE SET model = excluded.model, vec = excluded.vec",
            (rowid(6), MODEL, vec.tobytes()),
        )
    conn.commit()
    assert (
        conn.execute(
            "SELECT count(*) FROM vector_changes WHERE record = ?", (rowid(6),)
        ).fetchone()[0]
        == 1
    )
    again.add_sync(np.array([rowid(6)], dtype=np.int64), new[1][None, :])
    meta = tmp_path / SNAPSHOT_META
    snapshot(again, conn)
    assert json.loads(meta.read_bytes())["changes_in"] == 1
    again.add_sync(np.array([rowid(7)], dtype=np.int64), vecs[7][None, :])  # dirty again
    snapshot(again, conn)
    assert json.loads(meta.read_bytes())["changes_in"] == latest_change(conn) == 3
    assert top(opened(tmp_path, conn), new[1])[0] == rowid(6)

    # Past the bound, rebuilt (as when a reindex replaced most vectors since the snapshot;
    # the bound lowered to the test's size).
    monkeypatch.setattr(vector_index, "RECONCILE_MAX", 100)
    conn.executemany(
        "UPDATE vectors SET vec = ? WHERE rowid = ?",
        [(vecs[(i + 1) % N].tobytes(), rowid(i)) for i in range(N // 2)],
    )
    conn.commit()
    rebuilt = opened(tmp_path, conn)
    assert "re-embedded since" in (rebuilt.rebuilt_reason or "")
    assert top(rebuilt, vecs[1])[0] in (rowid(0), rowid(1))


def test_a_float32_graph_an_older_daemon_wrote_is_rebuilt_with_16_bit_vectors(
    tmp_path: Path,
) -> None:
    import faiss

    vecs = clustered(N, seed=8)
    conn = vectors_table(tmp_path, vecs)
    snapshot(opened(tmp_path, conn), conn)
    # The same graph of float32 vectors, as an older daemon wrote it, its checksum right.
    old = faiss.IndexHNSWFlat(vecs.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    old.add(vecs)
    faiss.write_index(old, str(tmp_path / vector_index.SNAPSHOT))
    meta = json.loads((tmp_path / SNAPSHOT_META).read_text())
    meta["checksum"] = vector_index._snapshot_digest(tmp_path, True)
    (tmp_path / SNAPSHOT_META).write_text(json.dumps(meta))

    again = opened(tmp_path, conn)
    assert "not an fp16 HNSW graph" in (again.rebuilt_reason or "")
    assert again.kind.startswith("IndexHNSWSQ(fp16") and again.ntotal == N
    assert [top(again, v)[0] for v in vecs[:10]] == [rowid(i) for i in range(10)]
    snapshot(again, conn)
    # Two bytes a component saved, the graph's links alike in both.
    saved = len(faiss.serialize_index(old)) - (tmp_path / vector_index.SNAPSHOT).stat().st_size
    assert saved >= 0.9 * N * DIM * 2


def test_a_graph_mostly_removed_is_built_afresh_at_start(tmp_path: Path) -> None:
    vecs = clustered(N, seed=7)
    conn = vectors_table(tmp_path, vecs)
    index = opened(tmp_path, conn)
    gone = [rowid(i) for i in range(N // 3)]
    index.remove_sync(np.array(gone, dtype=np.int64))
    conn.executemany("DELETE FROM vectors WHERE rowid = ?", [(r,) for r in gone])
    conn.commit()
    snapshot(index, conn)
    again = opened(tmp_path, conn)
    assert "removed vectors" in (again.rebuilt_reason or "")
    assert again.ntotal == N - N // 3 and again.kind.endswith("dead=0)")


def test_a_collection_below_the_graph_size_is_scanned_exactly(tmp_path: Path) -> None:
    vecs = clustered(300, seed=8)
    index = opened(tmp_path, vectors_table(tmp_path, vecs))
    assert index.kind == "IndexIDMap2(IndexFlatIP)"
    assert top(index, vecs[4])[0] == rowid(4)
