"""``recallctl``'s commands and their parser: status and admin client for the recalld daemon.

The ``recallctl`` entry point (recall_client.recallctl) adds the commands of other parts
(the web page's ``ui``), so this package imports none of them."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

import anyio
import msgspec

from .. import __version__, paths
from .. import protocol as p
from ..client import DaemonUnavailable, RecallClient, RemoteError, connect
from ..hello import hello_tokens
from . import arguments, capture, context, experience, hook_entry, memories, ops
from . import connect as hosts
from . import db as database
from .output import one_line, print_json, print_json_line

__all__ = ["AddCommands", "main"]

# What adds a part's commands to recallctl's subparsers.
AddCommands = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _database_lines(db: p.DatabaseStatus | None) -> list[str]:
    if db is None:
        return []
    line = f"database {db.engine} {db.location}  {db.state}"
    if db.role:
        line += f"  as role {db.role}"
    if db.connections_max is not None:
        line += f"  connections {db.connections}/{db.connections_max}"
    if db.state != "ok" and db.since is not None:
        line += f" for {_duration(max(0.0, time.time() - db.since))}: {db.error or '-'}"
    return [line]


def _spool_lines(spool: p.SpoolStatus | None) -> list[str]:
    if spool is None:
        return []
    line = f"spool    {spool.waiting} captures waiting ({spool.waiting_bytes} bytes held)"
    if spool.full:
        line += "  FULL: new captures are dropped"
    lines = [line]
    if spool.dropped:
        when = (
            f", the last {_duration(max(0.0, time.time() - spool.last_dropped_at))} ago"
            if spool.last_dropped_at is not None
            else ""
        )
        lines.append(f"         {spool.dropped} episodes dropped for want of room{when}")
    if spool.rejected:
        lines.append(
            f"         {spool.rejected} files could not be sent, kept in "
            f"{spool.directory}/rejected; the newest: {spool.last_rejection or '-'}"
        )
    return lines


def render_status(report: p.StatusReport) -> str:
    """The status report as a table for people."""
    m = report.model
    model = f"{m.name}: {m.state}"
    if m.state == "ready" and m.load_s is not None:
        model += f" ({m.backend}, loaded in {m.load_s:.1f}s, dim {m.dim})"
    if m.reason:
        model += f" ({m.reason})"
    lat = report.search_latency_ms
    lines = [
        f"recalld {report.version}  state {report.state}  pid {report.pid}  "
        f"up {_duration(report.uptime_s)}",
        f"socket   {report.socket}",
        f"data     {report.data_dir}",
        *_database_lines(report.database),
        f"model    {model}",
        f"search   {'hybrid (lexical + semantic)' if report.semantic_search else 'lexical only'}"
        f"  latency p50 {_ms(lat.p50)} ms  p90 {_ms(lat.p90)} ms  p99 {_ms(lat.p99)} ms",
        f"index    {report.index.type or 'not open'}  {report.index.size} vectors"
        f"  embedding backlog {report.index.embedding_backlog}",
        *_spool_lines(report.spool),
        *([f"admin    {report.admin_token_problem}"] if report.admin_token_problem else []),
        "",
        f"{'actor':<12}{'state':<20}{'queue':>14}{'processed':>12}{'per s':>9}{'errors':>8}",
    ]
    for a in report.actors:
        lines.append(
            f"{a.name:<12}{a.state:<20}{f'{a.queue_depth}/{a.queue_capacity}':>14}"
            f"{a.processed:>12}{a.per_s:>9.1f}{a.errors:>8}"
        )
        if a.commit_failures or a.last_error:
            lines.append(
                f"{'':<12}{a.commit_failures} failed commits; last error: {a.last_error or '-'}"
            )
    lines.append("")
    if report.records:
        lines.append(
            "records  "
            + "; ".join(
                f"{kind}: {counts['total']} ("
                + ", ".join(f"{k} {v}" for k, v in counts.items() if k != "total")
                + ")"
                for kind, counts in sorted(report.records.items())
            )
        )
    else:
        lines.append("records  none")
    lines.append(f"agents   {len(report.agents)} connected")
    for agent in report.agents:
        lines.append(
            f"  {agent.agent:<20} {agent.client or '-':<12} pid {agent.pid:<8} "
            f"{agent.requests} requests  {agent.workspace}"
            + (
                f" (at {agent.workspace_path})"
                if agent.workspace_path not in (None, agent.workspace)
                else ""
            )
        )
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


async def _status(rc: RecallClient, args: argparse.Namespace) -> int:
    while True:
        reply = await rc.call(p.Status(wait_model_s=args.wait), p.StatusResult)
        if args.json:
            print_json(reply.report)
            return 0
        if args.watch:
            sys.stdout.write("\x1b[H\x1b[2J")
        sys.stdout.write(render_status(reply.report) + "\n")
        if not args.watch:
            return 0
        sys.stdout.flush()
        await anyio.sleep(args.interval)


async def _search(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(
        # verbose: each hit's snippet (a window around the match) is printed
        p.MemorySearch(
            query=args.query,
            limit=args.limit,
            mode=args.mode,
            workspace=args.workspace_filter,
            verbose=True,
        ),
        p.MemorySearchResult,
    )
    if args.json:
        # The seed's names, as memory_search's structuredContent has them.
        shown = msgspec.to_builtins(reply)
        print_json({p.SEARCH_SEED_NAMES.get(k, k): v for k, v in shown.items()})
        return 0
    print(render_search(reply))
    return 0


def render_search(reply: p.MemorySearchResult) -> str:
    """Whether nothing matched confidently first (read before any hit is acted on), then the
    current facts, then each hit with how well it matched and its score.

    A hit's relevance leads its line, named: the score is relative to the query's other
    candidates (the best one scores near 1 however weakly it matches), so a bare number
    beside it would read as a strong match.
    """
    if not reply.hits and not reply.cortex:
        return "no matches"
    lines = []
    if reply.low_confidence:
        lines.append(
            "low confidence: nothing matched the query well; try the nouns a memory would hold"
        )
    lines += [f"fact    {f.subject}: {one_line(f.text, 90)}  [{f.id}]" for f in reply.cortex]
    for hit in reply.hits:
        text = one_line(hit.snippet or hit.text, 90)
        relevance = f"{hit.relevance} relevance"
        lines.append(f"{relevance:<16}  score {hit.score:.3f}  {hit.id}  {text}")
    return "\n".join(lines)


def _workspace_given(args: argparse.Namespace) -> None:
    """``--in``: a path must be a directory (a workspace is a repository's checkout, or its
    identity, such as github.com/owner/repo).

    Raises:
        UsageError: the path names no directory.
    """
    given = getattr(args, "workspace_filter", None)
    if given and given.startswith(("/", ".", "~")):
        path = os.path.expanduser(given)
        if not os.path.isdir(path):
            raise UsageError(f"--in {given}: no such workspace (not a directory)")


class UsageError(Exception):
    """Input recallctl refuses before sending anything (exit 2, as for a bad argument)."""


def _max_length(request: type[msgspec.Struct], field: str) -> int | None:
    """The bound the protocol declares on a request's string field."""
    info = msgspec.inspect.type_info(request)
    assert isinstance(info, msgspec.inspect.StructType)
    for f in info.fields:
        if f.name == field:
            t = f.type.type if isinstance(f.type, msgspec.inspect.Metadata) else f.type
            return t.max_length if isinstance(t, msgspec.inspect.StrType) else None
    return None


