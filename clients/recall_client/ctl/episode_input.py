"""What ``recallctl capture`` reads, turned into :class:`~recall_client.protocol.CaptureEpisode`.

Two shapes are accepted, one JSON object each (a single object, a JSON array, or JSON Lines):

- a **hook payload** from an agent host, recognised by ``hook_event_name``. Claude Code, Codex
  and Gemini CLI hand one on stdin to every hook command: ``session_id``, ``cwd``,
  ``hook_event_name`` and per event ``tool_name``/``tool_input``/``tool_response``,
  ``error``, ``prompt``, ``reason``... It becomes an episode of the hook's session, in the git
  root of its ``cwd``; the summary is a compact description (the daemon redacts secrets
  before storing it). An event none of the hosts documents is ignored, and so is a call of
  recalld's own MCP tools (a search is not work done).
- a **plain episode object** with CaptureEpisode's own field names (``summary``, ``tool``,
  ``status``, ``session_id``, ...; ``vault`` is accepted for ``workspace``).

Whose payload it is decides how a tool call's outcome is read (``--host``, else its shape:
Gemini CLI's carry a ``timestamp``, Codex's a ``turn_id``, anything else is read as Claude
Code's):

- Claude Code runs PostToolUse only after a call succeeded (a failure is PostToolUseFailure,
  with ``error``): ``ok`` unless the response itself says otherwise;
- Gemini CLI's AfterTool follows every call: its ``tool_response`` is ``{llmContent,
  returnDisplay, error?}``, and a shell command's exit code is an ``Exit Code: N`` line of
  ``llmContent``; without an error or a non-zero code the call succeeded;
- Codex's PostToolUse gives only what the command printed (a plain string), not whether it
  succeeded: :data:`~recall_client.protocol.UNKNOWN_STATUS`, never ``ok``, unless the output
  itself opens with an error.

Input is read the way a hook's must be, never refused for its bytes: undecodable bytes and
lone surrogate escapes (``"\\ud83d"``, valid JSON) become U+FFFD.

Nothing here talks to the daemon; :func:`episodes_from_text` is pure, so tests and other
hosts' adapters can use it directly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from .. import protocol as p
from ..paths import find_workspace

__all__ = [
    "RECALLD_SERVER",
    "ROLLUP_EVENTS",
    "Ignored",
    "InputError",
    "Item",
    "RollUp",
    "episode_from_hook",
    "episode_from_object",
    "episodes_from_text",
    "host_of",
    "read_json",
    "session_from_hook",
    "user_words",
]

SUMMARY_MAX = 600
_DETAIL_MAX = 240

# The name `recallctl connect` gives recalld's MCP server in every host's config: the hosts
# name its tools after it, and capture leaves those calls out.
RECALLD_SERVER = "recalld"

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

# Every event capture records, by the hosts' names; any other is ignored.
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
    "PreCompress": "compaction",
}
_GEMINI_EVENTS = frozenset({"BeforeTool", "AfterTool", "BeforeAgent", "AfterAgent", "PreCompress"})
# The event that ends a host's session, after which capture rolls the session up into an
# experience. Codex has no session end: its Stop (each turn's end) keeps the experience current.
ROLLUP_EVENTS = {"claude-code": "SessionEnd", "codex": "Stop", "gemini": "SessionEnd"}
# Hosts whose tool-call payload says when a call failed, so one that does not say succeeded.
_REPORTS_FAILURE = frozenset({"claude-code", "gemini"})
# Tools whose results are someone else's words: trust scoring weighs the source.
_WEB_TOOLS = frozenset({"WebFetch", "WebSearch"})

# recalld's context block as a host quotes it back in a prompt (Gemini CLI's BeforeAgent and
# AfterAgent carry the prompt with the block its hooks injected).
_INJECTED_OPEN = "<hook_context>"
_INJECTED_CLOSE = "</hook_context>"
# What JSON decoding leaves of an unpaired \ud8xx..\udfxx escape: no encoder takes it.
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class InputError(ValueError):
    """One input object could not be read as an episode; the message says why."""


@dataclass(frozen=True)
class RollUp:
    """A session a host's payload ended (:data:`ROLLUP_EVENTS`): capture rolls it up into
    its experience once the episodes before it are recorded."""

    session: str
    workspace: str | None


class Ignored(ValueError):
    """One input object is no episode to record (an unknown event, a call of recalld's own
    tools); the message says why."""


Item = p.CaptureEpisode | RollUp | InputError | Ignored


def episodes_from_text(text: str, host: str | None = None) -> list[Item]:
    """Every episode in ``text``: one JSON object, a JSON array of them, or JSON Lines, hook
    payloads read as ``host``'s (see the module; None: by their shape).

    A line that cannot be used yields an :class:`InputError` in its place (naming the line),
    so one bad line does not lose the others; one left out on purpose an :class:`Ignored`;
    a payload that ends its session is followed by its :class:`RollUp`.
    """
    stripped = text.strip()
    if not stripped:
        return [InputError("no input: expected a JSON object or JSON Lines on stdin")]
    try:
        whole = read_json(stripped)
    except InputError:
        whole = None
        objects: list[tuple[str, Any]] = []
        for n, line in enumerate(stripped.splitlines(), 1):
            if not line.strip():
                continue
            try:
                objects.append((f"line {n}", read_json(line)))
            except InputError as exc:
                objects.append((f"line {n}", InputError(f"line {n}: {exc}")))
    else:
        items = whole if isinstance(whole, list) else [whole]
        objects = [
            (f"item {n}" if isinstance(whole, list) else "input", obj)
            for n, obj in enumerate(items, 1)
        ]
    out: list[Item] = []
    for where, obj in objects:
        if isinstance(obj, InputError):
            out.append(obj)
            continue
        try:
            episode = episode_from_object(obj, host)
        except InputError as exc:
            out.append(InputError(f"{where}: {exc}"))
            continue
        except Ignored as exc:
            out.append(Ignored(f"{where}: {exc}"))
            continue
        out.append(episode)
        if _ends_session(obj, host) and episode.session_id is not None:
            out.append(RollUp(episode.session_id, episode.workspace))
    return out


def _ends_session(obj: dict[str, Any], host: str | None) -> bool:
    event = obj.get("hook_event_name")
    return event is not None and event == ROLLUP_EVENTS.get(host_of(obj, host))


def read_json(text: str) -> Any:
    """One JSON value, its lone surrogates replaced (a hook's payload, whatever it quotes).

    Raises:
        InputError: not JSON, or nested deeper than the decoder goes.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc.msg})") from None
    except RecursionError:
        raise InputError("not JSON this client reads (nested too deeply)") from None
    if _SURROGATE_ESCAPE.search(text) is None:
        return value
    # Paired escapes were joined into one character; any surrogate left stands alone. Once
    # through the encoder (which keeps it), replaced, and decoded again.
    return json.loads(_SURROGATE.sub("\ufffd", json.dumps(value, ensure_ascii=False)))


