"""Memories and canonical facts: the writes (inside a group commit) and the reads.

A memory is a ``records`` row of kind 'memory' plus its ``memory_meta`` row (kind, subject,
authority, origin, verification, supersession), its labels, cited paths, links and recorded
uses. A fact's supersession or contest is decided (by the policy) in the transaction that
stores it, so the reply and every later search already see it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgspec
from recall_client import protocol as p

from ...domain.dedup import memory_digest
from ...domain.drift import scrape_paths
from ...domain.ids import new_id
from ...domain.policy import HELD, OUTSIDE_SOURCES, Assessment, FactView, decide_fact, subject_key
from ...domain.principal import Principal
from ...domain.scopes import ADMIN
from ...errors import RecallError
from ..port import CalibrationRow, Fact, Filter, MemoryRow, UseRow
from .db import Db
from .filters import marks, where
from .records import remember_key, replayed, visibility

__all__ = ["SqlMemoryReads", "SqlMemoryWrites"]

_json = msgspec.json.Encoder()
_tags = msgspec.json.Decoder(list[str])

# A memory row written without its metadata (a bulk load straight into records) reads as a
# plain entry of its workspace, verified when it was created.
_ROW_SQL = (
    "SELECT r.rowid, r.id, r.text, r.ts, r.tags, r.source, r.trust, r.created_at, r.updated_at,"
    " r.agent, r.workspace, r.session, r.eligibility, r.expires_at,"
    " coalesce(m.kind, 'entry'), m.subject, m.subject_key, coalesce(m.authority, 'first-party'),"
    " m.distortion_tolerance, CASE WHEN m.rowid IS NULL THEN r.workspace ELSE m.origin END,"
    " m.origin_repo, m.origin_commit, m.verified_commit,"
    " coalesce(m.last_verified_at, r.created_at),"
    " m.writer_client, m.writer_model, m.superseded_by, r.visibility, {owner},"
    " CASE WHEN {owned} THEN 1 ELSE 0 END"
    " FROM {records} LEFT JOIN memory_meta m ON m.rowid = r.rowid"
)


def _labels(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


# --------------------------------------------------------------------------- reads


class SqlMemoryReads:
    def __init__(self, conn: Db) -> None:
        self._conn = conn
        self._token_key: bytes | None = None

    def _rows(
        self, condition: str, params: Sequence[Any], tail: str = "", *, keyed: bool = False
    ) -> list[MemoryRow]:
        """Memory rows where ``condition``; ``keyed``: it names them by rowid (Db.by_rowid)."""
        records = self._conn.by_rowid("r") if keyed else "records r"
        rows = []
        sql = _ROW_SQL.format(
            records=records, owner=self._conn.owner("r"), owned=self._conn.owned("r")
        )
        for r in self._conn.execute(f"{sql} WHERE {condition}{tail}", params):
            values: list[Any] = [*r[:4], _tags.decode(r[4]), *r[5:-1], bool(r[-1])]
            rows.append(MemoryRow(*values))
        if not rows:
            return rows
        by_rowid = {r.rowid: r for r in rows}
        ids = list(by_rowid)
        for rowid, kind, value in self._conn.execute(
            f"SELECT rowid, kind, value FROM memory_labels WHERE rowid IN ({marks(ids)})", ids
        ):
            by_rowid[rowid].labels.setdefault(kind, []).append(value)
        for rowid, path, anchored in self._conn.execute(
            f"SELECT rowid, path, anchored FROM memory_paths WHERE rowid IN ({marks(ids)})", ids
        ):
            by_rowid[rowid].paths.append((path, bool(anchored)))
        return rows

    def by_rowid(self, rowids: Sequence[int]) -> dict[int, MemoryRow]:
        if not rowids:
            return {}
        return {r.rowid: r for r in self._rows(f"r.rowid IN ({marks(rowids)})", list(rowids))}

    def live(self, ids: Sequence[str]) -> dict[str, MemoryRow]:
        """Memories by public id that are not forgotten (any eligibility)."""
        if not ids:
            return {}
        return {
            r.id: r
            for r in self._rows(
                f"r.id IN ({marks(ids)}) AND r.kind = 'memory' AND r.tombstoned_at IS NULL",
                list(ids),
            )
        }

    def pinned_constraints(self, f: Filter) -> list[MemoryRow]:
        """Constraint facts that are current, under the filter."""
        clause, params = where(self._conn, f)
        return self._rows(
            "r.rowid IN (SELECT rowid FROM memory_meta WHERE distortion_tolerance = 'constraint'"
            f" AND superseded_by IS NULL) AND {clause}",
            params,
            keyed=True,  # the few constraints, not the workspace's every record
        )

    def current_facts(self, key: str, origin: str | None, now: float) -> list[Fact]:
        """The current facts on a subject, oldest stored first. More than one: contested."""
        return current_facts(self._conn, key, origin, now)

    def texts(self, ids: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        return dict(
            self._conn.execute(
                f"SELECT id, text FROM records WHERE id IN ({marks(wanted)})", wanted
            ).fetchall()
        )

    def uses(self, rowids: Sequence[int]) -> list[UseRow]:
        if not rowids:
            return []
        return [
            UseRow(*row)
            for row in self._conn.execute(
                f"SELECT rowid, outcome, ts, note FROM memory_uses WHERE rowid IN ({marks(rowids)})"
                " ORDER BY ts DESC",
                list(rowids),
            )
        ]

    def use_counts(self, rowid: int) -> dict[str, int]:
        return dict(
            self._conn.execute(
                "SELECT outcome, count(*) FROM memory_uses WHERE rowid = ? GROUP BY outcome",
                (rowid,),
            ).fetchall()
        )

    def links_from(self, rowid: int) -> list[tuple[str, str, str | None]]:
        return [
            tuple(row)
            for row in self._conn.execute(
                "SELECT rel, dst_id, note FROM memory_links WHERE src = ?", (rowid,)
            )
        ]

    def depended_on_by(self, memory_id: str) -> list[tuple[str, str, str | None]]:
        return [
            tuple(row)
            for row in self._conn.execute(
                "SELECT r.id, r.text, l.note FROM memory_links l JOIN records r ON r.rowid = l.src"
                " WHERE l.dst_id = ? AND l.rel = 'depends_on' AND r.tombstoned_at IS NULL",
                (memory_id,),
            )
        ]

    def depends_on(self, rowids: Sequence[int]) -> dict[int, list[tuple[str, str | None]]]:
        out: dict[int, list[tuple[str, str | None]]] = {}
        if not rowids:
            return out
        for src, dst, note in self._conn.execute(
            "SELECT src, dst_id, note FROM memory_links WHERE rel = 'depends_on'"
            f" AND src IN ({marks(rowids)})",
            list(rowids),
        ):
            out.setdefault(src, []).append((dst, note))
        return out

    def prior_session_boundary(self, session: str) -> float | None:
        row = self._conn.execute(
            "SELECT max(ts) FROM memory_events WHERE session != ?", (session,)
        ).fetchone()
        return None if row[0] is None else float(row[0])

    def newest_facts(self, f: Filter, limit: int) -> list[MemoryRow]:
        """Up to ``limit`` current facts under ``f``, newest first: found from the subject
        index, so a workspace's other records are not read."""
        clause, params = where(self._conn, f)
        return self._rows(
            "r.rowid IN (SELECT rowid FROM memory_meta WHERE subject_key IS NOT NULL"
            f" AND kind = 'fact' AND superseded_by IS NULL) AND {clause}",
            [*params, limit],
            " ORDER BY r.ts DESC, r.id DESC LIMIT ?",
            keyed=True,
        )

    def citing(self, paths: Sequence[str], f: Filter, limit: int) -> list[MemoryRow]:
        """Up to ``limit`` memories under ``f`` that cite one of ``paths``, newest first."""
        if not paths:
            return []
        clause, params = where(self._conn, f)
        return self._rows(
            f"r.rowid IN (SELECT rowid FROM memory_paths WHERE path IN ({marks(paths)}))"
            f" AND {clause}",
            [*paths, *params, limit],
            " ORDER BY r.ts DESC, r.id DESC LIMIT ?",
        )

    def origin_repo(self, memory_id: str) -> str | None:
        row = self._conn.execute(
            "SELECT m.origin_repo FROM records r JOIN memory_meta m ON m.rowid = r.rowid"
            " WHERE r.id = ?",
            (memory_id,),
        ).fetchone()
        return None if row is None else row[0]

    def newest_page(
        self,
        f: Filter,
        *,
        before: tuple[float, str] | None,
        limit: int,
        kind: p.MemoryKind | None = None,
        subject_key: str | None = None,
        current_only: bool = False,
    ) -> list[MemoryRow]:
        clause, params = where(self._conn, f)
        if kind is not None:
            # A row without metadata reads as an entry (see _ROW_SQL).
            has_fact = (
                "EXISTS (SELECT 1 FROM memory_meta k WHERE k.rowid = r.rowid AND k.kind = 'fact')"
            )
            clause += f" AND {has_fact}" if kind == "fact" else f" AND NOT {has_fact}"
        if subject_key is not None:
            clause += (
                " AND EXISTS (SELECT 1 FROM memory_meta k WHERE k.rowid = r.rowid"
                " AND k.subject_key = ?)"
            )
            params.append(subject_key)
        if current_only:
            clause += (
                " AND NOT EXISTS (SELECT 1 FROM memory_meta k WHERE k.rowid = r.rowid"
                " AND k.superseded_by IS NOT NULL)"
            )
        if before is not None:
            clause += " AND (r.ts < ? OR (r.ts = ? AND r.id < ?))"
            params += [before[0], before[0], before[1]]
        return self._rows(clause, [*params, limit], " ORDER BY r.ts DESC, r.id DESC LIMIT ?")

    def workspace_counts(self, f: Filter) -> dict[str, int]:
        clause, params = where(self._conn, f)
        return {
            str(workspace): int(n)
            for workspace, n in self._conn.execute(
                f"SELECT r.workspace, count(*) FROM records r WHERE {clause} GROUP BY r.workspace",
                params,
            )
        }

    def use_token_key(self) -> bytes:
        if self._token_key is None:
            self._token_key = bytes(
                self._conn.execute(
                    "SELECT key FROM daemon_keys WHERE name = 'use_token'"
                ).fetchone()[0]
            )
        return self._token_key

    def token_outcome(self, nonce: str) -> p.StoredOutcome | None:
        row = self._conn.execute(
            "SELECT outcome FROM memory_uses WHERE token = ?", (nonce,)
        ).fetchone()
        return None if row is None else row[0]

    def calibrations(self, workspace: str, uid: int) -> dict[str, CalibrationRow]:
        return {
            str(r[0]): CalibrationRow(
                str(r[0]), int(r[1]), float(r[2]), float(r[3]), float(r[4]), int(r[5]), r[6]
            )
            for r in self._conn.execute(
                "SELECT workspace, uid, bias, lexical, semantic, updates, updated_at"
                " FROM relevance_calibrations WHERE uid = ? AND workspace IN (?, '')",
                (uid, workspace),
            )
        }


