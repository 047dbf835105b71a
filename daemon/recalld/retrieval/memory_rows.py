"""What every memory read shares (memory_search, memory_show, memory_list, the context
hooks): the reader contract of memory reads, whose a row is, a fact's contest, the bar under
which a text is flagged low-trust, the instruction signals it is flagged with, the fields a
memory's hit, list item and detail fill alike, and a memory's one-line summary."""

from __future__ import annotations

import functools
import os
import pwd
from collections.abc import Sequence
from typing import Any, get_args

from recall_client import protocol as p

from ..domain.instructions import instruction_signals
from ..store.port import Fact, Filter, MemoryRow, Reader
from .staleness import Staleness

__all__ = [
    "LOW_TRUST",
    "contender",
    "contested_slots",
    "core_of",
    "instruction_flags",
    "memory_filter",
    "owner_of",
    "summary",
]

# Trust below this (text that instructs its reader, risky sources) is flagged low_trust.
LOW_TRUST = 0.8


_SIGNALS: dict[str, p.InstructionSignal] = {s: s for s in get_args(p.InstructionSignal)}


def instruction_flags(text: str) -> list[p.InstructionSignal]:
    """What in a memory's text reads as orders to its reader (``domain.instructions``), as
    its hit and its detail carry it: found, still served, never to be followed."""
    return [_SIGNALS[name] for name in instruction_signals(text)]


@functools.cache
def _local_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry (a container)
        return str(os.getuid())


def owner_of(owner: str | None) -> str:
    """Whose a record is: its database role (``owner``), or where the database is one
    user's (SQLite, ``owner`` None), the user this daemon runs as (only that user's peers
    reach it)."""
    return owner or _local_user()


def memory_filter(
    now: float,
    workspace: str | None,
    *,
    tags: Sequence[str] = (),
    sources: Sequence[str] = (),
    labels: Sequence[tuple[str, Sequence[str]]] = (),
    client: str | None = None,
    model: str | None = None,
    updated_after: float | None = None,
    agent: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> Filter:
    """The reader contract of memory reads (memory_search, memory_list): eligible, live,
    unexpired memories of ``workspace`` plus the global ones (no recorded origin), or of
    every workspace (None); each given filter narrows."""
    return Filter(
        kind="memory",
        now=now,
        workspace=workspace,
        or_global=True,
        tags=tuple(tags),
        sources=tuple(sources),
        labels=tuple((kind, tuple(values)) for kind, values in labels if values),
        writer_client=client,
        writer_model=model,
        updated_after=updated_after,
        agent=agent,
        since=since,
        until=until,
    )


def summary(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def contender(f: Fact) -> p.Contender:
    return p.Contender(id=f.id, text=f.text, authority=f.authority, ts=f.ts)


def _current_counts(
    reader: Reader, rows: list[MemoryRow], now: float
) -> dict[tuple[str | None, str | None], int]:
    keys = {(r.subject_key, r.origin) for r in rows if r.kind == "fact" and r.subject_key}
    return {
        (key, origin): len(reader.memories.current_facts(key, origin, now))
        for key, origin in keys
        if key is not None
    }


def contested_slots(
    reader: Reader, rows: list[MemoryRow], now: float
) -> set[tuple[str | None, str | None]]:
    """The (subject key, origin) of those facts among ``rows`` whose subject is contested
    (more than one current fact); a row in one is contested unless it is superseded
    (:func:`core_of`)."""
    return {slot for slot, n in _current_counts(reader, rows, now).items() if n > 1}


def core_of(
    row: MemoryRow, judged: Staleness, contested: set[tuple[str | None, str | None]]
) -> dict[str, Any]:
    """The fields memory_search's hit, memory_list's item and memory_show's detail of ``row``
    fill alike, by name: ``p.MemoryCore``'s and those the three declare apart (each with its
    own presence rule), whose values must not differ between them. ``judged``: the row's
    staleness; ``contested``: the slots from :func:`contested_slots`.

    A row is contested when it is a fact, not superseded, whose subject has more than one
    current fact: the one rule all three answer ``contested`` by."""
    return {
        "id": row.id,
        "kind": row.kind,
        "subject": row.subject,
        "source": row.source,
        "tags": row.tags,
        "visibility": row.visibility,
        "owner": owner_of(row.owner),
        "superseded": row.superseded_by is not None,
        "superseded_by": row.superseded_by,
        "pinned": row.pinned,
        "contested": row.superseded_by is None and (row.subject_key, row.origin) in contested,
        "authority": row.authority,
        "low_trust": row.trust < LOW_TRUST,
        "staleness_verdict": judged.verdict,
        "path_drift_missing": len(judged.path_drift.missing),
    }
