"""``recallctl capture``: a hook's episodes reach the daemon, or wait in the spool for it.

The episodes are spooled first (durable before anything is sent), then the spool is replayed
to the daemon. When none answers, one is started the way recall-mcp starts one (same lock,
unless autostart is off); it replays the spool once it runs. Everything happens within
:data:`CAPTURE_BUDGET_S`, inside the hook timeout ``recallctl connect`` writes: what is not sent
by then stays spooled, and the command still exits 0, because nothing was lost. A payload
that ends its session (:data:`~recall_client.ctl.episode_input.ROLLUP_EVENTS`) then rolls
the session up into its experience.

Run by a host's hook (``--host``, or a hook payload on stdin), capture never stands in the
host's way: it exits 0 on every path (0 is the one code Claude Code, Codex and Gemini CLI
all read as "go on": Claude Code and Codex take 2 as blocking, Gemini CLI anything but 0 and
1), and says nothing (a host shows a hook's stderr to the user) unless ``--verbose``. What it
could not record is in the spool, which ``recallctl status`` reports; an input it could not
read, it could not keep. With ``--host``, ``--quiet`` and ``--detach`` the host does not even
wait for the delivery: :mod:`recall_client.ctl.hook_entry` answers it first.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import anyio

from .. import protocol as p
from ..autostart import AutostartFailed, ensure_daemon
from ..client import DaemonUnavailable, RemoteError, connect
from ..hello import hello_tokens
from ..paths import autostart_enabled, find_workspace, read_admin_token, socket_path
from ..spool import OnReply, Spool, SpooledCapture, SpoolFull, default_spool
from .episode_input import Ignored, InputError, RollUp, episodes_from_text
from .output import print_json_line

__all__ = ["CAPTURE_BUDGET_S", "HOOK_TIMEOUT_S", "capture"]

# The timeout of the capture hooks `recallctl connect` writes (seconds, as the hosts count).
HOOK_TIMEOUT_S = 10
# Capture's own deadline: room left inside the hook timeout for the interpreter to start.
CAPTURE_BUDGET_S = HOOK_TIMEOUT_S - 3


# Where capture says what went wrong (stderr, or nowhere in a host's hook).
Say = Callable[[str], None]


async def capture(args: argparse.Namespace) -> int:
    """Record stdin's episodes as ``args.agent``. In a host's hook: always 0 (see the
    module). Otherwise 0 when all were recorded or spooled, 1 when any was refused or
    unreadable, 3 when they could not even be spooled."""
    items = episodes_from_text(args.stdin_text, args.host)
    episodes = [item for item in items if isinstance(item, p.CaptureEpisode)]
    hook = args.host is not None or any(
        isinstance(item, Ignored) or (isinstance(item, p.CaptureEpisode) and item.channel == "hook")
        for item in items
    )

    def say(line: str) -> None:
        if args.verbose or not hook:
            print(f"recallctl capture: {line}", file=sys.stderr)

    failed = 0
    for item in items:
        if isinstance(item, InputError):
            failed += 1
            say(str(item))
        elif isinstance(item, Ignored):
            say(f"ignored {item}")
    try:
        sock = Path(args.socket) if args.socket else socket_path()
        if episodes:
            refused = await _record(args, episodes, sock, say)
            if refused is None:
                return 0 if hook else 3
            failed += refused
        rollups = [item for item in items if isinstance(item, RollUp)]
        if rollups:
            await _roll_up(args, rollups, sock, say)
    except Exception:
        # A host's hook is not where a bug of ours should stop the agent.
        if not hook:
            raise
        say(traceback.format_exc())
        return 0
    return 0 if hook or not failed else 1


async def _record(
    args: argparse.Namespace, episodes: list[p.CaptureEpisode], sock: Path, say: Say
) -> int | None:
    """Spool ``episodes`` and send the spool; how many the daemon refused, None when they
    could not be spooled."""
    spool = default_spool()
    try:
        mine = spool.add(
            SpooledCapture(
                agent=args.agent,
                workspace=args.workspace or find_workspace(),
                admin=not args.no_admin,
                agent_token_file=args.agent_token_file,
                episodes=episodes,
            )
        )
    except SpoolFull as exc:
        say(str(exc))
        return None
    replies: dict[int, p.EpisodeCaptured | RemoteError] = {}

    def on_reply(name: str, n: int, reply: p.EpisodeCaptured | RemoteError) -> None:
        if name == mine:
            replies[n] = reply

    why = await _deliver(spool, sock, on_reply)
    if len(replies) < len(episodes):
        if not args.quiet:
            say(
                f"{len(episodes) - len(replies)} episode(s) wait in the spool "
                f"{spool.directory}: {why}"
            )
        return 0
    refused = 0
    for n in range(len(episodes)):
        reply = replies[n]
        if isinstance(reply, RemoteError):
            refused += 1
            say(f"{reply.code}: {reply.message}")
        elif args.json:
            print_json_line(reply)
        elif not args.quiet:
            print(reply.record_id + _flags(reply))
    return refused


async def _roll_up(args: argparse.Namespace, rollups: list[RollUp], sock: Path, say: Say) -> None:
    """Roll each ended session up into its experience, as far as the daemon answers within
    the budget (a later roll-up of the session, or ``recallctl experience rollup``, catches
    up on what this one missed)."""
    with anyio.move_on_after(CAPTURE_BUDGET_S):
        for rollup in rollups:
            try:
                async with connect(
                    agent=args.agent,
                    workspace=rollup.workspace or args.workspace or find_workspace(),
                    client="recallctl",
                    path=sock,
                    **hello_tokens(args),
                ) as rc:
                    reply = await rc.call(
                        p.RollUpExperience(session=rollup.session), p.ExperienceRolledUp
                    )
            except RemoteError as exc:
                say(f"session {rollup.session} not rolled up: {exc.code}: {exc.message}")
            except (DaemonUnavailable, OSError) as exc:
                say(f"session {rollup.session} not rolled up: {exc}")
            else:
                if args.json:
                    print_json_line(reply)


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