def current_facts(conn: Db, key: str, origin: str | None, now: float) -> list[Fact]:
    return [
        Fact(*row)
        for row in conn.execute(
            "SELECT r.rowid, r.id, m.authority, r.ts, r.created_at, r.text, m.subject,"
            " m.distortion_tolerance, r.visibility FROM memory_meta m"
            " JOIN records r ON r.rowid = m.rowid"
            " WHERE m.subject_key = ? AND m.origin IS NOT DISTINCT FROM ? AND m.kind = 'fact'"
            " AND m.superseded_by IS NULL AND r.tombstoned_at IS NULL"
            " AND (r.expires_at IS NULL OR r.expires_at > ?) AND r.eligibility = 'eligible'"
            " ORDER BY r.created_at, r.rowid",
            (key, origin, now),
        )
    ]


# --------------------------------------------------------------------------- writes


def _event(conn: Db, now: float, who: Principal, record_id: str, event: str) -> None:
    conn.execute(
        "INSERT INTO memory_events (ts, session, agent, record_id, event) VALUES (?, ?, ?, ?, ?)",
        (now, who.session, who.agent, record_id, event),
    )


def _require_memories(conn: Db, ids: list[str], what: str) -> None:
    for memory_id in ids:
        if (
            conn.execute(
                "SELECT 1 FROM records WHERE id = ? AND kind = 'memory' AND tombstoned_at IS NULL",
                (memory_id,),
            ).fetchone()
            is None
        ):
            raise RecallError(
                "not_found", f"{what} names {memory_id}, which is not a stored memory"
            )


