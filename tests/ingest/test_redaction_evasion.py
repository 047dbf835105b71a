"""Redaction reads what a reader sees: a secret spelled with invisible characters, fullwidth
or look-alike letters is found, and what is stored is the text as sent with only the secret's
span replaced, every other character (invisible, fullwidth, ligature) kept as it was."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from recall_client import protocol as p
from recalld.ingest.redact import redact
from recalld.ingest.textfold import fold

from tests.support.corpus import SECRETS, Secret, wide
from tests.support.daemon import DaemonProcess
from tests.support.episodes import database_bytes

# The round trip through a daemon runs on each store (the other tests take no daemon).
pytestmark = pytest.mark.both_backends

ZWSP, SOFT_HYPHEN, ZWJ, WORD_JOINER = "\u200b", "\u00ad", "\u200d", "\u2060"
CYRILLIC_O, CYRILLIC_ER, CYRILLIC_A = "\u043e", "\u0440", "\u0430"
LIGATURE_FI = "\ufb01"
TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PASSWORD = "Tr0ub4dor-and-3"


# (as sent, as stored): only the secret's span differs.
EVASIONS: list[tuple[str, str]] = [
    (
        f"push with {TOKEN[:20]}{ZWSP}{TOKEN[20:]} today",
        "push with [REDACTED:github_token] today",
    ),
    # An invisible character beside the token is no part of it: it stays.
    (f"use {ZWSP}{TOKEN}{ZWSP} now", f"use {ZWSP}[REDACTED:github_token]{ZWSP} now"),
    (
        f"export OPENAI_API_KEY=sk-proj-{'Zx9Yw8Vu7Ts6Rq5Po4'}{SOFT_HYPHEN}{'Nm3Lk2Jh1Gf0'}",
        "export OPENAI_API_KEY=[REDACTED:openai_key]",
    ),
    (f"the token is {wide(TOKEN)}.", "the token is [REDACTED:github_token]."),
    (
        f"{wide('PASSWORD')}={PASSWORD}",
        f"{wide('PASSWORD')}=[REDACTED:secret_assignment]",
    ),
    (
        f"t{CYRILLIC_O}ken={PASSWORD}x and more",
        f"t{CYRILLIC_O}ken=[REDACTED:secret_assignment] and more",
    ),
    (
        f"{CYRILLIC_ER}{CYRILLIC_A}ssword: {PASSWORD}",
        f"{CYRILLIC_ER}{CYRILLIC_A}ssword: [REDACTED:secret_assignment]",
    ),
    (
        f"pass{ZWJ}word{WORD_JOINER} = {PASSWORD[:6]}{ZWSP}{PASSWORD[6:]}",
        f"pass{ZWJ}word{WORD_JOINER} = [REDACTED:secret_assignment]",
    ),
    # A character that folds to several (the fi ligature) before the secret moves nothing.
    (
        f"{LIGATURE_FI}le \u2014 d\u00e9j\u00e0 vu \u2713 e\u0301; password={PASSWORD} \u2026 ok",
        f"{LIGATURE_FI}le \u2014 d\u00e9j\u00e0 vu \u2713 e\u0301; "
        "password=[REDACTED:secret_assignment] \u2026 ok",
    ),
    (
        f"ssh-keygen -t ed25519 -N {wide(PASSWORD)} -f key",
        "ssh-keygen -t ed25519 -N [REDACTED:cli_password] -f key",
    ),
]


@pytest.mark.parametrize(("sent", "stored"), EVASIONS)
def test_an_evasive_secret_is_cut_from_the_text_as_sent(sent: str, stored: str) -> None:
    text, found = redact(sent)
    assert text == stored
    assert found


def test_a_base64_value_beside_a_dotted_capital_i_is_no_crash() -> None:
    # re's IGNORECASE took the dotted I into the value, and decoding it raised ValueError.
    value = "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
    assert redact(f"Authorization: Basic {value}\u0130\u0130") == (
        "Authorization: Basic [REDACTED:basic_auth]\u0130\u0130",
        ["basic_auth"],
    )
    assert redact(f"Authorization: Basic {value[:-2]}\u0130") == (
        f"Authorization: Basic {value[:-2]}\u0130",
        [],
    )


def test_the_folded_text_maps_each_character_to_where_it_came_from() -> None:
    sent = f"a{ZWSP}{LIGATURE_FI}{wide('B')}{CYRILLIC_O}\u2026"
    folded = fold(sent)
    assert folded.text == "afiBo\u2026"
    assert folded.starts is not None and folded.ends is not None
    assert [sent[s:e] for s, e in zip(folded.starts, folded.ends, strict=True)] == [
        "a",
        LIGATURE_FI,
        LIGATURE_FI,
        wide("B"),
        CYRILLIC_O,
        "\u2026",
    ]
    # Folding that changes nothing keeps no map: the text is its own original.
    assert fold("plain \u00e9 text \u2026").starts is None


def kept_verbatim(sent: str, stored: str) -> bool:
    """``stored`` is ``sent`` with some non-empty spans replaced by placeholders."""
    pieces = re.split(r"\[REDACTED:[a-z0-9_]+\]", stored)
    pattern = "(?:.+?)".join(re.escape(piece) for piece in pieces)
    return re.fullmatch(pattern, sent, re.S) is not None


@pytest.mark.parametrize("secret", SECRETS, ids=[s.kind for s in SECRETS])
def test_the_stored_text_is_the_original_with_only_secrets_replaced(secret: Secret) -> None:
    stored, _ = redact(secret.text)
    assert kept_verbatim(secret.text, stored), stored


# Pieces that move a fold's offsets (characters dropped, expanded, replaced), and secrets.
_PIECES = [
    ZWSP,
    SOFT_HYPHEN,
    ZWJ,
    LIGATURE_FI,
    CYRILLIC_O,
    "\u2026",
    "\u0130",
    "\u212a",
    "\ufe0f",
    wide("Key="),
    " ",
    "\n",
    "token=",
    "password: ",
    TOKEN,
    TOKEN[:12],
    PASSWORD,
    "AKIAIOSFODNN7EXAMPLE",
    "Cookie: sid=",
    "mysql -p",
    "echo 'root:",
    "' | chpasswd",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12))
def test_whatever_the_text_only_secret_spans_are_replaced(pieces: list[str]) -> None:
    sent = "".join(pieces)
    stored, found = redact(sent)
    assert kept_verbatim(sent, stored)
    assert bool(found) == (stored != sent)


async def test_an_evasive_secret_stored_through_the_daemon_reads_back_without_it(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    async with d.client() as rc:
        ids = []
        for i, (sent, _stored) in enumerate(EVASIONS):
            reply = await rc.call(p.MemoryStore(text=f"note{i} {sent}"), p.Stored)
            ids.append(reply.record_id)
        for i, (record_id, (_sent, stored)) in enumerate(zip(ids, EVASIONS, strict=True)):
            shown = await rc.call(p.MemoryShow(memory_id=record_id), p.MemoryShown)
            assert shown.memory.text == f"note{i} {stored}"
            found = await rc.call(
                p.MemorySearch(query=f"note{i}", mode="keyword", limit=50), p.MemorySearchResult
            )
            [hit] = [h for h in found.hits if h.id == record_id]
            assert hit.text == f"note{i} {stored}"
    await d.stop()
    raw = database_bytes(d)
    for secret in (TOKEN[20:], PASSWORD[6:], "Nm3Lk2Jh1Gf0", wide(TOKEN)[8:]):
        assert secret.encode() not in raw, secret
