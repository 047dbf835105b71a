"""Memories and canonical facts, the write side: store, update, verify, record use, resolve.

Every job here runs on the writer thread inside a group-commit transaction. A fact's
supersession or contest is decided in the same transaction that stores it, so the reply (and
any search after it) already sees the outcome.

Facts on one subject (per origin: a workspace's facts never replace another's):
- a new fact supersedes the current one when its order is clear: it is about a later time
  (``ts``) and its authority is not lower (first-party outranks quoted);
- a fact about an *earlier* time than the current one is stored as history, superseded at once;
- a fact about the same time, or with lower authority, is contested: both stay current, flagged
  ``contested``, until ``memory_fact_resolve`` settles them.
The incumbent of a contest is the earliest stored of the current facts; the rest are contenders.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from recall_client import protocol as p

from ..pipeline.writer import Principal, WriteJob, content_hash, new_id
from ..domain.drift import GitOrigin, cached_origin, git_head, git_origin, scrape_paths
from ..errors import RecallError
from ..store.sqlite_schema import open_reader, remember_key, replayed_record
from ..ingest.trust import DEFAULT_TRUST_FLOOR, assess

if TYPE_CHECKING:
    from ..app import Daemon

__all__ = [
    "QUOTED_PENALTY",
    "Fact",
    "FactResolveJob",
    "MemoryStoreJob",
    "MemoryUpdateJob",
    "MemoryVerifyJob",
    "RecordUseJob",
    "UseToken",
    "current_facts",
    "handle",
    "show",
    "issue_use_token",
    "subject_key",
    "token_memory_id",
]

# Quoted authority: someone else said it. It is marked, and trusted a little less.
QUOTED_PENALTY = 0.15
_AUTHORITY_RANK = {"quoted": 0, "first-party": 1}
_json = msgspec.json.Encoder()
_SEPARATORS = re.compile(r"[\s_\-.:/]+")


def subject_key(subject: str) -> str:
    """A subject as compared: case, spacing and separators do not make a new subject."""
    return _SEPARATORS.sub(" ", subject.casefold()).strip()


def _labels(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _eligibility(trust: float, blocked: bool) -> str:
    # The evaluation policy, applied at once since memories are not captured pending: text
    # that gives its reader orders (trust below the floor) is kept, not served.
    if blocked:
        return "blocked"
    return "eligible" if trust >= DEFAULT_TRUST_FLOOR else "ineligible"


def _trust(text: str, source: str | None, authority: str) -> tuple[float, bool, list[str]]:
    trust, blocked, reasons = assess(text, source=source)
    if authority == "quoted" and "quoted_authority" not in reasons:
        trust = round(max(0.0, trust - QUOTED_PENALTY), 3)
        reasons.append("authority:quoted")
    return trust, blocked, reasons


def _event(conn: sqlite3.Connection, now: float, who: Principal, record_id: str, event: str) -> None:
    conn.execute(
        "INSERT INTO memory_events (ts, session, agent, record_id, event) VALUES (?, ?, ?, ?, ?)",
        (now, who.session, who.agent, record_id, event),
    )


def _live_row(conn: sqlite3.Connection, memory_id: str) -> tuple[Any, ...]:
    # A memory bulk-loaded straight into records gets its metadata row on first change.
    conn.execute(
        "INSERT OR IGNORE INTO memory_meta (rowid, origin, last_verified_at)"
        " SELECT rowid, workspace, created_at FROM records WHERE id = ? AND kind = 'memory'",
        (memory_id,),
    )
    row = conn.execute(
        "SELECT r.rowid, r.text, r.source, r.workspace, m.kind, m.subject, m.authority,"
        " m.origin, m.origin_repo, r.ts FROM records r JOIN memory_meta m ON m.rowid = r.rowid"
        " WHERE r.id = ? AND r.kind = 'memory' AND r.tombstoned_at IS NULL",
        (memory_id,),
    ).fetchone()
    if row is None:
        raise RecallError("not_found", f"no memory {memory_id}")
    return tuple(row)


def _require_memories(conn: sqlite3.Connection, ids: list[str], what: str) -> None:
    for memory_id in ids:
        if conn.execute(
            "SELECT 1 FROM records WHERE id = ? AND kind = 'memory' AND tombstoned_at IS NULL",
            (memory_id,),
        ).fetchone() is None:
            raise RecallError("not_found", f"{what} names {memory_id}, which is not a stored memory")


# ``fresh``: the row was inserted in this job and has no labels, paths or links yet, so there
# is nothing to read or delete first (a store is a capture's hot path: statements count).


def _write_labels(conn: sqlite3.Connection, rowid: int, kind: str, values: list[str], *,
                  fresh: bool = False) -> None:
    if not fresh:
        conn.execute("DELETE FROM memory_labels WHERE rowid = ? AND kind = ?", (rowid, kind))
    if values:
        conn.executemany(
            "INSERT INTO memory_labels (rowid, kind, value) VALUES (?, ?, ?)",
            [(rowid, kind, v) for v in _labels(values)],
        )


def _write_paths(conn: sqlite3.Connection, rowid: int, text: str, explicit: list[str], *,
                 fresh: bool = False) -> list[str]:
    """Explicit paths are claim-anchored; paths in the text are evidence. Attested ones stay."""
    attested: set[str] = set()
    if not fresh:
        attested = {
            r[0] for r in conn.execute(
                "SELECT path FROM memory_paths WHERE rowid = ? AND anchored = 2", (rowid,)
            )
        }
        conn.execute("DELETE FROM memory_paths WHERE rowid = ? AND anchored < 2", (rowid,))
    rows: dict[str, int] = {path: 0 for path in scrape_paths(text)}
    rows.update({path: 1 for path in explicit})
    if rows:
        conn.executemany(
            "INSERT OR IGNORE INTO memory_paths (rowid, path, anchored) VALUES (?, ?, ?)",
            [(rowid, path, anchored) for path, anchored in rows.items() if path not in attested],
        )
    return [*rows, *sorted(attested - rows.keys())]


def _write_depends(conn: sqlite3.Connection, rowid: int, links: list[p.DependsOn], *,
                   fresh: bool = False) -> None:
    _require_memories(conn, [d.id for d in links], "depends_on")
    if not fresh:
        conn.execute("DELETE FROM memory_links WHERE src = ? AND rel = 'depends_on'", (rowid,))
    if links:
        conn.executemany(
            "INSERT OR REPLACE INTO memory_links (src, rel, dst_id, note) VALUES (?, 'depends_on', ?, ?)",
            [(rowid, d.id, d.note) for d in links],
        )


@dataclass(frozen=True, slots=True)
class Fact:
    rowid: int
    id: str
    authority: str
    ts: float
    created_at: float
    text: str
    subject: str
    distortion_tolerance: str | None


def current_facts(conn: sqlite3.Connection, key: str, origin: str | None, now: float) -> list[Fact]:
    """The current facts on a subject, oldest stored first. More than one: contested."""
    return [
        Fact(*row)
        for row in conn.execute(
            "SELECT r.rowid, r.id, m.authority, r.ts, r.created_at, r.text, m.subject,"
            " m.distortion_tolerance FROM memory_meta m JOIN records r ON r.rowid = m.rowid"
            " WHERE m.subject_key = ? AND m.origin IS ? AND m.kind = 'fact'"
            " AND m.superseded_by IS NULL AND r.tombstoned_at IS NULL"
            " AND (r.expires_at IS NULL OR r.expires_at > ?) AND r.eligibility = 'eligible'"
            " ORDER BY r.created_at, r.rowid",
            (key, origin, now),
        )
    ]


class MemoryStoreJob(WriteJob):
    """Insert one memory (or return the existing one for a duplicate or a replayed key)."""

    __slots__ = ("origin", "principal", "req")

    def __init__(self, principal: Principal, req: p.MemoryStore, origin: GitOrigin | None = None) -> None:
        super().__init__()
        self.principal = principal
        self.req = req
        self.origin = origin

    def apply(self, conn: sqlite3.Connection, now: float) -> p.MemoryStored:
        req, who = self.req, self.principal
        if req.kind == "fact" and req.subject is None:
            raise RecallError("invalid_request", "a fact needs a subject (the entity it is about)")
        if req.kind == "entry" and req.subject is not None:
            raise RecallError("invalid_request", "subject applies to facts; store it with kind 'fact'")
        replayed = replayed_record(conn, who.agent, req.idempotency_key)
        if replayed is not None:
            return p.MemoryStored(id=0, record_id=replayed, replayed=True, kind=req.kind,
                                  action="replayed", subject=req.subject)
        _require_memories(conn, req.supersedes, "supersedes")
        workspace = req.workspace or who.workspace
        # Already redacted, like every free-text field: the ingest stage (sanitize) ran first.
        text = req.text
        digest = content_hash("memory", text)
        row = conn.execute(
            "SELECT id FROM records WHERE workspace = ? AND kind = 'memory' AND content_hash = ?"
            " AND tombstoned_at IS NULL",
            (workspace, digest),
        ).fetchone()
        if row is not None:
            self._remember_key(conn, row[0], now)
            return p.MemoryStored(id=0, record_id=row[0], duplicate=True, kind=req.kind,
                                  action="duplicate", subject=req.subject)

        trust, blocked, reasons = _trust(text, req.source, req.authority)
        record_id = new_id("mem")
        ts = req.ts if req.ts is not None else now
        cur = conn.execute(
            "INSERT INTO records (id, kind, ts, created_at, updated_at, workspace, agent, uid,"
            " session, source, text, tags, trust, eligibility, expires_at, content_hash)"
            " VALUES (?, 'memory', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record_id, ts, now, now, workspace, who.agent, who.uid,
                req.session or who.session, req.source, text, _json.encode(_labels(req.tags)).decode(),
                trust, _eligibility(trust, blocked),
                now + req.ttl_s if req.ttl_s is not None else None, digest,
            ),
        )
        rowid = cur.lastrowid
        assert rowid is not None
        self.new_rowids.append(rowid)

        origin = None if req.global_scope or workspace == "/" else workspace
        # The handler checked that a given origin_repo is the one recalld found.
        repo = self.origin.repo if self.origin else None
        commit = req.origin_commit or (self.origin.commit if self.origin else None)
        key = subject_key(req.subject) if req.subject else None
        conn.execute(
            "INSERT INTO memory_meta (rowid, kind, subject, subject_key, authority,"
            " distortion_tolerance, origin, origin_repo, origin_commit, verified_commit,"
            " last_verified_at, writer_client, writer_model, trust_reasons)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rowid, req.kind, req.subject, key, req.authority, req.distortion_tolerance,
                origin, repo, commit, commit, now, who.client or None, who.model,
                _json.encode(reasons).decode(),
            ),
        )
        for kind, values in (("scope", req.scopes), ("band", req.bands), ("episode", req.episodes)):
            _write_labels(conn, rowid, kind, values, fresh=True)
        cited = _write_paths(conn, rowid, text, req.paths, fresh=True)
        _write_depends(conn, rowid, req.depends_on, fresh=True)

        superseded = list(req.supersedes)
        for target in superseded:
            conn.execute(
                "INSERT OR IGNORE INTO memory_links (src, rel, dst_id) VALUES (?, 'supersedes', ?)",
                (rowid, target),
            )
            conn.execute(
                "UPDATE memory_meta SET superseded_by = ? WHERE rowid ="
                " (SELECT rowid FROM records WHERE id = ?)",
                (record_id, target),
            )
        action = "superseded" if superseded else "inserted"
        contested_with: list[str] = []
        if key is not None and not blocked:
            action, more, contested_with = _settle_fact(
                conn, rowid, record_id, key, origin, req.authority, ts, now, superseded
            )
            superseded += more
        _event(conn, now, who, record_id, "stored")
        self._remember_key(conn, record_id, now)
        return p.MemoryStored(
            id=0, record_id=record_id, kind=req.kind, action=action, subject=req.subject,
            superseded=superseded, contested=bool(contested_with), contested_with=contested_with,
            authority=req.authority, trust=trust, cited_paths=cited,
            origin_repo=repo, origin_commit=commit,
        )

    def _remember_key(self, conn: sqlite3.Connection, record_id: str, now: float) -> None:
        remember_key(conn, self.principal.agent, self.req.idempotency_key, record_id, now)


def _settle_fact(
    conn: sqlite3.Connection, rowid: int, record_id: str, key: str, origin: str | None,
    authority: str, ts: float, now: float, explicit: list[str],
) -> tuple[str, list[str], list[str]]:
    """Decide what a new fact does to its subject: (action, superseded ids, contested with)."""
    others = [f for f in current_facts(conn, key, origin, now) if f.rowid != rowid]
    if not others:
        return ("superseded" if explicit else "inserted"), [], []
    rank = _AUTHORITY_RANK[authority]
    contested = [f.id for f in others if _AUTHORITY_RANK[f.authority] > rank or f.ts == ts]
    if contested:
        return "contested", [], contested
    newer = [f for f in others if f.ts > ts]
    if newer:
        # About an earlier time than the current answer: history from the start.
        conn.execute("UPDATE memory_meta SET superseded_by = ? WHERE rowid = ?", (newer[-1].id, rowid))
        return "historical", [], []
    for f in others:
        conn.execute("UPDATE memory_meta SET superseded_by = ? WHERE rowid = ?", (record_id, f.rowid))
    return "superseded", [f.id for f in others], []


class MemoryUpdateJob(WriteJob):
    """Correct a memory in place. An update is also a verification."""

    __slots__ = ("head", "principal", "req")

    def __init__(self, principal: Principal, req: p.MemoryUpdate, head: str | None) -> None:
        super().__init__()
        self.principal = principal
        self.req = req
        self.head = head

    def apply(self, conn: sqlite3.Connection, now: float) -> p.MemoryChanged:
        req = self.req
        rowid, text, source, workspace, kind, _subject, authority, _origin, _repo, _ts = _live_row(
            conn, req.memory_id
        )
        changed: list[str] = []
        if req.subject is not None:
            if kind != "fact":
                raise RecallError("invalid_request", "subject applies to facts")
            conn.execute("UPDATE memory_meta SET subject = ?, subject_key = ? WHERE rowid = ?",
                         (req.subject, subject_key(req.subject), rowid))
            changed.append("subject")
        if req.text is not None:
            text = req.text
            digest = content_hash("memory", text)
            clash = conn.execute(
                "SELECT id FROM records WHERE workspace = ? AND kind = 'memory' AND content_hash = ?"
                " AND tombstoned_at IS NULL AND rowid != ?",
                (workspace, digest, rowid),
            ).fetchone()
            if clash is not None:
                raise RecallError("invalid_request", f"memory {clash[0]} already has this text")
            # embed_state 0: the embedding actor re-embeds it and replaces the old vector.
            conn.execute("UPDATE records SET text = ?, content_hash = ?, embed_state = 0 WHERE rowid = ?",
                         (text, digest, rowid))
            self.new_rowids.append(rowid)
            changed.append("text")
        if req.source is not None:
            source = req.source
            conn.execute("UPDATE records SET source = ? WHERE rowid = ?", (source, rowid))
            changed.append("source")
        if req.authority is not None:
            authority = req.authority
            conn.execute("UPDATE memory_meta SET authority = ? WHERE rowid = ?", (authority, rowid))
            changed.append("authority")
        if {"text", "source", "authority"} & set(changed):
            trust, blocked, reasons = _trust(text, source, authority)
            conn.execute("UPDATE records SET trust = ?, eligibility = ? WHERE rowid = ?",
                         (trust, _eligibility(trust, blocked), rowid))
            conn.execute("UPDATE memory_meta SET trust_reasons = ? WHERE rowid = ?",
                         (_json.encode(reasons).decode(), rowid))
        if req.tags is not None:
            conn.execute("UPDATE records SET tags = ? WHERE rowid = ?",
                         (_json.encode(_labels(req.tags)).decode(), rowid))
            changed.append("tags")
        for kind_name, values in (("scope", req.scopes), ("band", req.bands), ("episode", req.episodes)):
            if values is not None:
                _write_labels(conn, rowid, kind_name, values)
                changed.append(f"{kind_name}s")
        if req.distortion_tolerance is not None:
            value = None if req.distortion_tolerance == "none" else req.distortion_tolerance
            conn.execute("UPDATE memory_meta SET distortion_tolerance = ? WHERE rowid = ?", (value, rowid))
            changed.append("distortion_tolerance")
        if req.depends_on is not None:
            _write_depends(conn, rowid, req.depends_on)
            changed.append("depends_on")
        if req.paths is not None or "text" in changed:
            explicit = req.paths if req.paths is not None else [
                r[0] for r in conn.execute(
                    "SELECT path FROM memory_paths WHERE rowid = ? AND anchored = 1", (rowid,)
                )
            ]
            _write_paths(conn, rowid, text, explicit)
            if req.paths is not None:
                changed.append("paths")
        if req.ttl_s is not None:
            conn.execute("UPDATE records SET expires_at = ? WHERE rowid = ?", (now + req.ttl_s, rowid))
            changed.append("ttl_s")
        conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, rowid))
        conn.execute(
            "UPDATE memory_meta SET last_verified_at = ?, verified_commit = COALESCE(?, verified_commit)"
            " WHERE rowid = ?",
            (now, self.head, rowid),
        )
        _event(conn, now, self.principal, req.memory_id, "updated")
        return p.MemoryChanged(id=0, memory_id=req.memory_id, updated_at=now, last_verified_at=now,
                               verified_commit=self.head, changed=changed)


class MemoryVerifyJob(WriteJob):
    """Refresh last_verified_at (and the commit drift base); attested paths become anchors."""

    __slots__ = ("head", "principal", "req")

    def __init__(self, principal: Principal, req: p.MemoryVerify, head: str | None) -> None:
        super().__init__()
        self.principal = principal
        self.req = req
        self.head = head

    def apply(self, conn: sqlite3.Connection, now: float) -> p.MemoryChanged:
        req = self.req
        rowid = _live_row(conn, req.memory_id)[0]
        conn.executemany(
            "INSERT INTO memory_paths (rowid, path, anchored) VALUES (?, ?, 2)"
            " ON CONFLICT (rowid, path) DO UPDATE SET anchored = 2",
            [(rowid, path) for path in req.verified_paths],
        )
        conn.execute(
            "UPDATE memory_meta SET last_verified_at = ?, verified_commit = ? WHERE rowid = ?",
            (now, self.head, rowid),
        )
        _event(conn, now, self.principal, req.memory_id, "verified")
        changed = ["last_verified_at"] + (["verified_paths"] if req.verified_paths else [])
        updated_at = conn.execute("SELECT updated_at FROM records WHERE rowid = ?", (rowid,)).fetchone()[0]
        return p.MemoryChanged(id=0, memory_id=req.memory_id, updated_at=updated_at,
                               last_verified_at=now, verified_commit=self.head, changed=changed)


# --------------------------------------------------------------------------- use tokens


@dataclass(frozen=True, slots=True)
class UseToken:
    memory_id: str
    issued_at: float
    nonce: str


class _TokenBody(msgspec.Struct, array_like=True):
    memory_id: str
    issued_at: float
    nonce: bytes


_token_key: bytes | None = None


def _key(conn: sqlite3.Connection) -> bytes:
    global _token_key
    if _token_key is None:
        _token_key = bytes(conn.execute("SELECT key FROM daemon_keys WHERE name = 'use_token'").fetchone()[0])
    return _token_key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_use_token(conn: sqlite3.Connection, memory_id: str, now: float) -> str:
    """A signed token naming one surfaced memory; memory_record_use takes it back."""
    body = msgspec.msgpack.encode(_TokenBody(memory_id, round(now, 3), os.urandom(6)))
    mac = hmac.new(_key(conn), body, hashlib.sha256).digest()[:12]
    return f"{_b64(body)}.{_b64(mac)}"


def token_memory_id(token: str) -> str | None:
    """The memory a use_token names, unverified (authorization looks the id up; the write
    verifies the token's signature); None when it does not parse."""
    try:
        body = _unb64(token.split(".")[0])
        return msgspec.msgpack.decode(body, type=_TokenBody).memory_id
    except (ValueError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _read_token(conn: sqlite3.Connection, token: str) -> UseToken:
    try:
        body_text, mac_text = token.split(".")
        body, mac = _unb64(body_text), _unb64(mac_text)
    except ValueError:
        raise RecallError("invalid_request", "use_token is malformed") from None
    expected = hmac.new(_key(conn), body, hashlib.sha256).digest()[:12]
    if not hmac.compare_digest(mac, expected):
        raise RecallError("invalid_request", "use_token was not issued by this recalld")
    decoded = msgspec.msgpack.decode(body, type=_TokenBody)
    return UseToken(decoded.memory_id, decoded.issued_at, decoded.nonce.hex())


class RecordUseJob(WriteJob):
    """Record outcomes; a use_token's outcome replaces an earlier one for the same token."""

    __slots__ = ("principal", "req")

    def __init__(self, principal: Principal, req: p.MemoryRecordUse) -> None:
        super().__init__()
        self.principal = principal
        self.req = req

    def apply(self, conn: sqlite3.Connection, now: float) -> p.UseRecorded:
        req, who = self.req, self.principal
        if req.use_token is None and not req.memory_ids:
            raise RecallError("invalid_request", "give a use_token from memory_search, or memory_ids")
        if req.use_token is None and req.outcome is None:
            raise RecallError("invalid_request", "an outcome is needed without a use_token")
        outcome = req.outcome or "used"
        targets: list[tuple[str, str | None]] = [(i, None) for i in req.memory_ids]
        if req.use_token is not None:
            token = _read_token(conn, req.use_token)
            targets.insert(0, (token.memory_id, token.nonce))
        recorded = []
        for memory_id, nonce in dict(targets).items():
            row = conn.execute(
                "SELECT rowid FROM records WHERE id = ? AND kind = 'memory'", (memory_id,)
            ).fetchone()
            if row is None:
                raise RecallError("not_found", f"no memory {memory_id}")
            conn.execute(
                "INSERT INTO memory_uses (rowid, outcome, ts, agent, session, token, note)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (token) DO UPDATE SET"
                " outcome = excluded.outcome, ts = excluded.ts, note = excluded.note",
                (row[0], outcome, now, who.agent, who.session, nonce, req.note),
            )
            _event(conn, now, who, memory_id, f"use:{outcome}")
            recorded.append(p.RecordedUse(memory_id=memory_id, outcome=outcome))
        return p.UseRecorded(id=0, recorded=recorded)


class FactResolveJob(WriteJob):
    """Settle a contested subject: one fact stays current, the others are superseded by it."""

    __slots__ = ("principal", "req")

    def __init__(self, principal: Principal, req: p.MemoryFactResolve) -> None:
        super().__init__()
        self.principal = principal
        self.req = req

    def apply(self, conn: sqlite3.Connection, now: float) -> p.FactResolved:
        req, who = self.req, self.principal
        if (req.accept is None) == (req.keep_id is None):
            raise RecallError("invalid_request", "give exactly one of accept or keep_id")
        key = subject_key(req.subject)
        facts = current_facts(conn, key, who.workspace, now)
        if len(facts) < 2:
            facts = current_facts(conn, key, None, now)
        if len(facts) < 2:
            return p.FactResolved(id=0, resolved=False, subject=req.subject, reason="no_contender")
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
        losers = [f for f in facts if f.rowid != winner.rowid]
        for f in losers:
            conn.execute("UPDATE memory_meta SET superseded_by = ? WHERE rowid = ?", (winner.id, f.rowid))
        conn.execute("UPDATE memory_meta SET last_verified_at = ? WHERE rowid = ?", (now, winner.rowid))
        conn.execute("UPDATE records SET updated_at = ? WHERE rowid = ?", (now, winner.rowid))
        _event(conn, now, who, winner.id, "resolved")
        return p.FactResolved(
            id=0, resolved=True, subject=req.subject,
            accepted=req.accept if req.accept is not None else winner.rowid != facts[0].rowid,
            current=winner.id, current_text=winner.text, superseded=[f.id for f in losers],
        )


# --------------------------------------------------------------------------- requests


async def handle(
    daemon: Daemon, who: Principal,
    req: p.MemoryStore | p.MemoryUpdate | p.MemoryVerify | p.MemoryRecordUse | p.MemoryFactResolve,
) -> p.Reply:
    """Serve one memory write request: git look-ups first (never on the writer), then the job.

    Raises:
        RecallError: invalid_request, not_found, busy or unavailable.
    """
    job: WriteJob
    match req:
        case p.MemoryStore():
            origin = None
            workspace = req.workspace or who.workspace
            if not req.global_scope:
                known, origin = cached_origin(workspace)
                if not known:
                    origin = await anyio.to_thread.run_sync(git_origin, workspace)
            _check_origin_repo(req, workspace, origin)
            job = MemoryStoreJob(who, req, origin)
        case p.MemoryUpdate():
            job = MemoryUpdateJob(who, req, await _head_of(daemon.data_dir, req.memory_id))
        case p.MemoryVerify():
            job = MemoryVerifyJob(who, req, await _head_of(daemon.data_dir, req.memory_id))
        case p.MemoryRecordUse():
            job = RecordUseJob(who, req)
        case p.MemoryFactResolve():
            job = FactResolveJob(who, req)
    await daemon.submit(job)
    result: p.Reply = await job.wait()
    return result


def _check_origin_repo(req: p.MemoryStore, workspace: str, origin: GitOrigin | None) -> None:
    """A client may name the origin repository only as the one recalld itself finds for the
    workspace: drift is computed in that directory, so it must never be a path that only a
    client asserted.

    Raises:
        RecallError: ``invalid_request`` saying what recalld found instead.
    """
    if req.origin_repo is None:
        return
    if req.global_scope:
        raise RecallError("invalid_request", "a global_scope memory has no origin; drop origin_repo")
    if origin is None:
        raise RecallError(
            "invalid_request",
            f"origin_repo {req.origin_repo} was given, but workspace {workspace} is not in a "
            "git repository recalld can read; leave origin_repo unset",
        )
    if os.path.normpath(req.origin_repo) != origin.repo:
        raise RecallError(
            "invalid_request",
            f"origin_repo must be the git top level of workspace {workspace}, which is "
            f"{origin.repo}; leave it unset and recalld records it",
        )


async def show(daemon: Daemon, req: p.MemoryShow) -> p.MemoryShown:
    """memory_show, read on a search worker. Raises RecallError not_found / forbidden."""
    reader = daemon.search.memory
    return await daemon.search.run_read(lambda conn: reader.show(conn, req))


async def _head_of(data_dir: Path, memory_id: str) -> str | None:
    """HEAD of a memory's origin repository now: the new base for its commit drift."""

    def look_up() -> str | None:
        conn = open_reader(data_dir)
        try:
            row = conn.execute(
                "SELECT m.origin_repo FROM records r JOIN memory_meta m ON m.rowid = r.rowid"
                " WHERE r.id = ?", (memory_id,),
            ).fetchone()
        finally:
            conn.close()
        if row is None or row[0] is None or not os.path.isdir(row[0]):
            return None
        return git_head(row[0])

    return await anyio.to_thread.run_sync(look_up)
