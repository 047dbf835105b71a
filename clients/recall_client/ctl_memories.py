"""``recallctl memories``: browse memories newest first (memory_list), without a query."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import msgspec

from . import protocol as p
from .client import RecallClient

__all__ = ["add_commands", "render_items"]

_json = msgspec.json.Encoder()
_TEXT_SHOWN = 80


def _print_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.format(_json.encode(value), indent=2).decode() + "\n")


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _flags(item: p.MemoryItem) -> str:
    marks = [
        mark
        for mark, on in (
            ("pinned", item.pinned),
            ("superseded", item.superseded),
            ("contested", item.contested),
            ("low-trust", item.low_trust),
            ("global", item.global_scope),
            ("quoted", item.authority == "quoted"),
        )
        if on
    ]
    if item.staleness_verdict != "fresh":
        marks.append(item.staleness_verdict.replace("_", "-"))
    return f" [{', '.join(marks)}]" if marks else ""


def render_items(items: list[p.MemoryItem], *, workspaces: bool) -> str:
    """One line per memory: when, id, kind (and subject), flags, the start of its text."""
    lines = []
    for item in items:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(item.ts))
        kind = f"fact ({item.subject})" if item.kind == "fact" and item.subject else item.kind
        where = f"  {item.workspace}" if workspaces else ""
        lines.append(
            f"{when}  {item.id}  {kind}{_flags(item)}{where}  {_clip(item.text, _TEXT_SHOWN)}"
        )
    return "\n".join(lines)


async def _memories(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(
        p.MemoryList(
            workspace=args.workspace_filter,
            all_workspaces=args.all,
            kind=args.kind,
            subject=args.subject,
            tags=args.tag or [],
            sources=args.source or [],
            agent=args.by_agent,
            staleness=args.staleness,
            include_superseded=not args.current,
            before=args.before,
            limit=args.limit,
        ),
        p.MemoryListResult,
    )
    if args.json:
        _print_json(reply)
        return 0
    if reply.items:
        print(render_items(reply.items, workspaces=args.all))
    else:
        print(_nothing_listed(args, rc.welcome.workspace if rc.welcome else None))
    if reply.next_before is not None:
        print(f"more: --before {reply.next_before}", file=sys.stderr)
    return 0


def _nothing_listed(args: argparse.Namespace, own: str | None) -> str:
    """What an empty page searched (which workspace, whose memories) and what would widen it."""
    where = "any workspace" if args.all else f"workspace {args.workspace_filter or own} or global"
    said = f"no memories in {where}"
    if args.by_agent:
        said += f" written by agent {args.by_agent}"
    narrowing = [
        flag
        for flag, value in (
            ("--kind", args.kind),
            ("--subject", args.subject),
            ("--tag", args.tag),
            ("--source", args.source),
            ("--agent", args.by_agent),
            ("--staleness", args.staleness),
            ("--current", args.current),
            ("--before", args.before),
        )
        if value
    ]
    widen = [] if args.all else ["--all lists every workspace's"]
    if narrowing:
        widen.append("without " + ", ".join(narrowing) + " more would show")
    return said + "".join(f"; {hint}" for hint in widen)


def _limit(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 200:
        raise argparse.ArgumentTypeError(f"{value} is not in 1..200")
    return number


def add_commands(sub: Any) -> None:
    """Register ``recallctl memories``."""
    me = sub.add_parser(
        "memories",
        help="list memories newest first",
        description="List the memories of this workspace (and the global ones) newest first, "
        "under memory_search's reader contract; each option narrows. A page's last line says "
        "how to get the next one (--before).",
    )
    me.add_argument("--kind", choices=["entry", "fact"])
    me.add_argument("--subject", help="only facts about this subject")
    me.add_argument("--tag", action="append", help="with this tag (repeatable: any of them)")
    me.add_argument("--source", action="append", help="with this source (repeatable: any of them)")
    # After the command, --agent filters on the writer; before it, it is recallctl's own.
    me.add_argument(
        "--agent",
        dest="by_agent",
        metavar="AGENT",
        help="written by this agent (recallctl's own --agent goes before the command)",
    )
    me.add_argument(
        "--staleness",
        choices=["fresh", "spot_check_recommended", "spot_check_required"],
        help="only memories with this staleness verdict",
    )
    me.add_argument("--current", action="store_true", help="leave superseded facts out")
    scope = me.add_mutually_exclusive_group()
    scope.add_argument(
        "--in",
        dest="workspace_filter",
        metavar="WORKSPACE",
        help="list this workspace instead of the current one (needs the admin token)",
    )
    scope.add_argument("--all", action="store_true", help="every workspace's memories")
    me.add_argument("--before", metavar="CURSOR", help="the page after this cursor")
    me.add_argument("--limit", type=_limit, default=50, help="1-200 (default 50)")
    me.add_argument("--json", action="store_true", help="print the reply as JSON")
    me.set_defaults(run=_memories)
