"""Packing a context block: ranked candidates in, the lines that fit a token budget out.

Pure (no store, no model): the context reader hands it each section's candidates in the
ranker's order and a token counter, and gets back what to inject. Three steps:

- **rank**: sections take turns, each giving its next best candidate, in the order the
  sections are listed (a long first section cannot starve the others);
- **dedupe**: a candidate whose id was given earlier in the session, or was taken already
  in this block (a fact both current and retrieved), or whose text equals a taken one's, is
  skipped;
- **fit**: a candidate is taken when its line, and its section's heading if it is the
  section's first, fit in what the budget has left; one that does not is left out and the
  next is tried, so a long line cannot keep short ones out.

A block's lines are joined by newlines; the counter counts each line with the newline that
ends it (``host_tokens.count``), so the block's text costs at most the sum of its lines'.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field

__all__ = ["Candidate", "Packed", "Section", "pack"]

TokenCounter = Callable[[Sequence[str]], list[int]]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One thing the block may say: its id, its line as injected, and what the reply says
    of it beside the line."""

    id: str
    line: str
    drift: str | None = None
    contested: bool = False
    # A memory's: the use it is recorded as (None for lessons and episodes).
    memory_id: str | None = None


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    heading: str
    candidates: Sequence[Candidate]


@dataclass(slots=True)
class Packed:
    """What fit: (section name, candidate, tokens) in block order, the block's text and
    tokens, and how many candidates were left out for the budget or given before."""

    items: list[tuple[str, Candidate, int]] = field(default_factory=list)
    text: str = ""
    tokens: int = 0
    left_out: int = 0
    given_before: int = 0


def _normal(line: str) -> str:
    return " ".join(line.split()).casefold()


def pack(
    preamble: str,
    sections: Sequence[Section],
    budget: int,
    given: Container[str],
    count: TokenCounter,
) -> Packed:
    """The block for ``budget`` tokens: ``preamble`` (only when something else fits) and
    the sections' lines under their headings, each section's in the order given."""
    out = Packed()
    if budget <= 0:
        return out
    order: list[tuple[int, Candidate]] = []
    depth = max((len(s.candidates) for s in sections), default=0)
    for i in range(depth):
        order += [(n, s.candidates[i]) for n, s in enumerate(sections) if i < len(s.candidates)]
    fresh: list[tuple[int, Candidate]] = []
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    for n, cand in order:
        if cand.id in given:
            out.given_before += 1
            continue
        key = _normal(cand.line)
        if cand.id in seen_ids or key in seen_text:
            continue
        seen_ids.add(cand.id)
        seen_text.add(key)
        fresh.append((n, cand))
    if not fresh:
        return out
    counts = count([preamble, *(s.heading for s in sections), *(c.line for _, c in fresh)])
    preamble_tokens, heading_tokens = counts[0], counts[1 : 1 + len(sections)]
    line_tokens = counts[1 + len(sections) :]
    left = budget - preamble_tokens
    opened: set[int] = set()
    taken: list[tuple[int, Candidate, int]] = []
    for (n, cand), tokens in zip(fresh, line_tokens, strict=True):
        cost = tokens + (0 if n in opened else heading_tokens[n])
        if cost > left:
            out.left_out += 1
            continue
        left -= cost
        opened.add(n)
        taken.append((n, cand, tokens))
    if not taken:
        return out
    lines = [preamble]
    for n, section in enumerate(sections):
        mine = [(cand, tokens) for m, cand, tokens in taken if m == n]
        if not mine:
            continue
        lines.append(section.heading)
        for cand, tokens in mine:
            lines.append(cand.line)
            out.items.append((section.name, cand, tokens))
    out.text = "\n".join(lines)
    out.tokens = budget - left
    return out
