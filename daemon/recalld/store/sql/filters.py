"""The reader contract (:class:`~recalld.store.port.Filter`) as one SQL condition over
``records r``: the lexical and the semantic channel, and every row fetch, apply the same."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..port import Filter
from .db import Db

__all__ = ["marks", "where"]


def marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


def where(db: Db, f: Filter) -> tuple[str, list[Any]]:
    """``(condition, parameters)`` for ``f``."""
    clauses = [
        "r.kind = ?",
        "r.tombstoned_at IS NULL",
        "(r.expires_at IS NULL OR r.expires_at > ?)",
    ]
    params: list[Any] = [f.kind, f.now]
    if len(f.eligibility) == 1:
        clauses.append("r.eligibility = ?")
    else:
        clauses.append(f"r.eligibility IN ({marks(f.eligibility)})")
    params += f.eligibility
    if f.workspace is not None:
        if f.or_global:
            # The workspace, plus memories with no recorded origin (global ones).
            clauses.append(
                "(r.workspace = ? OR EXISTS (SELECT 1 FROM memory_meta m"
                " WHERE m.rowid = r.rowid AND m.origin IS NULL))"
            )
        else:
            clauses.append("r.workspace = ?")
        params.append(f.workspace)
    for column, value in (("uid", f.uid), ("agent", f.agent), ("session", f.session)):
        if value is not None:
            clauses.append(f"r.{column} = ?")
            params.append(value)
    bounds: tuple[tuple[str, float | None], ...] = (
        ("r.trust >= ?", f.min_trust),
        ("r.ts >= ?", f.since),
        ("r.ts <= ?", f.until),
        ("r.updated_at > ?", f.updated_after),
    )
    for condition, bound in bounds:
        if bound is not None:
            clauses.append(condition)
            params.append(bound)
    if f.tool is not None:
        clauses.append("r.rowid IN (SELECT rowid FROM episodes WHERE tool = ?)")
        params.append(f.tool)
    if f.tags:
        clauses.append(
            f"EXISTS (SELECT 1 FROM {db.json_values('r.tags')} WHERE value IN ({marks(f.tags)}))"
        )
        params += f.tags
    if f.sources:
        clauses.append(f"r.source IN ({marks(f.sources)})")
        params += f.sources
    for kind, values in f.labels:
        clauses.append(
            "EXISTS (SELECT 1 FROM memory_labels l WHERE l.rowid = r.rowid"
            f" AND l.kind = ? AND l.value IN ({marks(values)}))"
        )
        params += [kind, *values]
    for column, value in (("writer_client", f.writer_client), ("writer_model", f.writer_model)):
        if value is not None:
            clauses.append(
                f"EXISTS (SELECT 1 FROM memory_meta m WHERE m.rowid = r.rowid AND m.{column} = ?)"
            )
            params.append(value)
    return " AND ".join(clauses), params
