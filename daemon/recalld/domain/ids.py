"""Record ids and content hashes."""

from __future__ import annotations

import hashlib
import os
import time

__all__ = ["content_hash", "new_id"]

_B32 = "0123456789abcdefghjkmnpqrstvwxyz"


def new_id(prefix: str) -> str:
    """A sortable id: 48 bits of milliseconds then 40 random bits, Crockford base32."""
    value = (int(time.time() * 1000) << 40) | int.from_bytes(os.urandom(5), "big")
    chars = []
    for _ in range(18):
        chars.append(_B32[value & 31])
        value >>= 5
    return f"{prefix}_{''.join(reversed(chars))}"


def content_hash(kind: str, text: str) -> bytes:
    """What makes two records of a kind the same: their words, spacing and case aside."""
    normalised = " ".join(text.split()).casefold()
    return hashlib.blake2b(f"{kind}\0{normalised}".encode(), digest_size=16).digest()
