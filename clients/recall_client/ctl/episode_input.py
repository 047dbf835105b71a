"""What ``recallctl capture`` reads, turned into :class:`~recall_client.protocol.CaptureEpisode`.

Two shapes are accepted, one JSON object each (a single object, a JSON array, or JSON Lines):

- a **hook payload** from an agent host, recognised by ``hook_event_name``. Claude Code hands
  one on stdin to every hook command (PostToolUse, PostToolUseFailure, Stop, SessionEnd, ...):
  ``session_id``, ``cwd``, ``transcript_path``, ``hook_event_name`` and per event
  ``tool_name``/``tool_input``/``tool_response``/``tool_use_id``, ``error``, ``prompt``,
  ``reason``... It becomes an episode of the hook's session, in the git root of its ``cwd``;
  the summary is a compact description (the daemon redacts secrets before storing it).
- a **plain episode object** with CaptureEpisode's own field names (``summary``, ``tool``,
  ``status``, ``session_id``, ...; ``vault`` is accepted for ``workspace``).

Nothing here talks to the daemon; :func:`episodes_from_text` is pure, so tests and other
hosts' adapters can use it directly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from .. import protocol as p
from ..paths import find_workspace

__all__ = [
    "InputError",
    "episode_from_hook",
    "episode_from_object",
    "episodes_from_text",
    "session_from_hook",
]

SUMMARY_MAX = 600
_DETAIL_MAX = 240

# tool_input keys that say what a call was about, most telling first.
_INPUT_KEYS = (
    "command",
    "file_path",
    "notebook_path",
    "path",
    "pattern",
    "url",
    "query",
    "description",
    "prompt",
    "skill",
    "subagent_type",
)
# tool_input keys that name a file the call read or wrote (Read, Edit, Write, MultiEdit,
# NotebookEdit); a session's roll-up lists them as the experience's files.
_FILE_KEYS = ("file_path", "notebook_path")

_EVENT_TYPES = {
    "PreToolUse": "tool_intent",
    "PostToolUse": "tool_call",
    "PostToolUseFailure": "tool_call",
    "UserPromptSubmit": "prompt",
    "Stop": "turn_end",
    "StopFailure": "turn_end",
    "SubagentStop": "subagent_end",
    "SessionStart": "session_start",
    "SessionEnd": "session_end",
    "PreCompact": "compaction",
    "PostCompact": "compaction",
    "Notification": "notification",
    # Gemini CLI's names for the same moments.
    "BeforeTool": "tool_intent",
    "AfterTool": "tool_call",
    "BeforeAgent": "prompt",
    "AfterAgent": "turn_end",
}
# Tools whose results are someone else's words: trust scoring weighs the source.
_WEB_TOOLS = frozenset({"WebFetch", "WebSearch"})


class InputError(ValueError):
    """One input object could not be read as an episode; the message says why."""


def episodes_from_text(text: str) -> list[p.CaptureEpisode | InputError]:
    """Every episode in ``text``: one JSON object, a JSON array of them, or JSON Lines.

    A line that cannot be used yields an :class:`InputError` in its place (naming the line),
    so one bad line does not lose the others.
    """
    stripped = text.strip()
    if not stripped:
        return [InputError("no input: expected a JSON object or JSON Lines on stdin")]
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        whole = None
        objects: list[tuple[str, Any]] = []
        for n, line in enumerate(stripped.splitlines(), 1):
            if not line.strip():
                continue
            try:
                objects.append((f"line {n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                objects.append((f"line {n}", InputError(f"line {n}: not JSON ({exc.msg})")))
    else:
        items = whole if isinstance(whole, list) else [whole]
        objects = [
            (f"item {n}" if isinstance(whole, list) else "input", obj)
            for n, obj in enumerate(items, 1)
        ]
    out: list[p.CaptureEpisode | InputError] = []
    for where, obj in objects:
        if isinstance(obj, InputError):
            out.append(obj)
            continue
        try:
            out.append(episode_from_object(obj))
        except InputError as exc:
            out.append(InputError(f"{where}: {exc}"))
    return out


def episode_from_object(obj: Any) -> p.CaptureEpisode:
    """One hook payload or plain episode object as a request.

    Raises:
        InputError: not an object, unknown fields, or a value out of bounds.
    """
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}")
    if "hook_event_name" in obj:
        return episode_from_hook(obj)
    fields = dict(obj)
    if "vault" in fields:
        fields["workspace"] = fields.pop("vault")
    fields.setdefault("channel", "cli")
    unknown = sorted(set(fields) - _PLAIN_FIELDS)
    if unknown:
        raise InputError(
            f"unknown field(s) {', '.join(unknown)}; an episode has "
            f"{', '.join(sorted(_PLAIN_FIELDS))} (or pass a hook payload with hook_event_name)"
        )
    return _convert(fields)


# CaptureEpisode's fields minus the request id: a plain object may set any of them.
_PLAIN_FIELDS = frozenset(f for f in p.CaptureEpisode.__struct_fields__ if f != "id")


def _convert(fields: dict[str, Any]) -> p.CaptureEpisode:
    try:
        return msgspec.convert(fields, p.CaptureEpisode)
    except msgspec.ValidationError as exc:
        raise InputError(str(exc)) from None


def episode_from_hook(payload: dict[str, Any]) -> p.CaptureEpisode:
    """A Claude Code hook payload (or one of the same shape) as an episode.

    Raises:
        InputError: the payload has no usable ``hook_event_name``.
    """
    event = payload.get("hook_event_name")
    if not isinstance(event, str) or not event:
        raise InputError("hook_event_name must be a non-empty string")
    session = _text(payload.get("session_id"))
    cwd = _text(payload.get("cwd"))
    fields: dict[str, Any] = {
        "channel": "hook",
        "episode_type": _EVENT_TYPES.get(event, _snake(event)),
        "session_id": session,
        "workspace": find_workspace(Path(cwd)) if cwd else None,
        "tags": [f"hook:{event}"[:64]],
    }
    tool = _text(payload.get("tool_name"))
    if tool is not None:
        fields.update(_tool_fields(event, tool, payload))
        tool_use_id = _text(payload.get("tool_use_id"))
        if session and tool_use_id:
            # The same call reported twice (a retried hook) is stored once.
            fields["idempotency_key"] = f"hook:{session}:{tool_use_id}:{event}"[:200]
    else:
        fields["summary"] = _event_summary(event, payload)
        fields["status"] = "error" if event == "StopFailure" else "ok"
        if _EVENT_TYPES.get(event) == "prompt":
            fields["source"] = "user"
    # The summary quotes what the tool printed, which may hold a NUL (a binary file's
    # bytes); no request may carry one, so it is kept as U+FFFD rather than lose the step.
    fields["summary"] = _clip(fields["summary"].replace("\x00", "\ufffd"), SUMMARY_MAX)
    return _convert({k: v for k, v in fields.items() if v is not None})


def session_from_hook(obj: Any) -> tuple[str, str | None]:
    """(session_id, workspace) of a hook payload: its session and the git root of its cwd.

    Raises:
        InputError: not a hook payload, or one without a session_id.
    """
    if not isinstance(obj, dict) or "hook_event_name" not in obj:
        raise InputError(
            "expected an agent host's hook payload: a JSON object with "
            "hook_event_name and session_id"
        )
    session = _text(obj.get("session_id"))
    if session is None:
        raise InputError("the hook payload has no session_id")
    cwd = _text(obj.get("cwd"))
    return session, find_workspace(Path(cwd)) if cwd else None


def _tool_fields(event: str, tool: str, payload: dict[str, Any]) -> dict[str, Any]:
    tool_input = payload.get("tool_input")
    response = payload.get("tool_response")
    described = _describe_input(tool_input)
    what = f"{tool}: {described}" if described else tool
    fields: dict[str, Any] = {
        "tool": tool[:128],
        "source": "web" if tool in _WEB_TOOLS else "tool_output",
    }
    if isinstance(tool_input, dict):
        files = [v for key in _FILE_KEYS if isinstance(v := tool_input.get(key), str) and v]
        if files:
            fields["files"] = files
    if _EVENT_TYPES.get(event) == "tool_intent":
        fields.update(status="started", summary=what)
        return fields
    failed, error_code, detail = _outcome(event, payload, response)
    fields["status"] = "error" if failed else "ok"
    fields["error_code"] = error_code
    outcome = "failed" if failed else "ok"
    fields["summary"] = f"{what} -> {outcome}: {detail}" if detail else f"{what} -> {outcome}"
    if response is not None:
        fields["result_size"] = len(json.dumps(response, ensure_ascii=False).encode())
    duration = payload.get("duration_ms")
    if duration is None and isinstance(response, dict):
        duration = response.get("durationMs", response.get("duration_ms"))
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
        fields["duration_ms"] = float(duration)
    return fields


def _outcome(event: str, payload: dict[str, Any], response: Any) -> tuple[bool, str | None, str]:
    """(failed, error_code, one line of detail) of a finished tool call."""
    if event == "PostToolUseFailure":
        error = payload.get("error")
        if payload.get("is_interrupt") is True:
            return True, "interrupted", _gist(error) or "interrupted"
        return True, _exit_code(error) or "tool_error", _gist(error)
    if isinstance(response, dict):
        code = next(
            (
                response[k]
                for k in ("exit_code", "exitCode", "returnCode", "return_code")
                if isinstance(response.get(k), int) and not isinstance(response.get(k), bool)
            ),
            None,
        )
        error = response.get("error")
        if response.get("interrupted") is True:
            return True, "interrupted", _gist(response.get("stderr")) or "interrupted"
        if response.get("is_error") is True or response.get("success") is False or error:
            detail = _gist(error) or _gist(response.get("stderr"))
            code_name = _text(response.get("error_code")) or _exit_code(error) or "tool_error"
            return True, code_name, detail
        if code:
            return True, f"exit_{code}", _gist(response.get("stderr"))
        # What a command printed last is usually its verdict ("4 passed in 0.31s").
        return False, None, _gist(response.get("stdout"), last_only=True)
    if isinstance(response, str) and re.match(r"(?i)\s*error\b", response):
        return True, "tool_error", _gist(response)
    return False, None, ""


_EXIT = re.compile(r"(?i)\b(?:exit|status) code (\d+)")


def _exit_code(error: Any) -> str | None:
    match = _EXIT.search(error) if isinstance(error, str) else None
    return f"exit_{match.group(1)}" if match else None


def _describe_input(tool_input: Any) -> str:
    if isinstance(tool_input, str):
        return _clip(tool_input, _DETAIL_MAX)
    if not isinstance(tool_input, dict):
        return ""
    parts = [
        _clip(" ".join(value.split()), _DETAIL_MAX)
        for key in _INPUT_KEYS
        if isinstance(value := tool_input.get(key), str) and value.strip()
    ][:2]
    if parts:
        return " | ".join(parts)
    return _clip(json.dumps(tool_input, ensure_ascii=False, sort_keys=True), _DETAIL_MAX)


def _event_summary(event: str, payload: dict[str, Any]) -> str:
    detail = next(
        (
            line
            for key in (
                "last_assistant_message",
                "prompt_response",
                "prompt",
                "message",
                "reason",
                "source",
                "trigger",
                "error",
            )
            if (line := _first_line(payload.get(key), _DETAIL_MAX * 2))
        ),
        "",
    )
    label = {
        "Stop": "turn ended",
        "StopFailure": "turn failed",
        "SubagentStop": "subagent finished",
        "SessionStart": "session started",
        "SessionEnd": "session ended",
        "UserPromptSubmit": "prompt",
        "PreCompact": "context compaction",
        "PostCompact": "context compacted",
        "Notification": "notification",
        "BeforeAgent": "prompt",
        "AfterAgent": "turn ended",
    }.get(event, event)
    return f"{label}: {detail}" if detail else label


def _gist(value: Any, *, last_only: bool = False) -> str:
    """The telling lines of an error or output: its first and last (where the exception
    usually is), or only the last."""
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, str):
        return ""
    lines = [line.strip() for line in value.splitlines() if line.strip()]
    if not lines:
        return ""
    if last_only or len(lines) == 1:
        return _clip(lines[-1], _DETAIL_MAX)
    return _clip(f"{_clip(lines[0], _DETAIL_MAX // 2)} … {lines[-1]}", _DETAIL_MAX)


def _first_line(value: Any, limit: int = _DETAIL_MAX) -> str:
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, str):
        return ""
    for line in value.splitlines():
        if line.strip():
            return _clip(line.strip(), limit)
    return ""


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    # Cut between words, never inside one: the daemon redacts the secrets it recognises, and
    # half a token ("ghp_A1b2C3…") no longer looks like the secret it is the start of.
    cut = text[: limit - 1]
    if not text[limit - 1].isspace():
        cut = cut[: max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"), 0)]
    return cut.rstrip() + "…"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()[:64] or "event"
