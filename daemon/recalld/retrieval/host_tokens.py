"""A context block's tokens as the host's model counts them, estimated from above.

A budget is a promise to the agent's host, whose model tokenizes with its own byte-level
BPE (Claude's, GPT's o200k and cl100k), not with the MiniLM WordPiece recalld embeds with
(which reads a 5 kB block as 200 tokens). Those vocabularies are not ours to ship, so a
text is cut into runs of one character class and each run is charged what such a
tokenizer takes for it at most in practice:

- a run of ASCII letters (cut again where a lowercase letter meets a capital): a third of
  its length, rounded up, when it reads like a word (at most 12 letters, a vowel in every
  four, not a long capital run), plus one where the cut split it from the letters before;
  else 0.7 a letter (a random string, a long capital run, a key);
- a run of digits: one token per two digits;
- a single space before a letter: nothing (the tokenizers fold it into the word);
- any other ASCII character: one token each (punctuation, whitespace, newlines);
- any other character: one token per UTF-8 byte beyond the first (CJK is two, an emoji
  three).

``tests/context/test_host_tokens.py`` measures it against real BPE tokenizers on prose,
code, identifiers and text in other scripts, and keeps it at or above them; it is about
1.5 times their count on English and code. One pass over the text, so linear in it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["NAME", "count", "estimate"]

# What the reply names as its tokenizer.
NAME = "host-bpe-estimate"

_VOWELS = frozenset("aeiouyAEIOUY")
# A word longer than this, or a run with fewer vowels, is charged as a random string.
_WORD_LETTERS = 12


def _letter(c: str) -> bool:
    return "a" <= c <= "z" or "A" <= c <= "Z"


def _letters_cost(run: str, split: bool) -> int:
    m = len(run)
    vowels = sum(1 for c in run if c in _VOWELS)
    wordlike = m <= _WORD_LETTERS and vowels * 4 >= m and not (m > 3 and run.isupper())
    if wordlike:
        return -(-m // 3) + split
    return -(-m * 7 // 10)


def estimate(text: str) -> int:
    """Tokens of ``text`` by a host's BPE tokenizer, estimated from above (see the module)."""
    total = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if _letter(c):
            j = i + 1
            while j < n and _letter(text[j]) and not (text[j].isupper() and text[j - 1].islower()):
                j += 1
            total += _letters_cost(text[i:j], i > 0 and _letter(text[i - 1]))
            i = j
        elif "0" <= c <= "9":
            j = i + 1
            while j < n and "0" <= text[j] <= "9":
                j += 1
            total += (j - i + 1) // 2
            i = j
        elif c == " " and i + 1 < n and _letter(text[i + 1]):
            i += 1
        elif c < "\x80":
            total += 1
            i += 1
        else:
            width = len(c.encode("utf-8", "surrogatepass"))
            total += width - 1
            i += 1
    return total


def count(lines: Sequence[str]) -> list[int]:
    """Each line's tokens with the newline that ends it in a block (an upper bound of the
    block's tokens, whose last line has none)."""
    return [estimate(line) + 1 for line in lines]
