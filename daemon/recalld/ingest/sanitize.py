"""The sanitise step every write request passes before a write job is built.

It walks the request as the protocol declares it and treats each string by its mark
(``recall_client.protocol.FREE_TEXT`` / ``OPAQUE``):

- free text is redacted: a secret keeps its place as ``[REDACTED:kind]``;
- an opaque value (an idempotency key, a token) passes untouched: the daemon never stores
  it as sent;
- every other string is an identifier (an agent's name, a session id, a workspace path).
  Redacting one would change what it names, so a request whose identifier holds a secret
  is refused (``invalid_request`` naming the field), and nothing of it is stored.

Driven by the declarations, a new field is covered the moment it is declared: no handler
has to remember to redact it. The walk plan of each request type is built once. (A NUL or a
blank where text is required never gets this far: the protocol refuses it at decode, for
every request, read or write.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import msgspec.inspect as mi
from recall_client import protocol as p

from ..errors import RecallError
from .redact import redact

__all__ = ["Sanitized", "check_identifiers", "sanitize"]


@dataclass(slots=True)
class Sanitized:
    """A request with its free text redacted, and the kinds of secret found (sorted, once)."""

    request: p.Request
    redacted: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Walk:
    found: list[str] = field(default_factory=list)
    # False: only check identifiers (a hello), redact nothing.
    redact_free: bool = True


# A plan turns one value into its sanitised value; ``where`` names it in an error.
_Plan = Callable[[Any, str, _Walk], Any]


def _free(value: str, where: str, walk: _Walk) -> str:
    if not walk.redact_free:
        return value
    cleaned, kinds = redact(value)
    walk.found.extend(kinds)
    return cleaned


def _identifier(value: str, where: str, walk: _Walk) -> str:
    _cleaned, kinds = redact(value)
    if kinds:
        raise RecallError(
            "invalid_request",
            f"{where} holds what looks like a secret ({', '.join(sorted(set(kinds)))}); it "
            "names something, so it cannot be redacted, and the request was not stored",
        )
    return value


def _opaque(value: str, where: str, walk: _Walk) -> str:
    return value


def _plan(t: mi.Type) -> _Plan | None:
    """How to sanitise a value of protocol type ``t``; None when it holds no string."""
    mark = None
    if isinstance(t, mi.Metadata):
        mark = (t.extra or {}).get("text")
        t = t.type
    if isinstance(t, mi.StrType):
        return {"free": _free, "opaque": _opaque}.get(mark or "", _identifier)
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        item = _plan(t.item_type)
        if item is None:
            return None
        return lambda value, where, walk: [
            item(v, f"{where}[{i}]", walk) for i, v in enumerate(value)
        ]
    if isinstance(t, mi.UnionType):
        members = [(m, _plan(m)) for m in t.types]
        plans = [(m, plan) for m, plan in members if plan is not None]
        if not plans:
            return None

        def union(value: Any, where: str, walk: _Walk) -> Any:
            for member, plan in plans:
                if _fits(member, value):
                    return plan(value, where, walk)
            return value

        return union
    if isinstance(t, mi.StructType):
        return _struct_plan(t.cls)
    return None


def _fits(t: mi.Type, value: Any) -> bool:
    if isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.StrType):
        return isinstance(value, str)
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return isinstance(value, (list, set, frozenset, tuple))
    if isinstance(t, mi.StructType):
        return isinstance(value, t.cls)
    return False


_plans: dict[type, _Plan | None] = {}


def _struct_plan(cls: type) -> _Plan | None:
    if cls in _plans:
        return _plans[cls]
    _plans[cls] = None  # a self-referencing struct sees no plan while its own is built
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    fields = [(f.name, f.encode_name, plan) for f in info.fields if (plan := _plan(f.type))]
    if not fields:
        return None

    def struct(value: Any, where: str, walk: _Walk) -> Any:
        changes = {}
        for name, wire, plan in fields:
            current = getattr(value, name)
            # None, UNSET, "" and []: nothing to sanitise (most of a request's fields).
            if not current:
                continue
            new = plan(current, f"{where}.{wire}" if where else wire, walk)
            if new != current:
                changes[name] = new
        return msgspec.structs.replace(value, **changes) if changes else value

    _plans[cls] = struct
    return struct


def sanitize(req: p.Request) -> Sanitized:
    """``req`` with its free text redacted.

    CPU work (redaction is linear but a request may carry 100,000 characters): callers run
    it in a worker thread, never on the event loop.

    Raises:
        RecallError: ``invalid_request`` when an identifier holds a secret.
    """
    plan = _struct_plan(type(req))
    if plan is None:
        return Sanitized(req)
    walk = _Walk()
    cleaned = plan(req, "", walk)
    return Sanitized(cleaned, sorted(set(walk.found)))


def check_identifiers(req: p.Request) -> None:
    """Refuse ``req`` (a hello) if one of its identifiers holds a secret; change nothing.

    Raises:
        RecallError: ``invalid_request`` naming the field.
    """
    plan = _struct_plan(type(req))
    if plan is not None:
        plan(req, "", _Walk(redact_free=False))
