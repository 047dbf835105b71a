"""``recallctl capture``: a hook's episodes reach the daemon, or wait in the spool for it.

The episodes are spooled first (durable before anything is sent), then the spool is replayed
to the daemon. When none answers, one is started the way recall-mcp starts one (same lock,
unless autostart is off); it replays the spool once it runs. Everything happens within
:data:`CAPTURE_BUDGET_S`, inside the hook timeout ``recallctl connect`` writes: what is not sent
by then stays spooled, and the command still exits 0, because nothing was lost.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

from .. import protocol as p
from ..autostart import AutostartFailed, ensure_daemon
from ..client import DaemonUnavailable, RemoteError
from ..paths import autostart_enabled, find_workspace, read_admin_token, socket_path
from ..spool import OnReply, Spool, SpooledCapture, SpoolFull, default_spool
from .episode_input import InputError, episodes_from_text
from .output import print_json_line

__all__ = ["CAPTURE_BUDGET_S", "HOOK_TIMEOUT_S", "capture"]

# The timeout of the capture hooks `recallctl connect` writes (seconds, as the hosts count).
HOOK_TIMEOUT_S = 10
# Capture's own deadline: room left inside the hook timeout for the interpreter to start.
CAPTURE_BUDGET_S = HOOK_TIMEOUT_S - 3


async def capture(args: argparse.Namespace) -> int:
    """Record stdin's episodes as ``args.agent``: 0 when all were recorded or spooled, 1 when
    any was refused or unreadable, 3 when they could not even be spooled."""
    failed = 0
    episodes: list[p.CaptureEpisode] = []
    for item in episodes_from_text(args.stdin_text):
        if isinstance(item, InputError):
            failed += 1
            print(f"recallctl capture: {item}", file=sys.stderr)
        else:
            episodes.append(item)
    if not episodes:
        return 1 if failed else 0
    spool = default_spool()
    try:
        mine = spool.add(
            SpooledCapture(
                agent=args.agent,
                workspace=args.workspace or find_workspace(),
                admin=not getattr(args, "no_admin", False),
                agent_token_file=getattr(args, "agent_token_file", None),
                episodes=episodes,
            )
        )
    except SpoolFull as exc:
        print(f"recallctl capture: {exc}", file=sys.stderr)
        return 3
    replies: dict[int, p.EpisodeCaptured | RemoteError] = {}

    def on_reply(name: str, n: int, reply: p.EpisodeCaptured | RemoteError) -> None:
        if name == mine:
            replies[n] = reply

    sock = Path(args.socket) if args.socket else socket_path()
    why = await _deliver(spool, sock, on_reply)
    if len(replies) < len(episodes):
        if not args.quiet:
            print(
                f"recallctl capture: {len(episodes) - len(replies)} episode(s) wait in the "
                f"spool {spool.directory}: {why}",
                file=sys.stderr,
            )
        return 1 if failed else 0
    for n in range(len(episodes)):
        reply = replies[n]
        if isinstance(reply, RemoteError):
            failed += 1
            print(f"recallctl capture: {reply.code}: {reply.message}", file=sys.stderr)
        elif args.json:
            print_json_line(reply)
        elif not args.quiet:
            print(reply.record_id + _flags(reply))
    return 1 if failed else 0


async def _deliver(spool: Spool, sock: Path, on_reply: OnReply) -> str:
    """Replay the spool (this capture's file included) within the budget, starting a daemon
    when none answers; why the spool may still hold this capture's episodes."""
    with anyio.move_on_after(CAPTURE_BUDGET_S):
        try:
            return _outcome(await spool.replay(sock, read_admin_token(), on_reply))
        except DaemonUnavailable as exc:
            why = str(exc)
        except (RemoteError, OSError) as exc:
            return str(exc)
        if not autostart_enabled():
            return f"{why} (autostart is off: recalld sends them when it starts)"
        try:
            # Without waiting for a start under way elsewhere: that daemon replays the spool.
            await ensure_daemon(sock, wait=False)
            return _outcome(await spool.replay(sock, read_admin_token(), on_reply))
        except (AutostartFailed, DaemonUnavailable, RemoteError, OSError) as exc:
            return str(exc)
    return f"not sent within {CAPTURE_BUDGET_S}s"


def _outcome(sent: int | None) -> str:
    return "" if sent is not None else "another process is sending the spool to recalld"


def _flags(reply: p.EpisodeCaptured) -> str:
    flags = [
        f
        for f, on in (
            ("duplicate", reply.duplicate),
            ("replayed", reply.replayed),
            ("blocked", reply.blocked),
        )
        if on
    ]
    if reply.redacted:
        flags.append("redacted " + ",".join(reply.redacted))
    return f" ({'; '.join(flags)})" if flags else ""
