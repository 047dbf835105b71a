"""recallctl against a real daemon."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon import BIN, DaemonProcess
from tests.support.recallctl import ctl

pytestmark = pytest.mark.both_backends


async def test_status_json_shows_actors_model_and_records(running_daemon: DaemonProcess) -> None:
    assert ctl(running_daemon, "store", "nightly backups run at 02:00 UTC").returncode == 0
    out = ctl(running_daemon, "status", "--json", "--wait", "10")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["model"]["state"] == "ready"
    assert sorted(a["name"] for a in report["actors"]) == [
        "embedding",
        "evaluation",
        "search",
        "writer",
    ]
    assert all(a["state"] == "running" for a in report["actors"])
    assert report["records"]["memory"]["total"] == 1


async def test_status_table_is_readable(running_daemon: DaemonProcess) -> None:
    out = ctl(running_daemon, "status", "--wait", "10")
    assert out.returncode == 0, out.stderr
    assert "state running" in out.stdout
    assert "writer" in out.stdout and "embedding" in out.stdout
    assert "hash-384: ready" in out.stdout


async def test_store_from_stdin_then_search(running_daemon: DaemonProcess) -> None:
    stored = ctl(
        running_daemon, "store", "-", "--tag", "ops", stdin="the VPN config is in ~/vpn/work.ovpn"
    )
    assert stored.returncode == 0, stored.stderr
    found = ctl(running_daemon, "search", "vpn config", "--json")
    assert found.returncode == 0
    hits = json.loads(found.stdout)["entries"]
    assert hits[0]["id"] == stored.stdout.strip()
    assert hits[0]["tags"] == ["ops"]


def test_a_missing_daemon_is_a_clear_failure(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(tmp_path / "none.sock"), "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3
    assert "not answering" in out.stderr
