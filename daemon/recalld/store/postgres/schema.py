"""The PostgreSQL schema: numbered migrations, row-level security, and the roles daemons use.

The same tables as the SQLite schema (the shared SQL under ``store.sql`` reads and writes
both), plus what a database shared by many people needs:

- every row says whose it is (``owner``, the database role that wrote it, filled in by the
  server from ``current_user``, so a daemon cannot write in another's name), and every
  record whether it is ``private`` to that owner or shared with the ``team``;
- row-level security on every table enforces it in the server: a role reads its own rows
  and team rows, and nothing else, whatever SQL it sends. A child row (an episode's
  details, a memory's labels, a vector) is visible exactly when every record it names is,
  is written by whoever may change its record, and goes with the record: only what an
  update or a forget rewrites is deleted apart from it (``_CHILD_DELETES``);
- what a role sends tells it nothing of rows it may not read beyond what PostgreSQL shows
  every role (a table's size and row estimate, the numbers its own inserts get): grants
  are by column, so no role picks a row's number (and learns from a clash that a private
  row holds it), no role uses a sequence, and the SECURITY DEFINER search functions
  compute only over readable rows;
- uniqueness is a constraint, never a check-then-insert, so two daemons writing at once
  cannot both store what must be stored once (idempotency keys and content-hash dedup are
  per owner, dedup per visibility too: another person's private row must not collide
  with, or reveal, mine, nor a team record rewritten by another member).

Daemons connect as login roles that are members of ``recalld_member``, which holds the
grants; the tables belong to the role that ran the migrations (``recallctl db init``), so
no daemon can alter them or switch row-level security off.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import psycopg.errors
from psycopg import sql

from .textsearch import DOCLEN_EXPR, TEXT_SEARCH_DDL, TSV_EXPR, access_ddl, access_ddl_v1

__all__ = [
    "MEMBER_ROLE",
    "MIGRATIONS",
    "SEARCH_SETTINGS",
    "VECTOR_DIM",
    "add_role",
    "init_database",
    "migrate",
    "schema_version",
    "set_search_settings",
]

log = logging.getLogger(__name__)

# The group role every daemon's login role belongs to.
MEMBER_ROLE = "recalld_member"
# all-MiniLM-L6-v2 (and the hashing embedder tests use): the HNSW index needs one size.
VECTOR_DIM = 384

# Version 1, as shipped (version 2 below replaces the policies of child tables and every
# grant). A child table's rows are visible (and writable) when their record is: the look-up runs
# under records' own policies. A function, not the EXISTS it holds: inlined, the planner
# turns the EXISTS into a hashed scan of every record for each query of a child table (64
# of 98 ms of a vector search at 100k records); called, it is one index probe per row the
# query really reads. Its search_path is fixed (pg_temp last) so that no role can put a
# table of its own named records in front of the real one.
_CHILD = "recalld_visible_record({col})"
_CHILD_DDL = """
DO $do$ BEGIN EXECUTE format($f$
CREATE FUNCTION recalld_visible_record(r bigint) RETURNS boolean
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, %1$I, pg_temp
AS $b$
BEGIN
    RETURN EXISTS (SELECT 1 FROM %1$I.records p WHERE p.rowid = r);
END $b$;
$f$, current_schema()); END $do$;
"""
_CHILDREN_V1 = {
    "episodes": "rowid",
    "experiences": "rowid",
    "memory_meta": "rowid",
    "memory_labels": "rowid",
    "memory_links": "src",
    "memory_paths": "rowid",
    "memory_uses": "rowid",
    "vectors": "rowid",
    "lesson_support": "experience_rowid",
}
# Tables whose rows are their owner's alone (keys, approvals, credentials, the event log).
_OWNED_V1 = (
    "idempotency",
    "memory_events",
    "daemon_keys",
    "workspace_approvals",
    "agent_credentials",
    "experience_rollups",
)


def _policies_v1() -> str:
    """Version 1's policies and grants, as shipped (version 2 replaces the child tables'
    policies and every grant)."""
    out = [
        _CHILD_DDL,
        "ALTER TABLE records ENABLE ROW LEVEL SECURITY;",
        "CREATE POLICY records_read ON records FOR SELECT"
        " USING (owner = current_user OR visibility = 'team');",
        "CREATE POLICY records_insert ON records FOR INSERT WITH CHECK (owner = current_user);",
        # A team record is the team's to correct (update, verify, forget, supersede); the
        # check keeps anyone but its owner from making it private (and so hiding it).
        "CREATE POLICY records_update ON records FOR UPDATE"
        " USING (owner = current_user OR visibility = 'team')"
        " WITH CHECK (owner = current_user OR visibility = 'team');",
        "CREATE POLICY records_delete ON records FOR DELETE USING (owner = current_user);",
    ]
    for table, col in _CHILDREN_V1.items():
        cond = _CHILD.format(col=f"{table}.{col}")
        out += [
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;",
            f"CREATE POLICY {table}_by_record ON {table} USING ({cond}) WITH CHECK ({cond});",
        ]
    for table in _OWNED_V1:
        out += [
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;",
            f"CREATE POLICY {table}_own ON {table} USING (owner = current_user)"
            " WITH CHECK (owner = current_user);",
        ]
    tables = ["records", *_CHILDREN_V1, *_OWNED_V1]
    out += [
        f"GRANT SELECT, INSERT, DELETE ON {', '.join(tables)} TO {MEMBER_ROLE};",
        # Not records.owner: a row stays its writer's.
        "GRANT UPDATE (id, kind, ts, created_at, updated_at, workspace, agent, uid, session,"
        " source, text, tags, trust, eligibility, expires_at, tombstoned_at, content_hash,"
        f" embed_state, visibility) ON records TO {MEMBER_ROLE};",
        f"GRANT UPDATE ON {', '.join(t for t in tables if t != 'records')} TO {MEMBER_ROLE};",
        f"GRANT SELECT ON schema_migrations TO {MEMBER_ROLE};",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {MEMBER_ROLE};",
    ]
    return "\n".join(out)


# Version 2: what a member may do to rows that are not its own.
#
# Each child table and the columns naming records, the first the record the row belongs to
# (an experience a lesson's support cites is named too: a row is visible, and written, only
# when every record it names is). Whoever may change a record (its owner, or any member for a
# team record: records_update's USING is records_read's) writes its child rows; none moves a
# child row to another record (the naming columns are not updatable).
_CHILDREN: dict[str, tuple[str, ...]] = {
    **{table: (col,) for table, col in _CHILDREN_V1.items()},
    "lesson_support": ("lesson_rowid", "experience_rowid"),
}
# The tables whose rows are their owner's alone, and the column of those that name a record:
# the owner's own (a roll-up is of one's own experience), checked before the row's key is,
# so that neither a clash nor the foreign key tells a member that a private record exists.
_OWNED = _OWNED_V1
_OWN_RECORD = {"experience_rollups": "rowid"}
# The child rows deleted apart from their record, by whoever may change it: what updating a
# memory rewrites (its labels, cited paths and dependencies) and a forgotten record's vector.
# Every other child row (a memory's metadata, an episode's or experience's details, uses,
# supersessions, a lesson's support) goes only with its record (ON DELETE CASCADE, which
# PostgreSQL runs as the tables' owner).
_CHILD_DELETES = {
    "memory_labels": "true",
    "memory_paths": "true",
    "memory_links": "rel = 'depends_on'",
    "vectors": "recalld_forgotten_record(rowid)",
}
# Columns that keep their first value beyond the naming ones: which link a link is.
_FIXED = {"memory_links": ("rel", "dst_id")}


def _record_test(name: str, condition: str) -> str:
    """A function true when record ``r`` is readable by the caller and meets ``condition``
    (over ``p``), in the way of ``recalld_visible_record``: the look-up runs under records'
    own policies, with a fixed search_path."""
    return f"""
