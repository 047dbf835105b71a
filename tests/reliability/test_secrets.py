"""Secrets: a corpus of realistic credentials, captured through every write path, is found by
no search and is absent from every file the daemon writes; ordinary prose is left alone."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from unittest.mock import patch

import msgspec
import pytest
from recall_client import protocol as p
from recall_client.client import connect
from recall_client.ctl.episode_input import episodes_from_text
from recall_client.paths import read_admin_token
from recalld.ingest import redact as redaction
from recalld.ingest.redact import redact
from recalld.ingest.textfold import fold

from tests.support.corpus import PROSE, SECRETS, Secret
from tests.support.daemon import DaemonProcess

from .harness import FIGURES
from .writes import WRITE_PATHS

WORKSPACE = "/ws/secrets"
CORES = [core for s in SECRETS for core in s.cores]


def test_the_corpus_is_big_enough_to_mean_something() -> None:
    assert len(SECRETS) >= 130
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


RULE_IDS = [f"{i}-{rule.name}" for i, rule in enumerate(redaction._RULES)]


@pytest.mark.parametrize("index", range(len(redaction._RULES)), ids=RULE_IDS)
def test_every_rule_redacts_a_secret_of_the_corpus_alone(index: int) -> None:
    rule = redaction._RULES[index]
    with patch.object(redaction, "_RULES", [rule]):
        assert [s.kind for s in SECRETS if redact(s.text)[1]], rule.pattern.pattern


@pytest.mark.parametrize("index", range(len(redaction._RULES)), ids=RULE_IDS)
def test_every_rule_reads_some_prose_of_the_corpus_and_leaves_it(index: int) -> None:
    """A near miss per rule: prose that holds what the rule needs (its prefix, command or
    key word), so the rule scans it, and is left alone (the prose test above)."""
    rule = redaction._RULES[index]
    scanned = []
    for prose in PROSE:
        folded = redaction._folded(fold(prose).text)
        if rule.needed.search(folded) and all(c in folded for c in rule.also):
            scanned.append(prose)
    assert scanned, rule.pattern.pattern


@pytest.mark.parametrize("secret", SECRETS, ids=[s.kind for s in SECRETS])
def test_a_hook_summary_clipped_inside_a_secret_keeps_no_piece_of_it(secret: Secret) -> None:
    # recallctl capture shortens a hook's command line before the daemon redacts it: the cut
    # must not leave the head of a token that no longer looks like one.
    for pad in range(150, 240, 7):
        command = "echo " + "x" * pad + " " + " ".join(secret.text.split())
        payload = {
            "session_id": "s",
            "cwd": "/",
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_use_id": "t",
            "tool_input": {"command": command},
            "tool_response": {"stdout": "ok"},
        }
        [episode] = episodes_from_text(json.dumps(payload))
        assert isinstance(episode, p.CaptureEpisode)
        summary = redact(episode.summary)[0].lower()
        for core in secret.cores:
            assert not [f for f in _fragments(core.lower(), width=10) if f in summary], summary


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


def _fragments(core: str, width: int = 16) -> set[str]:
    """Pieces of a long secret: a secret cut short (a clipped summary) must not leak either."""
    if len(core) < width + 4:
        return set()
    return {core[i : i + width] for i in range(0, len(core) - width + 1, 2)}


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
        # Numbered: two secrets of one template redact to the same words, which a store
        # keeps once (and memory_update refuses as no change).
        texts = [f"[{path.name} {n}] {s.text}" for n, s in enumerate(SECRETS)]
        captures = [
            "\n\n".join(texts[i : i + path.per_capture])
            for i in range(0, len(texts), path.per_capture)
        ]
        await path.store(d, captures, WORKSPACE)
        stored += len(captures)
    redacted = stored
    # Free-text fields beside the text are stored too. A tag holds a bare value, so take the
    # secrets whose value is recognisable alone (an issuer's format, not "password=...").
    short = [s for s in SECRETS if len(s.cores[0]) <= 64 and redact(s.cores[0])[1]][:20]
    async with d.client(agent="fields", workspace=WORKSPACE) as rc:
        for i, s in enumerate(short):
            core = s.cores[0]
            await rc.call(
                p.MemoryStore(text=f"field check {i}", source=s.text[:128], tags=[core]), p.Stored
            )
            await rc.call(
                p.CaptureEpisode(
                    summary=f"field check {i}",
                    tool=core,
                    tags=[core],
                    error_code=core,
                    source=s.text[:128],
                ),
                p.EpisodeCaptured,
            )

    stored += 2 * len(short)
    with sqlite3.connect(f"file:{d.data_dir / 'recalld.db'}?mode=ro", uri=True) as db:
        # One record per capture; the lessons an experience brings are records of their own.
        texts = [row[0] for row in db.execute("SELECT text FROM records WHERE kind != 'lesson'")]
        fields = "\n".join(
            " ".join(str(v) for v in row)
            for row in db.execute(
                "SELECT r.text, r.source, r.tags, r.session, e.tool, e.error_code, x.strategy,"
                " m.subject FROM records r LEFT JOIN episodes e ON e.rowid = r.rowid"
                " LEFT JOIN experiences x ON x.rowid = r.rowid"
                " LEFT JOIN memory_meta m ON m.rowid = r.rowid"
            )
        ).lower()
    assert len(texts) == stored, "a capture was lost or merged"
    # A hook payload's summary is clipped ("…") and may end before the secret did: then there
    # is nothing to redact, and the fragment check below still proves nothing leaked.
    assert sum("[REDACTED:" in t or "…" in t for t in texts) == redacted
    pieces = [piece for core in CORES for piece in _fragments(core.lower()) if piece in fields]
    assert not pieces, f"pieces of secrets were stored: {pieces[:3]}"

    # No search finds a secret, by its words or its meaning (hybrid runs both channels); the
    # episode search crosses every agent's partition and drops every floor.
    token = read_admin_token()
    async with connect(
        agent="searcher", workspace=WORKSPACE, path=d.socket, admin_token=token
    ) as rc:
        for core in CORES:
            result = await rc.call(
                p.MemorySearch(query=core[:4000], mode="hybrid", limit=50, verbose=True),
                p.MemorySearchResult,
            )
            shown = [
                " ".join([h.text, h.snippet or "", h.source or "", *h.tags]) for h in result.hits
            ]
            work = await rc.call(
                p.WorkSearch(
                    query=core[:4000],
                    semantic=True,
                    any_caller=True,
                    include_pending=True,
                    min_trust=0.0,
                    k=200,
                ),
                p.WorkSearchResult,
            )
            shown += [msgspec.json.encode(e).decode() for e in work.results]
            past = await rc.call(
                p.SearchExperience(query=core[:1000], limit=20), p.ExperienceSearchResult
            )
            shown += [msgspec.json.encode(x).decode() for x in (*past.experiences, *past.lessons)]
            leaked = [s for s in shown if core.lower() in s.lower()]
            assert not leaked, f"a search found a secret: {core} in {leaked[0]}"

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
