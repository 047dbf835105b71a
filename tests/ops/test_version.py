"""recalld has one version, declared in ``recall_client.__version__``: the installed
package's metadata (pyproject.toml reads it from there) and every command's --version say it."""

from __future__ import annotations

import importlib.metadata
import subprocess

import pytest
import recall_client

from tests.support.daemon import BIN


def test_the_installed_package_has_the_declared_version() -> None:
    # A mismatch means the install is older than the source: run scripts/setup.
    assert importlib.metadata.version("recalld") == recall_client.__version__


@pytest.mark.parametrize("command", ["recalld", "recallctl", "recall-mcp"])
def test_every_command_says_the_declared_version(command: str) -> None:
    out = subprocess.run(
        [str(BIN / command), "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == [command, recall_client.__version__], out
