"""The lexical channel in PostgreSQL: FTS5's bm25, computed over a tsvector column.

The SQLite backend ranks its lexical channel with FTS5's ``bm25()`` over a table tokenized
``porter unicode61 remove_diacritics 2``; this module makes PostgreSQL rank the same way, so
the two backends retrieve the same records (top 10 the same for 99.9% of LoCoMo queries).

Tokens and stems. The text search configuration ``recalld`` (:data:`TEXT_SEARCH_DDL`) sees
what unicode61 sees. ``recalld_fts_text`` lower-cases the text and turns every run of
non-alphanumerics into a space (PostgreSQL's parser would otherwise keep e-mail addresses,
hosts, file names, versions and decimals whole, where unicode61 splits them); ``unaccent``
folds diacritics; Snowball's ``porter`` stemmer -- the original Porter algorithm, FTS5's, not
Snowball ``english`` (Porter2) -- stems every word. No stop words are dropped: FTS5 keeps
them, and its length normalisation counts them. FTS5 leaves tokens shorter than three bytes
unstemmed, so the two-letter words Porter would change are rewritten first: ``us`` becomes
``use`` (which Porter stems back to ``us``, joining ``use`` and ``used`` as in FTS5) and ``ms``
or ``ay`` an XML entity (``&ms;``) that only the ``simple`` dictionary sees. Over the LoCoMo
turns the lexemes then match FTS5's in all but 18 of 5,882 (words the two Porter variants end
differently: ``-logy``, ``-bly``; emoji). ``doclen`` (:data:`DOCLEN_EXPR`) counts the same
alphanumeric runs: FTS5's column size.

Scoring. Okapi BM25 with FTS5's constants (k1 = 1.2, b = 0.75, idf = ln((N - n + 0.5) /
(n + 0.5)) floored at 1e-6), in one SQL statement. A lexeme's frequency in a record comes from
``ts_rank`` with unit weights against the one-lexeme query, which is sum(1/j^2, j = 1..tf) /
(pi^2 / 6): a binary search in C, which :data:`_TF` inverts exactly for every tf a tsvector
holds (at most 255 positions per lexeme). That costs little more than reading the row;
unnesting the tsvector, even narrowed by setweight/ts_filter to the query's lexemes, cost
twice as much, and numeric (not float8) constants in the arithmetic as much again.

Statistics. N, avgdl and document frequencies are cached per database and role for a minute
(a count a few records behind changes nothing that matters). They are over the records the
connection may read -- the whole table for its owner, like FTS5 over its index; under
row-level security the reader's own and team records, so no count reveals what another
person's private records hold. N and avgdl come from a page sample of about
:data:`SAMPLE_ROWS` rows, not a scan: for the owner N is the planner's row estimate, for a
reader under row-level security its readable rows in the sample over the share of the
table's pages sampled.

Bounded work, as SQLite's ``lexical_plan``: when the terms' document frequencies add up to
more than :data:`LEXICAL_BUDGET`, only the rarest terms that fit are scored; when none fits,
all are scored over the newest rows, as many as should hold about ``LEXICAL_BUDGET`` matches
if matches spread evenly (FTS5 reads its rowid-ordered doclists back; PostgreSQL would read
every matching row to find the newest ones exactly), their idf then estimated from the
sample, since only "more than the budget" was counted.

Row-level security. ``tsvector @@ tsquery`` is not leakproof, so under row-level security
PostgreSQL will not use the GIN index for it and reads the whole table instead (26 ms at 100k
records, growing with the table). Readers the policy applies to therefore search through
``recalld_text_rows``, ``recalld_text_count`` and ``recalld_text_sample`` (:func:`access_ddl`):
SECURITY DEFINER functions that take only a tsquery and numbers, apply the ``records_read``
policy's condition themselves (:data:`VISIBLE`, for ``session_user``) to every row they read,
and return only what the caller could compute itself (rows, counts, a maximum, an average of
its readable rows). They must change whenever that policy does.

Long texts. Only the first :data:`TEXT_CAP` characters are indexed, which keeps a tsvector
under PostgreSQL's 1 MB limit whatever the text. A tsvector keeps at most 255 positions of a
lexeme and none past position 16,383, so in texts longer than that (about 80k characters)
later occurrences of a word no longer raise its tf; ``doclen`` still counts every token.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from ..sql.candidates import LEXICAL_BUDGET, bm25_idf

__all__ = [
    "DOCLEN_EXPR",
    "TEXT_SEARCH_DDL",
    "TSQUERY_ONE",
    "TSV_EXPR",
    "VISIBLE",
    "access_ddl",
    "access_ddl_v1",
    "lexical",
    "lexical_plan",
]

STATS_TTL_S = 60.0
CACHE_SIZE = 20_000
# Rows the N / avgdl sample reads, about; fewer visible than MIN_SAMPLE and it counts all.
SAMPLE_ROWS = 5_000
MIN_SAMPLE = 500
# Pages a reader under row-level security samples together: runs of them, evenly spaced, so
# the share of the table read is known from its size alone.
SAMPLE_RUN = 8
# Characters of a text that are indexed: at most 4 bytes of tsvector per character, so a
# tsvector stays under PostgreSQL's 1 MB limit whatever the text (recalld stores <= 100k).
TEXT_CAP = 200_000
K1 = 1.2
B = 0.75

# Run once by a migration, as the database's owner, before ``records`` is created (unaccent
# is a trusted extension: no superuser needed). recalld_fts_text: lower-case (pg_c_utf8, so
# whatever the database's locale), every run of non-alphanumerics a space, then the two-letter
# words FTS5 leaves unstemmed and Porter would not: a vowel and s gets an e that Porter takes
# off again, the others (bs .. zs, ay .. uy) become XML entities, mapped to ``simple``.
TEXT_SEARCH_DDL = f"""
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE TEXT SEARCH DICTIONARY recalld_porter (TEMPLATE = snowball, LANGUAGE = porter);
CREATE TEXT SEARCH CONFIGURATION recalld (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION recalld
    ALTER MAPPING FOR asciiword, asciihword, hword_asciipart WITH recalld_porter;
ALTER TEXT SEARCH CONFIGURATION recalld
    ALTER MAPPING FOR word, numword, hword, hword_part, numhword, hword_numpart
    WITH unaccent, recalld_porter;
ALTER TEXT SEARCH CONFIGURATION recalld ADD MAPPING FOR entity WITH simple;
CREATE FUNCTION recalld_fts_text(t text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN regexp_replace(regexp_replace(regexp_replace(
        lower(left(t, {TEXT_CAP}) COLLATE pg_c_utf8), '[^[:alnum:]]+', ' ', 'g'),
        '(^| )([aeiou])s(?= |$)', '\\1\\2se', 'g'),
        '(^| )([b-df-hj-np-rtv-z]s|[aeiou]y)(?= |$)', '\\1&\\2;', 'g');
CREATE FUNCTION recalld_fts_doclen(t text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN regexp_count(left(t, {TEXT_CAP}) COLLATE pg_c_utf8, '[[:alnum:]]+');
"""

# The generated columns: ``tsv tsvector GENERATED ALWAYS AS (TSV_EXPR) STORED`` (with a GIN
# index) and ``doclen integer GENERATED ALWAYS AS (DOCLEN_EXPR) STORED``.
TSV_EXPR = "to_tsvector('recalld'::regconfig, recalld_fts_text(text))"
DOCLEN_EXPR = "recalld_fts_doclen(text)"
# A tsquery for one term (a %s parameter): ``tsv @@ TSQUERY_ONE``.
TSQUERY_ONE = "plainto_tsquery('recalld'::regconfig, recalld_fts_text(%s))"

# What the records_read policy lets a role read, as a SECURITY DEFINER function sees it.
VISIBLE = "(r.owner = session_user OR r.visibility = 'team')"
_SQL_VISIBLE = VISIBLE.replace("'", "''")  # inside a string literal


def access_ddl(member_role: str) -> str:
    """The search functions for readers under row-level security, for ``member_role``.

    Run by a migration after the policies they mirror, and again by any migration that
    changes those (it replaces them). Each computes only over the rows the caller may read:
    no count, maximum or average of them includes another person's private rows. The table
    is named with its schema and the functions' search_path ends in pg_temp, so no reader
    can put a table of their own in its place.
    """
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", member_role):
        raise ValueError(f"not a plain role name: {member_role!r}")
    return f"""
DROP FUNCTION IF EXISTS recalld_text_sample(float8);
DO $do$ BEGIN EXECUTE format($f$
CREATE OR REPLACE FUNCTION recalld_text_rows(q tsquery, recent bigint, walk boolean)
    RETURNS SETOF %1$I.records
    LANGUAGE plpgsql STABLE SECURITY DEFINER ROWS 4000
    SET search_path = pg_catalog, %1$I, pg_temp
AS $b$
DECLARE
    lo bigint;
BEGIN
    IF recent IS NULL THEN
        RETURN QUERY SELECT r.* FROM %1$I.records r WHERE r.tsv @@ q AND {VISIBLE};
    ELSE
        lo := (SELECT max(r.rowid) FROM %1$I.records r WHERE {VISIBLE}) - recent + 1;
        RETURN QUERY EXECUTE 'SELECT r.* FROM %1$I.records r WHERE r.tsv @@ $1 AND r.rowid'
            || CASE WHEN walk THEN '' ELSE ' + 0' END || ' >= $2 AND {_SQL_VISIBLE}'
            USING q, coalesce(lo, 0);
    END IF;
END $b$;
CREATE OR REPLACE FUNCTION recalld_text_count(q tsquery, cap bigint) RETURNS bigint
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, %1$I, pg_temp
AS $b$
BEGIN
    RETURN (SELECT count(*) FROM (SELECT 1 FROM %1$I.records r
        WHERE r.tsv @@ q AND {VISIBLE} LIMIT cap) s);
END $b$;
CREATE FUNCTION recalld_text_sample(pct float8)
    RETURNS TABLE (visible bigint, avgdl float8, fraction float8)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, %1$I, pg_temp
AS $b$
DECLARE
    pages bigint := pg_relation_size('%1$I.records'::regclass)
        / current_setting('block_size')::int;
    step bigint := greatest({SAMPLE_RUN}, ceil({SAMPLE_RUN} * 100 / pct))::bigint;
    n bigint;
    len bigint;
    read bigint := 0;
BEGIN
    visible := 0;
    avgdl := 0;
    -- One TID range scan per run (a range taken from a join would read the whole table).
    FOR b IN 0 .. pages - 1 BY step LOOP
        SELECT count(*), coalesce(sum(r.doclen), 0) INTO n, len FROM %1$I.records r
            WHERE r.ctid >= format('(%%s,0)', b)::tid
            AND r.ctid < format('(%%s,0)', b + {SAMPLE_RUN})::tid AND {VISIBLE};
        visible := visible + n;
        avgdl := avgdl + len;
        read := read + least({SAMPLE_RUN}, pages - b);
    END LOOP;
    avgdl := CASE WHEN visible > 0 THEN avgdl / visible END;
    fraction := read::float8 / greatest(pages, 1);
    RETURN NEXT;
END $b$;
$f$, current_schema()); END $do$;
REVOKE ALL ON FUNCTION recalld_text_rows(tsquery, bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION recalld_text_count(tsquery, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION recalld_text_sample(float8) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION recalld_text_rows(tsquery, bigint, boolean) TO {member_role};
GRANT EXECUTE ON FUNCTION recalld_text_count(tsquery, bigint) TO {member_role};
GRANT EXECUTE ON FUNCTION recalld_text_sample(float8) TO {member_role};
"""


def access_ddl_v1(member_role: str) -> str:
    """Schema version 1's search functions, as shipped (version 2 replaces them: the sample
    counted the rows the caller may not read, and the recency window began at the newest
    row of anyone's)."""
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", member_role):
        raise ValueError(f"not a plain role name: {member_role!r}")
    return f"""
DO $do$ BEGIN EXECUTE format($f$
CREATE FUNCTION recalld_text_rows(q tsquery, recent bigint, walk boolean)
    RETURNS SETOF %1$I.records
    LANGUAGE plpgsql STABLE SECURITY DEFINER ROWS 4000
    SET search_path = pg_catalog, %1$I, pg_temp
AS $b$
DECLARE
    lo bigint;
BEGIN
    IF recent IS NULL THEN
        RETURN QUERY SELECT r.* FROM %1$I.records r WHERE r.tsv @@ q AND {VISIBLE};
    ELSE
        lo := (SELECT max(r.rowid) FROM %1$I.records r) - recent + 1;
        RETURN QUERY EXECUTE 'SELECT r.* FROM %1$I.records r WHERE r.tsv @@ $1 AND r.rowid'
            || CASE WHEN walk THEN '' ELSE ' + 0' END || ' >= $2 AND {_SQL_VISIBLE}'
            USING q, coalesce(lo, 0);
    END IF;
END $b$;
CREATE FUNCTION recalld_text_count(q tsquery, cap bigint) RETURNS bigint
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, %1$I, pg_temp
AS $b$
BEGIN
    RETURN (SELECT count(*) FROM (SELECT 1 FROM %1$I.records r
        WHERE r.tsv @@ q AND {VISIBLE} LIMIT cap) s);
END $b$;
CREATE FUNCTION recalld_text_sample(pct float8)
    RETURNS TABLE (sampled bigint, visible bigint, avgdl float8)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, %1$I, pg_temp
AS $b$
BEGIN
    RETURN QUERY SELECT count(*), count(*) FILTER (WHERE {VISIBLE}),
        (avg(r.doclen) FILTER (WHERE {VISIBLE}))::float8
        FROM %1$I.records r TABLESAMPLE SYSTEM (pct) REPEATABLE (0);
END $b$;
$f$, current_schema()); END $do$;
REVOKE ALL ON FUNCTION recalld_text_rows(tsquery, bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION recalld_text_count(tsquery, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION recalld_text_rows(tsquery, bigint, boolean) TO {member_role};
GRANT EXECUTE ON FUNCTION recalld_text_count(tsquery, bigint) TO {member_role};
REVOKE ALL ON FUNCTION recalld_text_sample(float8) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION recalld_text_sample(float8) TO {member_role};
"""


# A lexeme's frequency in r.tsv (0 when absent) from ts_rank with unit weights: the exact
# inverse of rank = sum(1/j^2, j = 1..tf) * 6/pi^2 for tf = 0..255 (checked in float4).
_TF = (
    "round(0.6079271018540267::float8 / (1::float8"
    " - ts_rank('{1,1,1,1}'::real[], r.tsv, %s::tsquery)) - 0.5::float8)"
)
# _TF over a tsvector whose lexeme occurs 200 times must give 200 (checked with the stats).
_TF_PROBE = (
    "array_to_string(array(SELECT 'x:' || i FROM generate_series(1, 200) i), ' ')::tsvector",
    "'x'::tsquery",
    200,
)
# k1 * (1 - b + b * doclen / avgdl), the second %s being k1 * b / avgdl.
_K = "(%s::float8 + %s::float8 * r.doclen)"
# One lexeme's bm25: idf * (k1 + 1) * tf / (tf + K), written a - a * (K / (tf + K)) with
# a = idf * (k1 + 1) so that tf appears once and an absent lexeme scores exactly 0.
_TERM = f"(%s::float8 - %s::float8 * ({_K} / ({_TF} + {_K})))"


def _quote(lexeme: str) -> str:
    """``lexeme`` as tsquery text: quoted, so nothing in it is read as query syntax."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _any(lexemes: Sequence[str]) -> str:
    return " | ".join(_quote(x) for x in dict.fromkeys(lexemes))


@dataclass(frozen=True, slots=True)
class _Stats:
    rows: float  # records in the table, as the planner estimates them
    n: float  # records the connection may read
    avgdl: float  # their mean doclen
    fraction: float  # of the table's pages sampled to get them (1.0: all counted)
    visible: int  # readable records the sample held
    rls: bool  # row-level security applies: search through recalld_text_*


@dataclass(frozen=True, slots=True)
class LexicalPlan:
    """The lexemes to score (with idf) and, when bounded by recency, among how many of the
    table's newest rows (about the budget of them hold one of the lexemes), and whether to
    read those rows (walk the primary key) rather than all that hold a lexeme (GIN)."""

    lexemes: tuple[str, ...]
    idf: tuple[float, ...]
    recent: int | None = None
    walk: bool = False


# Caches shared by every connection of the process; an entry is replaced whole, so a lost
# race only counts twice. Keys start with the database (and role, where visibility matters).
_stems: dict[tuple[str, str], tuple[str, ...]] = {}
_df: dict[tuple[str, str, int], tuple[float, int]] = {}
_sampled_df: dict[tuple[str, str], tuple[float, int]] = {}
_stats: dict[str, tuple[float, _Stats]] = {}


def _database(conn: psycopg.Connection[Any]) -> str:
    i = conn.info
    return f"{i.host}:{i.port}/{i.dbname}"


def _reader(conn: psycopg.Connection[Any]) -> str:
    return f"{_database(conn)}#{conn.info.user}"


def _bounded(cache: dict[Any, Any], adding: int) -> None:
    if len(cache) + adding > CACHE_SIZE:
        cache.clear()


def _lexemes(conn: psycopg.Connection[Any], terms: Sequence[str]) -> list[tuple[str, ...]]:
    """Each term's lexemes (none for a term that is only punctuation), as the index has them."""
    db = _database(conn)
    missing = [t for t in dict.fromkeys(terms) if (db, t) not in _stems]
    if missing:
        rows = conn.execute(
            "SELECT t, tsvector_to_array(to_tsvector('recalld'::regconfig, recalld_fts_text(t)))"
            " FROM unnest(%s::text[]) t",
            (missing,),
        ).fetchall()
        _bounded(_stems, len(rows))
        for term, lexemes in rows:
            _stems[(db, term)] = tuple(lexemes)
    return [_stems[(db, t)] for t in terms]


def _corpus(conn: psycopg.Connection[Any]) -> _Stats:
    key = _reader(conn)
    now = time.monotonic()
    hit = _stats.get(key)
    if hit is not None and now - hit[0] < STATS_TTL_S:
        return hit[1]
    row = conn.execute(
        "SELECT row_security_active('records'::regclass), c.reltuples, c.relpages,"
        " pg_relation_size(c.oid) / current_setting('block_size')::int,"
        f" {_TF.replace('r.tsv', _TF_PROBE[0]).replace('%s', _TF_PROBE[1])}"
        " FROM pg_class c WHERE c.oid = 'records'::regclass"
    ).fetchone()
    assert row is not None
    if row[4] != _TF_PROBE[2]:
        raise RuntimeError("this server's ts_rank no longer gives term frequencies")
    rls, reltuples, relpages, pages = bool(row[0]), float(row[1]), int(row[2]), int(row[3])
    stats: _Stats | None = None
    # The table's rows as the planner estimates them (its density times its size now), and
    # the readable rows of a page sample. Its owner reads every row: N is the estimate. A
    # reader under row-level security learns no count of rows it may not read, so not the
    # share of the sample it may: N is its rows in the sample over the share of the table's
    # pages the sample read (runs of pages at even steps: a share known from the size alone).
    rows = reltuples / relpages * pages if reltuples >= 0 and relpages > 0 else 0.0
    if rows > SAMPLE_ROWS:
        fraction = SAMPLE_ROWS / rows
        sample = conn.execute(
            "SELECT * FROM recalld_text_sample(%s)"
            if rls
            else "SELECT count(*), avg(doclen)::float8, 1.0::float8 FROM records"
            " TABLESAMPLE SYSTEM (%s) REPEATABLE (0)",
            (100.0 * fraction,),
        ).fetchone()
        if sample is not None and sample[0] >= MIN_SAMPLE:
            stats = _Stats(
                rows=rows,
                n=sample[0] / sample[2] if rls else rows,
                avgdl=float(sample[1]),
                fraction=fraction,
                visible=int(sample[0]),
                rls=rls,
            )
    if stats is None:
        counted = conn.execute("SELECT count(*), avg(doclen)::float8 FROM records").fetchone()
        assert counted is not None
        n = int(counted[0])
        stats = _Stats(
            rows=max(rows, n),
            n=n,
            avgdl=float(counted[1] or 0.0),
            fraction=1.0,
            visible=n,
            rls=rls,
        )
    _bounded(_stats, 1)
    _stats[key] = (now, stats)
    return stats


def _doc_frequency(
    conn: psycopg.Connection[Any], lexemes: Sequence[str], cap: int, stats: _Stats
) -> dict[str, int]:
    """Readable records holding each lexeme, counted up to ``cap`` + 1 (SQLite's rule)."""
    key = _reader(conn)
    now = time.monotonic()
    out: dict[str, int] = {}
    missing: list[str] = []
    for lx in dict.fromkeys(lexemes):
        hit = _df.get((key, lx, cap))
        if hit is not None and now - hit[0] < STATS_TTL_S:
            out[lx] = hit[1]
        else:
            missing.append(lx)
    if missing:
        sql = (
            "SELECT recalld_text_count(q::tsquery, %s) FROM unnest(%s::text[]) q"
            if stats.rls
            else "SELECT (SELECT count(*) FROM (SELECT 1 FROM records r"
            " WHERE r.tsv @@ q::tsquery LIMIT %s) s) FROM unnest(%s::text[]) q"
        )
        rows = conn.execute(sql, (cap + 1, [_quote(x) for x in missing])).fetchall()
        _bounded(_df, len(rows))
        for lx, (n,) in zip(missing, rows, strict=True):
            _df[(key, lx, cap)] = (now, int(n))
            out[lx] = int(n)
    return out


def _common_frequency(
    conn: psycopg.Connection[Any], lexemes: Sequence[str], cap: int, stats: _Stats
) -> dict[str, int]:
    """Records holding each lexeme (known to be more than ``cap``), estimated from a page
    sample (the one N came from, for the owner): a few percent off, against an idf that is
    small anyway."""
    if stats.fraction >= 1.0:
        return _doc_frequency(conn, lexemes, 1 << 62, stats)
    key = _reader(conn)
    now = time.monotonic()
    out: dict[str, int] = {}
    missing: list[str] = []
    for lx in dict.fromkeys(lexemes):
        hit = _sampled_df.get((key, lx))
        if hit is not None and now - hit[0] < STATS_TTL_S:
            out[lx] = hit[1]
        else:
            missing.append(lx)
    if missing:
        held = dict(
            conn.execute(
                "SELECT q, count(*) FROM records r TABLESAMPLE SYSTEM (%s) REPEATABLE (0),"
                " unnest(%s::text[]) q WHERE r.tsv @@ q::tsquery GROUP BY q",
                (100.0 * stats.fraction, [_quote(x) for x in missing]),
            ).fetchall()
        )
        sampled = stats.visible
        if stats.rls:  # N came from another sample (recalld_text_sample's): count this one's
            row = conn.execute(
                "SELECT count(*) FROM records TABLESAMPLE SYSTEM (%s) REPEATABLE (0)",
                (100.0 * stats.fraction,),
            ).fetchone()
            sampled = max(1, int(row[0])) if row else 1
        _bounded(_sampled_df, len(missing))
        for lx in missing:
            n = max(cap + 1, round(int(held.get(_quote(lx), 0)) * stats.n / sampled))
            _sampled_df[(key, lx)] = (now, n)
            out[lx] = n
    return out


def lexical_plan(
    conn: psycopg.Connection[Any], terms: Sequence[str], budget: int = LEXICAL_BUDGET
) -> LexicalPlan | None:
    """What one search scores: all lexemes while their document frequencies add up to
    ``budget``; past it the rarest that fit; when none fits, all of them over the newest
    rows, about ``budget`` of which hold one (SQLite's ``lexical_plan``, by lexeme)."""
    units = [lx for lexemes in _lexemes(conn, terms) for lx in dict.fromkeys(lexemes)]
    if not units:
        return None
    stats = _corpus(conn)
    df = _doc_frequency(conn, units, budget, stats)
    ranked = sorted(range(len(units)), key=lambda i: (df[units[i]], i))
    recent: int | None = None
    walk = False
    if sum(df[u] for u in units) <= budget:
        kept = ranked
    else:
        kept = []
        total = 0
        for i in ranked:
            if total + df[units[i]] > budget:
                break
            kept.append(i)
            total += df[units[i]]
        if not total:
            kept = ranked
            common = [u for u in units if df[u] > budget]
            df.update(_common_frequency(conn, common, budget, stats))
            # The newest rowids of which about ``budget`` hold a lexeme, if they spread evenly
            # (rowids, not rows: the gaps deletes leave only make the window smaller).
            held = sum(df[u] for u in units)
            recent = math.ceil(budget * stats.rows / held)
            # The planner walks the key however many rows hold a lexeme: tell it which reads less.
            walk = recent < held
    # A lexeme two terms share counts twice, as two FTS5 phrases would.
    idf: dict[str, float] = {}
    for i in sorted(kept):
        idf[units[i]] = idf.get(units[i], 0.0) + bm25_idf(stats.n, df[units[i]])
    return LexicalPlan(tuple(idf), tuple(idf.values()), recent, walk)


def lexical(
    conn: psycopg.Connection[Any],
    terms: Sequence[str],
    clause: str,
    params: Sequence[Any],
    depth: int,
) -> list[tuple[int, float]]:
    """(rowid, bm25) of the best ``depth`` records matching any of ``terms`` and ``clause``
    (a condition over ``records r`` with ``%s`` placeholders for ``params``), best first."""
    if not terms or depth <= 0:
        return []
    plan = lexical_plan(conn, terms)
    if plan is None:
        return []
    stats = _corpus(conn)
    avgdl = stats.avgdl if stats.avgdl > 0 else 1.0
    k_len, k_doc = K1 * (1 - B), K1 * B / avgdl
    score: list[str] = []
    args: list[Any] = []
    for lexeme, idf in zip(plan.lexemes, plan.idf, strict=True):
        a = idf * (K1 + 1)
        score.append(_TERM)
        args += [a, a, k_len, k_doc, _quote(lexeme), k_len, k_doc]
    query = _any(plan.lexemes)
    if stats.rls:
        source = "recalld_text_rows(%s::tsquery, %s::bigint, %s) r"
        args += [query, plan.recent, plan.walk]
        match = ""
    else:
        source = "records r"
        match = "r.tsv @@ %s::tsquery AND "
        args.append(query)
        if plan.recent is not None:
            row = conn.execute("SELECT max(rowid) FROM records").fetchone()
            match += "r.rowid >= %s AND " if plan.walk else "r.rowid + 0 >= %s AND "
            args.append(int(row[0]) - plan.recent + 1 if row and row[0] is not None else 0)
    sql = (
        f"SELECT r.rowid, {' + '.join(score)} AS score FROM {source}"
        f" WHERE {match}({clause}) ORDER BY score DESC, r.rowid LIMIT %s"
    )
    return [(int(rowid), float(s)) for rowid, s in conn.execute(sql, (*args, *params, depth))]