def _read_text(args: argparse.Namespace) -> None:
    """``store``'s TEXT ('-': stdin, read as UTF-8), checked against memory_store's bound.

    Raises:
        UsageError: stdin is not UTF-8, or the text is longer than a memory may be.
    """
    limit = _max_length(p.MemoryStore, "text")
    if args.text == "-":
        raw = sys.stdin.buffer.read(p.MAX_FRAME + 1)
        if len(raw) > p.MAX_FRAME:
            raise UsageError(
                f"stdin holds more than {p.MAX_FRAME} bytes; a memory's text is at most "
                f"{limit} characters"
            )
        args.text = _utf8(raw)
    if limit is not None and len(args.text) > limit:
        raise UsageError(
            f"the text is {len(args.text)} characters; a memory's text is at most {limit}"
        )


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"stdin is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})"
        ) from None


def _read_episodes(args: argparse.Namespace) -> None:
    """``capture``'s stdin as text, any undecodable byte replaced (a hook's payload is
    recorded whatever bytes a tool printed). A host's hook (``--host``) is read up to its
    one JSON value: the host may keep stdin open."""
    raw = hook_entry.read_hook_input(0) if args.host else sys.stdin.buffer.read()
    args.stdin_text = raw.decode("utf-8", "replace")


def _read_payload(args: argparse.Namespace) -> None:
    """``context``'s stdin, as bytes (the payload is JSON, read under a bound, up to its end:
    the host may keep stdin open)."""
    args.stdin_bytes = hook_entry.read_hook_input(
        0, wait_s=context.CONTEXT_BUDGET_S, limit=context.MAX_PAYLOAD
    )


