"""What every memory read shares (memory_search, memory_show, memory_list, the context
hooks): the reader contract of memory reads, whose a row is, a fact's contest, the bar under
which a text is flagged low-trust, the instruction signals it is flagged with, and a
memory's one-line summary."""

from __future__ import annotations

import functools
import os
import pwd
from collections.abc import Sequence
from typing import get_args

from recall_client import protocol as p

from ..domain.instructions import instruction_signals
from ..store.port import Fact, Filter, MemoryRow, Reader

__all__ = [
    "LOW_TRUST",
    "contender",
    "contested_slots",
    "instruction_flags",
    "is_contested",
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
    (more than one current fact); a row in one is contested unless it is superseded."""
    return {slot for slot, n in _current_counts(reader, rows, now).items() if n > 1}


def is_contested(row: MemoryRow, slots: set[tuple[str | None, str | None]]) -> bool:
    """The one rule memory_search, memory_list and memory_show answer ``contested`` by: a
    fact not superseded whose subject has more than one current fact (``slots`` from
    :func:`contested_slots`)."""
    return row.superseded_by is None and (row.subject_key, row.origin) in slots
