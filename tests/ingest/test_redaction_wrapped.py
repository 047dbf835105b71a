"""The two leaks of the fourth review: a GitHub token base64-encoded, and a generic hex key.
Each is redacted wherever it is written; hex that is no key (a git SHA, a digest, a cache
key, a public key) and base64 that decodes to no secret stay as they are."""

from __future__ import annotations

import base64

import pytest
from recalld.ingest.redact import redact

TOKEN = "ghp_" + "Zq8Rt5Wm2Kp9Xc4Vb7Nm1Lk3Jh6Gf0Ds2Aq5We"
HEX = "a0000c6d07ef7b77e90d3593ad699fc1f7cd5bb2e35cbf0f19c557067cbbe80c"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


WRAPPED = {
    "echo to base64 -d": f"echo {b64(TOKEN)} | base64 -d > ~/.config/gh/token",
    "after another prefix (offset 1)": f"header {b64('x' + ':' + TOKEN)}",
    "after another prefix (offset 2)": f"header {b64('x-access-token:' + TOKEN)}",
    "unpadded": f"value {b64(TOKEN).rstrip('=')} end",
    "in a kubernetes secret": f"data:\n  gh: {b64('token=' + TOKEN)}\n",
}
HEX_KEYS = {
    "key=": f"key={HEX}",
    "KEY: ": f"KEY: {HEX}",
    "a key's name": f"encryption_key = {HEX}",
    "quoted yaml": f'signing_key: "{HEX[:32]}"',
    "upper hex": f"HMAC_KEY={HEX.upper()}",
    "camel case": f'{{"apiKey": "{HEX}"}}',
    "prose": f"the master key is {HEX} for the vault",
}
NOT_SECRETS = [
    f"commit {HEX[:40]} fixed the parser",
    f"git show {HEX[:40]}",
    f"sha256 of the tarball is {HEX}, checked in CI",
    f"the digest sha256:{HEX} is pinned",
    f"cache_key = {HEX[:32]}",
    f"the cache key is {HEX}",
    f"public_key: {HEX}",
    f"key_id = {HEX[:32]}",
    f"key: {HEX[:20]}",
    f"monkey = {HEX[:32]}",
    f"{b64('ghp_ tokens are classic GitHub PATs')} is base64 of a sentence",
    f"{b64('the build failed at step 3 of 12, retrying')} is base64 of a log line",
]


@pytest.mark.parametrize("text", list(WRAPPED.values()), ids=list(WRAPPED))
def test_a_github_token_in_base64_is_redacted(text: str) -> None:
    out, found = redact(text)
    assert found == ["base64_secret"]
    assert "[REDACTED:base64_secret]" in out
    for alignment in range(3):
        # No window of the encoding that could carry the token survives.
        assert b64("ab"[:alignment] + TOKEN)[8:40] not in out


@pytest.mark.parametrize("text", list(HEX_KEYS.values()), ids=list(HEX_KEYS))
def test_a_hex_key_under_a_keys_name_is_redacted(text: str) -> None:
    out, found = redact(text)
    assert found == ["hex_key"], found
    assert HEX[:32] not in out.lower()


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_hex_and_base64_that_hold_no_secret_are_left_alone(text: str) -> None:
    assert redact(text) == (text, [])