async def _store(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(
        p.MemoryStore(
            text=args.text,
            tags=args.tag or [],
            source=args.source,
            visibility=args.visibility,
            kind="fact" if args.subject else "entry",
            subject=args.subject,
        ),
        p.MemoryStored,
    )
    if args.json:
        print_json(reply)
        return 0
    said = reply.record_id + (" (duplicate)" if reply.duplicate else "")
    if reply.superseded:
        said += f"; supersedes {', '.join(reply.superseded)}"
    if reply.contested:
        contested = ", ".join(reply.contested_with)
        said += f"; contested with {contested} (settle it with memory_fact_resolve)"
    print(said)
    return 0


async def _show(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(p.MemoryShow(memory_id=args.id), p.MemoryShown)
    if args.json:
        print_json(reply.memory)
    else:
        print(memories.render_detail(reply.memory))
    return 0


async def _record_use(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(
        p.MemoryRecordUse(memory_ids=args.ids, outcome=args.outcome, note=args.note),
        p.UseRecorded,
    )
    if args.json:
        print_json(reply)
    else:
        for use in reply.recorded:
            print(f"{use.id} {use.outcome}")
    return 0


async def _work_search(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(
        p.WorkSearch(
            query=args.query,
            tool=args.tool,
            session_id=args.session,
            since=args.since,
            until=args.until,
            k=args.k,
            min_trust=args.min_trust,
            include_pending=args.include_pending,
            any_caller=args.any_caller,
            semantic=args.semantic,
            response_format=args.format,
        ),
        p.WorkSearchResult,
    )
    if args.json:
        # The seed's output shape, the same as the work_search tool's structuredContent.
        print_json(
            {
                "available": reply.available,
                "message": reply.message,
                "floor": reply.floor,
                "results": reply.results,
            }
        )
        return 0
    print(reply.message or "")
    if not reply.results:
        print(_widen_work_search(args))
    for ep in reply.results:
        verdict = "" if ep.task_result in (None, msgspec.UNSET) else f" verdict {ep.task_result:g}"
        tool = ep.tool if isinstance(ep.tool, str) else "-"
        print(f"{ep.id}  {ep.status:<8} {tool:<12} {ep.eligibility}{verdict}  {ep.summary or ''}")
    return 0


def _widen_work_search(args: argparse.Namespace) -> str:
    """recallctl's flags that would widen a work search that found nothing."""
    widen = [
        hint
        for hint, already in (
            ("--include-pending adds episodes not yet evaluated", args.include_pending),
            ("--any-caller searches every agent's (needs the admin token)", args.any_caller),
            ("--min-trust 0 keeps low-trust ones", args.min_trust == 0),
        )
        if not already
    ]
    narrowing = [
        flag
        for flag, value in (
            ("--tool", args.tool),
            ("--session", args.session),
            ("--since", args.since),
            ("--until", args.until),
        )
        if value is not None
    ]
    if narrowing:
        widen.append("without " + ", ".join(narrowing) + " more would match")
    return "to widen: " + "; ".join(widen) if widen else "nothing narrower to drop"


async def _work_result(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(
        p.WorkResult(
            task_result=args.task_result,
            episode_id=args.episode,
            session_id=args.session,
            any_caller=args.any_caller,
        ),
        p.VerdictSet,
    )
    if args.json:
        print_json(reply)
    else:
        print(
            f"verdict {reply.task_result:g} on {reply.matched} episode(s), {reply.updated} changed"
        )
    return 0


async def _forget(rc: RecallClient, args: argparse.Namespace) -> int:
    code = 0
    for record_id in args.ids:
        try:
            reply = await rc.call(p.Forget(record_id=record_id), p.Forgotten)
        except RemoteError as exc:
            print(f"recallctl forget: {exc.code}: {exc.message}", file=sys.stderr)
            code = 1
            continue
        if args.json:
            print_json_line(reply)
        else:
            print(
                f"{reply.record_id} ({reply.kind}) "
                + ("was already forgotten" if reply.already else "forgotten")
            )
    return code


def _parser(more: Sequence[AddCommands] = ()) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="recallctl",
        description="Status and admin client for the recalld memory daemon.",
    )
    _global_options(ap)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    st = sub.add_parser(
        "status",
        help="show the daemon's state",
        description="Show state, model, actor queues, records, index, "
        "connected agents and search latency.",
    )
    st.add_argument("--json", action="store_true", help="print the report as JSON")
    st.add_argument("--watch", action="store_true", help="refresh until interrupted")
    st.add_argument(
        "--interval",
        type=arguments.positive_seconds,
        default=2.0,
        help="seconds between refreshes, more than 0 (default 2)",
    )
    st.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for the embedding model to be ready first",
    )
    st.set_defaults(run=_status)

    se = sub.add_parser(
        "search",
        help="search memories of a workspace",
        description="Search memories lexically and by meaning.",
    )
    se.add_argument(
        "query",
        metavar="QUERY",
        type=arguments.text(p.MemorySearch, "query"),
        help="what you look for, in the words a memory would hold",
    )
    limit, span = arguments.bounded_int(p.MemorySearch, "limit")
    se.add_argument("--limit", type=limit, default=5, help=f"hits to show, {span} (default 5)")
    se.add_argument(
        "--mode",
        choices=["keyword", "bm25", "hybrid"],
        default="hybrid",
        help="hybrid: words and meaning (default); bm25: words ranked by bm25; keyword: "
        "how many of the query's words a memory holds",
    )
    se.add_argument(
        "--in",
        dest="workspace_filter",
        metavar="WORKSPACE",
        help="search this workspace (a checkout's path or a workspace identity) instead of "
        "the current one",
    )
    se.add_argument(
        "--json", action="store_true", help="print memory_search's result (entries, cortex) as JSON"
    )
    se.set_defaults(run=_search, prepare=_workspace_given)

    so = sub.add_parser(
        "store",
        help="store one memory",
        description="Store one memory; TEXT '-' reads it from stdin.",
    )
    so.add_argument("text", metavar="TEXT", help="the memory's text ('-': read it from stdin)")
    so.add_argument("--tag", action="append", help="a tag (repeatable)")
    so.add_argument(
        "--source", help="who or what it came from (a person, a document, a URL), when not you"
    )
    so.add_argument(
        "--fact",
        dest="subject",
        metavar="SUBJECT",
        type=arguments.text(p.MemoryStore, "subject"),
        help="store it as the current fact about SUBJECT (e.g. 'prod database port'): it "
        "supersedes the older fact on that subject, or is marked contested beside it",
    )
    so.add_argument(
        "--visibility",
        choices=["private", "team"],
        help="in a team database: who sees it (default: the daemon's configured default)",
    )
    so.add_argument("--json", action="store_true")
    so.set_defaults(run=_store, prepare=_read_text)

    ca = sub.add_parser(
        "capture",
        help="record work episodes from stdin (for agent hooks)",
        description="Read one JSON object, a JSON array or JSON Lines from stdin and record "
        "each as a work episode of --agent. An object with hook_event_name is an agent host's "
        "hook payload (Claude Code: PostToolUse, PostToolUseFailure, Stop, ...); any other "
        "object uses the episode's own fields (summary, tool, status, session_id, error_code, "
        "duration_ms, result_size, episode_type, tags, task_result, ts, ...). The episodes are "
        "spooled durably first; when no daemon answers (and autostart is on) one is started, "
        "and what is not sent within the hook's timeout is sent when recalld starts. A "
        "payload that ends its session (SessionEnd; Codex: Stop) rolls the session up into "
        "its experience. Exit 0 when all were recorded or spooled, 1 when any was refused, 3 "
        "when the spool is full; run by a host's hook (--host, or hook payloads on stdin) "
        "always 0, and silent unless --verbose.",
    )
    ca.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print nothing on success (hooks whose stdout reaches the model)",
    )
    ca.add_argument("--json", action="store_true", help="one JSON reply per episode")
    ca.add_argument(
        "--host",
        choices=sorted(context.HOST_EVENTS),
        help="the host whose hook runs this (recallctl connect writes it): its payloads' "
        "shape (default: told by the payload)",
    )
    ca.add_argument(
        "--detach",
        action="store_true",
        help="with --host and --quiet: answer the host at once and record the payload in a "
        "detached process (for a host that waits for every hook: Gemini CLI)",
    )
    ca.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="in a host's hook, say on stderr what was not recorded and why",
    )
    ca.set_defaults(local=capture.capture, prepare=_read_episodes)

    cx = sub.add_parser(
        "context",
        help="print the context a host's hook injects (for agent hooks)",
        description="Read a host's context hook payload from stdin (Claude Code and Codex: "
        "SessionStart, UserPromptSubmit; Gemini CLI: SessionStart, BeforeAgent) and print "
        "the block recalld builds for it, within a token budget, as the host's "
        "hookSpecificOutput.additionalContext. Never blocks the host: with no daemon, a bad "
        "payload or any error it prints nothing (why on stderr with --verbose) and exits 0.",
    )
    cx.add_argument(
        "--budget",
        type=int,
        metavar="TOKENS",
        help="the block's size in tokens (default: the daemon's context_session_budget or "
        "context_prompt_budget; 0: nothing)",
    )
    cx.add_argument(
        "--host",
        choices=sorted(context.HOST_EVENTS),
        help="the host whose hook runs this (recallctl connect writes it): only its context "
        "events are taken (default: any host's)",
    )
    cx.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="say on stderr why there is no context (a host shows a hook's stderr)",
    )
    cx.add_argument("--json", action="store_true", help="print the daemon's whole reply")
    cx.set_defaults(local=context.context, prepare=_read_payload)

    ws = sub.add_parser(
        "work-search",
        help="search work episodes (work_search)",
        description="Search this agent's work episodes under the reader "
        "contract; without a query, list the newest.",
    )
    ws.add_argument(
        "query",
        nargs="?",
        metavar="QUERY",
        type=arguments.text(p.WorkSearch, "query"),
        help="what the work was about (without: the newest episodes)",
    )
    ws.add_argument("--tool", help="only episodes of this tool (Bash, Edit, ...)")
    ws.add_argument("--session", help="only episodes of this session id")
    since, _ = arguments.bounded_int(p.WorkSearch, "since")
    ws.add_argument(
        "--since", type=since, metavar="UNIX_SECONDS", help="only episodes from then on"
    )
    until, _ = arguments.bounded_int(p.WorkSearch, "until")
    ws.add_argument("--until", type=until, metavar="UNIX_SECONDS", help="only episodes before then")
    k, span = arguments.bounded_int(p.WorkSearch, "k")
    ws.add_argument("-k", type=k, default=20, help=f"episodes to show, {span} (default 20)")
    trust, span = arguments.bounded_float(p.WorkSearch, "min_trust")
    ws.add_argument(
        "--min-trust",
        type=trust,
        default=0.3,
        help=f"leave out episodes trusted less, {span} (default 0.3)",
    )
    ws.add_argument(
        "--include-pending", action="store_true", help="also episodes not yet evaluated"
    )
    ws.add_argument(
        "--any-caller", action="store_true", help="every agent's episodes (needs the admin token)"
    )
    ws.add_argument(
        "--semantic", action="store_true", help="rank by meaning too, not only by words"
    )
    ws.add_argument(
        "--format", choices=["concise", "detailed"], help="how much of each episode to show"
    )
    ws.add_argument("--json", action="store_true", help="print work_search's result as JSON")
    ws.set_defaults(run=_work_search)

    wr = sub.add_parser(
        "work-result",
        help="set the verdict of an episode or a session",
        description="Set task_result (0 = failed .. 1 = succeeded) on one "
        "episode or on every episode of a session.",
    )
    target = wr.add_mutually_exclusive_group(required=True)
    target.add_argument("--episode", metavar="ID")
    target.add_argument("--session", metavar="SESSION_ID")
    verdict, span = arguments.bounded_float(p.WorkResult, "task_result")
    wr.add_argument(
        "task_result",
        metavar="TASK_RESULT",
        type=verdict,
        help=f"how well the task went, {span} (0: failed, 1: succeeded)",
    )
    wr.add_argument(
        "--any-caller",
        action="store_true",
        help="judge another agent's episodes (needs the admin token)",
    )
    wr.add_argument("--json", action="store_true")
    wr.set_defaults(run=_work_result)

    sh = sub.add_parser(
        "show",
        help="show one memory whole (memory_show)",
        description="Show one memory whole: its text, who wrote it and where, its links "
        "(supersedes, superseded by, contested with, depends on), its cited paths and their "
        "drift, its staleness and the outcomes recorded for it.",
    )
    sh.add_argument("id", metavar="ID", help="the memory's id (mem_...)")
    sh.add_argument("--json", action="store_true", help="print memory_show's memory as JSON")
    sh.set_defaults(run=_show)

    ru = sub.add_parser(
        "record-use",
        help="record what became of memories (memory_record_use)",
        description="Record an outcome for memories you were shown: used (it helped), "
        "ignored, contradicted (it was wrong) or corrected (you fixed it). Outcomes move "
        "how a memory ranks.",
    )
    ru.add_argument("ids", nargs="+", metavar="ID", help="the memories' ids (mem_...)")
    ru.add_argument(
        "--outcome",
        required=True,
        choices=["used", "ignored", "contradicted", "corrected"],
        help="what became of them",
    )
    ru.add_argument(
        "--note",
        type=arguments.text(p.MemoryRecordUse, "note"),
        help="what was wrong, or what it was corrected to",
    )
    ru.add_argument("--json", action="store_true", help="print the reply as JSON")
    ru.set_defaults(run=_record_use)

    fo = sub.add_parser(
        "forget",
        help="tombstone records by id",
        description="Tombstone each record: it never surfaces in a search "
        "again and its vector leaves the index.",
    )
    fo.add_argument("ids", nargs="+", metavar="ID")
    fo.add_argument("--json", action="store_true")
    fo.set_defaults(run=_forget)

    memories.add_commands(sub)
    experience.add_commands(sub)
    ops.add_commands(sub)
    database.add_commands(sub)
    for add in more:
        add(sub)
    hosts.add_commands(sub)
    _after_commands(ap)
    return ap


