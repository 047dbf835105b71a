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

__all__ = ["Folded", "fold"]

# Default-ignorable code points that are not format characters (category Cf, dropped by
# category): the combining grapheme joiner, Hangul and Khmer fillers, Mongolian and other
# variation selectors.
_IGNORABLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u3164\uffa0"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)
_CLIP_MARK = "…"
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")

# Letters of other scripts drawn like a Latin letter (most from Unicode's confusables list,
# TR39), in the scripts a keyboard layout puts beside Latin: by name, the Latin letter each
# stands for.
_LOOK_ALIKES = {
    "CYRILLIC SMALL LETTER": "A a, ES c, KOMI DE d, IE e, SHHA h, BYELORUSSIAN-UKRAINIAN I i, "
    "JE j, KA k, PALOCHKA l, O o, ER p, QA q, DZE s, WE w, HA x, U y, STRAIGHT U y",
    "CYRILLIC CAPITAL LETTER": "A A, VE B, ES C, IE E, EN H, BYELORUSSIAN-UKRAINIAN I I, JE J, "
    "KA K, EM M, O O, ER P, DZE S, TE T, HA X, U Y, STRAIGHT U Y, QA Q, WE W",
    "GREEK SMALL LETTER": "ALPHA a, OMICRON o, IOTA i, RHO p, NU v, KAPPA k, TAU t, UPSILON u, "
    "CHI x",
    "GREEK CAPITAL LETTER": "ALPHA A, BETA B, EPSILON E, ZETA Z, ETA H, IOTA I, KAPPA K, MU M, "
    "NU N, OMICRON O, RHO P, TAU T, UPSILON Y, CHI X",
    "ARMENIAN SMALL LETTER": "OH o, SEH u, HO h, VO n, CO g, ZA q",
}
_CONFUSABLES = str.maketrans(
    {
        unicodedata.lookup(f"{script} {name}"): latin
        for script, letters in _LOOK_ALIKES.items()
        for name, latin in (pair.rsplit(" ", 1) for pair in letters.split(", "))
    }
)


@lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    if ch in _IGNORABLE or unicodedata.category(ch) == "Cf":
        return ""
    if ch == _CLIP_MARK:
        return ch
    return unicodedata.normalize("NFKC", ch).translate(_CONFUSABLES)


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