# ``fresh``: the row was inserted in this job and has no labels, paths or links yet, so there
# is nothing to read or delete first (a store is a capture's hot path: statements count).


def _write_labels(
    conn: Db, rowid: int, kind: str, values: list[str], *, fresh: bool = False
) -> None:
    if not fresh:
        conn.execute("DELETE FROM memory_labels WHERE rowid = ? AND kind = ?", (rowid, kind))
    if values:
        conn.executemany(
            "INSERT INTO memory_labels (rowid, kind, value) VALUES (?, ?, ?)",
            [(rowid, kind, v) for v in _labels(values)],
        )


def hold(conn: Db, rowid: int, why: str) -> None:
    """Keep the memory out of the context hooks until a person verifies it (policy.HELD)."""
    conn.execute(
        "INSERT INTO memory_labels (rowid, kind, value) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        (rowid, HELD, why),
    )


def _outside(source: str | None) -> str | None:
    """``source`` when it names text from outside the agent's own hand, else None."""
    return source if source is not None and source.lower() in OUTSIDE_SOURCES else None


def _write_paths(
    conn: Db, rowid: int, text: str, explicit: list[str], *, fresh: bool = False
) -> list[str]:
    """Explicit paths are claim-anchored; paths in the text are evidence. Attested ones stay."""
    attested: set[str] = set()
    if not fresh:
        attested = {
            r[0]
            for r in conn.execute(
                "SELECT path FROM memory_paths WHERE rowid = ? AND anchored = 2", (rowid,)
            )
        }
        conn.execute("DELETE FROM memory_paths WHERE rowid = ? AND anchored < 2", (rowid,))
    rows: dict[str, int] = {path: 0 for path in scrape_paths(text)}
    rows.update({path: 1 for path in explicit})
    if rows:
        conn.executemany(
            "INSERT INTO memory_paths (rowid, path, anchored) VALUES (?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            [(rowid, path, anchored) for path, anchored in rows.items() if path not in attested],
        )
    return [*rows, *sorted(attested - rows.keys())]


