"""The context hooks' test support: host payload fixtures, the hook command as a host runs
it, a checkout with commits, and reading a block's items."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import msgspec
from recall_client import protocol as p
from recall_client.client import RecallClient

from tests.support.daemon import BIN, DaemonProcess
from tests.support.git import git

FIXTURES = Path(__file__).parent.parent / "fixtures"
# The agent name `recallctl connect claude-code` writes into its hooks.
AGENT = "claude-code"


def context_hook(
    d: DaemonProcess, stdin: str, *args: str, socket: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The hook command ``recallctl connect claude-code`` writes, as the host runs it."""
    return subprocess.run(
        [
            str(BIN / "recallctl"),
            "--agent",
            AGENT,
            "--socket",
            str(socket or d.socket),
            "context",
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=d.env(),
    )


def hook_payload(name: str, cwd: Path, **changes: Any) -> str:
    """The fixture ``name`` (a host's recorded payload), run from ``cwd``."""
    obj = json.loads((FIXTURES / name).read_text())
    obj.update(cwd=str(cwd), **changes)
    return json.dumps(obj)


def item_ids(block: str) -> list[str]:
    """The record ids a context block lists, in order."""
    return re.findall(r"^- \[((?:mem|ep|les)_\w+)\]", block, re.M)


def make_shop(tmp_path: Path) -> Path:
    """A checkout with commits; the hooks run in a subdirectory of it."""
    repo = tmp_path / "shop"
    (repo / "services" / "cart").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "services" / "cart" / "total.py").write_text("TOTAL = 'Decimal'\n")
    (repo / "services" / "cart" / "tax.py").write_text("RATE = 0.2\n")
    (repo / "README.md").write_text("shop\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    return repo


async def remember(rc: RecallClient, text: str, **kw: Any) -> str:
    """Store a memory; its id."""
    return (await rc.call(p.MemoryStore(text=text, **kw), p.MemoryStored)).record_id


async def seed_shop(d: DaemonProcess, shop: Path) -> dict[str, str]:
    """A fact, two memories and a lesson the hooks can inject in ``shop``; their ids."""
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        ids = {
            "fact": await remember(
                rc, "Releases of the shop go out on Fridays.", kind="fact", subject="release day"
            ),
            "total": await remember(
                rc,
                "The cart total is computed in total.py with Decimal, never float.",
                paths=["services/cart/total.py"],
            ),
            "discount": await remember(
                rc, "Discounted orders take the discount per line before the total is summed."
            ),
        }
        done = await rc.call(
            p.RecordExperience(
                description="fixed rounding of the cart total on main",
                status="success",
                lessons=["Round the cart total once, at the end, on main and release branches"],
            ),
            p.ExperienceRecorded,
        )
    ids["lesson"] = done.lessons[0].id
    await d.settled()
    return ids


def hook_block(d: DaemonProcess, payload: str) -> p.ContextInjected:
    """The block the hook gets for ``payload`` (its ``--json`` output)."""
    out = context_hook(d, payload, "--json")
    assert out.returncode == 0, out.stderr
    return msgspec.json.decode(out.stdout, type=p.ContextInjected)


async def hook_session(
    d: DaemonProcess, shop: Path, session: str
) -> tuple[p.ContextInjected, p.ContextInjected]:
    """A session start and a prompt of ``session`` in ``shop``, as Claude Code sends them."""
    start = hook_block(d, hook_payload("claude_code_session_start.json", shop, session_id=session))
    prompt = hook_block(
        d, hook_payload("claude_code_user_prompt_submit.json", shop, session_id=session)
    )
    # The log is queued before the hook's answer: a write after it commits after the log.
    async with d.client(agent=AGENT, workspace=str(shop)) as rc:
        await rc.call(p.CaptureEpisode(summary="a later step", session_id=session))
    return start, prompt
