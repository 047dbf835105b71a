"""The PostgreSQL schema: numbered migrations, row-level security, and the roles daemons use.

The same tables as the SQLite schema (the shared SQL under ``store.sql`` reads and writes
both), plus what a database shared by many people needs:

- every row says whose it is (``owner``, the database role that wrote it, filled in by the
  server from ``current_user``, so a daemon cannot write in another's name), and every
  record whether it is ``private`` to that owner or shared with the ``team``;
- row-level security on every table enforces it in the server: a role reads its own rows
  and team rows, and nothing else, whatever SQL it sends. A child row (an episode's
  details, a memory's labels, a vector) is visible exactly when its record is;
- uniqueness is a constraint, never a check-then-insert, so two daemons writing at once
  cannot both store what must be stored once (idempotency keys and content-hash dedup are
  per owner: another person's private row must not collide with, or reveal, mine).

Daemons connect as login roles that are members of ``recalld_member``, which holds the
grants; the tables belong to the role that ran the migrations (``recallctl db init``), so
no daemon can alter them or switch row-level security off.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from .textsearch import DOCLEN_EXPR, TEXT_SEARCH_DDL, TSV_EXPR, access_ddl

__all__ = [
    "MEMBER_ROLE",
    "MIGRATIONS",
    "VECTOR_DIM",
    "add_role",
    "init_database",
    "migrate",
    "schema_version",
]

log = logging.getLogger(__name__)

# The group role every daemon's login role belongs to.
MEMBER_ROLE = "recalld_member"
# all-MiniLM-L6-v2 (and the hashing embedder tests use): the HNSW index needs one size.
VECTOR_DIM = 384

# A child table's rows are visible (and writable) when their record is: the look-up runs
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
_CHILDREN = {
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
_OWNED = (
    "idempotency",
    "memory_events",
    "daemon_keys",
    "workspace_approvals",
    "agent_credentials",
    "experience_rollups",
)


def _policies() -> str:
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
    for table, col in _CHILDREN.items():
        cond = _CHILD.format(col=f"{table}.{col}")
        out += [
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;",
            f"CREATE POLICY {table}_by_record ON {table} USING ({cond}) WITH CHECK ({cond});",
        ]
    for table in _OWNED:
        out += [
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;",
            f"CREATE POLICY {table}_own ON {table} USING (owner = current_user)"
            " WITH CHECK (owner = current_user);",
        ]
    tables = ["records", *_CHILDREN, *_OWNED]
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


_OWNER = "owner text NOT NULL DEFAULT current_user"

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

    {_policies()}
    {access_ddl(MEMBER_ROLE)}
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


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Bring the schema up to date (as the database's owner); returns the version now.

    Each migration runs in its own transaction under an advisory lock, so two
    ``recallctl db init`` at once apply it once.
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
    for version in range(1, len(MIGRATIONS) + 1):
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
        for role, password in roles.items():
            add_role(conn, role, password)
    return version
