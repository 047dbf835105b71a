"""Use tokens: a memory_search hit's signed name, which memory_record_use takes back.

A token names one surfaced memory, when it was issued and a nonce (so a later use of the
same token overrides its outcome); a MAC under the daemon's own key (kept in the store)
proves recalld issued it.

A token issued since stores learn their relevance also carries the hit's evidence when it
was served (its lexical and semantic evidence, each 0..1 in a byte), so an outcome teaches
the store's calibration without the query (``retrieval.learned_relevance``). A token without
it (issued before) still records its outcome; it teaches nothing. The MAC covers the
evidence: a client cannot choose what an outcome teaches.
"""

from __future__ import annotations

import base64
import hmac
import os
from dataclasses import dataclass

import msgspec

from ..errors import RecallError

__all__ = ["Evidence", "UseToken", "issue", "memory_of", "read"]

# A hit's (lexical, semantic) evidence when it was served, each 0..1.
Evidence = tuple[float, float]
_LEVELS = 255


@dataclass(frozen=True, slots=True)
class UseToken:
    memory_id: str
    issued_at: float
    nonce: str
    evidence: Evidence | None = None


class _Body(msgspec.Struct, array_like=True):
    memory_id: str
    issued_at: float
    nonce: bytes
    # Trailing and optional: a token of an older recalld decodes without it.
    evidence: bytes | None = None


def _quantized(evidence: Evidence) -> bytes:
    return bytes(round(min(1.0, max(0.0, v)) * _LEVELS) for v in evidence)


def _evidence(data: bytes | None) -> Evidence | None:
    if data is None or len(data) != 2:
        return None
    return data[0] / _LEVELS, data[1] / _LEVELS


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, body: bytes) -> bytes:
    # hmac.digest's one-shot path: a search signs a token for each of its hits.
    return hmac.digest(key, body, "sha256")[:12]


def issue(key: bytes, memory_id: str, now: float, evidence: Evidence | None = None) -> str:
    """A token naming ``memory_id``, signed with ``key``, with the hit's ``evidence``."""
    packed = None if evidence is None else _quantized(evidence)
    body = msgspec.msgpack.encode(_Body(memory_id, round(now, 3), os.urandom(6), packed))
    return f"{_b64(body)}.{_b64(_mac(key, body))}"


def memory_of(token: str) -> str | None:
    """The memory a token names, unverified (authorization looks the id up; the write
    verifies the signature); None when it does not parse."""
    try:
        return msgspec.msgpack.decode(_unb64(token.split(".")[0]), type=_Body).memory_id
    except (ValueError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def read(key: bytes, token: str) -> UseToken:
    """The token's content, its signature checked.

    Raises:
        RecallError: ``invalid_request`` for a malformed token or one recalld did not issue.
    """
    try:
        body_text, mac_text = token.split(".")
        body, mac = _unb64(body_text), _unb64(mac_text)
    except ValueError:
        raise RecallError("invalid_request", "use_token is malformed") from None
    if not hmac.compare_digest(mac, _mac(key, body)):
        raise RecallError("invalid_request", "use_token was not issued by this recalld")
    decoded = msgspec.msgpack.decode(body, type=_Body)
    return UseToken(
        decoded.memory_id, decoded.issued_at, decoded.nonce.hex(), _evidence(decoded.evidence)
    )
