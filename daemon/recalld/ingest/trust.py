"""Trust scoring: how far a stored text can be believed, and whether it is unsafe to serve.

Trust starts at 1.0 for a first-party note and is lowered by what the text does: each
instruction-shaped signal the scorer finds (``domain.instructions``: orders to the agent
that reads it) costs its penalty, and so does quoting someone else's authority or coming
from outside the agent's own hand. High-risk content lands below the readers' floor (the
policy's, 0.3); content that tries to take over the reader outright is blocked.
"""

from __future__ import annotations

import re

from ..domain.instructions import instruction_signals
from ..domain.policy import Assessment

__all__ = ["PENALTIES", "QUOTED_PENALTY", "assess", "score"]

# Quoted authority: someone else said it. It is marked, and trusted a little less.
QUOTED_PENALTY = 0.15

# What each signal costs; penalties add up and the sum is subtracted from 1.0.
PENALTIES: dict[str, float] = {
    # Alone, each of these three is the canonical injection: enough to fall below the floor.
    "override": 0.75,
    "addresses_assistant": 0.75,
    "exfiltration": 0.75,
    # Each of these has an innocent use ("System: Ubuntu 24.04" heading a note, the rustup
    # installer's curl | sh, text pasted from a right-to-left editor): alone they cost
    # less, and together with another they fall below the floor.
    "role_marker": 0.45,
    "pipe_to_shell": 0.45,
    "forged_structure": 0.45,
    "hidden_characters": 0.3,
}

# Signals that make a text that fell to nothing blocked rather than only ineligible.
_TAKEOVER = frozenset({"override", "exfiltration"})

# Read in the lowercased text: re's IGNORECASE alternations are many times slower.
_QUOTED = re.compile(
    r"\b(?:according to|as (?:\w+ ){0,2}said|(?:he|she|they) said|quote:)|^\s*+>\s"
)

# Sources whose text comes from outside the agent's own hand.
_SOURCE_PENALTY = {"web": 0.2, "external": 0.2, "email": 0.2, "tool_output": 0.1, "quoted": 0.15}

_BLOCK_AT = 0.05


def assess(text: str, *, source: str | None = None) -> tuple[float, bool, list[str]]:
    """Score ``text``: (trust in 0..1, blocked, reasons).

    The reasons are the instruction signals found (``domain.instructions.SIGNALS``), then
    ``quoted_authority`` and ``source:<source>`` where they apply."""
    reasons = list(instruction_signals(text))
    penalty = sum(PENALTIES[name] for name in reasons)
    if _QUOTED.search(text.lower()) is not None:
        reasons.append("quoted_authority")
        penalty += QUOTED_PENALTY
    if source is not None and source.lower() in _SOURCE_PENALTY:
        reasons.append(f"source:{source.lower()}")
        penalty += _SOURCE_PENALTY[source.lower()]
    trust = round(max(0.0, 1.0 - penalty), 3)
    blocked = trust <= _BLOCK_AT and not _TAKEOVER.isdisjoint(reasons)
    return trust, blocked, reasons


def score(text: str, source: str | None = None, authority: str = "first-party") -> Assessment:
    """The trust of a record's text as written by ``authority`` (a quoted memory, someone
    else's words, is trusted less)."""
    trust, blocked, reasons = assess(text, source=source)
    if authority == "quoted" and "quoted_authority" not in reasons:
        trust = round(max(0.0, trust - QUOTED_PENALTY), 3)
        reasons.append("authority:quoted")
    return Assessment(trust, blocked, tuple(reasons))
