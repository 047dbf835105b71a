"""Every tool's schemas against what its conversions make, over generated protocol values.

For each tool recall-mcp serves: replies of its reply type (every field omitted where it may be,
None, empty lists, values at their bounds) go over the wire as the daemon sends them, through
the tool's conversion, and must validate against the tool's published outputSchema. Requests of
its request type, as arguments, must validate against its inputSchema and convert back into the
same request; an argument just past one of the inputSchema's bounds must be refused by both, in
one line that names the argument.
"""

from __future__ import annotations

import copy
import enum
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec import inspect as mi
from recall_client import protocol as p
from recall_client.mcp.server import every_tool
from recall_client.mcp.shapes import ArgumentError, Shape, request_of, result_of

TOOLS = {tool.name: tool for tool in every_tool()}
# Validators built once: checking a schema against the metaschema costs ~20 ms, which the
# generated examples need not pay each (their own test checks each schema once).
PUBLISHED = {name: jsonschema.Draft202012Validator(t.shape.published) for name, t in TOOLS.items()}
ACCEPTED = {name: jsonschema.Draft202012Validator(t.shape.accepted) for name, t in TOOLS.items()}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Lists and strings are drawn short, or at their bound (which may be long): both ends matter.
SHORT = 3


def values(t: mi.Type) -> st.SearchStrategy[Any]:
    """Values of ``t`` that its bounds accept, from empty to maximal."""
    if isinstance(t, mi.Metadata):
        return values(t.type)
    if isinstance(t, mi.NoneType):
        return st.none()
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.IntType):
        least = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else -(2**31))
        most = t.le if t.le is not None else (t.lt - 1 if t.lt is not None else 2**31)
        return st.integers(least, most)
    if isinstance(t, mi.FloatType):
        floor = t.ge if t.ge is not None else t.gt
        ceiling = t.le if t.le is not None else t.lt
        return st.floats(
            min_value=floor if floor is not None else -1e12,
            max_value=ceiling if ceiling is not None else 1e12,
            exclude_min=t.gt is not None,
            exclude_max=t.lt is not None,
            allow_nan=False,
        )
    if isinstance(t, mi.StrType):
        if t.pattern is not None:
            return st.from_regex(t.pattern, fullmatch=True)
        low, longest = t.min_length or 0, t.max_length
        # Text as a client writes it: no control characters, and not blank where it is required.
        short = st.text(
            st.characters(blacklist_categories=("Cc", "Cs")),
            min_size=low,
            max_size=max(low, min(SHORT * 4, longest or SHORT * 4)),
        ).filter(lambda text: low == 0 or text.strip())
        return short if longest is None else st.one_of(short, st.just("x" * longest))
    if isinstance(t, mi.LiteralType):
        return st.sampled_from(t.values)
    if isinstance(t, mi.EnumType):
        members: list[enum.Enum] = list(t.cls)
        return st.sampled_from(members)
    if isinstance(t, mi.UnionType):
        return st.one_of(*(values(x) for x in t.types))
    if isinstance(t, mi.ListType):
        low = t.min_length or 0
        high = min(t.max_length if t.max_length is not None else SHORT, SHORT)
        return st.lists(values(t.item_type), min_size=low, max_size=max(low, high))
    if isinstance(t, mi.DictType):
        return st.dictionaries(values(t.key_type), values(t.value_type), max_size=SHORT)
    if isinstance(t, mi.AnyType):
        # Any value the wire carries: msgpack's integers are 64-bit.
        return st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=SHORT))
    if isinstance(t, mi.StructType):
        return structs(t)
    raise AssertionError(f"no strategy for {t!r}")


_OMIT = object()


def structs(t: mi.StructType, leave_out: tuple[str, ...] = ()) -> st.SearchStrategy[Any]:
    """Instances of a Struct: each field that may be left out left out, or given a value."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in t.fields:
        if f.name in leave_out or (f.name == "id" and _envelope(t)):
            continue
        given = values(f.type)
        fields[f.name] = given if f.required else st.one_of(st.just(_OMIT), given)

    def build(drawn: dict[str, Any]) -> Any:
        kwargs = {k: v for k, v in drawn.items() if v is not _OMIT}
        if _envelope(t):
            kwargs["id"] = 0
        try:
            return t.cls(**kwargs)
        except p.RequestRuleError:
            return _OMIT  # fields that contradict each other: no request a client can send

    return st.fixed_dictionaries(fields).map(build).filter(lambda built: built is not _OMIT)


def _envelope(t: mi.StructType) -> bool:
    return issubclass(t.cls, p.Request | p.Reply)


def over_the_wire(reply: p.Reply, reply_type: type[p.Reply]) -> p.Reply:
    """``reply`` as the shim gets it: encoded by the daemon, decoded (and checked) by the client."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(reply), type=reply_type)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_every_schema_a_tool_publishes_is_a_valid_json_schema(name: str) -> None:
    shape = TOOLS[name].shape
    jsonschema.Draft202012Validator.check_schema(shape.published)
    jsonschema.Draft202012Validator.check_schema(shape.accepted)


@pytest.mark.parametrize("name", sorted(TOOLS))
@SETTINGS
@given(data=st.data())
def test_every_reply_a_tool_can_get_validates_against_its_output_schema(
    name: str, data: st.DataObject
) -> None:
    shape = TOOLS[name].shape
    reply = data.draw(structs(mi.type_info(shape.reply)))  # type: ignore[arg-type]
    content = result_of(shape, over_the_wire(reply, shape.reply))
    PUBLISHED[name].validate(content)


