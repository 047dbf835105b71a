"""The configuration reference is generated from Settings: docs/configuration.md's table is
exactly what ``scripts/config_reference.py`` prints (a row per key, its env var, default, bounds and
whether SIGHUP applies it), and every key's env var is read."""

from __future__ import annotations

import sys

import pytest
from recalld.config import ENV, RELOADABLE, Settings, load_settings

from tests.support.daemon import REPO

sys.path.insert(0, str(REPO / "scripts"))
import config_reference


def test_the_configuration_docs_table_is_the_generated_one() -> None:
    assert config_reference.TARGET == REPO / "docs" / "configuration.md"
    text = config_reference.TARGET.read_text()
    assert config_reference.table_in(text) == config_reference.render(), (
        "docs/configuration.md's table differs from Settings: "
        "run .venv/bin/python scripts/config_reference.py --write"
    )


def test_the_table_has_a_row_per_key_saying_whether_sighup_applies_it() -> None:
    rows = config_reference.render().splitlines()[2:]
    keys = [row.split("|")[1].strip().strip("`") for row in rows]
    assert keys == list(Settings.__struct_fields__)
    applied = {k for k, row in zip(keys, rows, strict=True) if "| applied |" in row}
    assert applied == RELOADABLE
    assert RELOADABLE == {
        "log_level",
        "require_approval",
        "context_session_budget",
        "context_prompt_budget",
        "context_inject_from",
        "workspace",
    }


def test_every_key_is_read_from_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert sorted(ENV.values()) == sorted(Settings.__struct_fields__)
    monkeypatch.setenv("RECALLD_SEARCH_WORKERS", "4")
    monkeypatch.setenv("RECALLD_BM25", "false")
    monkeypatch.setenv("RECALLD_CONTEXT_INJECT_FROM", '["self", "team"]')
    s = load_settings(REPO / "no-such-config.toml")
    assert (s.search_workers, s.bm25) == (4, False)
    assert s.context_inject_from == ("self", "team")
