"""Team mode's rows, attacked in raw SQL by another member.

alice holds a team record and a private one, each with a row in every table of the schema;
bob (a member role too) tries every table and every function in the schema, as any SQL
client would. What he sees, and what each function tells him, is the same whether or not
alice's private rows exist; nothing he sends changes them, nor removes the rows of her team
record that go only with it; a row number of his choosing, or one aimed at her private
record, fails as it fails for a number no row has. The tables, functions and sequences are
read from the catalog, so one added to the schema without an expectation here fails.

Each case runs on a database made at the current schema and on one made at version 1 (with
alice's rows written then, and CREATE on the schema for everyone, as before PostgreSQL 15) and
upgraded.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from pgserver import PgServer
from psycopg import sql
from recalld.store.postgres.schema import MIGRATIONS, VECTOR_DIM, add_role, migrate

from tests.support.team import ROLE_PASSWORDS, TeamDb

WS = "/ws/rows"
# A rowid, or row number, no row has.
ABSENT = 10**12
VEC = "[" + ",".join(["0.5"] * VECTOR_DIM) + "]"

Row = dict[str, object]


def _record(tag: str, visibility: str) -> Row:
    return {
        "id": f"mem_{tag}",
        "kind": "memory",
        "ts": 1.0,
        "created_at": 1.0,
        "updated_at": 1.0,
        "workspace": WS,
        "agent": "agent",
        "uid": 1000,
        "text": f"the shared quorum word, written for {tag}",
        "content_hash": hashlib.blake2b(tag.encode(), digest_size=16).digest(),
        "visibility": visibility,
    }


@dataclass(frozen=True)
class Table:
    """What a test expects of a table: its rows for a record (``tag`` keeps unique values
    apart), and which rows of another's team record a member may delete without it."""

    rows: Callable[[int, str], list[Row]]
    others_delete: str = "false"


# Every table of the schema. A new one needs its expectation here.
TABLES: dict[str, Table] = {
    "records": Table(lambda rowid, tag: []),  # made first, by _add_record
    "schema_migrations": Table(lambda rowid, tag: []),
    "episodes": Table(
        lambda r, t: [{"rowid": r, "channel": "tool", "episode_type": "call", "status": "ok"}]
    ),
    "experiences": Table(lambda r, t: [{"rowid": r, "task_class": "fix", "status": "success"}]),
    "memory_meta": Table(lambda r, t: [{"rowid": r, "last_verified_at": 1.0}]),
    # A memory's labels, cited paths and dependencies are what updating it rewrites.
    "memory_labels": Table(lambda r, t: [{"rowid": r, "kind": "scope", "value": t}], "true"),
    "memory_paths": Table(
        lambda r, t: [{"rowid": r, "path": f"src/{t}.py", "anchored": 2}], "true"
    ),
    "memory_links": Table(
        lambda r, t: [
            {"src": r, "rel": "supersedes", "dst_id": f"mem_old_{t}"},
            {"src": r, "rel": "depends_on", "dst_id": f"mem_dep_{t}"},
        ],
        "rel = 'depends_on'",
    ),
    "memory_uses": Table(
        lambda r, t: [{"rowid": r, "outcome": "helped", "ts": 1.0, "agent": "a", "token": t}]
    ),
    "vectors": Table(lambda r, t: [{"rowid": r, "model": "m", "vec": VEC}]),
    "lesson_support": Table(
        lambda r, t: [{"lesson_rowid": r, "experience_rowid": r, "created_at": 1.0}]
    ),
    "experience_rollups": Table(
        lambda r, t: [
            {"rowid": r, "workspace": WS, "session": t, "episodes": 3, "rolled_up_at": 1.0}
        ]
    ),
    "idempotency": Table(
        lambda r, t: [{"agent": "a", "key": t, "record_id": f"mem_{t}", "created_at": 1.0}]
    ),
    "memory_events": Table(
        lambda r, t: [
            {"ts": 1.0, "session": t, "agent": "a", "record_id": f"mem_{t}", "event": "stored"}
        ]
    ),
    "daemon_keys": Table(lambda r, t: [{"name": t, "key": t.encode()}]),
    "workspace_approvals": Table(
        lambda r, t: [{"workspace": f"/ws/{t}", "approved_at": 1.0, "approved_by": "admin"}]
    ),
    "agent_credentials": Table(
        lambda r, t: [{"agent": t, "token_digest": t.encode(), "created_at": 1.0}]
    ),
    "workspace_aliases": Table(
        lambda r, t: [{"path": f"/ws/{t}", "workspace": f"example.com/{t}", "seen_at": 1.0}]
    ),
    "workspace_rekey": Table(
        lambda r, t: [{"since": int(hashlib.blake2b(t.encode(), digest_size=3).hexdigest(), 16)}]
    ),
    "context_injections": Table(
        lambda r, t: [
            {
                "id": f"ctx_{t}",
                "ts": 1.0,
                "workspace": WS,
                "uid": 1000,
                "agent": "a",
                "session": t,
                "event": "prompt",
                "budget": 600,
                "tokens": 12,
            }
        ]
    ),
    "context_items": Table(
        lambda r, t: [
            {
                "injection": f"ctx_{t}",
                "position": 0,
                "item_id": f"mem_{t}",
                "section": "memories",
                "tokens": 12,
                "use_token": t,
            }
        ]
    ),
    "relevance_calibrations": Table(
        lambda r, t: [
            {
                "workspace": f"/ws/{t}",
                "uid": 1000,
                "bias": -2.0,
                "lexical": 3.0,
                "semantic": 4.0,
                "updates": 1,
                "updated_at": 1.0,
            }
        ]
    ),
}