def _write_depends(conn: Db, rowid: int, links: list[p.DependsOn], *, fresh: bool = False) -> None:
    _require_memories(conn, [d.id for d in links], "depends_on")
    if not fresh:
        conn.execute("DELETE FROM memory_links WHERE src = ? AND rel = 'depends_on'", (rowid,))
    if links:
        conn.executemany(
            "INSERT INTO memory_links (src, rel, dst_id, note) VALUES (?, 'depends_on', ?, ?)"
            " ON CONFLICT (src, rel, dst_id) DO UPDATE SET note = excluded.note",
            [(rowid, d.id, d.note) for d in links],
        )


def _live_row(conn: Db, memory_id: str) -> tuple[Any, ...]:
    # A memory bulk-loaded straight into records gets its metadata row on first change.
    conn.execute(
        "INSERT INTO memory_meta (rowid, origin, last_verified_at)"
        " SELECT rowid, workspace, created_at FROM records WHERE id = ? AND kind = 'memory'"
        " ON CONFLICT DO NOTHING",
        (memory_id,),
    )
    row = conn.execute(
        "SELECT r.rowid, r.text, r.source, r.workspace, m.kind, m.authority"
        " FROM records r JOIN memory_meta m ON m.rowid = r.rowid"
        " WHERE r.id = ? AND r.kind = 'memory' AND r.tombstoned_at IS NULL",
        (memory_id,),
    ).fetchone()
    if row is None:
        raise RecallError("not_found", f"no memory {memory_id}")
    return tuple(row)


