"""An MCP tool's schemas and values, derived from the protocol: one declaration per shape.

A tool sends one protocol request and gets one reply. Its inputSchema is the request's JSON
Schema and its outputSchema the reply's (msgspec's, made by the rules the daemon decodes and
encodes by), without the envelope (``id``, ``op``, ``type``) and the fields the tool does not
expose; its arguments are converted into the request by those rules, and its structured content
is the reply as msgspec encodes it. So whether a field is required, optional, or "present when
set" (the default of an ``omit_defaults`` Struct) is said once, in the protocol, and the schema
a client is shown cannot disagree with what it is sent.

A :class:`Shape` holds only the MCP face: the names that differ from the protocol's (a reply's
own ``id`` is the envelope's, so a memory's id travels as ``record_id``), the request fields the
shim fills itself or leaves to recallctl, and the reply fields a tool does not show.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, TypeVar, get_type_hints

import msgspec
from msgspec import inspect as mi

from .. import protocol as p

__all__ = [
    "ArgumentError",
    "Call",
    "Shape",
    "Tool",
    "hints",
    "input_schema",
    "output_schema",
    "request_of",
    "result_of",
]

# A request's and a reply's own fields: the frame's, never a tool's.
_ENVELOPE = ("id", "op", "type")


class ArgumentError(ValueError):
    """Arguments that do not convert into the tool's request: one line naming the argument."""


@dataclass(frozen=True)
class Shape:
    """The request a tool sends and the reply it returns, and the names they go by in MCP."""

    request: type[p.Request]
    reply: type[p.Reply]
    # argument name -> request field, where they differ (two names may set one field)
    arguments: Mapping[str, str] = field(default_factory=dict)
    # request fields no argument sets: the shim fills them, or only recallctl sends them
    internal: tuple[str, ...] = ()
    # reply field -> result name, where they differ
    results: Mapping[str, str] = field(default_factory=dict)
    # reply fields the result leaves out, and fields of the Structs it holds
    hidden: tuple[str, ...] = ()
    hidden_within: Mapping[type[msgspec.Struct], tuple[str, ...]] = field(default_factory=dict)
    # the result is this one field of the reply (memory_show's memory)
    unwrap: str | None = None
    # the names the outputSchema gives the reply's Structs, where a seed names them otherwise
    titles: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def accepted(self) -> dict[str, Any]:
        """The inputSchema, made once."""
        return input_schema(self)

    @cached_property
    def published(self) -> dict[str, Any]:
        """The outputSchema, made once."""
        return _titled(output_schema(self), self.titles)

    def argument_names(self) -> dict[str, list[str]]:
        """Each request field a tool takes, with the argument names that set it."""
        names: dict[str, list[str]] = {}
        # By the names on the wire (``class``, not the attribute task_class).
        for f in self.request.__struct_encode_fields__:
            if f in _ENVELOPE or f in self.internal:
                continue
            names[f] = [a for a, target in self.arguments.items() if target == f] or [f]
        return names


def input_schema(shape: Shape) -> dict[str, Any]:
    """The tool's inputSchema: the request's fields under their argument names, closed."""
    top, defs = _schema(shape.request, sent=False)
    props, required = top["properties"], set(top.get("required", ()))
    out_props: dict[str, Any] = {}
    out_required: list[str] = []
    for f, names in shape.argument_names().items():
        for name in names:
            out_props[name] = copy.deepcopy(props[f])
        # A field two arguments set is required as neither: either will do.
        if f in required and len(names) == 1:
            out_required.append(names[0])
    return _object(top, out_props, out_required, defs, closed=True)


def output_schema(shape: Shape) -> dict[str, Any]:
    """The tool's outputSchema: the reply's fields (or the unwrapped one's) under their names."""
    if shape.unwrap is not None:
        top, defs = _schema(get_type_hints(shape.reply)[shape.unwrap], sent=True)
        return _object(top, top["properties"], top.get("required", []), defs, closed=False)
    top, defs = _schema(shape.reply, sent=True)
    for struct, names in shape.hidden_within.items():
        inner = defs[struct.__name__]
        for name in names:
            del inner["properties"][name]
        inner["required"] = [r for r in inner.get("required", ()) if r not in names]
    out_props: dict[str, Any] = {}
    out_required: list[str] = []
    required = set(top.get("required", ()))
    for f, schema in top["properties"].items():
        if f in _ENVELOPE or f in shape.hidden:
            continue
        name = shape.results.get(f, f)
        out_props[name] = schema
        if f in required:
            out_required.append(name)
    return _object(top, out_props, out_required, defs, closed=False)