def _global_options(parser: argparse.ArgumentParser, *, after: bool = False) -> None:
    """recallctl's own options. Before the command they are the parser's; after it (every
    command and subcommand, ``after``) the same ones without defaults, so one given there
    wins and one not given leaves the value from before the command alone. A command's own
    option of the same name (``memories --agent``) keeps its meaning there."""
    taken = set(parser._option_string_actions)
    group = (
        parser.add_argument_group("recallctl's options (also accepted before the command)")
        if after
        else parser
    )

    def option(flag: str, **kw: Any) -> None:
        if flag in taken:
            return
        if after:
            kw["default"] = argparse.SUPPRESS
        group.add_argument(flag, **kw)

    option(
        "--socket",
        help="daemon socket (default: $RECALLD_SOCKET, else $XDG_RUNTIME_DIR/recalld/recalld.sock)",
    )
    option("--agent", default="recallctl", help="agent name to act as")
    option("--workspace", help="workspace (default: git root of the working directory)")
    option(
        "--no-admin",
        action="store_true",
        help="do not present the admin token (act as a plain agent, without "
        "the admin:workspace scope)",
    )
    option(
        "--agent-token-file",
        metavar="FILE",
        help="present this agent's credential (as `recallctl agent add` wrote "
        "it); needed with --no-admin once --agent's name has one",
    )
    option("--version", action="version", version=f"recallctl {__version__}")