def episode_from_object(obj: Any, host: str | None = None) -> p.CaptureEpisode:
    """One hook payload (``host``'s, see the module) or plain episode object as a request.

    Raises:
        InputError: not an object, unknown fields, or a value out of bounds.
        Ignored: a hook event capture does not record, or a call of recalld's own tools.
    """
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object, got {type(obj).__name__}")
    if "hook_event_name" in obj:
        return episode_from_hook(obj, host)
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


def host_of(payload: dict[str, Any], host: str | None = None) -> str:
    """Whose hook payload this is: ``host`` when given, else by its shape (see the module)."""
    if host is not None:
        return host
    if "timestamp" in payload or payload.get("hook_event_name") in _GEMINI_EVENTS:
        return "gemini"
    if "turn_id" in payload:
        return "codex"
    return "claude-code"


def episode_from_hook(payload: dict[str, Any], host: str | None = None) -> p.CaptureEpisode:
    """A hook payload of ``host`` (None: by its shape) as an episode.

    Raises:
        InputError: the payload has no usable ``hook_event_name``.
        Ignored: an event capture does not record, or a call of recalld's own tools.
    """
    event = payload.get("hook_event_name")
    if not isinstance(event, str) or not event:
        raise InputError("hook_event_name must be a non-empty string")
    if event not in _EVENT_TYPES:
        raise Ignored(f"hook event {event[:64]!r} is not one capture records")
    host = host_of(payload, host)
    session = _text(payload.get("session_id"))
    cwd = _text(payload.get("cwd"))
    fields: dict[str, Any] = {
        "channel": "hook",
        "episode_type": _EVENT_TYPES[event],
        "session_id": session,
        "workspace": find_workspace(Path(cwd)) if cwd else None,
        "tags": [f"hook:{event}"],
    }
    tool = _text(payload.get("tool_name"))
    if tool is not None:
        if _is_recalld_tool(tool, payload):
            raise Ignored(f"{tool[:128]} is recalld's own tool")
        fields.update(_tool_fields(event, host, tool, payload))
        tool_use_id = _text(payload.get("tool_use_id"))
        if session and tool_use_id:
            # The same call reported twice (a retried hook) is stored once.
            fields["idempotency_key"] = f"hook:{session}:{tool_use_id}:{event}"[:200]
    else:
        fields["summary"] = _event_summary(event, payload)
        fields["status"] = "error" if event == "StopFailure" else "ok"
        if _EVENT_TYPES[event] == "prompt":
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


def user_words(prompt: str) -> str:
    """``prompt`` without the context blocks hooks injected into it (recalld's among them):
    what the user typed."""
    kept: list[str] = []
    at = 0
    while (start := prompt.find(_INJECTED_OPEN, at)) >= 0:
        end = prompt.find(_INJECTED_CLOSE, start)
        if end < 0:
            break
        kept.append(prompt[at:start])
        at = end + len(_INJECTED_CLOSE)
    kept.append(prompt[at:])
    return "".join(kept).strip()


