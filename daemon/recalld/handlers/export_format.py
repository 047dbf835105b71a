"""The export row (``protocol.ExportedRecord``) and the rows the store keeps it in.

The row is the record as its tables hold it: each ``Exported*`` struct's fields are one
table's columns (:data:`TABLES`), so the struct is the one declaration of what the export
carries, and what of a table it does not carry is named in :data:`NOT_EXPORTED` with why
(``tests/ops/test_export_schema.py`` checks both against the live schema). The store reads
and writes those columns (:class:`~recalld.store.port.RecordRows`); this module turns them
into the row and back, and makes what is made from the row (content hash, subject key).
"""

from __future__ import annotations

from typing import Any

import msgspec
from recall_client import protocol as p

from ..domain.dedup import (
    episode_digest,
    experience_digest,
    lesson_digest,
    memory_digest,
    rollup_digest,
)
from ..domain.policy import HELD, IMPORTED, confidence, subject_key
from ..store.port import RecordRows

__all__ = [
    "COLUMNS",
    "INSTALL_TABLES",
    "NOT_EXPORTED",
    "TABLES",
    "columns",
    "digest",
    "exported",
    "stored",
]

# Each table an export row carries, the struct whose fields are its columns, and the
# struct's fields that are no column of it (rows of other tables, nested).
TABLES: dict[str, tuple[type[msgspec.Struct], frozenset[str]]] = {
    "records": (p.ExportedRecord, frozenset({"memory", "episode", "experience", "lesson"})),
    "memory_meta": (
        p.ExportedMemory,
        frozenset({"scopes", "bands", "episodes", "links", "paths", "uses", "events"}),
    ),
    "memory_links": (p.ExportedLink, frozenset()),
    "memory_paths": (p.ExportedPath, frozenset()),
    "memory_uses": (p.ExportedUse, frozenset()),
    "memory_events": (p.ExportedEvent, frozenset()),
    "episodes": (p.ExportedEpisode, frozenset()),
    "experiences": (p.ExportedExperience, frozenset({"rollup", "lessons"})),
    "experience_rollups": (p.ExportedRollup, frozenset()),
    "lesson_support": (p.ExportedLessonLink, frozenset({"id"})),
}

_ROWID = "the install's own numbering: rows name records by public id"
_CARRIER = "the record whose row carries it"
# What of each table an export row does not carry, and why. A table not named here nor in
# TABLES is the install's own, not a record's: each is listed with why.
NOT_EXPORTED: dict[str, dict[str, str]] = {
    "records": {
        "rowid": _ROWID,
        "uid": "the OS user the daemon serves: the importing connection's",
        "embed_state": "vectors are the install's model's: the import is embedded again",
        "content_hash": "made from the record by its kind's rule (domain.dedup)",
        # PostgreSQL's alone:
        "owner": "the database role that writes the import",
        "tsv": "the full-text index, made from text",
        "doclen": "the full-text index, made from text",
    },
    "memory_meta": {"rowid": _CARRIER, "subject_key": "made from subject (policy.subject_key)"},
    "memory_labels": {
        "rowid": _CARRIER,
        "kind": "carried as the memory's scopes, bands and episodes",
        "value": "carried as the memory's scopes, bands and episodes",
    },
    "memory_links": {"src": _CARRIER},
    "memory_paths": {"rowid": _CARRIER},
    "memory_uses": {
        "id": _ROWID,
        "rowid": _CARRIER,
        "token": "a use token's nonce: tokens are signed with the install's own key",
    },
    "memory_events": {"id": _ROWID, "record_id": _CARRIER, "owner": "the importing role"},
    "episodes": {"rowid": _CARRIER},
    "experiences": {"rowid": _CARRIER},
    "experience_rollups": {"rowid": _CARRIER, "owner": "the importing role"},
    "lesson_support": {
        "lesson_rowid": "carried by both ends as the other end's id",
        "experience_rowid": "carried by both ends as the other end's id",
    },
}
# Tables that are the install's, not any record's.
INSTALL_TABLES = {
    "vectors": "made again by the install's model",
    "vector_changes": "the vector index snapshot's bookkeeping",
    "idempotency": "a client's retry keys against this install",
    "workspace_approvals": "the install's configuration (recallctl workspace)",
    "workspace_aliases": "the paths of this install's checkouts",
    "workspace_rekey": "the schema's bookkeeping (re-keying by identity)",
    "agent_credentials": "the install's secrets (recallctl agent)",
    "daemon_keys": "the install's secrets (the use-token key)",
    "schema_migrations": "the schema's version",
    # What this install's hooks gave the hosts of this machine: their session ids, and items
    # named by this store's ids, which an import gives anew.
    "context_injections": "the log of the blocks this install's hooks injected",
    "context_items": "the log of the blocks this install's hooks injected",
    # Learned from outcomes of this install's use tokens; an import starts from the prior.
    "relevance_calibrations": "what this install's outcomes taught its ranking",
}
# Columns kept as JSON arrays of strings; and as integers for a bool.