def _after_commands(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                _global_options(command, after=True)
                _after_commands(command)


def main(argv: list[str] | None = None, more: Sequence[AddCommands] = ()) -> None:
    """Run recallctl; ``more``: what adds the commands of other parts to its parser."""
    parser = _parser(more)
    args = parser.parse_args(argv)
    undecodable = arguments.undecodable_argument(parser, args)
    if undecodable is not None:
        print(f"recallctl {args.command}: {undecodable}", file=sys.stderr)
        raise SystemExit(2)
    prepare: Callable[[argparse.Namespace], None] | None = getattr(args, "prepare", None)
    if prepare is not None:
        try:
            prepare(args)
        except UsageError as exc:
            print(f"recallctl {args.command}: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    async def run() -> int:
        # Commands that must also work with the daemon down open their own connections.
        local: Callable[[argparse.Namespace], Awaitable[int]] | None = getattr(args, "local", None)
        if local is not None:
            return await local(args)
        command: Callable[[RecallClient, argparse.Namespace], Awaitable[int]] = args.run
        # recallctl is the user's own admin client: it acts with admin:workspace whenever it
        # can read the daemon's admin token, unless told not to.
        async with connect(
            agent=args.agent,
            workspace=args.workspace,
            client="recallctl",
            path=args.socket,
            **hello_tokens(args),
        ) as rc:
            return await command(rc, args)

    try:
        try:
            code = anyio.run(run)
        except BaseExceptionGroup as group:
            raise _first_leaf(group) from None
    except DaemonUnavailable as exc:
        print(f"recallctl: {exc}", file=sys.stderr)
        code = 3
    except RemoteError as exc:
        print(f"recallctl: {exc.code}: {exc.message}", file=sys.stderr)
        problem = paths.admin_token_problem()
        if exc.code == "forbidden" and not getattr(args, "no_admin", True) and problem:
            # Without this, a forbidden export or doctor does not say what is missing.
            print(f"recallctl: no admin token was presented: {problem}", file=sys.stderr)
        code = 1
    except p.RequestRuleError as exc:
        # Arguments that contradict each other: the request refused itself before sending.
        print(f"recallctl {args.command}: {exc}", file=sys.stderr)
        code = 2
    except BrokenPipeError:
        _stdout_gone()
    except OSError as exc:
        print(f"recallctl: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()
    raise SystemExit(code)


def _stdout_gone() -> NoReturn:
    """The reader of stdout went away early (``| head``): end quietly with the shell's code
    for a broken pipe, not a traceback. Python flushes stdout once more at exit, so it is
    pointed at /dev/null first."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(141)


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error inside nested task-group groups, so it gets its own clear message."""
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf
