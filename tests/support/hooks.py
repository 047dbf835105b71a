"""The agents' hooks as users install them: recorded payloads, and the command that
docs/usage.md ships."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from .daemon import REPO

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


AGENT = "claude-code"


def run_hook(argv: list[str], stdin: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60, env=env)


def payload(name: str, cwd: Path) -> str:
    """A recorded payload, its cwd moved into a real git checkout under the test's tmp dir."""
    text = (FIXTURES / name).read_text()
    lines = []
    for line in text.strip().splitlines() if name.endswith(".jsonl") else [text]:
        obj = json.loads(line)
        obj["cwd"] = str(cwd)
        lines.append(json.dumps(obj))
    return "\n".join(lines) + "\n"


def readme_hook_command() -> tuple[dict[str, Any], str]:
    """The hook configuration docs/usage.md ships, and its one command."""
    usage = (REPO / "docs" / "usage.md").read_text()
    section = usage.split("## Capturing episodes with hooks", 1)[1]
    block = re.search(r"```json\n(.*?)\n```", section, re.S)
    assert block, "docs/usage.md's hook section has a JSON block"
    config = json.loads(block.group(1))
    commands = {
        hook["command"]
        for groups in config["hooks"].values()
        for group in groups
        for hook in group["hooks"]
    }
    assert len(commands) == 1
    return config, commands.pop()
