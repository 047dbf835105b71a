"""``recallctl``: status and admin client for the recalld daemon."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from . import __version__, ctl_ops
from . import protocol as p
from .client import DaemonUnavailable, RecallClient, RemoteError, connect

__all__ = ["main"]

_json = msgspec.json.Encoder()


def _print_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.format(_json.encode(value), indent=2).decode() + "\n")


def render_status(report: p.StatusReport) -> str:
    """The status report as a table for people."""
    m = report.model
    model = f"{m.name}: {m.state}"
    if m.state == "ready" and m.load_s is not None:
        model += f" ({m.backend}, loaded in {m.load_s:.1f}s, dim {m.dim})"
    if m.reason:
        model += f" ({m.reason})"
    lat = report.search_latency_ms
    fmt = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    lines = [
        f"recalld {report.version}  state {report.state}  pid {report.pid}  "
        f"up {_duration(report.uptime_s)}",
        f"socket   {report.socket}",
        f"data     {report.data_dir}",
        f"model    {model}",
        f"search   {'hybrid (lexical + semantic)' if report.semantic_search else 'lexical only'}"
        f"  latency p50 {fmt(lat.get('p50'))} ms  p90 {fmt(lat.get('p90'))} ms"
        f"  p99 {fmt(lat.get('p99'))} ms",
        f"index    {report.index.get('type') or 'not open'}  {report.index.get('size', 0)} vectors"
        f"  embedding backlog {report.index.get('embedding_backlog', 0)}",
        "",
        f"{'actor':<12}{'state':<20}{'queue':>14}{'processed':>12}{'errors':>8}",
    ]
    for a in report.actors:
        lines.append(
            f"{a.name:<12}{a.state:<20}{f'{a.queue_depth}/{a.queue_capacity}':>14}"
            f"{a.processed:>12}{a.errors:>8}"
        )
    lines.append("")
    if report.records:
        lines.append("records  " + "; ".join(
            f"{kind}: {counts['total']} ("
            + ", ".join(f"{k} {v}" for k, v in counts.items() if k != "total") + ")"
            for kind, counts in sorted(report.records.items())
        ))
    else:
        lines.append("records  none")
    lines.append(f"agents   {len(report.agents)} connected")
    for a in report.agents:
        lines.append(
            f"  {a['agent']:<20} {a.get('client') or '-':<12} pid {a['pid']:<8} "
            f"{a['requests']} requests  {a['workspace']}"
        )
    return "\n".join(lines)


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
            _print_json(reply.report)
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
        p.MemorySearch(query=args.query, limit=args.limit, mode=args.mode,
                       workspace=args.workspace_filter),
        p.MemorySearchResult,
    )
    if args.json:
        _print_json(reply)
        return 0
    if not reply.hits:
        print("no matches")
    for hit in reply.hits:
        print(f"{hit.score:6.3f}  {hit.id}  {hit.snippet}")
    return 0


async def _store(rc: RecallClient, args: argparse.Namespace) -> int:
    text = args.text if args.text != "-" else sys.stdin.read()
    reply = await rc.call(
        p.MemoryStore(text=text, tags=args.tag or [], source=args.source), p.Stored
    )
    if args.json:
        _print_json(reply)
    else:
        print(reply.record_id + (" (duplicate)" if reply.duplicate else ""))
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="recallctl",
        description="Status and admin client for the recalld memory daemon.",
    )
    ap.add_argument("--socket", help="daemon socket (default: $RECALLD_SOCKET, else "
                    "$XDG_RUNTIME_DIR/recalld/recalld.sock)")
    ap.add_argument("--agent", default="recallctl", help="agent name to act as")
    ap.add_argument("--workspace", help="workspace (default: git root of the working directory)")
    ap.add_argument("--version", action="version", version=f"recallctl {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    st = sub.add_parser("status", help="show the daemon's state",
                        description="Show state, model, actor queues, records, index, "
                        "connected agents and search latency.")
    st.add_argument("--json", action="store_true", help="print the report as JSON")
    st.add_argument("--watch", action="store_true", help="refresh until interrupted")
    st.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    st.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                    help="wait up to SECONDS for the embedding model to be ready first")
    st.set_defaults(run=_status)

    se = sub.add_parser("search", help="search memories of a workspace",
                        description="Search memories lexically and by meaning.")
    se.add_argument("query")
    se.add_argument("--limit", type=int, default=5)
    se.add_argument("--mode", choices=["keyword", "bm25", "hybrid"], default="hybrid")
    se.add_argument("--in", dest="workspace_filter", metavar="WORKSPACE",
                    help="search this workspace instead of the current one")
    se.add_argument("--json", action="store_true")
    se.set_defaults(run=_search)

    so = sub.add_parser("store", help="store one memory",
                        description="Store one memory; TEXT '-' reads it from stdin.")
    so.add_argument("text")
    so.add_argument("--tag", action="append", help="a tag (repeatable)")
    so.add_argument("--source")
    so.add_argument("--json", action="store_true")
    so.set_defaults(run=_store)

    ctl_ops.add_commands(sub)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)

    async def run() -> int:
        # Commands that must also work with the daemon down open their own connections.
        local: Callable[[argparse.Namespace], Awaitable[int]] | None = getattr(args, "local", None)
        if local is not None:
            return await local(args)
        command: Callable[[RecallClient, argparse.Namespace], Awaitable[int]] = args.run
        async with connect(agent=args.agent, workspace=args.workspace, client="recallctl",
                           path=args.socket) as rc:
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
        code = 1
    except OSError as exc:
        print(f"recallctl: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    raise SystemExit(code)


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error inside nested task-group groups, so it gets its own clear message."""
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    return leaf


if __name__ == "__main__":
    main()