# Every function of the schema (not an extension's), and calls of it; {b}, {t}, {p} are the
# rowids of bob's record, alice's team record and alice's private one.
FUNCTIONS: dict[str, list[str]] = {
    "recalld_fts_text": ["recalld_fts_text('The Quorum, words')"],
    "recalld_fts_doclen": ["recalld_fts_doclen('The Quorum, words')"],
    "recalld_visible_record": [f"recalld_visible_record({r})" for r in ("{b}", "{t}", "{p}")],
    "recalld_own_record": [f"recalld_own_record({r})" for r in ("{b}", "{t}", "{p}")],
    "recalld_forgotten_record": [f"recalld_forgotten_record({r})" for r in ("{b}", "{t}", "{p}")],
    "recalld_text_sample": ["recalld_text_sample(100)", "recalld_text_sample(50)"],
    "recalld_text_count": ["recalld_text_count('quorum', 100)", "recalld_text_count('quorum', 2)"],
    "recalld_text_rows": [
        f"recalld_text_rows('quorum', {recent}, {walk})"
        for recent in ("NULL", "1", "2", "100")
        for walk in ("true", "false")
    ],
}


@dataclass
class Team:
    """A team database with alice's and bob's rows; rowids of their records."""

    db: TeamDb
    b: int = 0  # bob's record, with a row in every table
    b2: int = 0  # bob's record with no other rows
    t: int = 0  # alice's team record
    p: int = 0  # alice's private record

    def connect(self, role: str) -> psycopg.Connection[Any]:
        return psycopg.connect(self.db.url(role), autocommit=True)

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.db.admin_url, autocommit=True)


def _insert(conn: psycopg.Connection[Any], table: str, row: Row, returning: str = "") -> Any:
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}){}").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, row)),
        sql.SQL(", ").join(sql.Placeholder() * len(row)),
        sql.SQL(f" RETURNING {returning}" if returning else ""),
    )
    cur = conn.execute(query, list(row.values()))
    return cur.fetchone()[0] if returning else None  # type: ignore[index]


def _add_record(conn: psycopg.Connection[Any], tag: str, visibility: str, rows: bool) -> int:
    rowid = int(_insert(conn, "records", _record(tag, visibility), "rowid"))
    present = set(_tables(conn))  # a database made at version 1 lacks later tables
    for name, table in TABLES.items():
        for row in table.rows(rowid, tag) if rows and name in present else ():
            _insert(conn, name, row)
    return rowid