def arguments_of(shape: Shape, request: p.Request) -> dict[str, Any]:
    """The arguments that ask for ``request``: its fields under the tool's names."""
    sent = msgspec.to_builtins(request)
    return {
        names[0]: sent[f]
        for f, names in shape.argument_names().items()
        if f in sent and getattr(request, _attribute(shape.request, f)) != _default(shape, f)
    }


def _attribute(cls: type[msgspec.Struct], encoded: str) -> str:
    return cls.__struct_fields__[cls.__struct_encode_fields__.index(encoded)]


def _default(shape: Shape, encoded: str) -> Any:
    info = next(f for f in mi.type_info(shape.request).fields if f.encode_name == encoded)  # type: ignore[attr-defined]
    if info.default_factory is not msgspec.NODEFAULT:
        return info.default_factory()
    return info.default


@pytest.mark.parametrize("name", sorted(TOOLS))
@SETTINGS
@given(data=st.data())
def test_every_request_a_tool_can_send_is_what_its_input_schema_accepts(
    name: str, data: st.DataObject
) -> None:
    shape = TOOLS[name].shape
    info = mi.type_info(shape.request)
    assert isinstance(info, mi.StructType)
    internal = tuple(_attribute(shape.request, f) for f in shape.internal)
    request = data.draw(structs(info, leave_out=internal))
    arguments = arguments_of(shape, request)
    ACCEPTED[name].validate(arguments)
    assert request_of(shape, arguments) == request


def past_bounds(schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """For each property with a bound: one value just past it."""
    out: list[tuple[str, Any]] = []
    for name, prop in schema["properties"].items():
        for alt in [prop, *prop.get("anyOf", ())]:
            if "maximum" in alt:
                out.append((name, alt["maximum"] + 1))
            if "minimum" in alt:
                out.append((name, alt["minimum"] - 1))
            if "exclusiveMinimum" in alt:
                out.append((name, alt["exclusiveMinimum"]))
            if "maxLength" in alt:
                out.append((name, "x" * (alt["maxLength"] + 1)))
            if alt.get("minLength", 0) > 0:
                out.append((name, ""))
            if "maxItems" in alt:
                item = alt.get("items", {})
                sample = "x" if item.get("type") == "string" else {"id": "mem_x"}
                out.append((name, [sample] * (alt["maxItems"] + 1)))
    return out


BOUNDS = [
    (name, argument, value)
    for name, tool in sorted(TOOLS.items())
    for argument, value in past_bounds(tool.shape.accepted)
]


@pytest.mark.parametrize(("name", "argument", "value"), BOUNDS, ids=lambda v: str(v)[:24])
def test_an_argument_past_a_bound_is_refused_by_the_schema_and_the_request_alike(
    name: str, argument: str, value: Any
) -> None:
    shape = TOOLS[name].shape
    base = _minimal(name, shape)
    arguments = {**base, argument: value}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(arguments, shape.accepted)
    with pytest.raises(ArgumentError) as refused:
        request_of(shape, arguments)
    message = str(refused.value)
    assert "\n" not in message and argument in message and "pydantic" not in message


# What a request's own rules (its __post_init__) ask for beyond its required arguments.
RULED: dict[str, dict[str, Any]] = {
    "work_result": {"session_id": "s"},
    "memory_record_use": {"memory_ids": ["mem_x"], "outcome": "used"},
    "memory_fact_resolve": {"accept": True},
}


def _minimal(name: str, shape: Shape) -> dict[str, Any]:
    """Arguments that make a valid request: each required one at a valid value, and what
    the request's rules ask for beside them."""
    schema = shape.accepted
    args: dict[str, Any] = dict(RULED.get(name, {}))
    for argument in schema.get("required", ()):
        prop = copy.deepcopy(schema["properties"][argument])
        args[argument] = (
            "x" * max(1, prop.get("minLength", 1)) if prop.get("type") == "string" else 0.5
        )
    request_of(shape, args)
    return args


def test_the_bounds_walk_reaches_every_tool() -> None:
    # Every tool takes a bounded argument; one the walk missed would go untested above.
    assert {name for name, _, _ in BOUNDS} == set(TOOLS)


def _literal_values(t: Any) -> list[Any]:
    if isinstance(t, mi.Metadata):
        return _literal_values(t.type)
    if isinstance(t, mi.LiteralType):
        return list(t.values)
    if isinstance(t, mi.UnionType):
        return [v for member in t.types for v in _literal_values(member)]
    return []


def test_every_literal_default_is_the_literals_own_object() -> None:
    # msgspec decodes a Literal to the objects the Literal holds and omit_defaults compares a
    # str default by identity: a default spelled anew in another module is encoded where the
    # Struct means to leave it out, and the tool's structured content changes shape.
    strays = []
    for name in p.__all__:
        t = getattr(p, name)
        if not (isinstance(t, type) and issubclass(t, msgspec.Struct)):
            continue
        info = mi.type_info(t)
        assert isinstance(info, mi.StructType)
        for f in info.fields:
            values = _literal_values(f.type)
            if isinstance(f.default, str) and values and not any(v is f.default for v in values):
                strays.append(f"{name}.{f.name}")
    assert strays == []
