"""What a character reads as: those that show nothing, and letters of other scripts drawn
like a Latin one.

Redaction (``ingest.textfold``) and the instruction scorer (``domain.instructions``) both
read a text as a reader sees it; these are the tables they share.
"""

from __future__ import annotations

import unicodedata

__all__ = ["CONFUSABLES", "invisible"]

# Default-ignorable code points that are not format characters (category Cf, dropped by
# category): the combining grapheme joiner, Hangul and Khmer fillers, Mongolian and other
# variation selectors.
_IGNORABLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u3164\uffa0"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)

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
CONFUSABLES = str.maketrans(
    {
        unicodedata.lookup(f"{script} {name}"): latin
        for script, letters in _LOOK_ALIKES.items()
        for name, latin in (pair.rsplit(" ", 1) for pair in letters.split(", "))
    }
)


def invisible(ch: str) -> bool:
    """Whether ``ch`` shows nothing (a default-ignorable code point: a format character
    such as U+200B or U+00AD, a variation selector, a filler)."""
    return ch in _IGNORABLE or unicodedata.category(ch) == "Cf"
