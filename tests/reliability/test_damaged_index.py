"""A missing or damaged FAISS snapshot is rebuilt from SQLite at start; a stale one is
brought up to date."""

from __future__ import annotations

import random
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec
import pytest
from recall_client import protocol as p

from tests.support.daemon import DaemonFactory, DaemonProcess

from .harness import FIGURES, snapshot_ids, vector_ids, wait_index_agrees

RECORDS = 40
TEXTS = [
    f"index note {i}: the {w} job retries with backoff"
    for i, w in enumerate(["nightly", "hourly", "weekly", "deploy", "backup"] * (RECORDS // 5))
]


def _missing(data: Path) -> None:
    (data / "index.faiss").unlink()


def _truncated(data: Path) -> None:
    path = data / "index.faiss"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(data: Path) -> None:
    path = data / "index.faiss"
    path.write_bytes(random.Random(1).randbytes(path.stat().st_size))


def _flipped_vector_byte(data: Path) -> None:
    # faiss still reads this file and its ids still match: only the checksum can tell.
    path = data / "index.faiss"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def _meta_garbage(data: Path) -> None:
    (data / "index.meta.json").write_bytes(b"{not json")


def _other_model(data: Path) -> None:
    path = data / "index.meta.json"
    meta = msgspec.json.decode(path.read_bytes())
    meta["model"] = "some-other-model"
    path.write_bytes(msgspec.json.encode(meta))


def _stale(data: Path) -> None:
    # SQLite lost three vectors since the snapshot (as if they were re-queued for embedding):
    # the snapshot's ids no longer match.
    with sqlite3.connect(data / "recalld.db") as conn:
        rows = [r[0] for r in conn.execute("SELECT rowid FROM vectors ORDER BY rowid LIMIT 3")]
        conn.executemany("DELETE FROM vectors WHERE rowid = ?", [(r,) for r in rows])
        conn.executemany("UPDATE records SET embed_state = 0 WHERE rowid = ?", [(r,) for r in rows])


def _re_embedded(data: Path) -> None:
    # Two records' vectors replaced under their rowids after the snapshot (a re-embed, then
    # a kill -9 before the next snapshot): the snapshot's ids still match SQLite's.
    with sqlite3.connect(data / "recalld.db") as conn:
        (a, va), (b, vb) = conn.execute("SELECT rowid, vec FROM vectors ORDER BY rowid LIMIT 2")
        conn.executemany("UPDATE vectors SET vec = ? WHERE rowid = ?", [(vb, a), (va, b)])


def _snapshot_matches_sqlite(data: Path) -> bool:
    """Whether each vector in the snapshot on disk is SQLite's for its record."""
    import faiss
    import numpy as np

    index = faiss.read_index(str(data / "index.faiss"))  # flat while small
    with sqlite3.connect(data / "recalld.db") as conn:
        stored = dict(conn.execute("SELECT rowid, vec FROM vectors"))
    return all(
        np.array_equal(index.reconstruct(int(rowid)), np.frombuffer(vec, dtype=np.float32))
        for rowid, vec in stored.items()
    )


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing": (_missing, "no snapshot"),
    "truncated": (_truncated, "checksum"),
    "garbage": (_garbage, "checksum"),
    "one flipped byte": (_flipped_vector_byte, "checksum"),
    "unreadable meta": (_meta_garbage, "unreadable"),
    "another model's": (_other_model, "some-other-model"),
}


@pytest.fixture(scope="module")
def healthy_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir with RECORDS embedded records and the snapshot of a clean stop."""

    async def build() -> Path:
        d = DaemonProcess(root=tmp_path_factory.mktemp("healthy"))
        await d.start()
        try:
            async with d.client(workspace="/ws/index") as rc:
                for text in TEXTS:
                    await rc.call(p.MemoryStore(text=text), p.Stored)
            assert await wait_index_agrees(d) == RECORDS
            assert await d.stop() == 0
        finally:
            d.kill()
        return d.data_dir

    return anyio.run(build)


async def _whole_again(d: DaemonProcess) -> None:
    """The index agrees with SQLite, semantic search finds its record, and the clean stop
    writes a healthy snapshot again."""
    assert await wait_index_agrees(d) == RECORDS
    async with d.client(workspace="/ws/index") as rc:
        result = await rc.call(p.MemorySearch(query="weekly job retries"), p.MemorySearchResult)
    assert result.semantic_used and "weekly" in result.hits[0].text
    assert await d.stop() == 0
    ids, _ = vector_ids(d.data_dir)
    assert snapshot_ids(d.data_dir) == ids


@pytest.mark.parametrize("damage", sorted(DAMAGES))
async def test_a_damaged_snapshot_is_rebuilt_from_sqlite(
    daemon_factory: DaemonFactory,
    healthy_data: Path,
    damage: str,
) -> None:
    d: DaemonProcess = daemon_factory()
    shutil.copytree(healthy_data, d.data_dir)
    spoil, reason = DAMAGES[damage]
    spoil(d.data_dir)

    await d.start()
    report = await d.status(wait_model_s=30)
    assert reason in (report.index.rebuilt_reason or ""), report.index
    await _whole_again(d)
    FIGURES["damaged index: kinds of damage rebuilt"] += 1


async def test_a_stale_snapshot_is_brought_up_to_date_not_rebuilt(
    daemon_factory: DaemonFactory, healthy_data: Path
) -> None:
    d: DaemonProcess = daemon_factory()
    shutil.copytree(healthy_data, d.data_dir)
    _stale(d.data_dir)

    await d.start()
    report = await d.status(wait_model_s=30)
    assert report.index.rebuilt_reason is None, report.index
    # The three re-queued records are embedded again and join the index.
    await _whole_again(d)
    FIGURES["damaged index: stale snapshots brought up to date"] += 1


async def test_vectors_replaced_after_the_snapshot_are_replaced_in_the_index(
    daemon_factory: DaemonFactory, healthy_data: Path
) -> None:
    d: DaemonProcess = daemon_factory()
    shutil.copytree(healthy_data, d.data_dir)
    assert _snapshot_matches_sqlite(d.data_dir)
    _re_embedded(d.data_dir)
    assert not _snapshot_matches_sqlite(d.data_dir)

    await d.start()
    report = await d.status(wait_model_s=30)
    assert report.index.rebuilt_reason is None, report.index
    assert await wait_index_agrees(d) == RECORDS
    assert await d.stop() == 0
    # The clean stop wrote the index as it was: the replaced vectors, not the old ones.
    assert _snapshot_matches_sqlite(d.data_dir)
    FIGURES["damaged index: vectors replaced after the snapshot caught up"] += 1
