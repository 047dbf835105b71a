"""``recallctl context``: a host's context hook. Reads the hook's payload on stdin, asks the
daemon for the block and prints it in the host's output format.

Hosts and their events (each host's payload names its event in ``hook_event_name``;
``--host`` names the host, so a payload of another host's event is refused, not guessed):

- Claude Code and Codex: ``SessionStart`` and ``UserPromptSubmit``;
- Gemini CLI: ``SessionStart`` and ``BeforeAgent`` (its prompt-submit event).

All three take ``{"hookSpecificOutput": {"hookEventName": EVENT, "additionalContext": TEXT}}``
on stdout (Claude Code's hook output, Codex's generated ``session-start`` and
``user-prompt-submit`` output schemas, which allow no other member, and Gemini CLI's
``BeforeAgentOutput`` / ``SessionStart`` output): one shape, written by :func:`hook_output`.

Context is a nicety, never a gate: with no daemon, a bad payload or an error the hook prints
nothing and exits 0 within :data:`CONTEXT_BUDGET_S` (0: every host's "go on"); it never starts
a daemon (capture's hooks do). Why there is no context goes to stderr only with ``--verbose``:
Gemini CLI shows a hook's stderr to the user when its stdout is empty. A payload is read
whatever its bytes (undecodable ones and lone surrogate escapes replaced), and a prompt
without the context blocks hooks already injected into it (Gemini CLI's BeforeAgent quotes
them): the block is looked up by what the user typed.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from .. import protocol as p
from ..client import DaemonUnavailable, RemoteError, connect
from ..hello import hello_tokens
from ..paths import find_workspace
from .episode_input import InputError, read_json, user_words
from .output import print_json_line

__all__ = [
    "CONTEXT_BUDGET_S",
    "CONTEXT_HOOK_TIMEOUT_S",
    "HOST_EVENTS",
    "context",
    "hook_output",
    "read_payload",
]

# The timeout of the context hooks `recallctl connect` writes, and the command's own deadline
# (an answer later than this is not worth the host's wait).
CONTEXT_HOOK_TIMEOUT_S = 5
CONTEXT_BUDGET_S = 2.0
# A payload larger than this is no hook's (a prompt is cut to the protocol's query bound).
MAX_PAYLOAD = 1024 * 1024
QUERY_CHARS = 4_000

# Each host's context events: hook_event_name -> the block's event.
HOST_EVENTS: dict[str, dict[str, p.ContextEvent]] = {
    "claude-code": {"SessionStart": "session_start", "UserPromptSubmit": "prompt"},
    "codex": {"SessionStart": "session_start", "UserPromptSubmit": "prompt"},
    "gemini": {"SessionStart": "session_start", "BeforeAgent": "prompt"},
}
# Without --host (a hook written by hand): any host's event.
_ANY_HOST = {name: event for events in HOST_EVENTS.values() for name, event in events.items()}


class PayloadError(ValueError):
    """The payload is not a context hook's."""


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() and "\x00" not in value else None


def read_payload(
    raw: bytes, budget: int | None, host: str | None = None
) -> tuple[str, p.ContextBlock, str]:
    """(hook event name, the request, workspace) of ``host``'s hook payload (any host's
    when None).

    Raises:
        PayloadError: it is not JSON, not an object, not one of the host's context events,
            or lacks what a context hook sends.
    """
    events = _ANY_HOST if host is None else HOST_EVENTS[host]
    if len(raw) > MAX_PAYLOAD:
        raise PayloadError(f"the payload is over {MAX_PAYLOAD} bytes")
    try:
        obj = read_json(raw.decode("utf-8", "replace"))
    except InputError as exc:
        raise PayloadError(f"the payload is {exc}") from None
    if not isinstance(obj, dict):
        raise PayloadError("the payload is not a JSON object")
    name = _text(obj.get("hook_event_name"))
    if name not in events:
        whose = f"{host}'s" if host else "a"
        raise PayloadError(
            f"hook_event_name {name!r} is not {whose} context event ({', '.join(events)})"
        )
    session = _text(obj.get("session_id"))
    if session is None:
        raise PayloadError("the payload has no session_id")
    prompt = None
    if events[name] == "prompt":
        said = obj.get("prompt")
        prompt = _text(user_words(said) if isinstance(said, str) else None)
        if prompt is None:
            raise PayloadError(f"the {name} payload has no prompt")
        prompt = prompt[:QUERY_CHARS]
    cwd = _text(obj.get("cwd"))
    workspace = find_workspace(Path(cwd)) if cwd else find_workspace()
    req = p.ContextBlock(event=events[name], session_id=session[:200], prompt=prompt, budget=budget)
    return name, req, workspace


def hook_output(event_name: str, text: str) -> dict[str, Any]:
    """What a host's context hook prints for ``text`` (the module says whose shape it is)."""
    return {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": text}}


async def context(args: argparse.Namespace) -> int:
    """Print the host's context output for stdin's payload; always 0 (see the module)."""

    def fail(why: str) -> int:
        if args.verbose:
            print(f"recallctl context: {why}", file=sys.stderr)
        return 0

    try:
        return await _inject(args, fail)
    except Exception:
        # A bug of ours is no reason to stop the host's agent.
        return fail(traceback.format_exc())


async def _inject(args: argparse.Namespace, fail: Callable[[str], int]) -> int:
    try:
        name, req, workspace = read_payload(args.stdin_bytes, args.budget, args.host)
    except PayloadError as exc:
        return fail(str(exc))
    reply: p.ContextInjected | None = None
    with anyio.move_on_after(CONTEXT_BUDGET_S):
        try:
            async with connect(
                agent=args.agent,
                workspace=args.workspace or workspace,
                client="recallctl",
                path=args.socket,
                timeout=CONTEXT_BUDGET_S,
                session=req.session_id,
                **hello_tokens(args),
            ) as rc:
                reply = await rc.call(req, p.ContextInjected)
        except DaemonUnavailable as exc:
            return fail(f"no context: {exc}")
        except RemoteError as exc:
            return fail(f"no context: {exc.code}: {exc.message}")
        except (OSError, TimeoutError) as exc:
            return fail(f"no context: {exc}")
    if reply is None:
        return fail(f"no context: recalld did not answer within {CONTEXT_BUDGET_S:g}s")
    if args.json:
        print_json_line(reply)
    elif reply.text:
        print_json_line(hook_output(name, reply.text))
    return 0