DO $do$ BEGIN EXECUTE format($f$
CREATE FUNCTION {name}(r bigint) RETURNS boolean
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, %1$I, pg_temp
AS $b$
BEGIN
    RETURN EXISTS (SELECT 1 FROM %1$I.records p WHERE p.rowid = r AND {condition});
END $b$;
$f$, current_schema()); END $do$;
"""


def _grant_columns(privilege: str, table: str, kept: tuple[str, ...]) -> str:
    """GRANT ``privilege`` on every column of ``table`` a member may set: not ``kept`` (and
    so never ``owner``, the server's), nor one the server numbers or computes. Granting a
    row's number would let a member insert a chosen one and learn from the clash that
    another's private row holds it."""
    kept = ("owner", *kept)
    return f"""
DO $do$ BEGIN EXECUTE (
    SELECT format('GRANT {privilege} (%s) ON {table} TO {MEMBER_ROLE}',
        string_agg(quote_ident(attname), ', ' ORDER BY attnum))
    FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attnum > 0
        AND NOT attisdropped AND attgenerated = '' AND attidentity = ''
        AND attname <> ALL (ARRAY[{", ".join(f"'{c}'" for c in kept)}]::text[])
); END $do$;
"""


def _policies_v2() -> str:
    out = [
        _record_test("recalld_own_record", "p.owner = current_user"),
        _record_test("recalld_forgotten_record", "p.tombstoned_at IS NOT NULL"),
        # Every grant anew, by column: version 1 granted whole tables, and sequences. And no
        # one but the owner creates in the schema (PostgreSQL 15's default, not an upgraded
        # cluster's): a member's function or operator of a closer type would be the one a
        # SECURITY DEFINER function calls, with the owner's rights.
        f"""DO $do$ BEGIN
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM {MEMBER_ROLE}', current_schema());
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM {MEMBER_ROLE}',
        current_schema());
    EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC, {MEMBER_ROLE}', current_schema());
END $do$;""",
        f"GRANT SELECT ON schema_migrations TO {MEMBER_ROLE};",
        f"GRANT SELECT, DELETE ON records TO {MEMBER_ROLE};",
        _grant_columns("INSERT", "records", ()),
        _grant_columns("UPDATE", "records", ()),
        # Dedup per owner and visibility: a member who may rewrite a team record's text must
        # not learn from a clash that its owner holds that text privately.
        "DROP INDEX records_dedup;",
        "CREATE UNIQUE INDEX records_dedup"
        " ON records (owner, visibility, workspace, kind, content_hash)"
        " WHERE tombstoned_at IS NULL;",
    ]
    for table, cols in _CHILDREN.items():
        named = " AND ".join(_CHILD.format(col=f"{table}.{c}") for c in cols)
        out += [
            f"DROP POLICY {table}_by_record ON {table};",
            f"CREATE POLICY {table}_read ON {table} FOR SELECT USING ({named});",
            f"CREATE POLICY {table}_insert ON {table} FOR INSERT WITH CHECK ({named});",
            f"CREATE POLICY {table}_update ON {table} FOR UPDATE USING ({named})"
            f" WITH CHECK ({named});",
            f"GRANT SELECT ON {table} TO {MEMBER_ROLE};",
            _grant_columns("INSERT", table, ()),
            _grant_columns("UPDATE", table, (*cols, *_FIXED.get(table, ()))),
        ]
        if table in _CHILD_DELETES:
            out += [
                f"CREATE POLICY {table}_delete ON {table} FOR DELETE"
                f" USING ({named} AND {_CHILD_DELETES[table]});",
                f"GRANT DELETE ON {table} TO {MEMBER_ROLE};",
            ]
    for table in _OWNED:
        col = _OWN_RECORD.get(table)
        out += [
            f"GRANT SELECT, DELETE ON {table} TO {MEMBER_ROLE};",
            _grant_columns("INSERT", table, ()),
            _grant_columns("UPDATE", table, () if col is None else (col,)),
        ]
        if col is not None:
            own = f"owner = current_user AND recalld_own_record({col})"
            out += [
                f"DROP POLICY {table}_own ON {table};",
                f"CREATE POLICY {table}_own ON {table} USING ({own}) WITH CHECK ({own});",
            ]
    return "\n".join(out)


_OWNER = "owner text NOT NULL DEFAULT current_user"


def _owned_table(table: str) -> str:
    """A table of rows their owner's alone, with version 2's policy and grants."""
    return "\n".join(
        [
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;",
            f"CREATE POLICY {table}_own ON {table} USING (owner = current_user)"
            " WITH CHECK (owner = current_user);",
            f"GRANT SELECT, DELETE ON {table} TO {MEMBER_ROLE};",
            _grant_columns("INSERT", table, ()),
            _grant_columns("UPDATE", table, ()),
        ]
    )


# Numbered migrations: version = index + 1, recorded in schema_migrations. Never edit one
# that has shipped; append.
MIGRATIONS: list[str] = [
    # 1: everything the SQLite schema has at its version 9, with owners, visibility and
    # row-level security.
    f"""
    {TEXT_SEARCH_DDL}

    CREATE TABLE records (
        rowid         bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        id            text NOT NULL UNIQUE,
        kind          text NOT NULL,
        ts            double precision NOT NULL,
        created_at    double precision NOT NULL,
        updated_at    double precision NOT NULL,
        workspace     text NOT NULL,
        agent         text NOT NULL,
        uid           integer NOT NULL,
        session       text,
        source        text,
        text          text NOT NULL,
        tags          text NOT NULL DEFAULT '[]',
        trust         double precision NOT NULL DEFAULT 1.0,
        eligibility   text NOT NULL DEFAULT 'pending',
        expires_at    double precision,
        tombstoned_at double precision,
        content_hash  bytea NOT NULL,
        embed_state   integer NOT NULL DEFAULT 0,
        visibility    text NOT NULL DEFAULT 'private' CHECK (visibility IN ('private', 'team')),
        {_OWNER},
        tsv           tsvector GENERATED ALWAYS AS ({TSV_EXPR}) STORED,
        doclen        integer GENERATED ALWAYS AS ({DOCLEN_EXPR}) STORED
    );
    CREATE UNIQUE INDEX records_dedup ON records (owner, workspace, kind, content_hash)
        WHERE tombstoned_at IS NULL;
    CREATE INDEX records_scope ON records (workspace, kind, ts);
    CREATE INDEX records_unembedded ON records (rowid) WHERE embed_state = 0;
    CREATE INDEX records_pending ON records (rowid) WHERE eligibility = 'pending';
    CREATE INDEX records_session ON records (session, kind) WHERE session IS NOT NULL;
    CREATE INDEX records_session_ts ON records (workspace, kind, session, ts)
        WHERE session IS NOT NULL;
    CREATE INDEX records_tsv ON records USING gin (tsv);

    CREATE TABLE vectors (
        rowid bigint PRIMARY KEY REFERENCES records (rowid) ON DELETE CASCADE,
        model text NOT NULL,
        vec   vector({VECTOR_DIM}) NOT NULL
    );
    CREATE INDEX vectors_hnsw ON vectors USING hnsw (vec vector_cosine_ops);

    CREATE TABLE idempotency (
        {_OWNER},
        agent      text NOT NULL,
        key        text NOT NULL,
        record_id  text NOT NULL,
        created_at double precision NOT NULL,
        PRIMARY KEY (owner, agent, key)
    );

    CREATE TABLE episodes (
        rowid        bigint PRIMARY KEY REFERENCES records (rowid) ON DELETE CASCADE,
        channel      text NOT NULL,
        episode_type text NOT NULL,
        tool         text,
        status       text NOT NULL,
        error_code   text,
        duration_ms  double precision,
        result_size  bigint,
        task_result  double precision,
        verdict_at   double precision,
        blocked      integer NOT NULL DEFAULT 0,
        prev_id      text,
        files        text NOT NULL DEFAULT '[]'
    );
    CREATE INDEX episodes_tool ON episodes (tool) WHERE tool IS NOT NULL;

    CREATE TABLE workspace_approvals (
        {_OWNER},
        workspace   text NOT NULL,
        approved_at double precision NOT NULL,
        approved_by text NOT NULL,
        PRIMARY KEY (owner, workspace)
    );

    CREATE TABLE experiences (
        rowid      bigint PRIMARY KEY REFERENCES records (rowid) ON DELETE CASCADE,
        task_class text NOT NULL,
        strategy   text,
        status     text NOT NULL CHECK (status IN ('success', 'failure', 'unknown')),
        tool_calls bigint NOT NULL DEFAULT 0,
        minutes    double precision NOT NULL DEFAULT 0,
        files      text NOT NULL DEFAULT '[]'
    );
    CREATE TABLE lesson_support (
        lesson_rowid     bigint NOT NULL REFERENCES records (rowid) ON DELETE CASCADE,
        experience_rowid bigint NOT NULL REFERENCES records (rowid) ON DELETE CASCADE,
        created_at       double precision NOT NULL,
        PRIMARY KEY (lesson_rowid, experience_rowid)
    );
    CREATE INDEX lesson_support_by_experience ON lesson_support (experience_rowid);

    CREATE TABLE memory_meta (
        rowid            bigint PRIMARY KEY REFERENCES records (rowid) ON DELETE CASCADE,
        kind             text NOT NULL DEFAULT 'entry',
        subject          text,
        subject_key      text,
        authority        text NOT NULL DEFAULT 'first-party',
        distortion_tolerance text,
        origin           text,
        origin_repo      text,
        origin_commit    text,
        verified_commit  text,
        last_verified_at double precision NOT NULL,
        writer_client    text,
        writer_model     text,
        superseded_by    text,
        trust_reasons    text NOT NULL DEFAULT '[]'
    );
    CREATE INDEX memory_meta_subject ON memory_meta (subject_key) WHERE subject_key IS NOT NULL;
    CREATE INDEX memory_meta_constraints ON memory_meta (rowid)
        WHERE distortion_tolerance = 'constraint';

    CREATE TABLE memory_labels (
        rowid bigint NOT NULL REFERENCES records (rowid) ON DELETE CASCADE,
        kind  text NOT NULL,
        value text NOT NULL,
        PRIMARY KEY (kind, value, rowid)
    );
    CREATE INDEX memory_labels_rowid ON memory_labels (rowid);

    CREATE TABLE memory_links (
        src    bigint NOT NULL REFERENCES records (rowid) ON DELETE CASCADE,
        rel    text NOT NULL,
        dst_id text NOT NULL,
        note   text,
        PRIMARY KEY (src, rel, dst_id)
    );
    CREATE INDEX memory_links_dst ON memory_links (dst_id, rel);

    CREATE TABLE memory_paths (
        rowid    bigint NOT NULL REFERENCES records (rowid) ON DELETE CASCADE,
        path     text NOT NULL,
        anchored integer NOT NULL,
        PRIMARY KEY (rowid, path)
    );

    CREATE TABLE memory_uses (
        id      bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        rowid   bigint NOT NULL REFERENCES records (rowid) ON DELETE CASCADE,
        outcome text NOT NULL,
        ts      double precision NOT NULL,
        agent   text NOT NULL,
        session text,
        token   text UNIQUE,
        note    text
    );
    CREATE INDEX memory_uses_rowid ON memory_uses (rowid, ts);

    CREATE TABLE memory_events (
        id        bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        {_OWNER},
        ts        double precision NOT NULL,
        session   text NOT NULL,
        agent     text NOT NULL,
        record_id text NOT NULL,
        event     text NOT NULL
    );
    CREATE INDEX memory_events_session ON memory_events (owner, session, ts);

    CREATE TABLE daemon_keys (
        {_OWNER},
        name text NOT NULL,
        key  bytea NOT NULL,
        PRIMARY KEY (owner, name)
    );

    CREATE TABLE experience_rollups (
        rowid        bigint PRIMARY KEY REFERENCES records (rowid) ON DELETE CASCADE,
        {_OWNER},
        workspace    text NOT NULL,
        session      text NOT NULL,
        given        text NOT NULL DEFAULT '[]',
        episodes     bigint NOT NULL,
        rolled_up_at double precision NOT NULL,
        UNIQUE (owner, workspace, session)
    );

    CREATE TABLE agent_credentials (
        {_OWNER},
        agent        text NOT NULL,
        token_digest bytea NOT NULL,
        created_at   double precision NOT NULL,
        PRIMARY KEY (owner, agent)
    );

    {_policies_v1()}
    {access_ddl_v1(MEMBER_ROLE)}
    """,
    # 2: no member changes, or learns anything of, a row it may not: child rows go with
    # their record, grants by column (no chosen row numbers, no sequences), and the search
    # functions count only what the caller may read.
    f"""
    {_policies_v2()}
    {access_ddl(MEMBER_ROLE)}
    """,
    # 3: workspaces by repository identity, as SQLite's 12: each member's paths are its own
    # aliases, and each member re-keys its own rows (from its own checkouts) at its start.
    f"""
    CREATE TABLE workspace_aliases (
        {_OWNER},
        path      text NOT NULL,
        workspace text NOT NULL,
        seen_at   double precision NOT NULL,
        PRIMARY KEY (owner, path)
    );
    CREATE INDEX workspace_aliases_workspace ON workspace_aliases (workspace);
    -- Whose rows are still to be re-keyed, for which schema version.
    CREATE TABLE workspace_rekey (
        {_OWNER},
        since integer NOT NULL DEFAULT 3,
        PRIMARY KEY (owner, since)
    );
    INSERT INTO workspace_rekey (owner)
        SELECT owner FROM records UNION SELECT owner FROM workspace_approvals;
    {_owned_table("workspace_aliases")}
    {_owned_table("workspace_rekey")}
    """,
    # 4: the context hooks' log, as SQLite's 13: each member's own (what a hook gave one
    # person's agent is no one else's to read), keyed by owner so that no key tells a
    # member another's row exists.
    f"""
    CREATE TABLE context_injections (
        {_OWNER},
        id        text NOT NULL,
        ts        double precision NOT NULL,
        workspace text NOT NULL,
        uid       integer NOT NULL,
        agent     text NOT NULL,
        session   text NOT NULL,
        event     text NOT NULL,
        budget    integer NOT NULL,
        tokens    integer NOT NULL,
        PRIMARY KEY (owner, id)
    );
    CREATE INDEX context_injections_newest ON context_injections (owner, workspace, ts, id);
    CREATE INDEX context_injections_session ON context_injections (owner, session, ts);
    CREATE TABLE context_items (
        {_OWNER},
        injection text NOT NULL,
        position  integer NOT NULL,
        item_id   text NOT NULL,
        section   text NOT NULL,
        tokens    integer NOT NULL,
        drift     text,
        contested integer NOT NULL DEFAULT 0,
        use_token text,
        PRIMARY KEY (owner, injection, position)
    );
    CREATE INDEX context_items_item ON context_items (owner, item_id);
    {_owned_table("context_injections")}
    {_owned_table("context_items")}
    """,
    # 5: as SQLite's 14, the re-keying by identity once more, for every member with a
    # checkout noted (each moves their own rows, from their own checkouts, at their start).
    """
    INSERT INTO workspace_rekey (owner, since)
        SELECT DISTINCT owner, 5 FROM workspace_aliases
        ON CONFLICT DO NOTHING;
    """,
    # 6: as SQLite's 15, the relevance calibrations outcomes taught: each member's own (one
    # person's outcomes never move another's ranking), keyed by owner.
    f"""
    CREATE TABLE relevance_calibrations (
        {_OWNER},
        workspace  text NOT NULL,
        uid        integer NOT NULL,
        bias       double precision NOT NULL,
        lexical    double precision NOT NULL,
        semantic   double precision NOT NULL,
        updates    integer NOT NULL,
        updated_at double precision NOT NULL,
        PRIMARY KEY (owner, workspace, uid)
    );
    {_owned_table("relevance_calibrations")}
    """,
]


def schema_version(conn: psycopg.Connection[Any]) -> int:
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(row[0]) if row else 0


def _for_server(conn: psycopg.Connection[Any], ddl: str) -> str:
    """``ddl`` for this server: before PostgreSQL 17 there is no pg_c_utf8 collation, and
    text is folded by the database's own (a UTF-8 locale gives the same words)."""
    if conn.info.server_version < 170000:
        return ddl.replace(" COLLATE pg_c_utf8", "")
    return ddl


def migrate(conn: psycopg.Connection[Any], upto: int | None = None) -> int:
    """Bring the schema up to date, or to version ``upto`` (as the database's owner);
    returns the version now.

    Each migration runs in its own transaction under an advisory lock, so two
    ``recallctl db init`` at once apply it once, and one that fails leaves the database at
    the version before it, to be run again.
    """
    with conn.transaction():
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(
            "DO $$ BEGIN CREATE ROLE recalld_member NOLOGIN;"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
    for version in range(1, (len(MIGRATIONS) if upto is None else upto) + 1):
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('recalld migrations'))")
            if schema_version(conn) >= version:
                continue
            log.info("migrating the database to schema version %d", version)
            conn.execute(_for_server(conn, MIGRATIONS[version - 1]))
            conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
    current = schema_version(conn)
    if current > len(MIGRATIONS):
        raise RuntimeError(
            f"database schema version {current} is newer than this recalld "
            f"({len(MIGRATIONS)}); upgrade recalld"
        )
    return current


def add_role(conn: psycopg.Connection[Any], role: str, password: str) -> bool:
    """Create (or re-password) ``role`` as a login role of ``recalld_member``; True when it
    was created. The name and password go through the driver's quoting, never as SQL."""
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    verb = "ALTER" if exists else "CREATE"
    conn.execute(
        sql.SQL("{} ROLE {} LOGIN PASSWORD {}").format(
            sql.SQL(verb), sql.Identifier(role), sql.Literal(password)
        )
    )
    conn.execute(
        sql.SQL("GRANT {} TO {}").format(sql.Identifier(MEMBER_ROLE), sql.Identifier(role))
    )
    return not exists


def init_database(admin_url: str, roles: dict[str, str]) -> int:
    """``recallctl db init``: migrate the database (connected as its owner) and create or
    re-password a login role for each of ``roles`` (name -> password); the schema version."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        version = migrate(conn)
        set_search_settings(conn)
        for role, password in roles.items():
            add_role(conn, role, password)
    return version


# The database's own settings for every session in it: a daemon sets nothing per session,
# since behind a pooler in transaction mode a session's SET stays on one server connection.
# ef_search: the HNSW candidates a search visits (pgvector's default of 40 misses
# neighbours at our depths); iterative_scan (pgvector 0.8): a filtered search keeps
# scanning until enough rows pass the filter.
SEARCH_SETTINGS = {"hnsw.ef_search": "100", "hnsw.iterative_scan": "relaxed_order"}


def set_search_settings(conn: psycopg.Connection[Any]) -> None:
    """Make :data:`SEARCH_SETTINGS` the database's defaults (as its owner); one this
    pgvector does not know is left out."""
    # Load pgvector in this session, so the settings are checked as its own (a placeholder
    # for a library not loaded may be refused to a non-superuser owner).
    conn.execute("SELECT '[1]'::vector")
    (dbname,) = conn.execute("SELECT current_database()").fetchone() or ("",)
    for name, value in SEARCH_SETTINGS.items():
        try:
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(dbname), sql.Identifier(*name.split(".")), sql.Literal(value)
                )
            )
        except (psycopg.errors.UndefinedObject, psycopg.errors.InvalidParameterValue) as exc:
            log.warning("pgvector here has no %s (%s); searching without it", name, exc)
