"""Words of queries and texts: the terms a query looks for, and a snippet around them."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence

__all__ = [
    "FAMILY_MIN",
    "Coverage",
    "fts_tokens",
    "fts_words",
    "kin",
    "make_snippet",
    "porter",
    "query_terms",
]

_STOP = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves"""
    # The words of a request rather than of its subject: a prompt asks what to "use" or
    # "run", what it "needs" to "get" done; they say nothing of which memory is meant.
    """ also anything etc get gets let lets make makes need needs please something tell
    thing things use used uses using via want wants way""".split()
)
_TOKEN = re.compile(r"\w+", re.UNICODE)


def query_terms(query: str) -> list[str]:
    """The words of a query that carry meaning: stop words dropped, order kept, deduped."""
    words = [w.lower() for w in _TOKEN.findall(query)]
    # A lone letter is a contraction's ("what's", "don't") or a list's, not a subject.
    content = [w for w in words if w not in _STOP and (len(w) > 1 or w.isdigit())]
    return list(dict.fromkeys(content or words))


def make_snippet(text: str, terms: Sequence[str], width: int = 200) -> str:
    """A window of ``text`` around the first query term it contains (the term itself, or
    the stem of its first token: ``retri`` finds "retries" for ``retry``)."""
    if len(text) <= width:
        return text
    lowered = text.lower()
    positions = [i for t in terms if (i := _find(lowered, t)) >= 0]
    centre = min(positions) if positions else 0
    start = max(0, min(centre - width // 3, len(text) - width))
    end = start + width
    return ("…" if start else "") + text[start:end].strip() + ("…" if end < len(text) else "")


def _find(lowered: str, term: str) -> int:
    at = lowered.find(term)
    if at < 0 and (tokens := fts_tokens(term)):
        at = lowered.find(tokens[0])
    return at


# --------------------------------------------------------------------------- FTS5's tokens

# unicode61's token characters: letters and digits (an underscore separates, as punctuation).
_FTS_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def fts_words(text: str) -> list[str]:
    """The words FTS5's ``unicode61 remove_diacritics 2`` splits ``text`` into, before
    stemming: runs of letters and digits, lower-cased, diacritics removed (:func:`_fold`)."""
    return _FTS_TOKEN.findall(_folded(text))


def _folded(text: str) -> str:
    folded = text.lower()
    return folded if folded.isascii() else "".join(map(_fold, folded))


@functools.lru_cache(maxsize=4096)
def _fold(c: str) -> str:
    """One lower-cased character as unicode61 folds it: a Latin letter with diacritics to its
    letter, a combining diacritical mark to nothing (it joins the letters either side), final
    sigma to sigma. Other scripts keep their marks; a ligature stays one letter."""
    if _DIACRITIC[0] <= c <= _DIACRITIC[1]:
        return ""
    if c == "\u03c2":  # final sigma
        return "\u03c3"
    decomposed = unicodedata.normalize("NFD", c)
    base, marks = decomposed[0], decomposed[1:]
    if marks and base.isascii() and all(_DIACRITIC[0] <= m <= _DIACRITIC[1] for m in marks):
        return base
    return c


# Unicode's block of combining diacritical marks, the ones remove_diacritics drops.
_DIACRITIC = ("\u0300", "\u036f")


def fts_tokens(text: str) -> list[str]:
    """The tokens FTS5's ``porter unicode61 remove_diacritics 2`` indexes ``text`` as: its
    :func:`fts_words`, each stemmed by :func:`porter`."""
    return [porter(w) for w in fts_words(text)]


class Coverage:
    """Which of a query's terms a text holds, as the lexical channel's quoted FTS5 phrase
    matches them: the term's :func:`fts_tokens`, one after another (one token: anywhere).
    What a hit literally holds (``match_terms``); a word's family (:func:`kin`) counts
    towards relevance only.

    Built once a search. Only the text's words that start like a wanted token are found and
    stemmed: one regex scan a text. A Porter stem and its word differ in at most their last
    two letters (``ability`` to ``able``), so a word can stem to a token only when it starts
    with the token less three letters (less none of its first).
    """

    def __init__(self, terms: Sequence[str]) -> None:
        self.terms = list(terms)
        self._want = [tuple(fts_tokens(t)) for t in self.terms]
        starts = {tok[: max(1, len(tok) - 3)] for want in self._want for tok in want}
        # A phrase needs every word's place; a single token only whether it occurs.
        self._phrases = any(len(want) > 1 for want in self._want)
        self._scan = (
            re.compile(
                r"\b(?:" + "|".join(map(re.escape, sorted(starts, key=len, reverse=True))) + r")\w*"
            )
            if starts and not self._phrases
            else None
        )

    def __call__(self, text: str) -> tuple[float, list[str]]:
        """The share of the terms ``text`` holds, and those terms in query order."""
        if not self.terms:
            return 0.0, []
        tokens: list[str] = []
        if self._scan is not None:
            # With underscores as spaces, \w is unicode61's token character and \b its edge.
            words = self._scan.findall(_folded(text).replace("_", " "))
            have = {porter(w) for w in words}
        else:
            tokens = fts_tokens(text) if self._phrases else []
            have = set(tokens)
        matched = [
            term
            for term, want in zip(self.terms, self._want, strict=True)
            if want and set(want) <= have and (len(want) == 1 or _follows(tokens, want))
        ]
        return len(matched) / len(self.terms), matched


# The shortest stem that stands for its word family (see :func:`kin`).
FAMILY_MIN = 5


def kin(stem: str, wanted: str) -> bool:
    """Whether a text's ``stem`` matches a query word's ``wanted`` stem: the same, or one
    the other's start, at least :data:`FAMILY_MIN` letters long ("format" and "formatter",
    "config" and "configuration", which Porter's stemmer leaves apart; not "port" and
    "portable")."""
    if stem == wanted:
        return True
    short, long = (stem, wanted) if len(stem) < len(wanted) else (wanted, stem)
    return len(short) >= FAMILY_MIN and long.startswith(short)


def _follows(tokens: Sequence[str], want: Sequence[str]) -> bool:
    """Whether ``want`` occurs in ``tokens`` as a run (a phrase); linear in ``tokens`` times
    the phrase's length, which a query term bounds."""
    n = len(want)
    return any(
        tokens[i] == want[0] and list(tokens[i : i + n]) == list(want)
        for i in range(len(tokens) - n + 1)
    )


@functools.lru_cache(maxsize=65_536)
def porter(word: str) -> str:
    """Porter's stemmer as FTS5 runs it (``fts5_porter.c``): words under 3 or over 64
    characters unchanged, ``-bli`` to ``-ble`` and ``-logi`` to ``-log`` in step 2."""
    if len(word) < 3 or len(word) > 64:
        return word
    w = _step1ab(word)
    if w.endswith("y") and _has_vowel(w[:-1]):  # step 1c
        w = w[:-1] + "i"
    w = _replace(w, _STEP2, 0)
    w = _replace(w, _STEP3, 0)
    w = _step4(w)
    # step 5a, 5b
    if w.endswith("e"):
        m = _measure(w[:-1])
        if m > 1 or (m == 1 and not _cvc(w[:-1])):
            w = w[:-1]
    if w.endswith("ll") and _measure(w[:-1]) > 1:
        w = w[:-1]
    return w


def _consonant(w: str, i: int) -> bool:
    c = w[i]
    if c in "aeiou":
        return False
    if c == "y":
        return i == 0 or not _consonant(w, i - 1)
    return True


def _measure(stem: str) -> int:
    """m in [C](VC){m}[V]."""
    m, prev_vowel = 0, False
    for i in range(len(stem)):
        vowel = not _consonant(stem, i)
        if prev_vowel and not vowel:
            m += 1
        prev_vowel = vowel
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _consonant(stem, i) for i in range(len(stem)))


def _double_consonant(w: str) -> bool:
    return len(w) >= 2 and w[-1] == w[-2] and _consonant(w, len(w) - 1)


def _cvc(w: str) -> bool:
    n = len(w)
    return (
        n >= 3
        and _consonant(w, n - 3)
        and not _consonant(w, n - 2)
        and _consonant(w, n - 1)
        and w[-1] not in "wxy"
    )


def _step1ab(w: str) -> str:
    if w.endswith("sses") or w.endswith("ies"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if w.endswith("eed"):
        return w[:-1] if _measure(w[:-3]) > 0 else w
    for suffix in ("ed", "ing"):
        if w.endswith(suffix) and _has_vowel(w[: -len(suffix)]):
            w = w[: -len(suffix)]
            if w.endswith(("at", "bl", "iz")):
                return w + "e"
            if _double_consonant(w) and w[-1] not in "lsz":
                return w[:-1]
            if _measure(w) == 1 and _cvc(w):
                return w + "e"
            return w
    return w


_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("logi", "log"),
    ("bli", "ble"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
)
_STEP3 = (
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
)
_STEP4 = (
    "al",
    "ance",
    "ence",
    "er",
    "ic",
    "able",
    "ible",
    "ant",
    "ement",
    "ment",
    "ent",
    "ion",
    "ou",
    "ism",
    "ate",
    "iti",
    "ous",
    "ive",
    "ize",
)


def _longest(w: str, suffixes: Sequence[str]) -> str | None:
    found = [s for s in suffixes if w.endswith(s)]
    return max(found, key=len) if found else None


def _replace(w: str, rules: Sequence[tuple[str, str]], m_above: int) -> str:
    """The rule of the longest suffix ``w`` ends with, applied when the stem's m is above
    ``m_above``; no other rule is tried."""
    suffix = _longest(w, [s for s, _ in rules])
    if suffix is None:
        return w
    stem = w[: -len(suffix)]
    return stem + dict(rules)[suffix] if _measure(stem) > m_above else w


def _step4(w: str) -> str:
    suffix = _longest(w, _STEP4)
    if suffix is None:
        return w
    stem = w[: -len(suffix)]
    if suffix == "ion" and not stem.endswith(("s", "t")):
        return w
    return stem if _measure(stem) > 1 else w
