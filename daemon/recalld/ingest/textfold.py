"""The text redaction's rules read: the letters a reader sees, whatever code points spell them.

A secret can be hidden from a pattern without hiding it from a reader (or from whoever copies
it back out): a zero-width space or a soft hyphen inside the token, fullwidth letters, a
Cyrillic o (U+043E) in ``token=``. ``fold`` gives the text as the rules should see it:

- every character in its NFKC compatibility form (fullwidth and mathematical letters are
  ASCII ones), except the clip mark ``…`` that clipping writes and rules read;
- characters that show nothing dropped (Unicode's default-ignorable code points: format
  characters such as U+200B and U+00AD, variation selectors, fillers);
- the Cyrillic, Greek and Armenian letters drawn like a Latin one (Unicode's confusables,
  the ones with a one-letter Latin prototype) made that letter.

Each character of the folded text remembers the span of the original it came from, so what a
rule finds in the folded text is cut from the original exactly: the stored text is the
original with only the secrets' spans replaced (a dropped character inside a secret goes with
it; one beside it stays). Characters are folded one at a time: a fold never joins two.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from ..domain.glyphs import CONFUSABLES, invisible

__all__ = ["Folded", "fold"]

_CLIP_MARK = "…"
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


@lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    if invisible(ch):
        return ""
    if ch == _CLIP_MARK:
        return ch
    return unicodedata.normalize("NFKC", ch).translate(CONFUSABLES)


@dataclass(slots=True)
class Folded:
    """A folded text and, where folding changed it, the map back: for each character the
    span of the original it stands for, ``starts[i]:ends[i]``. A replacement keeps the map
    (each character of what replaced a span stands for the whole original span). Without a
    map (folding changed nothing, as for every ASCII text) the text with its replacements
    is itself the original with those spans replaced."""

    text: str
    starts: list[int] | None = None
    ends: list[int] | None = None

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span that ``text[start:end]`` of a mapped text came from (end >
        start)."""
        if self.starts is None or self.ends is None:
            raise ValueError("a text folding left as it was has no map: it is the original")
        return self.starts[start], self.ends[end - 1]

    def replace(self, cuts: list[tuple[int, int, str]]) -> Folded:
        """The text with each ``(start, end, new)`` span replaced; spans in order, apart."""
        text: list[str] = []
        done = 0
        for start, end, new in cuts:
            text += (self.text[done:start], new)
            done = end
        text.append(self.text[done:])
        if self.starts is None or self.ends is None:
            return Folded("".join(text))
        starts: list[int] = []
        ends: list[int] = []
        done = 0
        for start, end, new in cuts:
            starts += self.starts[done:start]
            ends += self.ends[done:start]
            first, last = self.span(start, end)
            starts += [first] * len(new)
            ends += [last] * len(new)
            done = end
        starts += self.starts[done:]
        ends += self.ends[done:]
        return Folded("".join(text), starts, ends)


def fold(text: str) -> Folded:
    """``text`` as the rules read it, with its map back to ``text``."""
    if text.isascii():
        return Folded(text)
    out: list[str] = []
    starts: list[int] = []
    done = 0
    for run in _NON_ASCII.finditer(text):
        out.append(text[done : run.start()])
        starts += range(done, run.start())
        for i in range(run.start(), run.end()):
            folded = _fold_char(text[i])
            out.append(folded)
            starts += [i] * len(folded)
        done = run.end()
    out.append(text[done:])
    starts += range(done, len(text))
    folded_text = "".join(out)
    if folded_text == text:
        return Folded(text)
    return Folded(folded_text, starts, [i + 1 for i in starts])