def _populate(team: Team, *, private: bool) -> None:
    """bob's rows, alice's team record, then (when ``private``) alice's private rows: last,
    so that every other row has the same number with and without them."""
    with team.connect("bob") as bob, team.connect("alice") as alice:
        team.b = _add_record(bob, "bob", "private", rows=True)
        team.b2 = _add_record(bob, "bob2", "private", rows=False)
        team.t = _add_record(alice, "team", "team", rows=True)
        team.p = team.t + 1
        if private:
            assert _add_record(alice, "private", "private", rows=True) == team.p
            # A private lesson citing the team experience, and the other way round.
            for lesson, experience in ((team.p, team.t), (team.t, team.p)):
                _insert(
                    alice,
                    "lesson_support",
                    {"lesson_rowid": lesson, "experience_rowid": experience, "created_at": 2.0},
                )


@pytest.fixture
def make_team(pg_server: PgServer) -> Iterator[Callable[[bool, bool], Team]]:
    made: list[str] = []

    def make(upgraded: bool, private: bool) -> Team:
        name = f"t_{uuid.uuid4().hex[:12]}"
        pg_server.create_database(name)
        made.append(name)
        db = TeamDb(pg_server, name)
        with psycopg.connect(db.admin_url, autocommit=True) as conn:
            if upgraded:
                # As a database from before PostgreSQL 15 has it.
                conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
                migrate(conn, upto=1)
            else:
                migrate(conn)
            for role, password in ROLE_PASSWORDS.items():
                add_role(conn, role, password)
        team = Team(db)
        _populate(team, private=private)
        if upgraded:
            with team.admin() as conn:
                migrate(conn)
        return team

    yield make
    for name in made:
        pg_server.drop_database(name)


# ---------------------------------------------------------------- the catalog


def _tables(conn: psycopg.Connection[Any]) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
            " AND relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY relname = 'records', relname"
        )
    ]


def _functions(conn: psycopg.Connection[Any]) -> list[str]:
    """The schema's own functions: not an extension's (pgvector's, unaccent's)."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace"
            " AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass"
            " AND d.objid = p.oid AND d.deptype = 'e') ORDER BY 1"
        )
    ]


def _columns(conn: psycopg.Connection[Any], table: str) -> list[tuple[str, bool, bool]]:
    """(name, numbered by the server, names a record) of each column a row can be given."""
    return [
        (r[0], bool(r[1]), bool(r[2]))
        for r in conn.execute(
            "SELECT a.attname, a.attidentity <> '', EXISTS (SELECT 1 FROM pg_constraint k"
            " WHERE k.conrelid = a.attrelid AND k.contype = 'f'"
            " AND k.confrelid = 'records'::regclass AND a.attnum = ANY (k.conkey))"
            " FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0"
            " AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum",
            (table,),
        )
    ]


def _private_rows(team: Team, conn: psycopg.Connection[Any], table: str) -> sql.Composable:
    """A condition true of the rows of ``table`` that are alice's private data."""
    cols = _columns(conn, table)
    names = {c for c, _, _ in cols}
    parts: list[sql.Composable] = [
        sql.SQL("{} = {}").format(sql.Identifier(c), team.p) for c, _, ref in cols if ref
    ]
    if table == "records":
        parts.append(sql.SQL("(owner = 'alice' AND visibility = 'private')"))
    elif "owner" in names:
        parts.append(sql.SQL("owner = 'alice'"))
    return sql.SQL(" OR ").join(parts) if parts else sql.SQL("false")


def _team_rows(team: Team, conn: psycopg.Connection[Any], table: str) -> sql.Composable:
    """A condition true of the rows of alice's team record that go only with it."""
    refs = [c for c, _, ref in _columns(conn, table) if ref]
    if table == "records":
        return sql.SQL("rowid = {}").format(team.t)
    if not refs:
        return sql.SQL("false")
    return sql.SQL("({}) AND NOT ({}) AND NOT ({})").format(
        sql.SQL(" OR ").join(sql.SQL("{} = {}").format(sql.Identifier(c), team.t) for c in refs),
        sql.SQL(TABLES[table].others_delete),
        _private_rows(team, conn, table),
    )


def _snapshot(team: Team) -> dict[str, tuple[list[str], int]]:
    """Per table, as the database's owner: alice's private rows (with the transaction that
    last wrote each, so that even a no-op update shows), and how many rows of her team
    record go only with it."""
    out: dict[str, tuple[list[str], int]] = {}
    with team.admin() as conn:
        for table in _tables(conn):
            t = sql.Identifier(table)
            private = conn.execute(
                sql.SQL("SELECT xmin::text || ' ' || t::text FROM {} t WHERE {} ORDER BY 1").format(
                    t, _private_rows(team, conn, table)
                )
            ).fetchall()
            (kept,) = conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE {}").format(t, _team_rows(team, conn, table))
            ).fetchone() or (0,)
            out[table] = ([r[0] for r in private], int(kept))
    return out


def _bobs_view(team: Team) -> dict[str, list[str]]:
    """Everything bob reads: every table's rows and every function's answers."""
    out: dict[str, list[str]] = {}
    with team.connect("bob") as bob:
        for table in _tables(bob):
            # (When each migration ran differs between any two databases.)
            row = sql.SQL("version" if table == "schema_migrations" else "t::text")
            rows = bob.execute(
                sql.SQL("SELECT {} FROM {} t ORDER BY 1").format(row, sql.Identifier(table))
            )
            out[table] = [r[0] for r in rows]
        for calls in FUNCTIONS.values():
            for call in calls:
                q = call.format(b=team.b, t=team.t, p=team.p)
                out[q] = [repr(r) for r in bob.execute(f"SELECT * FROM {q}")]
    return out


def _insertion(rowid: int, table: str, given: Row) -> tuple[sql.Composed, list[Any]]:
    """An INSERT of a new row of bob's into ``table`` (for his record ``rowid``), with the
    columns ``given``."""
    tag = f"attack-{uuid.uuid4().hex}"
    if table == "records":
        row = _record(tag, "private")
    elif table == "schema_migrations":
        row = {"version": 99}
    else:
        row = TABLES[table].rows(rowid, tag)[0]
    row |= given
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(table),
        sql.SQL(", ").join(map(sql.Identifier, row)),
        sql.SQL(", ").join(sql.Placeholder() * len(row)),
    )
    return query, list(row.values())


def _outcome(
    conn: psycopg.Connection[Any], query: sql.SQL | sql.Composed, params: list[Any]
) -> str:
    try:
        conn.execute(query, params)
    except psycopg.Error as exc:
        return str(exc.sqlstate)
    return "ok"


# ---------------------------------------------------------------- the tests


# Schema version 1 as it shipped (commit 79a9ddd): databases made by it are upgraded from it.
SHIPPED = {1: "953773df29b4bb569c0ed23de7735825db094bb632563c29ce39adc2e30e4840"}


def test_a_shipped_migration_is_never_edited() -> None:
    for version, digest in SHIPPED.items():
        assert hashlib.sha256(MIGRATIONS[version - 1].encode()).hexdigest() == digest, version


UPGRADED = pytest.mark.parametrize("upgraded", [False, True], ids=["fresh", "upgraded"])


@UPGRADED
def test_every_table_and_function_has_an_expectation(
    make_team: Callable[[bool, bool], Team], upgraded: bool
) -> None:
    team = make_team(upgraded, True)
    with team.admin() as conn:
        assert set(_tables(conn)) == set(TABLES)
        assert set(_functions(conn)) == set(FUNCTIONS)


@UPGRADED
def test_a_member_reads_and_counts_the_same_with_or_without_anothers_private_rows(
    make_team: Callable[[bool, bool], Team], upgraded: bool
) -> None:
    with_private, without = make_team(upgraded, True), make_team(upgraded, False)
    assert (with_private.b, with_private.t) == (without.b, without.t)
    without.p = with_private.p  # the same number, naming nothing there
    seen, unseen = _bobs_view(with_private), _bobs_view(without)
    assert seen.keys() == unseen.keys()
    differ = [w for w in seen if seen[w] != unseen[w]]
    assert not differ, f"bob's view differs in {differ}"
    # And he sees the team's record and its rows.
    assert any(f"({with_private.t}," in row for row in seen["memory_meta"])


@UPGRADED
def test_a_member_changes_nothing_of_anothers_private_rows_nor_the_team_records_own(
    make_team: Callable[[bool, bool], Team], upgraded: bool
) -> None:
    team = make_team(upgraded, True)
    before = _snapshot(team)
    with team.admin() as conn:
        tables = _tables(conn)
        columns = {t: _columns(conn, t) for t in tables}
        # alice's private row numbers, per numbered column.
        numbered = {
            (t, c): int(
                conn.execute(
                    sql.SQL("SELECT min({}) FROM {} WHERE {}").format(
                        sql.Identifier(c), sql.Identifier(t), _private_rows(team, conn, t)
                    )
                ).fetchone()[0]  # type: ignore[index]
            )
            for t in tables
            for c, ident, _ in columns[t]
            if ident
        }
    clashes: list[str] = []
    with team.connect("bob") as bob:
        # A row of his own goes in anywhere but the schema's version table (so what fails
        # below fails for what it aims at).
        mine = int(_insert(bob, "records", _record("bob3", "private"), "rowid"))
        for table in tables:
            if table != "schema_migrations":
                assert _outcome(bob, *_insertion(mine, table, {})) == "ok", table
        # Inserting: a row aimed at alice's private record, or given one of her private
        # rows' numbers, fails as one aimed at a number no row has; one in her name fails.
        for table in tables:
            cols = columns[table]
            for col, ident, ref in cols:
                if not (ident or ref):
                    continue
                aimed = numbered[(table, col)] if ident else team.p
                outcomes = [
                    _outcome(bob, *_insertion(team.b, table, {col: v})) for v in (aimed, ABSENT)
                ]
                if outcomes[0] != outcomes[1]:
                    clashes.append(
                        f"{table}.{col}: {outcomes[0]} for alice's, {outcomes[1]} absent"
                    )
            if "owner" in {c for c, _, _ in cols}:
                forged = _insertion(team.b, table, {"owner": "alice"})
                assert _outcome(bob, *forged) != "ok", table
        # Rewriting the team record's content to what alice holds privately clashes no more
        # than rewriting it to what nobody holds.
        rewrite = sql.SQL("UPDATE records SET content_hash = %s WHERE rowid = %s")
        outcomes = [
            _outcome(bob, rewrite, [_record(tag, "team")["content_hash"], team.t])
            for tag in ("private", "nobody's")
        ]
        assert outcomes[1] == "ok"  # the team's record is the team's to correct
        if outcomes[0] != outcomes[1]:
            clashes.append(f"records.content_hash: {outcomes[0]} for alice's, {outcomes[1]} absent")
        # Updating every column he can name, and moving the team record's rows to his own.
        for table in tables:
            for col, _, ref in columns[table]:
                c, t = sql.Identifier(col), sql.Identifier(table)
                _outcome(bob, sql.SQL("UPDATE {} SET {} = {}").format(t, c, c), [])
                if ref:
                    move = sql.SQL("UPDATE {} SET {} = %s WHERE {} = %s").format(t, c, c)
                    _outcome(bob, move, [team.b2, team.t])
        # Deleting everything he can, records last.
        for table in tables:
            _outcome(bob, sql.SQL("DELETE FROM {}").format(sql.Identifier(table)), [])
    after = _snapshot(team)
    changed = [t for t in tables if after[t][0] != before[t][0]]
    lost = [t for t in tables if after[t][1] != before[t][1]]
    assert not (changed or lost or clashes), (
        f"alice's private rows changed in {changed}, her team record lost rows of {lost},"
        f" bob's insertions tell her rows from absent ones: {clashes}"
    )


@UPGRADED
def test_a_member_has_no_sequence_and_no_right_beyond_rows(
    make_team: Callable[[bool, bool], Team], upgraded: bool
) -> None:
    team = make_team(upgraded, True)
    with team.connect("bob") as bob:
        sequences = [
            r[0]
            for r in bob.execute(
                "SELECT relname FROM pg_class WHERE relkind = 'S'"
                " AND relnamespace = current_schema()::regnamespace"
            )
        ]
        assert sequences
        for seq in sequences:
            for query in (
                sql.SQL("SELECT last_value FROM {}").format(sql.Identifier(seq)),
                sql.SQL("SELECT nextval({})").format(sql.Literal(seq)),
            ):
                assert _outcome(bob, query, []) == "42501", query.as_string()
        (creates,) = bob.execute(
            "SELECT has_schema_privilege(current_schema(), 'CREATE')"
        ).fetchone() or (True,)
        assert not creates
        for table in _tables(bob):
            for right in ("TRUNCATE", "REFERENCES", "TRIGGER"):
                (held,) = bob.execute(
                    "SELECT has_table_privilege(%s, %s)", (table, right)
                ).fetchone() or (True,)
                assert not held, (table, right)
