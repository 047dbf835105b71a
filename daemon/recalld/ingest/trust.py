"""Trust scoring: how far a stored text can be believed, and whether it is unsafe to serve.

Trust starts at 1.0 for a first-party note and is lowered by what the text does: text that
gives its reader instructions (prompt-injection markers) or quotes someone else's authority.
High-risk content lands below the readers' floor (the policy's, 0.3); content that tries to
take over the reader outright is blocked.
"""

from __future__ import annotations

import re

from ..domain.policy import Assessment
from .prefilter import any_word

__all__ = ["QUOTED_PENALTY", "assess", "score"]

# Quoted authority: someone else said it. It is marked, and trusted a little less.
QUOTED_PENALTY = 0.15

# (reason, pattern, penalty). Penalties add up; the sum is subtracted from 1.0.
_MARKERS: list[tuple[str, re.Pattern[str], float]] = [
    (
        "override_instructions",
        re.compile(
            r"(?i)\b(?:ignore|disregard|forget|override)\b[^.\n]{0,40}\b(?:previous|prior|above|"
            r"earlier|all|any|your|the)\b[^.\n]{0,20}\b(?:instructions?|prompts?|rules|guidelines|"
            r"directives|context)\b"
        ),
        # Alone it is the canonical injection: enough to fall below the floor.
        0.75,
    ),
    (
        "role_hijack",
        re.compile(
            r"(?i)\b(?:you are now|from now on,? you|act as|pretend (?:to be|you are)|"
            r"new (?:system )?instructions?:|system prompt:?)"
        ),
        0.45,
    ),
    (
        "fake_system_turn",
        # [ \t], not \s: "\s*" at every line start would rescan every blank line after it.
        re.compile(r"(?im)^[ \t]*+(?:<\|?(?:system|im_start)\|?>|\[?system\]?:|###[ \t]*+system)"),
        0.45,
    ),
    (
        "exfiltration",
        re.compile(
            # ".env" starts with a non-word character, so it sits outside the \b...\b group
            # (inside it never matched after a space).
            r"(?i)\b(?:send|post|upload|exfiltrate|leak|email)\b[^.\n]{0,40}(?:\b(?:secrets?|"
            r"tokens?|credentials?|api keys?|passwords?|ssh keys?)\b|\.env\b)"
        ),
        # Moving secrets out is an order to the reader however it is phrased: below the floor.
        0.75,
    ),
    (
        "addresses_the_reader",
        re.compile(
            r"(?i)(?:\b(?:note to|attention|dear)\b[^.\n]{0,20}\b(?:ai|assistants?|agents?|models?"
            r"|llms?|claude|chatgpt|copilot)\b|\b(?:ai|assistants?|agents?|models?|llms?)\b"
            r"[^.\n]{0,20}\breading this\b|\bwhen you read this\b|\bif you are an? "
            r"(?:ai|assistant|agent|llm|language model)\b)"
        ),
        0.35,
    ),
    (
        "imperative_to_reader",
        re.compile(
            r"(?i)\b(?:assistant|ai|agent|model|claude|you)\b[^.\n]{0,15}\b(?:must|should always|"
            r"shall|are required to|never reveal)\b"
        ),
        # Colleagues write "you must run the tests" too: alone it costs little; it weighs
        # with the markers above.
        0.1,
    ),
    (
        "dangerous_command",
        re.compile(r"(?i)(?:rm\s++-rf\s++[/~]|curl[^|\n]{0,80}\|\s*+(?:ba)?sh|chmod\s++777\s++/)"),
        0.3,
    ),
    (
        "quoted_authority",
        re.compile(
            r"(?i)(?:\b(?:according to|as (?:\w+ ){0,2}said|(?:he|she|they) said|quote:)|^\s*+>\s)"
        ),
        0.15,
    ),
]

# Every marker above needs one of these words; one scan for them (see .prefilter; on the
# lowercased text: re's IGNORECASE alternations are many times slower) spares the full set of
# patterns for the many texts that contain none. This runs on every capture. A line that
# starts with ">" is "\n[ \t]*>" in a text scanned with a newline put before it: an anchor
# (^) among the words would keep re from skipping ahead to their first characters.
_TRIGGER_WORDS = (
    "ignore", "disregard", "forget", "override", "you are now", "from now on", "act as",
    "pretend", "instruction", "system", "send", "post", "upload", "exfiltrat", "leak",
    "email", "must", "should always", "shall", "required to", "never reveal", r"rm\s+-rf",
    "curl", "chmod", "according to", "said", "quote:", r"\n[ \t]*>", "reading this",
    "when you read this", "note to", "attention", "dear", "if you are a",
)  # fmt: skip
_TRIGGERS = any_word(_TRIGGER_WORDS)

# Sources whose text comes from outside the agent's own hand.
_SOURCE_PENALTY = {"web": 0.2, "external": 0.2, "email": 0.2, "tool_output": 0.1, "quoted": 0.15}

_BLOCK_AT = 0.05


def assess(text: str, *, source: str | None = None) -> tuple[float, bool, list[str]]:
    """Score ``text``: (trust in 0..1, blocked, reasons)."""
    reasons: list[str] = []
    penalty = 0.0
    if _TRIGGERS.search("\n" + text.lower()) is not None:
        for reason, pattern, weight in _MARKERS:
            if pattern.search(text):
                reasons.append(reason)
                penalty += weight
    if source is not None and source.lower() in _SOURCE_PENALTY:
        reasons.append(f"source:{source.lower()}")
        penalty += _SOURCE_PENALTY[source.lower()]
    trust = round(max(0.0, 1.0 - penalty), 3)
    blocked = trust <= _BLOCK_AT and (
        "override_instructions" in reasons or "exfiltration" in reasons
    )
    return trust, blocked, reasons


def score(text: str, source: str | None = None, authority: str = "first-party") -> Assessment:
    """The trust of a record's text as written by ``authority`` (a quoted memory, someone
    else's words, is trusted less)."""
    trust, blocked, reasons = assess(text, source=source)
    if authority == "quoted" and "quoted_authority" not in reasons:
        trust = round(max(0.0, trust - QUOTED_PENALTY), 3)
        reasons.append("authority:quoted")
    return Assessment(trust, blocked, tuple(reasons))
