"""What recallctl's commands print: a reply as JSON on stdout, a note on stderr, a text cut to
one line of a table."""

from __future__ import annotations

import sys
from typing import Any

import msgspec

_json = msgspec.json.Encoder()


def print_json(value: Any) -> None:
    """``value`` (a reply, a Struct, builtins) as indented JSON, for ``--json``."""
    sys.stdout.write(msgspec.json.format(_json.encode(value), indent=2).decode() + "\n")


def say(message: str) -> None:
    """A note for the person at the terminal; stdout stays for what a script reads."""
    print(message, file=sys.stderr)


def one_line(text: str, width: int) -> str:
    """``text`` with its whitespace folded, cut to ``width`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def print_json_line(value: Any) -> None:
    """``value`` as one line of JSON: what a hook's host reads from stdout."""
    sys.stdout.write(_json.encode(value).decode() + "\n")
