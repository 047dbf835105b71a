"""Secrets: a corpus of realistic credentials, captured through every write path, is found by
no search and is absent from every file the daemon writes; ordinary prose is left alone."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from recall_client import protocol as p
from recalld.redact import redact

from ..conftest import DaemonProcess
from .corpus import PROSE, SECRETS, Secret
from .harness import FIGURES
from .writes import WRITE_PATHS

WORKSPACE = "/ws/secrets"
CORES = [core for s in SECRETS for core in s.cores]


def test_the_corpus_is_big_enough_to_mean_something() -> None:
    assert len(SECRETS) >= 50
    assert len({s.kind for s in SECRETS}) == len(SECRETS)


@pytest.mark.parametrize("secret", SECRETS, ids=[s.kind for s in SECRETS])
def test_each_secret_is_redacted(secret: Secret) -> None:
    text, found = redact(secret.text)
    assert found, "nothing was redacted"
    for core in secret.cores:
        assert core.lower() not in text.lower(), f"{core!r} survived: {text!r}"


@pytest.mark.parametrize("prose", PROSE)
def test_ordinary_technical_prose_is_not_redacted(prose: str) -> None:
    assert redact(prose) == (prose, [])


def _distinctive_tokens(core: str) -> set[str]:
    """The words FTS5 would index from ``core`` that no ordinary text contains."""
    words = "".join(c if c.isalnum() else " " for c in core.lower()).split()
    return {w for w in words if len(w) >= 8}


def _fts_vocabulary(db: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, 'records_fts', 'row')")
        return {row[0] for row in conn.execute("SELECT term FROM temp.vocab")}
    finally:
        conn.close()


def _files_leaking(paths: list[Path]) -> list[str]:
    leaks = []
    for path in paths:
        data = path.read_bytes().lower()
        leaks += [f"{path.name}: {core[:12]}…" for core in CORES if core.lower().encode() in data]
    return leaks


async def test_no_secret_survives_any_write_path(running_daemon: DaemonProcess) -> None:
    d = running_daemon
    stored = 0
    for path in WRITE_PATHS:
        texts = [f"[{path.name}] {s.text}" for s in SECRETS]
        captures = ["\n\n".join(texts[i : i + path.per_capture])
                    for i in range(0, len(texts), path.per_capture)]
        await path.store(d, captures, WORKSPACE)
        stored += len(captures)
    redacted = stored
    # Free-text fields beside the text are stored too. A tag holds a bare value, so take the
    # secrets whose value is recognisable alone (an issuer's format, not "password=...").
    short = [s for s in SECRETS if len(s.cores[0]) <= 64 and redact(s.cores[0])[1]][:20]
    async with d.client(agent="fields", workspace=WORKSPACE) as rc:
        for i, s in enumerate(short):
            core = s.cores[0]
            await rc.call(p.MemoryStore(text=f"field check {i}", source=s.text[:128], tags=[core]),
                          p.Stored)

    stored += len(short)
    with sqlite3.connect(f"file:{d.data_dir / 'recalld.db'}?mode=ro", uri=True) as db:
        texts = [row[0] for row in db.execute("SELECT text FROM records")]
    assert len(texts) == stored, "a capture was lost or merged"
    assert sum("[REDACTED:" in t for t in texts) == redacted

    # No search finds a secret, by its words or its meaning (hybrid runs both channels).
    async with d.client(agent="searcher", workspace=WORKSPACE) as rc:
        for core in CORES:
            result = await rc.call(p.MemorySearch(query=core[:4000], mode="hybrid", limit=50),
                                   p.MemorySearchResult)
            for hit in result.hits:
                shown = " ".join([hit.text, hit.snippet, hit.source or "", *hit.tags]).lower()
                assert core.lower() not in shown, f"search for a secret found it: {hit.id}"

    # Nor the full-text index's vocabulary, nor any file the daemon writes (WAL included).
    vocabulary = _fts_vocabulary(d.data_dir / "recalld.db")
    for core in CORES:
        for token in _distinctive_tokens(core):
            stems = {token[: len(token) - k] for k in range(4)}
            assert not stems & vocabulary, f"FTS5 indexed a word of a secret: {token[:10]}…"
    running_files = sorted(f for f in d.data_dir.iterdir() if f.is_file())
    assert any(f.name.endswith("-wal") for f in running_files)
    assert not _files_leaking(running_files)

    await d.status(wait_model_s=10)
    assert await d.stop() == 0
    stopped_files = sorted(f for f in d.data_dir.iterdir() if f.is_file())
    assert any(f.name == "index.faiss" for f in stopped_files)
    assert not _files_leaking([*stopped_files, d.log_path])

    FIGURES["secrets: corpus entries"] = len(SECRETS)
    FIGURES["secrets: write paths"] = len(WRITE_PATHS)
    FIGURES["secrets: captures checked"] += stored
    FIGURES["secrets: secret values searched for"] += len(CORES)
    FIGURES["secrets: prose texts left alone"] = len(PROSE)
