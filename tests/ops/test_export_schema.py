"""The export row is the record's one declaration: every column of every table of a live
store is either carried by the row (``export_format.TABLES``, built from the protocol's
``Exported*`` fields) or named as the install's own with why (``NOT_EXPORTED``,
``INSTALL_TABLES``). A column added to the schema and not to the row fails here."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
from recalld.handlers import export_format as fmt
from recalld.store.sqlite.schema import open_writer

from tests.support.team import TeamDb


def _accounted(live: dict[str, set[str]]) -> list[str]:
    """What of the ``live`` schema (table -> columns) the export neither carries nor names."""
    problems = []
    for table, cols in sorted(live.items()):
        if table in fmt.INSTALL_TABLES:
            continue
        if table not in fmt.TABLES and table not in fmt.NOT_EXPORTED:
            problems.append(f"table {table} is neither exported nor named the install's")
            continue
        carried = {c for c, _ in fmt.columns(table)} if table in fmt.TABLES else set()
        named = set(fmt.NOT_EXPORTED.get(table, {}))
        problems += [
            f"{table}.{c} is not in the export row" for c in sorted(cols - carried - named)
        ]
        problems += [f"{table}.{c} is in the export row, not the table" for c in carried - cols]
    problems += [
        f"table {t} is exported but not in the schema" for t in fmt.TABLES if t not in live
    ]
    return problems


def _sqlite_schema(path: Path) -> dict[str, set[str]]:
    conn = open_writer(path)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'records_fts%'"
            )
        ]
        return {t: {row[1] for row in conn.execute(f"PRAGMA table_info({t})")} for t in tables}
    finally:
        conn.close()


def test_every_sqlite_column_is_exported_or_named_the_installs(tmp_path: Path) -> None:
    assert _accounted(_sqlite_schema(tmp_path)) == []


def test_a_column_the_export_row_does_not_carry_fails_the_check(tmp_path: Path) -> None:
    open_writer(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "recalld.db")
    conn.execute("ALTER TABLE memory_meta ADD COLUMN pinned_by TEXT")
    conn.execute("CREATE TABLE memory_notes (rowid INTEGER, note TEXT)")
    conn.commit()
    conn.close()
    assert _accounted(_sqlite_schema(tmp_path)) == [
        "memory_meta.pinned_by is not in the export row",
        "table memory_notes is neither exported nor named the install's",
    ]


def test_every_postgres_column_is_exported_or_named_the_installs(team_db: TeamDb) -> None:
    with psycopg.connect(team_db.admin_url) as conn:
        live: dict[str, set[str]] = {}
        for table, column in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'public'"
        ):
            live.setdefault(table, set()).add(column)
    assert _accounted(live) == []
