"""Trust scoring: how far a stored text can be believed, and whether it is unsafe to serve.

Trust starts at 1.0 for a first-party note and is lowered by what the text does: each
instruction-shaped signal the scorer finds (``domain.instructions``: words that read as
orders to the agent that reads them) costs its penalty, and so do quoting someone else's
authority and coming from outside the agent's own hand.

Instruction-shaped text lands in the low-trust band (under the readers' ``LOW_TRUST``, 0.8:
never injected by the context hooks, flagged where it is served) but, on its own, above the
floor (the policy's, 0.3): a memory_search that asks for it still finds it, flagged with
its signals. Text that moves secrets out (exfiltration) falls below the floor, and with an
override or from an outside source to nothing: blocked.
"""

from __future__ import annotations

import re

from ..domain.instructions import instruction_signals
from ..domain.policy import Assessment

__all__ = ["INSTRUCTION_CAP", "PENALTIES", "QUOTED_PENALTY", "assess", "score"]

# Quoted authority: someone else said it. It is marked, and trusted a little less.
QUOTED_PENALTY = 0.15

# What each instruction signal costs; penalties add up to at most INSTRUCTION_CAP.
PENALTIES: dict[str, float] = {
    "override": 0.6,
    "addresses_assistant": 0.6,
    # Each of these has an innocent use ("System: Ubuntu 24.04" heading a note, the rustup
    # installer's curl | sh, text pasted from a right-to-left editor): alone they cost less.
    "role_marker": 0.45,
    "pipe_to_shell": 0.45,
    "forged_structure": 0.45,
    "hidden_characters": 0.3,
    # Not capped: moving secrets out is an order however it is phrased, below the floor.
    "exfiltration": 0.75,
}
# What instruction-shaped text (exfiltration aside) costs at most: it stays above the floor.
INSTRUCTION_CAP = 0.6

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
    penalty = min(
        INSTRUCTION_CAP, sum(PENALTIES[name] for name in reasons if name != "exfiltration")
    )
    if "exfiltration" in reasons:
        penalty += PENALTIES["exfiltration"]
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