class SqlMemoryWrites:
    def __init__(self, conn: Db) -> None:
        self._conn = conn

    def store(
        self,
        who: Principal,
        req: p.MemoryStore,
        *,
        repo: str | None,
        commit: str | None,
        trust: Assessment,
        now: float,
    ) -> tuple[p.MemoryStored, int | None]:
        """Insert one memory (or answer with the existing one for a duplicate or a replayed
        key); returns the reply and the new row, if one was written."""
        conn = self._conn
        earlier = replayed(conn, who, req.idempotency_key)
        if earlier is not None:
            return p.MemoryStored(
                record_id=earlier,
                duplicate=False,
                replayed=True,
                kind=req.kind,
                action="replayed",
                subject=req.subject,
                superseded=[],
                contested=False,
                authority=req.authority,
                trust=1.0,
                cited_paths=[],
            ), None
        _require_memories(conn, req.supersedes, "supersedes")
        workspace = req.workspace or who.workspace
        digest = memory_digest(req.text)
        row = conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND kind = 'memory' AND content_hash = ?"
            " AND tombstoned_at IS NULL",
            (workspace, digest),
        ).fetchone()
        if row is not None:
            remember_key(conn, who, req.idempotency_key, row[0], now)
            return p.MemoryStored(
                record_id=row[0],
                duplicate=True,
                replayed=False,
                kind=req.kind,
                action="duplicate",
                subject=req.subject,
                superseded=[],
                contested=False,
                authority=req.authority,
                trust=1.0,
                cited_paths=[],
            ), None

        record_id = new_id("mem")
        ts = req.ts if req.ts is not None else now
        rowid = conn.insert_record(
            "INSERT INTO records (id, kind, ts, created_at, updated_at, workspace, agent, uid,"
            " session, source, text, tags, trust, eligibility, expires_at, content_hash,"
            " visibility) VALUES (?, 'memory', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record_id,
                ts,
                now,
                now,
                workspace,
                who.agent,
                who.uid,
                req.session or who.session,
                req.source,
                req.text,
                _json.encode(_labels(req.tags)).decode(),
                trust.trust,
                trust.eligibility,
                now + req.ttl_s if req.ttl_s is not None else None,
                digest,
                visibility(req.visibility),
            ),
            req.text,
        )
        origin = None if req.global_scope or workspace == "/" else workspace
        key = subject_key(req.subject) if req.subject else None
        conn.execute(
            "INSERT INTO memory_meta (rowid, kind, subject, subject_key, authority,"
            " distortion_tolerance, origin, origin_repo, origin_commit, verified_commit,"
            " last_verified_at, writer_client, writer_model, trust_reasons)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rowid,
                req.kind,
                req.subject,
                key,
                req.authority,
                req.distortion_tolerance,
                origin,
                repo,
                commit,
                commit,
                now,
                who.client or None,
                who.model,
                _json.encode(list(trust.reasons)).decode(),
            ),
        )
        for kind, values in (("scope", req.scopes), ("band", req.bands), ("episode", req.episodes)):
            _write_labels(conn, rowid, kind, values, fresh=True)
        if (outside := _outside(req.source)) is not None:
            hold(conn, rowid, outside)
        cited = _write_paths(conn, rowid, req.text, req.paths, fresh=True)
        _write_depends(conn, rowid, req.depends_on, fresh=True)

        superseded = list(req.supersedes)
        for target in superseded:
            conn.execute(
                "INSERT INTO memory_links (src, rel, dst_id) VALUES (?, 'supersedes', ?)"
                " ON CONFLICT DO NOTHING",
                (rowid, target),
            )
            conn.execute(
                "UPDATE memory_meta SET superseded_by = ? WHERE rowid ="
                " (SELECT rowid FROM records WHERE id = ?)",
                (record_id, target),
            )
        action = "superseded" if superseded else "inserted"
        contested_with: list[str] = []
        if key is not None and not trust.blocked:
            # Another writer storing a fact on this subject waits until this one commits,
            # then sees it: the decision below holds when two daemons store at once.
            conn.lock("fact", key, origin or "")
            # Decided among facts of its own visibility: a private fact must not supersede
            # or contest a team fact (its other readers would see it replaced or disputed by
            # one they cannot see), and a team fact is decided among team facts, which every
            # member sees, so both see both contenders. A reader seeing a team and a private
            # fact current on one subject is shown them as contested.
            mine = visibility(req.visibility)
            others = [
                f
                for f in current_facts(conn, key, origin, now)
                if f.rowid != rowid and f.visibility == mine
            ]
            decision = decide_fact(
                req.authority,
                ts,
                [FactView(f.id, f.authority, f.ts) for f in others],
                explicit=bool(superseded),
            )
            action, contested_with = decision.action, list(decision.contested_with)
            if decision.history_of is not None:
                # About an earlier time than the current answer: history from the start.
                conn.execute(
                    "UPDATE memory_meta SET superseded_by = ? WHERE rowid = ?",
                    (decision.history_of, rowid),
                )
            for f in others:
                if f.id in decision.supersedes:
                    conn.execute(
                        "UPDATE memory_meta SET superseded_by = ? WHERE rowid = ?",
                        (record_id, f.rowid),
                    )
            superseded += decision.supersedes
        _event(conn, now, who, record_id, "stored")
        remember_key(conn, who, req.idempotency_key, record_id, now)
        return p.MemoryStored(
            record_id=record_id,
            duplicate=False,
            replayed=False,
            kind=req.kind,
            action=action,
            subject=req.subject,
            superseded=superseded,
            contested=bool(contested_with),
            contested_with=contested_with,
            authority=req.authority,
            trust=trust.trust,
            cited_paths=cited,
            origin_repo=repo,
            origin_commit=commit,
        ), rowid

    def update(
        self,
        who: Principal,
        req: p.MemoryUpdate,
        head: str | None,
        now: float,
        score: Callable[[str, str | None, str], Assessment],
    ) -> tuple[p.MemoryChanged, bool]:
        """Correct a memory in place (an update is also a verification); returns the reply
        and whether its text changed (it must be embedded again)."""
        conn = self._conn
        rowid, text, source, workspace, kind, authority = _live_row(conn, req.memory_id)
        changed: list[str] = []
        if req.subject is not None:
            if kind != "fact":
                raise RecallError("invalid_request", "subject applies to facts")
            conn.execute(
                "UPDATE memory_meta SET subject = ?, subject_key = ? WHERE rowid = ?",
                (req.subject, subject_key(req.subject), rowid),
            )
            changed.append("subject")
        if req.text is not None:
            text = req.text
            digest = memory_digest(text)
            clash = conn.execute(
                "SELECT id FROM records WHERE workspace = ? AND kind = 'memory'"
                " AND content_hash = ? AND tombstoned_at IS NULL AND rowid != ?",
                (workspace, digest, rowid),
            ).fetchone()
            if clash is not None:
                raise RecallError("invalid_request", f"memory {clash[0]} already has this text")
            # embed_state 0: the embedding actor re-embeds it and replaces the old vector.
            conn.execute(
                "UPDATE records SET text = ?, content_hash = ?, embed_state = 0 WHERE rowid = ?",
                (text, digest, rowid),
            )
            changed.append("text")
        if req.source is not None:
            source = req.source
            conn.execute("UPDATE records SET source = ? WHERE rowid = ?", (source, rowid))
            changed.append("source")
            if (outside := _outside(source)) is not None:
                hold(conn, rowid, outside)
        if req.authority is not None:
            authority = req.authority
            conn.execute("UPDATE memory_meta SET authority = ? WHERE rowid = ?", (authority, rowid))
            changed.append("authority")
        if {"text", "source", "authority"} & set(changed):
            trust = score(text, source, authority)
            conn.execute(
                "UPDATE records SET trust = ?, eligibility = ? WHERE rowid = ?",
                (trust.trust, trust.eligibility, rowid),
            )
            conn.execute(
                "UPDATE memory_meta SET trust_reasons = ? WHERE rowid = ?",
                (_json.encode(list(trust.reasons)).decode(), rowid),
            )
        if req.tags is not None:
            conn.execute(
                "UPDATE records SET tags = ? WHERE rowid = ?",
                (_json.encode(_labels(req.tags)).decode(), rowid),
            )
            changed.append("tags")
        for name, values in (("scope", req.scopes), ("band", req.bands), ("episode", req.episodes)):
            if values is not None:
                _write_labels(conn, rowid, name, values)
                changed.append(f"{name}s")
        if req.distortion_tolerance is not None:
            value = None if req.distortion_tolerance == "none" else req.distortion_tolerance
            conn.execute(
                "UPDATE memory_meta SET distortion_tolerance = ? WHERE rowid = ?", (value, rowid)
            )
            changed.append("distortion_tolerance")
        if req.depends_on is not None:
            _write_depends(conn, rowid, req.depends_on)
            changed.append("depends_on")
        if req.paths is not None or "text" in changed:
            explicit = (
                req.paths
                if req.paths is not None
                else [
                    r[0]
                    for r in conn.execute(
                        "SELECT path FROM memory_paths WHERE rowid = ? AND anchored = 1", (rowid,)
                    )
                ]
            )
            _write_paths(conn, rowid, text, explicit)
            if req.paths is not None:
                changed.append("paths")
        if req.ttl_s is not None:
            conn.execute(
                "UPDATE records SET expires_at = ? WHERE rowid = ?", (now + req.ttl_s, rowid)
            )
            changed.append("ttl_s")
        conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, rowid))
        conn.execute(
            "UPDATE memory_meta SET last_verified_at = ?,"
            " verified_commit = COALESCE(?, verified_commit) WHERE rowid = ?",
            (now, head, rowid),
        )
        _event(conn, now, who, req.memory_id, "updated")
        return p.MemoryChanged(
            memory_id=req.memory_id,
            updated_at=now,
            last_verified_at=now,
            verified_commit=head,
            changed=changed,
        ), "text" in changed

    def rowid_of(self, memory_id: str) -> int | None:
        row = self._conn.execute("SELECT rowid FROM records WHERE id = ?", (memory_id,)).fetchone()
        return None if row is None else int(row[0])

    def verify(
        self, who: Principal, req: p.MemoryVerify, head: str | None, now: float
    ) -> p.MemoryChanged:
        """Refresh last_verified_at (and the commit drift base); attested paths become anchors."""
        conn = self._conn
        rowid = _live_row(conn, req.memory_id)[0]
        conn.executemany(
            "INSERT INTO memory_paths (rowid, path, anchored) VALUES (?, ?, 2)"
            " ON CONFLICT (rowid, path) DO UPDATE SET anchored = 2",
            [(rowid, path) for path in req.verified_paths],
        )
        conn.execute(
            "UPDATE memory_meta SET last_verified_at = ?, verified_commit = ? WHERE rowid = ?",
            (now, head, rowid),
        )
        if ADMIN in who.scopes:
            # A person's check (the admin token is the user's own, see domain.scopes): what
            # was held for it may now be injected.
            conn.execute("DELETE FROM memory_labels WHERE rowid = ? AND kind = ?", (rowid, HELD))
        _event(conn, now, who, req.memory_id, "verified")
        changed = ["last_verified_at"] + (["verified_paths"] if req.verified_paths else [])
        updated_at = conn.execute(
            "SELECT updated_at FROM records WHERE rowid = ?", (rowid,)
        ).fetchone()[0]
        return p.MemoryChanged(
            memory_id=req.memory_id,
            updated_at=updated_at,
            last_verified_at=now,
            verified_commit=head,
            changed=changed,
        )

    def record_uses(
        self,
        who: Principal,
        targets: Sequence[tuple[str, str | None]],
        outcome: p.StoredOutcome,
        note: str | None,
        now: float,
    ) -> p.UseRecorded:
        """Record ``outcome`` for each (memory id, token nonce); a token's outcome replaces an
        earlier one of the same token."""
        conn = self._conn
        recorded = []
        for memory_id, nonce in dict(targets).items():
            row = conn.execute(
                "SELECT rowid FROM records WHERE id = ? AND kind = 'memory'", (memory_id,)
            ).fetchone()
            if row is None and outcome == "injected":
                continue  # forgotten since it was packed: nothing to account for
            if row is None:
                raise RecallError("not_found", f"no memory {memory_id}")
            conn.execute(
                "INSERT INTO memory_uses (rowid, outcome, ts, agent, session, token, note)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (token) DO UPDATE SET"
                " outcome = excluded.outcome, ts = excluded.ts, note = excluded.note",
                (row[0], outcome, now, who.agent, who.session, nonce, note),
            )
            _event(conn, now, who, memory_id, f"use:{outcome}")
            if outcome != "injected":
                recorded.append(p.RecordedUse(id=memory_id, outcome=outcome))
        return p.UseRecorded(recorded=recorded)

    def save_calibration(self, row: CalibrationRow) -> None:
        # Update, else insert: in a team database the key has the member's role too (which
        # the column's default fills in), so no one statement names the conflict for both.
        values = (row.bias, row.lexical, row.semantic, row.updates, row.updated_at)
        changed = self._conn.execute(
            "UPDATE relevance_calibrations SET bias = ?, lexical = ?, semantic = ?,"
            " updates = ?, updated_at = ? WHERE workspace = ? AND uid = ?",
            (*values, row.workspace, row.uid),
        ).rowcount
        if not changed:
            self._conn.execute(
                "INSERT INTO relevance_calibrations"
                " (workspace, uid, bias, lexical, semantic, updates, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (row.workspace, row.uid, *values),
            )

    def clear_calibrations(self, uid: int, workspace: str | None) -> int:
        if workspace is None:
            cur = self._conn.execute("DELETE FROM relevance_calibrations WHERE uid = ?", (uid,))
        else:
            cur = self._conn.execute(
                "DELETE FROM relevance_calibrations WHERE uid = ? AND workspace = ?",
                (uid, workspace),
            )
        return cur.rowcount

    def resolve_fact(self, who: Principal, req: p.MemoryFactResolve, now: float) -> p.FactResolved:
        """Settle a contested subject: one fact stays current, the others are superseded."""
        conn = self._conn
        key = subject_key(req.subject)
        conn.lock("fact", key, who.workspace)
        facts = current_facts(conn, key, who.workspace, now)
        if len(facts) < 2:
            facts = current_facts(conn, key, None, now)
        if len(facts) < 2:
            return p.FactResolved(resolved=False, subject=req.subject, reason="no_contender")
        if req.keep_id is not None:
            chosen = [f for f in facts if f.id == req.keep_id]
            if not chosen:
                raise RecallError(
                    "invalid_request",
                    f"{req.keep_id} is not one of the contested facts on {req.subject!r}: "
                    + ", ".join(f.id for f in facts),
                )
            winner = chosen[0]
        else:
            # facts are oldest first: the incumbent, then the contenders.
            winner = facts[-1] if req.accept else facts[0]
        # A private winner leaves team facts current: the team's answer changes only by a
        # team fact, not by a choice other members cannot see.
        losers = [
            f
            for f in facts
            if f.rowid != winner.rowid
            and (winner.visibility == "team" or f.visibility == "private")
        ]
        for f in losers:
            conn.execute(
                "UPDATE memory_meta SET superseded_by = ? WHERE rowid = ?", (winner.id, f.rowid)
            )
        conn.execute(
            "UPDATE memory_meta SET last_verified_at = ? WHERE rowid = ?", (now, winner.rowid)
        )
        conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, winner.rowid))
        _event(conn, now, who, winner.id, "resolved")
        return p.FactResolved(
            resolved=True,
            subject=req.subject,
            accepted=req.accept if req.accept is not None else winner.rowid != facts[0].rowid,
            current=winner.id,
            current_text=winner.text,
            superseded=[f.id for f in losers],
        )
