"""The scans that spare redaction and the instruction scorer most of their work: grouped by first
character, a trigger scan finds a trigger word exactly where the plain alternation of its
words does; a redaction rule skipped for lacking its needs would have replaced nothing."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recalld.domain import instructions
from recalld.domain.prefilter import any_word
from recalld.ingest import redact

from tests.support.corpus import BENIGN_NOTES, INJECTIONS, PROSE, SECRETS

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
    "instructions": (tuple(re.escape(w) for ws in instructions._NEEDS.values() for w in ws), 0),
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


def _odd_cases(text: str) -> list[str]:
    """``text`` in other cases, and with letters re folds to ASCII under IGNORECASE (the
    Kelvin sign, dotted capital I, long s) where str.lower does not agree with it."""
    return [
        text.upper(),
        text.title(),
        text.swapcase(),
        text.replace("k", "\u212a").replace("i", "\u0130").replace("s", "\u017f"),
    ]


def _every(rule: redact._Rule) -> redact._Rule:
    """``rule``, run on every text that passes the trigger scan."""
    return dataclasses.replace(rule, needs=("",), also=())


def _never(rule: redact._Rule) -> redact._Rule:
    """``rule``, never run."""
    return dataclasses.replace(rule, needs=("(?!)",), also=())


def test_the_ascii_folds_are_every_letter_re_matches_to_an_ascii_one() -> None:
    ascii_letter = re.compile("[a-z]", re.IGNORECASE)
    cased = (chr(c) for c in range(0x80, 0x110000) if chr(c).lower() != chr(c).upper())
    for ch in cased:
        if ascii_letter.fullmatch(ch):
            folded = ch.translate(redact._ASCII_FOLDS).lower()
            assert folded.isascii() and re.fullmatch(folded, ch, re.IGNORECASE), ch


def _every_rule(text: str) -> tuple[str, list[str]]:
    """Redaction as it was: every rule scans a text that passes the trigger scan."""
    with patch.object(redact, "_RULES", [_every(rule) for rule in redact._RULES]):
        return redact.redact(text)


# What only one rule replaces, of the kinds the corpus leaves to other rules.
_ALONE = [
    "the twilio key is SK0123456789abcdef0123456789ABCDEF here",
    "sentry: sntrys_eyJpYXQiOjE3MDAwMDAwMDAuMCwidXJsIjoiaHR0cHM6Ly9zZW50cnku",
    "docker login -u bob -p Sup3rS3cret! registry.example.com",
    '{"password": "hunter2"}',
    "SMTP_PASS=hunter22",
]


def _corpus() -> list[str]:
    texts = [s.text for s in SECRETS] + list(PROSE) + list(BENIGN_NOTES) + list(INJECTIONS)
    texts += _ALONE
    return texts + [odd for text in texts for odd in _odd_cases(text)]


def test_a_rule_skipped_for_its_needs_would_have_replaced_nothing_in_the_corpus() -> None:
    for text in _corpus():
        assert redact.redact(text) == _every_rule(text), text


@pytest.mark.parametrize("index", range(len(redact._RULES)))
def test_the_corpus_has_a_text_each_rule_alone_would_miss_for_its_needs(index: int) -> None:
    """Each rule's needs are put to the test above: skip the rule always, and some text of
    the corpus comes out differently."""
    rule = redact._RULES[index]
    skipped = [_every(r) if r is not rule else _never(r) for r in redact._RULES]
    with patch.object(redact, "_RULES", skipped):
        assert any(redact.redact(text) != _every_rule(text) for text in _corpus()), rule.name


# Pieces of the corpus's secrets and of the rules' needs, and what joins them.
_PIECES = sorted(
    {piece for s in SECRETS for piece in s.text.split()}
    | {need.replace("\\", "") for rule in redact._RULES for need in rule.needs}
    | {"=", ": ", '"', "'", "\n", " ", "--", "-u ", "-p ", "@", "/", "\u212a", "\u0130", "K"}
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=8))
def test_on_texts_made_of_secrets_pieces_redaction_is_what_every_rule_makes(
    pieces: list[str],
) -> None:
    text = " ".join(pieces)
    assert redact.redact(text) == _every_rule(text)
