"""Import's outcomes and the export row's mapping to the store's rows, on a SQLite store
without a daemon: a row is new, present (its id is there) or a duplicate (its live content,
or its session's roll-up, is there under another id); what is stored exports as it came."""

from __future__ import annotations

from pathlib import Path

import msgspec
from recall_client import protocol as p
from recalld.handlers.export_format import COLUMNS, exported
from recalld.handlers.ops import store_rows
from recalld.store.sql.operations import SqlOperationReads, SqlOperationWrites
from recalld.store.sqlite.schema import open_writer

NOW = 1_700_000_000.0


def record(rid: str, text: str, **parts: object) -> p.ExportedRecord:
    kind = next(iter(parts), "memory")
    return msgspec.convert(
        {
            "id": rid,
            "kind": kind,
            "text": text,
            "workspace": "/ws/a",
            "agent": "alice",
            "ts": NOW,
            "created_at": NOW,
            "updated_at": NOW,
            "trust": 1.0,
            "eligibility": "eligible",
            **parts,
        },
        p.ExportedRecord,
    )


def test_each_row_is_new_present_or_a_duplicate_and_exports_as_it_came(tmp_path: Path) -> None:
    memory = {"origin": "/ws/a", "last_verified_at": NOW, "scopes": ["ops"], "uses": []}
    rollup = {"workspace": "/ws/a", "session": "s-1", "episodes": 2, "rolled_up_at": NOW}
    experience = {"class": "debugging", "status": "success", "rollup": rollup}
    rows = [
        record("mem_1", "The cache is warm.", memory=memory),
        record("mem_1", "The cache is warm.", memory=memory),
        record("mem_2", "The cache is warm.", memory=memory),
        # Forgotten: the dedup index holds live records only.
        msgspec.structs.replace(
            record("mem_3", "The cache is warm.", memory=memory), tombstoned_at=NOW
        ),
        record("exp_1", "Fixed the flaky test.", experience=experience),
        # Its session is rolled up already, forgotten or not.
        msgspec.structs.replace(
            record("exp_2", "Fixed it again.", experience=experience), tombstoned_at=NOW
        ),
    ]
    conn = open_writer(tmp_path)
    try:
        conn.execute("BEGIN")
        outcomes, rowids = store_rows(
            SqlOperationReads(conn), SqlOperationWrites(conn), rows, uid=1000
        )
        assert outcomes == ["new", "present", "duplicate", "new", "new", "duplicate"]
        found = SqlOperationReads(conn).export_rows(0, 10, None, None, COLUMNS)
        assert list(found) == rowids
        again = [exported(found[rowid], None) for rowid in rowids]
        conn.execute("COMMIT")
    finally:
        conn.close()
    # The held label an import adds is the install's: no export carries it.
    assert again == [rows[0], rows[3], rows[4]]