def request_of(shape: Shape, arguments: Mapping[str, Any]) -> p.Request:
    """The request ``arguments`` make, by the protocol's rules.

    Raises:
        ArgumentError: one that does not convert, or two names for one field that disagree.
    """
    fields: dict[str, Any] = {}
    given: dict[str, str] = {}
    for name, value in arguments.items():
        target = shape.arguments.get(name, name)
        value = _unquoted(value, shape.accepted["properties"].get(name, {}))
        if target in fields and fields[target] != value:
            raise ArgumentError(f"{given[target]} and {name} are the same setting; give one")
        fields[target], given[target] = value, name
    named = {f: names[0] for f, names in shape.argument_names().items()} | given
    try:
        return msgspec.convert(fields, shape.request)
    except msgspec.ValidationError as exc:
        raise ArgumentError(_one_line(str(exc), named)) from None


def result_of(shape: Shape, reply: p.Reply) -> dict[str, Any]:
    """The tool's structured content: the reply as msgspec encodes it, under the tool's names."""
    if shape.unwrap is not None:
        inner: dict[str, Any] = msgspec.to_builtins(getattr(reply, shape.unwrap))
        return inner
    data: dict[str, Any] = msgspec.to_builtins(reply)
    result = {
        shape.results.get(k, k): v
        for k, v in data.items()
        if k not in _ENVELOPE and k not in shape.hidden
    }
    if shape.hidden_within:
        _prune(result, shape.published, shape.published.get("$defs", {}))
    return result


def _prune(value: Any, schema: Mapping[str, Any], defs: Mapping[str, Any]) -> None:
    """Drop from ``value`` (in place) every key its object's schema does not list: the fields
    a shape hides within the Structs a reply holds, by the schema the tool publishes."""
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[1]]
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        for key in [k for k in value if k not in props]:
            del value[key]
        for key, item in value.items():
            _prune(item, props[key], defs)
    elif isinstance(value, list) and "items" in schema:
        for item in value:
            _prune(item, schema["items"], defs)
    elif value is not None:
        for alternative in schema.get("anyOf", ()):
            _prune(value, alternative, defs)


# --------------------------------------------------------------------------- JSON Schema


def _schema(t: Any, *, sent: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """``t``'s own object schema and the definitions it refers to. What a client sends may
    leave out any field with a default; what it is ``sent`` lacks one only where its Struct
    omits defaults (the field is "present when set")."""
    (ref,), components = msgspec.json.schema_components([t], ref_template="#/$defs/{name}")
    if sent:
        for name, info in _structs(t).items():
            _as_sent(components[name], info)
    name = ref["$ref"].rsplit("/", 1)[1]
    top = components.pop(name)
    return top, components


def _as_sent(schema: dict[str, Any], info: mi.StructType) -> None:
    """``schema`` of what a Struct encodes: a field is absent only when UNSET, or at its default
    where the Struct omits defaults, and so never null when that default is None."""
    props = schema.get("properties", {})
    required = []
    for f in info.fields:
        # inspect shows an UNSET default as no default at all, for a field not required
        unset = f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT
        if unset and not f.required:
            continue
        if not info.cls.__struct_config__.omit_defaults or f.required:
            required.append(f.encode_name)
        elif f.default is None:
            prop = props[f.encode_name]
            prop.pop("default", None)
            alternatives = [a for a in prop.pop("anyOf", []) if a != {"type": "null"}]
            prop.update(alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives})
    schema["required"] = required


def _object(
    top: Mapping[str, Any],
    props: dict[str, Any],
    required: list[str],
    defs: dict[str, Any],
    *,
    closed: bool,
) -> dict[str, Any]:
    schema: dict[str, Any] = {"title": top["title"], "type": "object", "properties": props}
    if "description" in top:
        schema["description"] = top["description"]
    if required:
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    used = _referenced(props, defs)
    if used:
        schema["$defs"] = {n: defs[n] for n in defs if n in used}
    return schema


def _titled(schema: dict[str, Any], titles: Mapping[str, str]) -> dict[str, Any]:
    """``schema`` with its definitions (and itself) named by ``titles``."""
    if not titles:
        return schema
    text = json.dumps(schema)
    for old, new in titles.items():
        text = text.replace(f'"#/$defs/{old}"', f'"#/$defs/{new}"')
    renamed: dict[str, Any] = json.loads(text)
    defs = renamed.get("$defs", {})
    renamed["$defs"] = {titles.get(name, name): d for name, d in defs.items()}
    for name, d in renamed["$defs"].items():
        d["title"] = name
    top = titles.get(renamed.get("title", ""))
    if top is not None:
        renamed["title"] = top
    return renamed