def _is_recalld_tool(tool: str, payload: dict[str, Any]) -> bool:
    """A call of recalld's own MCP tools: Claude Code and Codex name them
    ``mcp__recalld__TOOL``, Gemini CLI ``mcp_recalld_TOOL`` with ``mcp_context``."""
    context = payload.get("mcp_context")
    if isinstance(context, dict) and context.get("server_name") == RECALLD_SERVER:
        return True
    return tool.startswith((f"mcp__{RECALLD_SERVER}__", f"mcp_{RECALLD_SERVER}_"))


def _tool_fields(event: str, host: str, tool: str, payload: dict[str, Any]) -> dict[str, Any]:
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
    if _EVENT_TYPES[event] == "tool_intent":
        fields.update(status="started", summary=what)
        return fields
    status, error_code, detail = _outcome(event, host, payload, response)
    fields["status"] = status
    fields["error_code"] = error_code
    outcome = {"error": "failed", p.UNKNOWN_STATUS: "outcome unknown"}.get(status, status)
    fields["summary"] = f"{what} -> {outcome}: {detail}" if detail else f"{what} -> {outcome}"
    if response is not None:
        fields["result_size"] = len(json.dumps(response, ensure_ascii=False).encode())
    duration = payload.get("duration_ms")
    if duration is None and isinstance(response, dict):
        duration = response.get("durationMs", response.get("duration_ms"))
    if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
        fields["duration_ms"] = float(duration)
    return fields


Outcome = tuple[str, str | None, str]  # (status, error_code, one line of detail)


def _outcome(event: str, host: str, payload: dict[str, Any], response: Any) -> Outcome:
    """How a finished tool call went, as ``host`` reports it (see the module)."""
    if event == "PostToolUseFailure":
        error = payload.get("error")
        if payload.get("is_interrupt") is True:
            return "error", "interrupted", _gist(error) or "interrupted"
        return "error", _exit_code(error) or "tool_error", _gist(error)
    silent = "ok" if host in _REPORTS_FAILURE else p.UNKNOWN_STATUS
    if isinstance(response, dict) and "llmContent" in response:
        return _gemini_outcome(response)
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
            return "error", "interrupted", _gist(response.get("stderr")) or "interrupted"
        if response.get("is_error") is True or response.get("success") is False or error:
            detail = _gist(error) or _gist(response.get("stderr"))
            code_name = _text(response.get("error_code")) or _exit_code(error) or "tool_error"
            return "error", code_name, detail
        if code:
            return "error", f"exit_{code}", _gist(response.get("stderr"))
        # What a command printed last is usually its verdict ("4 passed in 0.31s").
        last = _gist(response.get("stdout"), last_only=True)
        return ("ok" if code == 0 else silent), None, last
    if isinstance(response, str):
        if re.match(r"(?i)\s*error\b", response):
            return "error", "tool_error", _gist(response)
        return silent, None, _gist(response, last_only=silent == "ok")
    return silent, None, ""


# Gemini CLI's shell tool reports its command's outcome in lines of llmContent after the
# output; the last such line is the tool's own (the output may print one too).
_GEMINI_FIELD = re.compile(r"^(Exit Code|Signal|Error): *(\S[^\n]*)$", re.M)
_GEMINI_META = re.compile(
    r"^(?:Command|Directory|Exit Code|Signal|Error|Background PIDs|Process Group PGID):.*$\n?",
    re.M,
)
_UNTRUSTED = re.compile(r"</?untrusted_context>")


def _gemini_outcome(response: dict[str, Any]) -> Outcome:
    content = response.get("llmContent")
    if isinstance(content, list):  # Gemini's parts: the text ones say it
        content = "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    text = _UNTRUSTED.sub("", content) if isinstance(content, str) else ""
    said = {name: value.strip() for name, value in _GEMINI_FIELD.findall(text)}
    said = {name: value for name, value in said.items() if value != "(none)"}
    display = response.get("returnDisplay")
    output = display if isinstance(display, str) else _GEMINI_META.sub("", text)
    output = output.removeprefix("Output:").strip()
    error = response.get("error")
    code = said.get("Exit Code")
    if code is not None and code != "0":
        return "error", f"exit_{code}"[:128], _gist(output) or said.get("Error", "")
    if "Signal" in said:
        return "error", f"signal_{said['Signal']}"[:128], _gist(output)
    if error:
        kind = error.get("type") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        code_name = _text(kind) or _exit_code(message) or "tool_error"
        return "error", code_name[:128], _gist(message) or _gist(output)
    return "ok", None, _gist(output, last_only=True)


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
    prompt = payload.get("prompt")
    said = {**payload, "prompt": user_words(prompt) if isinstance(prompt, str) else prompt}
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
            if (line := _first_line(said.get(key), _DETAIL_MAX * 2))
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
        "PreCompress": "context compaction",
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
