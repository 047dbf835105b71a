"""``recallctl experience``: list, search, show, record, forget and roll up experiences.

``rollup`` is what an agent host's end-of-session hook runs: it reads the hook's JSON payload
on stdin (``session_id``, ``cwd``), as ``recallctl capture`` does, and asks the daemon to
record the session's experience from the episodes captured for it.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from typing import Any

from .. import protocol as p
from ..client import RecallClient, connect
from ..hello import hello_tokens
from . import arguments
from .episode_input import InputError, session_from_hook
from .output import one_line, print_json

__all__ = ["add_commands"]

_DESCRIPTION_SHOWN = 72
# How long rollup waits for a hook payload on stdin. Claude Code writes the payload at once
# but may leave stdin open (SessionEnd): reading to EOF could hang until the hook's timeout.
PAYLOAD_WAIT_S = 5.0


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _lesson_lines(lessons: list[p.LessonInfo] | list[p.RecordedLesson]) -> list[str]:
    lines = []
    for x in lessons:
        merged = ""
        if isinstance(x, p.RecordedLesson):
            merged = "  (merged)" if x.merged else "  (new)"
        lines.append(f"  {x.confidence:4.2f}  {x.support:>3}  {x.text}{merged}")
    return lines


def _experience_lines(e: p.ExperienceInfo) -> list[str]:
    lines = [
        f"{e.id}  {e.status}  class {e.task_class}  agent {e.agent}  {_when(e.ts)}",
        f"  description  {e.description}",
    ]
    if e.strategy:
        lines.append(f"  strategy     {e.strategy}")
    lines.append(f"  effort       {e.tool_calls} tool calls, {e.minutes:g} minutes")
    if e.session:
        lines.append(f"  session      {e.session}")
    if e.files:
        lines.append(f"  files        {', '.join(e.files)}")
    return lines


# --------------------------------------------------------------------------- commands


async def _search(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(
        p.SearchExperience(query=args.query, limit=args.limit), p.ExperienceSearchResult
    )
    if args.json:
        print_json(reply)
        return 0
    if not reply.experiences:
        print("no similar experiences")
        return 0
    print(
        f"{'score':>6}  {'id':<22} {'status':<8} {'class':<10} {'calls':>5} {'min':>6}  description"
    )
    for e in reply.experiences:
        print(
            f"{e.score:6.3f}  {e.id:<22} {e.status:<8} {one_line(e.task_class, 10):<10} "
            f"{e.tool_calls:>5} {e.minutes:>6g}  {one_line(e.description, _DESCRIPTION_SHOWN)}"
        )
    if reply.lessons:
        print("\nlessons (confidence, support)")
        print("\n".join(_lesson_lines(reply.lessons)))
    return 0


async def _list(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(
        p.ExperienceList(
            status=args.outcome, task_class=args.task_class, before=args.before, limit=args.limit
        ),
        p.ExperienceListResult,
    )
    if args.json:
        print_json(reply)
        return 0
    if not reply.experiences:
        print("no experiences")
    else:
        print(
            f"{'when':<16}  {'id':<22} {'status':<8} {'class':<10} {'calls':>5} {'min':>6}"
            "  description"
        )
    for e in reply.experiences:
        print(
            f"{_when(e.ts):<16}  {e.id:<22} {e.status:<8} {one_line(e.task_class, 10):<10} "
            f"{e.tool_calls:>5} {e.minutes:>6g}  {one_line(e.description, _DESCRIPTION_SHOWN)}"
        )
    if reply.lessons:
        print("\nlessons (confidence, support)")
        print("\n".join(_lesson_lines(reply.lessons)))
    if reply.next_before is not None:
        print(f"more: --before {reply.next_before}", file=sys.stderr)
    return 0


async def _show(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(p.ExplainNode(record_id=args.id, query=args.query), p.NodeExplained)
    if args.json:
        print_json(reply)
        return 0
    lines = _experience_lines(reply.experience)
    if reply.lessons:
        lines += ["lessons (confidence, support)", *_lesson_lines(reply.lessons)]
    if reply.episodes:
        lines.append(f"episodes of the session ({len(reply.episodes)})")
        lines += [f"  {_when(ep.ts)}  {ep.id}  {one_line(ep.text, 100)}" for ep in reply.episodes]
    r = reply.ranking
    if r is not None:
        rank = f"rank {r.rank}" if r.rank is not None else "not returned"
        lines.append(
            f"for {r.query!r}: {rank}, score {r.score:g}, lexical rank {r.lexical_rank or '-'}, "
            f"semantic rank {r.semantic_rank or '-'}, cosine "
            f"{'-' if r.cosine is None else f'{r.cosine:.3f}'}"
        )
        lines.append(f"  {r.reason}")
    print("\n".join(lines))
    return 0


async def _forget(rc: RecallClient, args: argparse.Namespace) -> int:
    reply = await rc.call(p.ForgetExperience(record_id=args.id), p.ExperienceForgotten)
    if args.json:
        print_json(reply)
    elif reply.already_forgotten:
        print(f"{reply.record_id} was already forgotten")
    else:
        print(
            f"{reply.record_id} forgotten ({reply.lessons_weakened} lessons weakened, "
            f"{reply.lessons_retired} retired)"
        )
    return 0


async def _record(rc: RecallClient, args: argparse.Namespace) -> int:
    description = args.description if args.description != "-" else sys.stdin.read().strip()
    reply = await rc.call(
        p.RecordExperience(
            description=description,
            status=args.outcome,
            strategy=args.strategy,
            task_class=args.task_class,
            tool_calls=args.tool_calls,
            minutes=args.minutes,
            files=args.file or [],
            lessons=args.lesson or [],
            session=args.session,
        ),
        p.ExperienceRecorded,
    )
    if args.json:
        print_json(reply)
        return 0
    print(reply.record_id + (" (duplicate: already recorded)" if reply.duplicate else ""))
    if reply.lessons:
        print("lessons (confidence, support)")
        print("\n".join(_lesson_lines(reply.lessons)))
    return 0


async def _rollup(args: argparse.Namespace) -> int:
    session, workspace = args.session, args.workspace
    # A hook hands its payload on stdin; read it when told to, or when no session was named
    # and something is piped in (never wait on a terminal).
    if args.hook or (session is None and not sys.stdin.isatty()):
        try:
            hooked, hook_workspace = session_from_hook(_payload(_read_payload(PAYLOAD_WAIT_S)))
        except InputError as exc:
            print(f"recallctl experience rollup: {exc}", file=sys.stderr)
            return 1
        session = session or hooked
        workspace = hook_workspace or workspace
    if session is None:
        print(
            "recallctl experience rollup: give --session ID, or pipe a hook payload "
            "(with session_id) on stdin",
            file=sys.stderr,
        )
        return 1
    async with connect(
        agent=args.agent,
        workspace=workspace,
        client="recallctl",
        path=args.socket,
        **hello_tokens(args),
    ) as rc:
        reply = await rc.call(
            p.RollUpExperience(
                session=session,
                description=args.description,
                status=args.outcome,
                strategy=args.strategy,
                task_class=args.task_class,
                lessons=args.lesson or [],
            ),
            p.ExperienceRolledUp,
        )
    if args.json:
        print_json(reply)
    elif not args.quiet:
        print(_rolled_up(reply))
    return 0


def _read_payload(wait_s: float) -> str:
    """Stdin up to the end of one JSON value, EOF, or ``wait_s`` without it."""
    fd = sys.stdin.fileno()
    data = b""
    deadline = time.monotonic() + wait_s
    while not _complete(data):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def _complete(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _payload(text: str) -> Any:
    if not text.strip():
        raise InputError("no hook payload on stdin")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"stdin is not a JSON hook payload ({exc.msg})") from None


def _rolled_up(reply: p.ExperienceRolledUp) -> str:
    if reply.forgotten or reply.experience is None:
        return (
            f"{reply.record_id}: the experience of session {reply.session} was forgotten; "
            "nothing recorded"
        )
    e = reply.experience
    done = "created" if reply.created else "updated"
    lines = [
        f"{e.id} {done} from {reply.episodes} episodes of session {reply.session}",
        f"  status       {e.status} ({reply.why})",
        *_experience_lines(e)[1:],
    ]
    if reply.lessons:
        lines += ["lessons (confidence, support)", *_lesson_lines(reply.lessons)]
    return "\n".join(lines)


# --------------------------------------------------------------------------- parsers


def _outcome(ap: argparse.ArgumentParser, default: str | None) -> None:
    ap.add_argument(
        "--outcome",
        choices=["success", "failure", "unknown"],
        default=default,
        help="how the task went"
        + (f" (default: {default})" if default else " (default: computed from the episodes)"),
    )


def add_commands(sub: Any) -> None:
    """Register ``recallctl experience`` and its subcommands."""
    ex = sub.add_parser(
        "experience",
        help="list, search, show, record, forget and roll up experiences",
        description="Experiences are finished tasks of a workspace with their outcome and "
        "lessons (experience_list, search_experience, explain_node, record_experience, "
        "forget_experience). "
        "'rollup' records the experience of a session from its captured episodes, for an "
        "agent host's end-of-session hook.",
    )
    ex_sub = ex.add_subparsers(dest="action", required=True, metavar="ACTION")

    li = ex_sub.add_parser(
        "list",
        help="this workspace's experiences newest first, with their lessons",
        description="The experiences of this workspace newest first and the lessons they "
        "support (experience_list). A page's last line says how to get the next one (--before).",
    )
    li.add_argument(
        "--outcome", choices=["success", "failure", "unknown"], help="only this outcome"
    )
    li.add_argument("--class", dest="task_class", help="only this task class")
    li.add_argument("--before", metavar="CURSOR", help="the page after this cursor")
    limit, span = arguments.bounded_int(p.ExperienceList, "limit")
    li.add_argument(
        "--limit", type=limit, default=20, help=f"experiences a page, {span} (default 20)"
    )
    li.add_argument("--json", action="store_true", help="print the reply as JSON")
    li.set_defaults(run=_list)

    se = ex_sub.add_parser(
        "search",
        help="past tasks similar to QUERY, and their lessons",
        description="Experiences of this workspace similar to QUERY by "
        "words and meaning, best first, and the lessons they support. "
        "Nothing is listed when nothing is similar enough.",
    )
    se.add_argument(
        "query",
        metavar="QUERY",
        type=arguments.text(p.SearchExperience, "query"),
        help="the task you are about to do, in a sentence",
    )
    limit, span = arguments.bounded_int(p.SearchExperience, "limit")
    se.add_argument(
        "--limit", type=limit, default=5, help=f"experiences to show, {span} (default 5)"
    )
    se.add_argument("--json", action="store_true", help="print the reply as JSON")
    se.set_defaults(run=_search)

    sh = ex_sub.add_parser(
        "show",
        help="one experience in full (explain_node)",
        description="One experience with its files, the episodes of its "
        "session and its lessons; with --query, why it ranked for it.",
    )
    sh.add_argument("id", metavar="ID")
    sh.add_argument("--query", help="explain the ranking for this query")
    sh.add_argument("--json", action="store_true", help="print the reply as JSON")
    sh.set_defaults(run=_show)

    fo = ex_sub.add_parser(
        "forget",
        help="tombstone an experience",
        description="Tombstone one experience: it never surfaces again, "
        "its lessons lose its support, and a lesson it alone supported is "
        "retired.",
    )
    fo.add_argument("id", metavar="ID")
    fo.add_argument("--json", action="store_true", help="print the reply as JSON")
    fo.set_defaults(run=_forget)

    rec = ex_sub.add_parser(
        "record",
        help="record a finished task",
        description="Record one finished task with its outcome and "
        "lessons (record_experience); DESCRIPTION '-' reads it from stdin. "
        "Secrets are redacted before storage; a lesson that says the same "
        "as a stored one is merged into it.",
    )
    rec.add_argument("description")
    _outcome(rec, "unknown")
    rec.add_argument("--strategy", help="how the task was approached")
    rec.add_argument(
        "--class",
        dest="task_class",
        default="general",
        help="task class, e.g. bugfix, feature, ops (default: general)",
    )
    calls, span = arguments.bounded_int(p.RecordExperience, "tool_calls")
    rec.add_argument(
        "--tool-calls", type=calls, default=0, help=f"how many tool calls it took, {span}"
    )
    minutes, span = arguments.bounded_float(p.RecordExperience, "minutes")
    rec.add_argument("--minutes", type=minutes, default=0.0, help=f"how long it took, {span}")
    rec.add_argument(
        "--file",
        action="append",
        metavar="PATH",
        help="a file the task touched, inside the workspace (repeatable)",
    )
    rec.add_argument("--lesson", action="append", metavar="TEXT", help="a lesson (repeatable)")
    rec.add_argument("--session", help="the session that did the task")
    rec.add_argument("--json", action="store_true", help="print the reply as JSON")
    rec.set_defaults(run=_record)

    ro = ex_sub.add_parser(
        "rollup",
        help="record a session's experience from its episodes (for hooks)",
        description="Record the experience of a session from the episodes captured for it "
        "(recallctl capture): tool calls, minutes, files, status and, unless given, the "
        "description are computed by the daemon. A session has one experience: rolling it up "
        "again updates it, keeping what was given before. With --hook, or without --session "
        "and with stdin piped, stdin is an agent host's hook payload (Claude Code: Stop, "
        "SessionEnd): its session_id, and the git root of its cwd as the workspace. Exit 0 "
        "when recorded, 1 when refused (e.g. no episodes), 3 when the daemon is not running.",
    )
    ro.add_argument("--session", metavar="ID", help="the session to roll up")
    ro.add_argument(
        "--hook", action="store_true", help="read a hook payload (session_id, cwd) from stdin"
    )
    ro.add_argument(
        "--description",
        help="what the task was (default: the session's first prompt, else its tool calls)",
    )
    _outcome(ro, None)
    ro.add_argument("--strategy", help="how the task was approached")
    ro.add_argument(
        "--class",
        dest="task_class",
        help="task class, e.g. bugfix, feature, ops (default: general)",
    )
    ro.add_argument(
        "--lesson",
        action="append",
        metavar="TEXT",
        help="a lesson (repeatable); added to those given before",
    )
    ro.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print nothing on success (hooks whose stdout reaches the model)",
    )
    ro.add_argument("--json", action="store_true", help="print the reply as JSON")
    ro.set_defaults(local=_rollup)
