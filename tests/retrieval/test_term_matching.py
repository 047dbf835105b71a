# ruff: noqa: RUF001  (the word list holds look-alike letters on purpose)
"""One term matcher: memory_search's coverage and match_terms say a text holds a query word
exactly when the store's own FTS5 (its tokenizer, its quoted-phrase query) finds the word in
it, over plurals, -ies, -ing, possessives, hyphens, apostrophes, digits and unicode; and a
real daemon counts "retry" as matched in "the client retries twice"."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from recall_client import protocol as p
from recalld.retrieval.terms import Coverage, query_terms
from recalld.store.sqlite.engine import SqliteStore

from tests.support.daemon import DaemonProcess
from tests.support.store import memory, write

TEXTS = [
    "the client retries twice",
    "two libraries and their dependencies",
    "running queries against the replica",
    "the daemon's socket is private",
    "send an e-mail to the owners",
    "re-indexing takes a minute",
    "Café naïve résumé",
    "don't panic, it's fine",
    "HTTP2 since release 2023 (v3.2)",
    "snake_case names like x_y",
    "the ﬁle ligature and Straße",
    "İstanbul and Ωmega and 東京 tower",
    "ΣΊΣΥΦΟΣ йод हिन्दी cafe\u0301 ñandú øre ｆｕｌｌ x²",
    "connection connected connecting",
    "ponies caresses happily",
]

QUERIES = [
    "retry",
    "retries",
    "library dependency",
    "run query queries",
    "daemon's daemons",
    "e-mail email mail",
    "reindex re-indexing indexing",
    "cafe café naive resume",
    "don't dont it's",
    "http2 2023 v3",
    "snake_case x_y case",
    "file ﬁle strasse straße",
    "istanbul İstanbul omega ωmega 東京",
    "σίσυφος σισυφοσ иод йод हिन्दी ह café nandu ore øre full ｆｕｌｌ x²",
    "connect connections",
    "pony caress happy",
]


def test_coverage_agrees_with_what_the_stores_fts5_matched(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path, durability="normal")
    try:
        rowids = write(store, *(memory("/w", text, None, 1.0) for text in TEXTS))
        reader = store.reader()
        try:
            disagree = []
            for query in QUERIES:
                terms = query_terms(query)
                covers = Coverage(terms)
                found = {term: reader.search.matching(term, rowids) for term in terms}
                for rowid, text in zip(rowids, TEXTS, strict=True):
                    coverage, matched = covers(text)
                    fts5 = [term for term in terms if rowid in found[term]]
                    if matched != fts5:
                        disagree.append((query, text, matched, fts5))
                    assert coverage == len(matched) / len(terms)
        finally:
            store.close_reader(reader)
    finally:
        store.close()
    assert not disagree, "coverage / FTS5:\n" + "\n".join(map(str, disagree))


def test_the_plural_of_a_query_word_counts_as_matched(tmp_path: Path) -> None:
    # The forms that a light suffix-stripping stemmer sent apart from their singular.
    covers = Coverage(query_terms("retry library dependency query"))
    assert covers("retries of libraries with dependencies and queries") == (
        1.0,
        ["retry", "library", "dependency", "query"],
    )


@pytest.mark.both_backends
async def test_a_search_for_retry_finds_retries_with_confidence(
    running_daemon: DaemonProcess,
) -> None:
    async with running_daemon.client() as rc:
        await rc.call(p.MemoryStore(text="the client retries twice"), p.Stored)
        with anyio.fail_after(30):
            found = await rc.call(p.MemorySearch(query="retry", mode="bm25"), p.MemorySearchResult)
    (hit,) = found.hits
    assert hit.match_terms == ["retry"]
    assert hit.relevance != "low"
    assert not found.low_confidence