def columns(table: str) -> list[tuple[str, str]]:
    """(column, the row's wire name) of each of ``table``'s columns an export row carries."""
    cls, nested = TABLES[table]
    return [(f.name, f.encode_name) for f in msgspec.structs.fields(cls) if f.name not in nested]


_COLUMNS = {table: columns(table) for table in TABLES}
# What the store reads of each table for an export.
COLUMNS = {table: [c for c, _ in cols] for table, cols in _COLUMNS.items()}
# The memory_labels kinds a memory carries, each as its list (scope: scopes).
_LABELS = ("scope", "band", "episode")


def digest(row: p.ExportedRecord) -> bytes:
    """The content hash of ``row`` by its kind's rule."""
    if isinstance(row.episode, p.ExportedEpisode):
        e = row.episode
        return episode_digest(row.agent, row.session, row.ts, e.tool, e.status, row.text)
    if isinstance(row.experience, p.ExportedExperience):
        x = row.experience
        if x.rollup is not None:
            return rollup_digest(x.rollup.session)
        return experience_digest(row.text, x.status, x.strategy, row.session)
    if row.kind == "lesson":
        return lesson_digest(row.text)
    return memory_digest(row.text)


def _wire(table: str, row: dict[str, Any]) -> dict[str, Any]:
    return {wire: row[c] for c, wire in _COLUMNS[table]}


def _row(table: str, part: msgspec.Struct) -> dict[str, Any]:
    return {c: getattr(part, c) for c, _ in _COLUMNS[table]}


def exported(rows: RecordRows, stats: tuple[int, float] | None) -> p.ExportedRecord:
    """The export row of a record's ``rows``; a lesson's ``stats`` are its (support,
    confidence), None while no experience that still surfaces supports it."""
    record = rows.record
    out = _wire("records", record)
    at = rows.attached
    if record["kind"] == "memory":
        # A memory bulk-loaded straight into records has no metadata row: an entry of its
        # workspace, verified when it was created (as the readers take it).
        meta = at["memory_meta"]
        part = _wire("memory_meta", meta[0]) if meta else {"origin": record["workspace"]}
        part.setdefault("last_verified_at", record["created_at"])
        # The held label is this install's: an export never carries it (see stored).
        part.update((f"{kind}s", values) for kind, values in rows.labels.items() if kind != HELD)
        for table, field in (
            ("memory_links", "links"),
            ("memory_paths", "paths"),
            ("memory_uses", "uses"),
            ("memory_events", "events"),
        ):
            part[field] = [_wire(table, r) for r in at[table]]
        out["memory"] = part
    elif record["kind"] == "episode":
        out["episode"] = _wire("episodes", at["episodes"][0])
    elif record["kind"] == "experience":
        part = _wire("experiences", at["experiences"][0])
        rollups = at["experience_rollups"]
        part["rollup"] = _wire("experience_rollups", rollups[0]) if rollups else None
        part["lessons"] = [{"id": i, "created_at": t} for i, t in rows.support]
        out["experience"] = part
    elif record["kind"] == "lesson":
        support, conf = stats or (0, confidence(0, 0, 0))
        out["lesson"] = {
            "support": support,
            "confidence": conf,
            "experiences": [{"id": i, "created_at": t} for i, t in rows.support],
        }
    return msgspec.convert(out, p.ExportedRecord)


def stored(row: p.ExportedRecord) -> RecordRows:
    """The rows an import stores of ``row``, with what is made from it: its content hash,
    a fact's subject key."""
    rows = RecordRows({**_row("records", row), "content_hash": digest(row)})
    if row.kind == "memory":
        memory = row.memory
        if not isinstance(memory, p.ExportedMemory):
            # As the readers take a memory without its metadata row (see exported).
            memory = p.ExportedMemory(origin=row.workspace, last_verified_at=row.created_at)
        meta = _row("memory_meta", memory)
        meta["subject_key"] = subject_key(memory.subject) if memory.subject is not None else None
        rows.attached = {"memory_meta": [meta]}
        for table, parts in (
            ("memory_links", memory.links),
            ("memory_paths", memory.paths),
            ("memory_uses", memory.uses),
            ("memory_events", memory.events),
        ):
            rows.attached[table] = [_row(table, part) for part in parts]
        rows.labels = {kind: getattr(memory, f"{kind}s") for kind in _LABELS}
        # Nobody here wrote it: held from the context hooks until a person verifies it (an
        # export never carries the label, so no file can say it was checked).
        rows.labels[HELD] = [IMPORTED]
    elif isinstance(row.episode, p.ExportedEpisode):
        rows.attached = {"episodes": [_row("episodes", row.episode)]}
    elif isinstance(row.experience, p.ExportedExperience):
        x = row.experience
        rows.attached = {
            "experiences": [_row("experiences", x)],
            "experience_rollups": []
            if x.rollup is None
            else [_row("experience_rollups", x.rollup)],
        }
        rows.support = [(link.id, link.created_at) for link in x.lessons]
    elif isinstance(row.lesson, p.ExportedLesson):
        rows.support = [(link.id, link.created_at) for link in row.lesson.experiences]
    return rows
