"""``recallctl memories``: browse memories newest first (memory_list), without a query;
``recallctl share``: review one of your memories or lessons, then share it with the team
(memory_share)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .. import protocol as p
from ..client import RecallClient, RemoteError
from . import arguments
from .output import one_line, print_json

__all__ = ["add_commands", "render_detail", "render_items", "render_preview"]

_TEXT_SHOWN = 80


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
            (f"team, {item.owner}'s", item.visibility == "team"),
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
            f"{when}  {item.id}  {kind}{_flags(item)}{where}  {one_line(item.text, _TEXT_SHOWN)}"
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
        print_json(reply)
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


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def render_detail(m: p.MemoryDetail) -> str:
    """One memory whole (memory_show), a fact a line: what it says, whose it is, how it
    stands, what it links to."""
    kind = f"fact about {m.subject}" if m.kind == "fact" and m.subject else m.kind
    by = m.agent + (f" via {m.client}" if m.client else "") + (f" ({m.model})" if m.model else "")
    lines = [
        f"{m.id}  {kind}",
        f"  written     by {by} on {_when(m.created_at)}, {m.visibility} of {m.owner}",
        f"  workspace   {m.workspace}" + ("" if m.origin else " (global)"),
    ]
    if m.source:
        lines.append(f"  source      {m.source}")
    if m.tags:
        lines.append(f"  tags        {', '.join(m.tags)}")
    trust = f"{m.trust:.2f}" + (" (low: never injected, searched only)" if m.low_trust else "")
    lines.append(f"  trust       {trust}; {m.authority}; {m.eligibility}")
    verified = f" at {m.verified_commit[:12]}" if m.verified_commit else ""
    lines.append(f"  verified    {_when(m.last_verified_at)}{verified}")
    lines.append(f"  staleness   {m.staleness_verdict.replace('_', ' ')}")
    if m.commit_drift is not None and m.commit_drift.count:
        lines.append(f"  drift       {m.commit_drift.count} commits since it was verified")
    for cited in m.cited_paths:
        lines.append(f"  cites       {cited.path}" + ("" if cited.exists else " (gone)"))
    if m.superseded_by:
        lines.append(
            f"  superseded  by {m.superseded_by}: {one_line(m.superseded_by_text or '', 60)}"
        )
    if m.supersedes:
        lines.append(f"  supersedes  {', '.join(m.supersedes)}")
    for c in m.contenders:
        lines.append(f"  contested   with {c.id}: {one_line(c.text, 60)}")
    for link in m.depends_on:
        lines.append(f"  depends on  {link.id}: {one_line(link.summary, 60)}")
    for link in m.depended_on_by:
        lines.append(f"  needed by   {link.id}: {one_line(link.summary, 60)}")
    if m.outcomes:
        lines.append(
            "  outcomes    " + ", ".join(f"{k} {v}" for k, v in sorted(m.outcomes.items()))
        )
    lines += ["  text:", *(f"    {line}" for line in m.text.splitlines() or [""])]
    return "\n".join(lines)


def render_preview(record: p.SharePreview) -> str:
    """What memory_share would share, and its provenance, one fact a line."""
    when = _when(record.created_at)
    by = record.agent + (f" via {record.client}" if record.client else "")
    by += f" ({record.model})" if record.model else ""
    lines = [
        f"{record.kind} {record.id} of {record.owner}, written by {by} on {when}",
        f"  workspace: {record.workspace}",
    ]
    if record.subject:
        lines.append(f"  subject: {record.subject}")
    if record.source:
        lines.append(f"  source: {record.source}")
    if record.tags:
        lines.append(f"  tags: {', '.join(record.tags)}")
    if record.cited_paths:
        lines.append(f"  cites: {', '.join(record.cited_paths)}")
    lines += ["  text:", *(f"    {line}" for line in record.text.splitlines() or [""])]
    if record.redactions:
        lines.append(f"  redaction finds: {', '.join(record.redactions)} (it cannot be shared)")
    return "\n".join(lines)


async def _share(rc: RecallClient, args: argparse.Namespace) -> int:
    try:
        reply = await rc.call(p.MemoryShare(record_id=args.id, confirm=args.yes), p.MemoryShared)
    except RemoteError as exc:
        print(f"recallctl share: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        print_json(reply)
        return 0
    print(render_preview(reply.record))
    if reply.shared_at is not None:
        shared = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(reply.shared_at))
        print(f"shared with the team at {shared}")
    elif reply.record.redactions:
        print("not shared: correct its text first (memory_update)", file=sys.stderr)
        return 1
    else:
        print(f"not shared yet: run `recallctl share {reply.record.id} --yes` to share it")
    return 0


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
    limit, span = arguments.bounded_int(p.MemoryList, "limit")
    me.add_argument("--limit", type=limit, default=50, help=f"memories a page, {span} (default 50)")
    me.add_argument("--json", action="store_true", help="print the reply as JSON")
    me.set_defaults(run=_memories)

    sh = sub.add_parser(
        "share",
        help="share one of your memories or lessons with the team",
        description="Show what would be shared with the team (the text every member would "
        "read, whose it is, the agent that wrote it, when, the paths it cites, and any secret "
        "redaction finds in it now); with --yes, share it. Needs a team database.",
    )
    sh.add_argument("id", metavar="ID", help="the memory (mem_...) or lesson (les_...)")
    sh.add_argument("--yes", action="store_true", help="share it (without: only the preview)")
    sh.add_argument("--json", action="store_true", help="print the reply as JSON")
    sh.set_defaults(run=_share)