def _referenced(node: Any, defs: Mapping[str, Any]) -> set[str]:
    """The definitions ``node`` refers to, directly or through another definition."""
    found: set[str] = set()
    todo = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[1]
                if name not in found:
                    found.add(name)
                    todo.append(defs[name])
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return found


def _structs(t: Any) -> dict[str, mi.StructType]:
    """Every Struct type ``t`` holds, by the name msgspec's schema gives it."""
    found: dict[str, mi.StructType] = {}
    todo: list[mi.Type] = [mi.type_info(t)]
    while todo:
        node = todo.pop()
        if isinstance(node, mi.StructType):
            if node.cls.__name__ not in found:
                found[node.cls.__name__] = node
                todo.extend(f.type for f in node.fields)
        elif isinstance(node, mi.Metadata):
            todo.append(node.type)
        elif isinstance(node, mi.UnionType):
            todo.extend(node.types)
        elif isinstance(node, mi.DictType):
            todo.extend((node.key_type, node.value_type))
        elif isinstance(node, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
            todo.append(node.item_type)
    return found


# --------------------------------------------------------------------------- arguments


def _unquoted(value: Any, schema: Mapping[str, Any]) -> Any:
    """A list or object an MCP client sent as JSON text for an argument that takes no string,
    as the SDK takes it (some hosts send every array as a string); any other string is left
    for the request's rules to judge."""
    if not isinstance(value, str):
        return value
    types = {schema.get("type"), *(a.get("type") for a in schema.get("anyOf", ()))}
    if "string" in types or "enum" in schema or not types - {None}:
        return value
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return parsed if isinstance(parsed, list | dict) else value


def _one_line(message: str, names: Mapping[str, str]) -> str:
    """msgspec's ``Expected `int` <= 50 - at `$.limit``` as ``top_k: expected `int` <= 50``:
    the argument as the caller named it (``names`` maps request fields to argument names), the
    rule it broke, on one line."""
    why, sep, path = message.rpartition(" - at `$")
    why = " ".join((why if sep else message).split())
    if not sep:
        # The arguments themselves: "Object missing required field `memory_id`".
        why = _FIELD.sub(lambda m: f"argument `{names.get(m[1], m[1])}`", why)
        return why.removeprefix("Object ")
    why = why[:1].lower() + why[1:]
    path = path.removesuffix("`").removeprefix(".")
    field_name = re.split(r"[.\[]", path, maxsplit=1)[0]
    return f"{names.get(field_name, field_name)}{path[len(field_name) :]}: {why}"


_FIELD = re.compile(r"field `(\w+)`")


# --------------------------------------------------------------------------- tools

R = TypeVar("R", bound=p.Reply)


class Call(Protocol):
    """Sends a request through the shim's daemon session (``Session.call``).

    Raises DaemonUnavailable or RemoteError: the shim turns either into a tool error, unless
    the tool's ``run`` answers it.
    """

    def __call__(self, request: p.Request, reply_type: type[R], /) -> Awaitable[R]: ...


@dataclass(frozen=True, slots=True)
class Tool:
    """One MCP tool: what the listing shows beside its shape, and how it runs."""

    name: str
    title: str
    description: str
    # The listing's annotations, as the wire names them (readOnlyHint, ...).
    annotations: Mapping[str, Any]
    shape: Shape
    # Sends the request; unset, it is forwarded as it is and the reply is the shape's.
    run: Callable[[Call, Any], Awaitable[p.Reply]] | None = None

    def listed(self) -> dict[str, Any]:
        """The tool as tools/list carries it."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.shape.accepted,
            "outputSchema": self.shape.published,
            "annotations": {"title": self.title, **self.annotations},
        }

    async def __call__(self, call: Call, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Run the tool on ``arguments``: its structured content.

        Raises:
            ArgumentError: the arguments do not make the tool's request.
            DaemonUnavailable, RemoteError: the daemon failed it.
        """
        request = request_of(self.shape, arguments)
        if self.run is None:
            reply: p.Reply = await call(request, self.shape.reply)
        else:
            reply = await self.run(call, request)
        return result_of(self.shape, reply)


def hints(*, read_only: bool, destructive: bool = False, idempotent: bool = True) -> dict[str, Any]:
    """A tool's annotations; recalld's tools reach nothing beyond the machine."""
    return {
        "readOnlyHint": read_only,
        "destructiveHint": destructive,
        "idempotentHint": idempotent,
        "openWorldHint": False,
    }
