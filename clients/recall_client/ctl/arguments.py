"""recallctl's arguments checked against the protocol's own bounds, before anything is sent.

A flag's range is the request field's declared bound (one declaration: the protocol), so a
mistake gets the flag's name and its range ("--limit: must be 1-50") where the daemon's
decoder would answer in its library's words, and ``--help`` shows the same range.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

import msgspec

__all__ = [
    "Bounds",
    "bounded_float",
    "bounded_int",
    "bounds",
    "positive_seconds",
    "text",
    "undecodable_argument",
]

Bounds = tuple[float | None, float | None]


def _field_type(request: type[msgspec.Struct], field: str) -> msgspec.inspect.Type:
    info = msgspec.inspect.type_info(request)
    assert isinstance(info, msgspec.inspect.StructType)
    for f in info.fields:
        if f.name == field:
            t = f.type
            # Unwrap descriptions and ``X | None`` (the bound is X's), in any nesting.
            while isinstance(t, msgspec.inspect.Metadata | msgspec.inspect.UnionType):
                if isinstance(t, msgspec.inspect.Metadata):
                    t = t.type
                else:
                    t = next(a for a in t.types if not isinstance(a, msgspec.inspect.NoneType))
            return t
    raise KeyError(f"{request.__name__} has no field {field}")


def bounds(request: type[msgspec.Struct], field: str) -> Bounds:
    """The (lowest, highest) a number field of ``request`` may be, or a string field's
    (shortest, longest) length; None where the protocol sets none."""
    t = _field_type(request, field)
    if isinstance(t, msgspec.inspect.StrType):
        return t.min_length, t.max_length
    if isinstance(t, msgspec.inspect.IntType | msgspec.inspect.FloatType):
        low = t.ge if t.ge is not None else (t.gt if t.gt is not None else None)
        high = t.le if t.le is not None else (t.lt if t.lt is not None else None)
        return low, high
    raise TypeError(f"{request.__name__}.{field} is neither a number nor a string")


def _range(low: float | None, high: float | None) -> str:
    def shown(n: float) -> str:
        return f"{n:g}"

    if low is not None and high is not None:
        return f"{shown(low)}-{shown(high)}"
    if low is not None:
        return f"at least {shown(low)}"
    if high is not None:
        return f"at most {shown(high)}"
    return "any number"


def bounded_int(request: type[msgspec.Struct], field: str) -> tuple[Callable[[str], int], str]:
    """An argparse ``type`` for an option holding ``request.field``, and its range for help
    (argparse names the option in its message)."""
    low, high = bounds(request, field)
    span = _range(low, high)

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be a whole number {span}, not {value!r}"
            ) from None
        if (low is not None and number < low) or (high is not None and number > high):
            raise argparse.ArgumentTypeError(f"must be {span}, not {value}")
        return number

    return parse, span


def bounded_float(request: type[msgspec.Struct], field: str) -> tuple[Callable[[str], float], str]:
    """As :func:`bounded_int`, for a number that may have a fraction."""
    low, high = bounds(request, field)
    span = _range(low, high)

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {span}, not {value!r}") from None
        if not math.isfinite(number) or (
            (low is not None and number < low) or (high is not None and number > high)
        ):
            raise argparse.ArgumentTypeError(f"must be {span}, not {value}")
        return number

    return parse, span


def text(request: type[msgspec.Struct], field: str) -> Callable[[str], str]:
    """An argparse ``type`` for a string argument within ``request.field``'s length bounds."""
    shortest, longest = bounds(request, field)

    def parse(value: str) -> str:
        if shortest and len(value) < shortest:
            raise argparse.ArgumentTypeError(
                "must not be empty" if shortest == 1 else f"must be at least {shortest:g} long"
            )
        if longest is not None and len(value) > longest:
            raise argparse.ArgumentTypeError(
                f"is {len(value)} characters; it may be at most {longest:g}"
            )
        return value

    return parse


def positive_seconds(value: str) -> float:
    """An argparse ``type``: a number of seconds greater than zero (``--interval``)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {value}")
    return number


def undecodable_argument(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """What to say of the first argument that is not UTF-8 text, or None.

    Python hands a command line's undecodable bytes over as lone surrogates
    (``surrogateescape``), which no request can carry; the argument and the byte are named
    so the user can find them.
    """
    names = _shown_names(parser, args)
    for dest, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                found = _first_surrogate(item)
                if found is not None:
                    offset, byte = found
                    return (
                        f"{names.get(dest, dest)} is not UTF-8 text (byte {byte:#04x} at "
                        f"offset {offset}); give it in UTF-8"
                    )
    return None


def _shown_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """Each destination's name as the user typed it: its flag, or its metavar."""
    parsers = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, "command", None) or "")
            if chosen is not None:
                parsers.append(chosen)
    names: dict[str, str] = {}
    for each in parsers:
        for action in each._actions:
            if action.option_strings:
                names[action.dest] = action.option_strings[-1]
            else:
                metavar = action.metavar if isinstance(action.metavar, str) else None
                names[action.dest] = metavar or action.dest.upper()
    return names


def _first_surrogate(value: str) -> tuple[int, int] | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raw = os.fsencode(value)
        # Where the undecodable byte sits in the argument's own bytes.
        prefix = os.fsencode(value[: exc.start])
        return len(prefix), raw[len(prefix)]
    return None
