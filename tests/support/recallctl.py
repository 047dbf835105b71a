"""recallctl, run as a user runs it, against a test daemon."""

from __future__ import annotations

import subprocess

from .daemon import BIN, DaemonProcess


def ctl(d: DaemonProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "recallctl"), "--socket", str(d.socket), "--workspace", "/ws/ctl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
    )


def run_recallctl(*args: str, d: DaemonProcess | None = None) -> subprocess.CompletedProcess[str]:
    """recallctl with ``args``, on ``d``'s socket when given (``migrate`` needs none)."""
    sock = ["--socket", str(d.socket)] if d is not None else []
    return subprocess.run(
        [str(BIN / "recallctl"), *sock, *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
