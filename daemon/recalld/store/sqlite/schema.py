"""The SQLite schema: numbered migrations, and the connections the store opens.

SQLite is the source of truth: every record, its full-text index and its vector live here.
One writer connection (owned by the capture actor) and any number of read connections, all
in WAL mode so readers never block the writer nor each other.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..sql.records import key_digest

__all__ = ["DB_NAME", "MIGRATIONS", "SqliteDb", "open_reader", "open_writer", "schema_version"]

log = logging.getLogger(__name__)

DB_NAME = "recalld.db"

# Numbered migrations: the list index + 1 is the version stored in PRAGMA user_version.
# Never edit a migration that has shipped; append a new one.
MIGRATIONS: list[str] = [
    # 1: records with FTS5, vectors, idempotency keys.
    """
    CREATE TABLE records (
        rowid         INTEGER PRIMARY KEY,       -- also the FAISS id
        id            TEXT NOT NULL UNIQUE,      -- public id, e.g. mem_01JD...
        kind          TEXT NOT NULL,             -- memory | episode | experience | lesson
        ts            REAL NOT NULL,             -- when the remembered thing happened
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL,
        workspace     TEXT NOT NULL,
        agent         TEXT NOT NULL,
        uid           INTEGER NOT NULL,
        session       TEXT,
        source        TEXT,
        text          TEXT NOT NULL,             -- redacted before it was ever written
        tags          TEXT NOT NULL DEFAULT '[]',-- JSON array
        trust         REAL NOT NULL DEFAULT 1.0,
        eligibility   TEXT NOT NULL DEFAULT 'pending',
        expires_at    REAL,
        tombstoned_at REAL,
        content_hash  BLOB NOT NULL,
        embed_state   INTEGER NOT NULL DEFAULT 0 -- 0 waiting for a vector, 1 embedded
    );
    CREATE UNIQUE INDEX records_dedup ON records(workspace, kind, content_hash)
        WHERE tombstoned_at IS NULL;
    CREATE INDEX records_scope ON records(workspace, kind, ts);
    CREATE INDEX records_unembedded ON records(rowid) WHERE embed_state = 0;
    CREATE INDEX records_pending ON records(rowid) WHERE eligibility = 'pending';

    CREATE VIRTUAL TABLE records_fts USING fts5(
        text, content='records', content_rowid='rowid',
        tokenize='porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER records_fts_insert AFTER INSERT ON records BEGIN
        INSERT INTO records_fts(rowid, text) VALUES (new.rowid, new.text);
    END;
    CREATE TRIGGER records_fts_delete AFTER DELETE ON records BEGIN
        INSERT INTO records_fts(records_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
    END;
    CREATE TRIGGER records_fts_update AFTER UPDATE OF text ON records BEGIN
        INSERT INTO records_fts(records_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
        INSERT INTO records_fts(rowid, text) VALUES (new.rowid, new.text);
    END;

    CREATE TABLE vectors (
        rowid INTEGER PRIMARY KEY REFERENCES records(rowid) ON DELETE CASCADE,
        model TEXT NOT NULL,
        vec   BLOB NOT NULL                      -- float32, L2-normalised
    );

    CREATE TABLE idempotency (
        agent      TEXT NOT NULL,
        key        TEXT NOT NULL,
        record_id  TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (agent, key)
    ) WITHOUT ROWID;
    """,
    # 2: work episodes (seed 001). The shared columns (ts, workspace = vault, agent = caller,
    # session = session_id, text = summary, tags, trust, eligibility, expiry, tombstone) live
    # in records; what only an episode has lives here, keyed by the record's rowid.
    """
    CREATE TABLE episodes (
        rowid        INTEGER PRIMARY KEY REFERENCES records(rowid) ON DELETE CASCADE,
        channel      TEXT NOT NULL,
        episode_type TEXT NOT NULL,
        tool         TEXT,
        status       TEXT NOT NULL,
        error_code   TEXT,
        duration_ms  REAL,
        result_size  INTEGER,
        task_result  REAL,
        verdict_at   REAL,
        blocked      INTEGER NOT NULL DEFAULT 0,
        prev_id      TEXT                        -- the session's previous episode
    );
    CREATE INDEX episodes_tool ON episodes(tool) WHERE tool IS NOT NULL;
    -- The chain and the session verdict look episodes up by session.
    CREATE INDEX records_session ON records(session, kind) WHERE session IS NOT NULL;
    """,
    # 3: workspaces approved for use when require_approval is on.
    """
    CREATE TABLE workspace_approvals (
        workspace   TEXT PRIMARY KEY,
        approved_at REAL NOT NULL,
        approved_by TEXT NOT NULL              -- agent name of the approving client
    ) WITHOUT ROWID;
    """,
    # 4: experiences (kind 'experience') and the lessons (kind 'lesson') they support.
    """
    CREATE TABLE experiences (
        rowid      INTEGER PRIMARY KEY REFERENCES records(rowid) ON DELETE CASCADE,
        task_class TEXT NOT NULL,
        strategy   TEXT,
        status     TEXT NOT NULL CHECK (status IN ('success', 'failure', 'unknown')),
        tool_calls INTEGER NOT NULL DEFAULT 0,
        minutes    REAL NOT NULL DEFAULT 0,
        files      TEXT NOT NULL DEFAULT '[]'   -- JSON array of project-relative paths
    );
    -- Which experiences support which lesson. A link outlives a forgotten experience (the
    -- tombstone on its record says it no longer counts), so history stays explainable.
    CREATE TABLE lesson_support (
        lesson_rowid     INTEGER NOT NULL REFERENCES records(rowid) ON DELETE CASCADE,
        experience_rowid INTEGER NOT NULL REFERENCES records(rowid) ON DELETE CASCADE,
        created_at       REAL NOT NULL,
        PRIMARY KEY (lesson_rowid, experience_rowid)
    ) WITHOUT ROWID;
    CREATE INDEX lesson_support_by_experience ON lesson_support(experience_rowid);
    """,
    # 5: memories and canonical facts (seeds 003 and 004): metadata, labels, links, cited
    # paths, use outcomes, the event log since_prior_session reads, and the use_token key.
    """
    CREATE TABLE memory_meta (
        rowid            INTEGER PRIMARY KEY REFERENCES records(rowid) ON DELETE CASCADE,
        kind             TEXT NOT NULL DEFAULT 'entry',       -- entry | fact
        subject          TEXT,                                -- a fact's subject, as written
        subject_key      TEXT,                                -- normalised, for supersession
        authority        TEXT NOT NULL DEFAULT 'first-party', -- first-party | quoted
        distortion_tolerance TEXT,                            -- 'constraint': pinned
        origin           TEXT,               -- workspace written in; NULL: global, no origin
        origin_repo      TEXT,               -- git top level of the origin, when it is a repo
        origin_commit    TEXT,               -- HEAD when written
        verified_commit  TEXT,               -- HEAD when last verified (commit drift base)
        last_verified_at REAL NOT NULL,
        writer_client    TEXT,               -- the writer's declared client and model
        writer_model     TEXT,
        superseded_by    TEXT,               -- public id of the memory that replaced this one
        trust_reasons    TEXT NOT NULL DEFAULT '[]'
    );
    CREATE INDEX memory_meta_subject ON memory_meta(subject_key) WHERE subject_key IS NOT NULL;
    CREATE INDEX memory_meta_constraints ON memory_meta(rowid)
        WHERE distortion_tolerance = 'constraint';

    CREATE TABLE memory_labels (
        rowid INTEGER NOT NULL REFERENCES records(rowid) ON DELETE CASCADE,
        kind  TEXT NOT NULL,                 -- scope | band | episode
        value TEXT NOT NULL,
        PRIMARY KEY (kind, value, rowid)
    ) WITHOUT ROWID;
    CREATE INDEX memory_labels_rowid ON memory_labels(rowid);

    CREATE TABLE memory_links (
        src    INTEGER NOT NULL REFERENCES records(rowid) ON DELETE CASCADE,
        rel    TEXT NOT NULL,                -- depends_on | supersedes
        dst_id TEXT NOT NULL,                -- public id: the target may be forgotten later
        note   TEXT,
        PRIMARY KEY (src, rel, dst_id)
    ) WITHOUT ROWID;
    CREATE INDEX memory_links_dst ON memory_links(dst_id, rel);

    CREATE TABLE memory_paths (
        rowid    INTEGER NOT NULL REFERENCES records(rowid) ON DELETE CASCADE,
        path     TEXT NOT NULL,
        anchored INTEGER NOT NULL,           -- 0: found in the prose; 1: given; 2: attested
        PRIMARY KEY (rowid, path)
    ) WITHOUT ROWID;

    CREATE TABLE memory_uses (
        id      INTEGER PRIMARY KEY,
        rowid   INTEGER NOT NULL REFERENCES records(rowid) ON DELETE CASCADE,
        outcome TEXT NOT NULL,               -- used | ignored | contradicted | corrected
        ts      REAL NOT NULL,
        agent   TEXT NOT NULL,
        session TEXT,
        token   TEXT UNIQUE,                 -- a use_token's nonce: a later call overrides
        note    TEXT
    );
    CREATE INDEX memory_uses_rowid ON memory_uses(rowid, ts);

    CREATE TABLE memory_events (
        id        INTEGER PRIMARY KEY,
        ts        REAL NOT NULL,
        session   TEXT NOT NULL,
        agent     TEXT NOT NULL,
        record_id TEXT NOT NULL,
        event     TEXT NOT NULL              -- stored | updated | verified | used | resolved
    );
    CREATE INDEX memory_events_session ON memory_events(session, ts);

    CREATE TABLE daemon_keys (
        name TEXT PRIMARY KEY,
        key  BLOB NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO daemon_keys (name, key) VALUES ('use_token', randomblob(32));

    INSERT INTO memory_meta (rowid, origin, last_verified_at)
        SELECT rowid, workspace, created_at FROM records WHERE kind = 'memory';
    """,
    # 6: the files an episode touched, and the experience each session was rolled up into.
    """
    ALTER TABLE episodes ADD COLUMN files TEXT NOT NULL DEFAULT '[]';  -- JSON array, as sent

    -- One row per rolled-up session: rolling it up again finds (and updates) its experience,
    -- also once forgotten, so a forgotten session is not recorded again by the next hook.
    CREATE TABLE experience_rollups (
        rowid       INTEGER PRIMARY KEY REFERENCES records(rowid) ON DELETE CASCADE,
        workspace   TEXT NOT NULL,
        session     TEXT NOT NULL,
        given       TEXT NOT NULL DEFAULT '[]', -- JSON: fields a caller set (kept at updates)
        episodes    INTEGER NOT NULL,           -- episodes read by the last roll-up
        rolled_up_at REAL NOT NULL,
        UNIQUE (workspace, session)
    );
    """,
    # 7: a record's neighbours in its session (search reads them to score a hit in context).
    """
    CREATE INDEX records_session_ts ON records(workspace, kind, session, ts)
        WHERE session IS NOT NULL;
    """,
    # 8: per-agent credentials (the digest of each agent's token, never the token), and
    # idempotency keys kept as digests: a key is client text and may hold anything.
    """
    CREATE TABLE agent_credentials (
        agent        TEXT PRIMARY KEY,
        token_digest BLOB NOT NULL,
        created_at   REAL NOT NULL
    ) WITHOUT ROWID;
    UPDATE idempotency SET key = recalld_key_digest(key);
    """,
    # 9: who may see a record once it lives in a shared database (PostgreSQL's row-level
    # security reads it; here it is kept so an export or a migration carries it along).
    """
    ALTER TABLE records ADD COLUMN visibility TEXT NOT NULL DEFAULT 'private'
        CHECK (visibility IN ('private', 'team'));
    """,
    # 10: a new record's text reaches FTS5 from a statement of its own (see
    # SqliteDb.insert_record), not from a trigger; updates and deletes keep theirs. A bulk
    # load straight into records indexes its rows the same way (or runs FTS5's 'rebuild').
    """
    DROP TRIGGER records_fts_insert;
    """,
    # 11: records whose vector changed in place (re-embedded under the same rowid, or
    # removed), each once, under its latest change's number. A vector index snapshot notes
    # the number it holds, so the next start re-reads the vectors changed since: its set of
    # ids alone cannot tell an old vector from a new one (see VectorIndex.open). The numbers
    # never repeat (AUTOINCREMENT), and a trigger's own ON CONFLICT gives way to the outer
    # statement's (an upsert), hence the delete before each insert.
    """
    CREATE TABLE vector_changes (
        seq    INTEGER PRIMARY KEY AUTOINCREMENT,
        record INTEGER NOT NULL                  -- records.rowid
    );
    CREATE INDEX vector_changes_record ON vector_changes(record);
    CREATE TRIGGER vectors_changed AFTER UPDATE OF model, vec ON vectors BEGIN
        DELETE FROM vector_changes WHERE record = new.rowid;
        INSERT INTO vector_changes (record) VALUES (new.rowid);
    END;
    CREATE TRIGGER vectors_removed AFTER DELETE ON vectors BEGIN
        DELETE FROM vector_changes WHERE record = old.rowid;
        INSERT INTO vector_changes (record) VALUES (old.rowid);
    END;
    """,
    # 12: workspaces are keyed by their repository's identity, not a path (see
    # recalld.domain.workspace_identity); the paths a workspace is seen at are its local
    # aliases. Rows keyed by a path are re-keyed at start (recalld.store.rekey), a path per
    # transaction, while workspace_rekey holds a row: a start cut short resumes there.
    """
    CREATE TABLE workspace_aliases (
        path      TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        seen_at   REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX workspace_aliases_workspace ON workspace_aliases(workspace);
    CREATE TABLE workspace_rekey (owner TEXT PRIMARY KEY) WITHOUT ROWID;
    INSERT INTO workspace_rekey (owner) VALUES ('local');
    """,
    # 13: the context hooks' log: each block a hook was given and its items, kept after the
    # uses they recorded change (see recalld.store.sql.context). Ids only, never the lines:
    # an item's text is its record's. No foreign key: an item is written only with its
    # injection, in its transaction, and PostgreSQL's would check across owners.
    """
    CREATE TABLE context_injections (
        id        TEXT PRIMARY KEY,          -- ctx_...
        ts        REAL NOT NULL,
        workspace TEXT NOT NULL,
        uid       INTEGER NOT NULL,
        agent     TEXT NOT NULL,
        session   TEXT NOT NULL,             -- the host's session id (its hook's payload)
        event     TEXT NOT NULL,             -- session_start | prompt
        budget    INTEGER NOT NULL,
        tokens    INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX context_injections_newest ON context_injections(workspace, uid, ts, id);
    CREATE INDEX context_injections_session ON context_injections(session, ts);
    CREATE TABLE context_items (
        injection TEXT NOT NULL,             -- context_injections.id
        position  INTEGER NOT NULL,          -- its place in the block
        item_id   TEXT NOT NULL,             -- a memory's, lesson's or episode's public id
        section   TEXT NOT NULL,
        tokens    INTEGER NOT NULL,
        drift     TEXT,
        contested INTEGER NOT NULL DEFAULT 0,
        use_token TEXT,                      -- a memory's: its use's memory_uses.token
        PRIMARY KEY (injection, position)
    ) WITHOUT ROWID;
    CREATE INDEX context_items_item ON context_items(item_id);
    """,
    # 14: identities keep a path's case, a port and an ssh user where they name another
    # repository (recalld.domain.workspace_identity): the re-keying runs once more at start,
    # moving each workspace whose checkouts here now all agree on one new identity.
    """
    INSERT OR IGNORE INTO workspace_rekey (owner) VALUES ('local');
    """,
    # 15: the relevance calibrations outcomes taught (recalld.retrieval.learned_relevance):
    # a workspace's, and the user's own under workspace ''.
    """
    CREATE TABLE relevance_calibrations (
        workspace  TEXT NOT NULL,
        uid        INTEGER NOT NULL,
        bias       REAL NOT NULL,
        lexical    REAL NOT NULL,
        semantic   REAL NOT NULL,
        updates    INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (workspace, uid)
    ) WITHOUT ROWID;
    """,
]


# Page cache per connection. The writer's holds the indexes a capture updates; a reader's
# only needs the hot part of the FTS index and records (the OS page cache holds the rest),
# and there are several readers.
WRITER_CACHE_MIB = 64
READER_CACHE_MIB = 16


def _configure(conn: sqlite3.Connection, cache_mib: int) -> None:
    # Readers must wait out a checkpoint rather than fail with "database is locked".
    conn.execute("PRAGMA busy_timeout=10000")
    conn.execute("PRAGMA temp_store=MEMORY")
    conn.execute(f"PRAGMA cache_size=-{cache_mib * 1024}")
    # No mmap: every connection maps the file anew and RSS counts each mapping's pages, so
    # five connections showed the same database five times over (1.0 GB RSS at 100k records
    # for 575 MB of real memory); without it, 465 MB and searches no slower. The OS page
    # cache keeps the hot pages shared either way.
    conn.execute("PRAGMA mmap_size=0")


class SqliteDb(sqlite3.Connection):
    """A connection that also answers what the shared SQL asks of its engine
    (:class:`~recalld.store.sql.db.Db`); made by ``sqlite3.connect(factory=...)``, so a
    statement costs no more than on a plain connection."""

    def insert_record(self, sql: str, parameters: Sequence[Any], text: str) -> int:
        """The insert, then its FTS5 row, as a statement of its own (migration 10).

        Not a trigger: an insert whose trigger writes FTS5 opens a statement journal, and at
        each FTS5 writes out the terms it holds for the transaction, a segment per record
        (with its merges, it cost more than the rest of a capture's writes together).
        """
        rowid = self.insert_record_if_free(sql, parameters, text)
        assert rowid is not None, "an INSERT of one row"
        return rowid

    def insert_record_if_free(self, sql: str, parameters: Sequence[Any], text: str) -> int | None:
        cur = self.execute(sql, parameters)
        if cur.rowcount == 0:
            return None
        rowid = cur.lastrowid
        assert rowid is not None, "an INSERT of one row"
        self.execute("INSERT INTO records_fts(rowid, text) VALUES (?, ?)", (rowid, text))
        return rowid

    def merge_text_index(self, pages: int) -> bool:
        """FTS5's incremental merge, all levels at once (a negative count). Every batch of
        inserts leaves a segment, and FTS5 merges them only four to a level: a bulk load
        left 13, and a query reads each (bm25 at 1M: 7.8 ms over 13 segments, 3.4 over one).
        FTS5 says a step found nothing to merge by changing fewer than two rows."""
        before = self.total_changes
        self.execute("INSERT INTO records_fts(records_fts, rank) VALUES ('merge', ?)", (-pages,))
        return self.total_changes - before >= 2

    def vector(self, vec: np.ndarray) -> bytes:
        return vec.astype(np.float32, copy=False).tobytes()

    def vector_of(self, value: Any) -> np.ndarray:
        return np.frombuffer(value, dtype=np.float32)

    def json_values(self, column: str) -> str:
        return f"json_each({column})"

    def joined(self, column: str) -> str:
        return f"group_concat({column})"

    def by_rowid(self, alias: str) -> str:
        # Without statistics SQLite's planner takes an equality on the workspace for
        # selective and walks that index, testing each entry against the rowid list: 18 ms
        # for 100 rowids at 100k records in one workspace, against 0.06 ms by rowid.
        # NOT INDEXED leaves it the rowid lookups alone.
        return f"records {alias} NOT INDEXED"

    def owner(self, table: str) -> str:
        return "NULL"

    def owned(self, table: str) -> str:
        return "1 = 1"

    def lock(self, *key: str) -> None:
        """One writer connection, in BEGIN IMMEDIATE: every write is serialised already."""

    def integrity(self) -> list[str]:
        problems = [str(row[0]) for row in self.execute("PRAGMA integrity_check(20)")]
        return [] if problems == ["ok"] else problems

    def schema(self) -> tuple[int, int]:
        return schema_version(self), len(MIGRATIONS)


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _migrate(conn: sqlite3.Connection) -> None:
    current = schema_version(conn)
    if current > len(MIGRATIONS):
        raise RuntimeError(
            f"database schema version {current} is newer than this recalld "
            f"({len(MIGRATIONS)}); upgrade recalld"
        )
    for version in range(current + 1, len(MIGRATIONS) + 1):
        log.info("migrating database to schema version %d", version)
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split(MIGRATIONS[version - 1]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={version}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _split(script: str) -> list[str]:
    """Split a migration into statements (triggers contain ';', so use sqlite's own test)."""
    statements: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                statements.append(buf.strip())
            buf = ""
    if buf.strip():
        statements.append(buf.strip())
    return statements


def open_writer(data_dir: Path, *, durability: str = "full") -> SqliteDb:
    """Open the one writer connection, creating and migrating the database as needed.

    The connection is used from one worker thread at a time (the capture actor serialises
    its batches), so ``check_same_thread`` is off. Transactions are explicit.
    """
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    conn = sqlite3.connect(
        data_dir / DB_NAME,
        isolation_level=None,
        check_same_thread=False,
        timeout=10,
        factory=SqliteDb,
    )
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
    conn.execute("PRAGMA foreign_keys=ON")
    _configure(conn, WRITER_CACHE_MIB)
    # Migration 8 turns stored idempotency keys into the digests writes now look up.
    conn.create_function("recalld_key_digest", 1, key_digest, deterministic=True)
    _migrate(conn)
    return conn


def open_reader(data_dir: Path) -> SqliteDb:
    """Open a read-only connection for searches (one per search worker)."""
    uri = f"file:{data_dir / DB_NAME}?mode=ro"
    conn = sqlite3.connect(
        uri, uri=True, isolation_level=None, check_same_thread=False, timeout=10, factory=SqliteDb
    )
    _configure(conn, READER_CACHE_MIB)
    conn.execute("PRAGMA query_only=ON")
    return conn
