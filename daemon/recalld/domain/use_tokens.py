"""Use tokens: a memory_search hit's signed name, which memory_record_use takes back.

A token names one surfaced memory, when it was issued and a nonce (so a later use of the
same token overrides its outcome); a MAC under the daemon's own key (kept in the store)
proves recalld issued it.
"""

from __future__ import annotations

import base64
import hmac
import os
from dataclasses import dataclass

import msgspec

from ..errors import RecallError

__all__ = ["UseToken", "issue", "memory_of", "read"]


@dataclass(frozen=True, slots=True)
class UseToken:
    memory_id: str
    issued_at: float
    nonce: str


class _Body(msgspec.Struct, array_like=True):
    memory_id: str
    issued_at: float
    nonce: bytes


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, body: bytes) -> bytes:
    # hmac.digest's one-shot path: a search signs a token for each of its hits.
    return hmac.digest(key, body, "sha256")[:12]


def issue(key: bytes, memory_id: str, now: float) -> str:
    """A token naming ``memory_id``, signed with ``key``."""
    body = msgspec.msgpack.encode(_Body(memory_id, round(now, 3), os.urandom(6)))
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
    return UseToken(decoded.memory_id, decoded.issued_at, decoded.nonce.hex())
