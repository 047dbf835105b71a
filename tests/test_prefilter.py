"""The trigger scans of redaction and trust scoring: grouped by first character, each finds a
trigger word exactly where the plain alternation of its words does."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recalld.ingest import redact, trust
from recalld.ingest.prefilter import any_word

from .reliability.corpus import BENIGN_NOTES, INJECTIONS, PROSE, SECRETS

# Words whose first character is not a plain one, beside words that share theirs.
TRICKY = (
    "sk-",
    "sk[0-9a-f]{4}",
    "secret",
    r"\.env",
    r"\.atlas",
    "a?b",
    "ab",
    "[xy]z",
    "x",
    r"\sx",
    r"\x41b",
    r"\x42c",
    r"^[ \t]*>",
    "^#",
    "(?:pat|rt)-",
    "p(?:at|ca)_",
)
WORD_LISTS = {
    "tricky": (TRICKY, re.MULTILINE),
    "redaction": (redact._TRIGGER_WORDS, 0),
    "trust": (trust._TRIGGER_WORDS, 0),
}


def _plain(words: Sequence[str], flags: int) -> re.Pattern[str]:
    return re.compile("|".join(words), flags)


def _pieces(words: Sequence[str]) -> list[str]:
    """Fragments of the words' literal text: texts made of them come near a trigger often."""
    out = {" ", "\n", "\t", "0", "f", "-", "_", "."}
    for word in words:
        literal = re.sub(r"\[[^]]*\]|\(\?:|[()?*+{}|\\^$]|\d+,?\d*\}", "", word)
        out.update(literal[i : i + n] for n in (1, 2, 3) for i in range(len(literal)))
        out.add(literal)
    return sorted(out)


@pytest.mark.parametrize("name", sorted(WORD_LISTS))
def test_the_grouped_scan_finds_a_trigger_where_the_plain_one_does(name: str) -> None:
    words, flags = WORD_LISTS[name]
    plain, grouped = _plain(words, flags), any_word(words, flags)
    texts = [s.text for s in SECRETS] + list(PROSE) + list(BENIGN_NOTES) + list(INJECTIONS)
    for text in texts:
        low = text.lower()
        assert (grouped.search(low) is None) == (plain.search(low) is None), low
    # Every word alone, and with a character on either side.
    for word in _pieces(words):
        for text in (word, f"a{word}", f"{word}z", f"\n{word}"):
            assert (grouped.search(text) is None) == (plain.search(text) is None), text


@pytest.mark.parametrize("name", sorted(WORD_LISTS))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_on_texts_made_of_the_words_pieces_the_scans_agree(name: str, data: st.DataObject) -> None:
    words, flags = WORD_LISTS[name]
    text = "".join(data.draw(st.lists(st.sampled_from(_pieces(words)), max_size=12)))
    assert (any_word(words, flags).search(text) is None) == (
        _plain(words, flags).search(text) is None
    )


def test_words_that_share_a_first_character_share_a_branch() -> None:
    assert any_word(("sk-", "secret", "x", r"\.a", r"\.b", "a?b", "ab")).pattern == (
        r"s(?:k-|ecret)|x|\.(?:a|b)|ab|a?b"
    )


# Trust scoring's words as an anchored alternation: a line that starts with ">" as ^[ \t]*>.
_ANCHORED = re.compile(
    "|".join(r"^[ \t]*>" if w == r"\n[ \t]*>" else w for w in trust._TRIGGER_WORDS), re.M
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["\n", " ", "\t", ">", "a", "> q", "said", "x\n"]), max_size=10))
def test_trust_finds_a_quoted_line_as_the_anchored_word_did(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert (trust._TRIGGERS.search("\n" + text) is None) == (_ANCHORED.search(text) is None)
