"""Finding 5: a secret in any field of any write request is redacted or refused, never stored.

The fields come from the protocol itself (every string a write request or a hello carries,
nested ones included), so a field added later is tried here without anyone listing it. Each
gets its own GitHub-shaped token; afterwards no token is in any file the daemon wrote.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from recall_client import protocol as p
from recall_client.client import RemoteError, connect
from recall_client.paths import read_admin_token
from recalld.domain.scopes import READ
from recalld.edge.registry import ROUTES
from recalld.ingest.sanitize import sanitize

from tests.support.daemon import DaemonProcess

from .harness import FIGURES

WORKSPACE = "/ws/fields"


def secret(n: int) -> str:
    return f"ghp_{n:06d}" + "Zq7" * 10


def string_fields(cls: type) -> Iterator[tuple[str, str]]:
    """(field, shape) of each string a struct carries: shape "str", "list", or
    "list.<field>" for a string inside a list of structs."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    for f in info.fields:
        for t in _members(f.type):
            if isinstance(t, mi.StrType):
                yield f.name, "str"
            elif isinstance(t, mi.ListType):
                (item,) = _members(t.item_type)
                if isinstance(item, mi.StrType):
                    yield f.name, "list"
                elif isinstance(item, mi.StructType):
                    for inner, shape in string_fields(item.cls):
                        assert shape == "str"
                        yield f.name, f"list.{inner}"


def _members(t: mi.Type) -> list[mi.Type]:
    if isinstance(t, mi.Metadata):
        t = t.type
    if isinstance(t, mi.UnionType):
        return [m for u in t.types for m in _members(u) if not isinstance(m, mi.NoneType)]
    return [t]


PARTS = ("memory", "episode", "experience", "lesson")


def leaf_paths(cls: type, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """The path (wire names; 0 for a list's item) of each string a struct carries, however
    deep, for a struct that nests structs in structs (an export row)."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    for f in info.fields:
        for t in _members(f.type):
            here = (*prefix, f.encode_name)
            if isinstance(t, mi.ListType):
                here, t = (*here, 0), _members(t.item_type)[0]
            if isinstance(t, mi.StrType):
                yield here
            elif isinstance(t, mi.StructType):
                yield from leaf_paths(t.cls, here)


def export_row(kind: str, n: int) -> dict[str, Any]:
    """A valid export row of ``kind`` with one item in each of its lists."""
    link = {"id": f"les_linked{n}", "created_at": 1.0}
    parts: dict[str, dict[str, Any]] = {
        "memory": {
            "last_verified_at": 1.0,
            "origin_commit": "abcdef0",
            "verified_commit": "abcdef0",
            "writer_client": "client",
            "writer_model": "model",
            "subject": "a subject",
            "superseded_by": "mem_other",
            "origin": WORKSPACE,
            "origin_repo": WORKSPACE,
            "trust_reasons": ["reason"],
            "scopes": ["scope"],
            "bands": ["band"],
            "episodes": ["episode"],
            "links": [{"rel": "depends_on", "dst_id": "mem_other", "note": "why"}],
            "paths": [{"path": "src/a.py", "anchored": 1}],
            "uses": [{"outcome": "used", "ts": 1.0, "agent": "a", "session": "s", "note": "n"}],
            "events": [{"ts": 1.0, "session": "s", "agent": "a", "event": "stored"}],
        },
        "episode": {
            "channel": "api",
            "episode_type": "tool_call",
            "status": "ok",
            "tool": "Bash",
            "error_code": "E1",
            "prev_id": "ep_other",
            "files": ["src/a.py"],
        },
        "experience": {
            "class": "general",
            "status": "success",
            "strategy": "a strategy",
            "files": ["src/a.py"],
            "rollup": {
                "workspace": WORKSPACE,
                "session": "s",
                "given": ["status"],
                "episodes": 1,
                "rolled_up_at": 1.0,
            },
            "lessons": [link],
        },
        "lesson": {"experiences": [link]},
    }
    prefix = {"memory": "mem", "episode": "ep", "experience": "exp", "lesson": "les"}[kind]
    return {
        "id": f"{prefix}_fields{n}",
        "kind": kind,
        "text": f"row {n}",
        "workspace": WORKSPACE,
        "agent": "importer",
        "ts": 1.0,
        "created_at": 1.0,
        "updated_at": 1.0,
        "session": "s",
        "source": "user",
        "tags": ["tag"],
        "trust": 1.0,
        "eligibility": "eligible",
        kind: parts[kind],
    }


def place(row: dict[str, Any], path: tuple[str | int, ...], value: str) -> None:
    at: Any = row
    for step in path[:-1]:
        at = at[step]
    at[path[-1]] = value


def write_types() -> list[type[p.Request]]:
    return [t for t, route in ROUTES.items() if route.rule.scope != READ]


def test_every_string_field_is_sanitised_by_its_declaration() -> None:
    # A field added to a request with the free-text mark is redacted with no handler code.
    class Annotated(p.Request, tag="test_annotated"):
        remark: typing.Annotated[str, msgspec.Meta(extra=p.FREE_TEXT)]
        label: str

    cleaned = sanitize(Annotated(remark=f"see {secret(1)}", label="plain"))
    assert isinstance(cleaned.request, Annotated)
    assert cleaned.request.remark == "see [REDACTED:github_token]"
    assert cleaned.redacted == ["github_token"]
    with pytest.raises(Exception, match="label holds what looks like a secret"):
        sanitize(Annotated(remark="fine", label=secret(2)))


async def test_a_secret_in_any_field_of_any_write_request_is_not_stored(
    running_daemon: DaemonProcess,
) -> None:
    d = running_daemon
    token = read_admin_token()
    async with connect(agent="owner", workspace=WORKSPACE, path=d.socket, admin_token=token) as rc:
        base = await rc.call(p.MemoryStore(text="a memory to point at"), p.MemoryStored)
        episode = await rc.call(
            p.CaptureEpisode(summary="a step", session_id="s-fields"), p.EpisodeCaptured
        )
        hits = await rc.call(p.MemorySearch(query="memory to point at"), p.MemorySearchResult)
        use_token = hits.hits[0].use_token
        experience = await rc.call(
            p.RecordExperience(description="an experience to point at"), p.ExperienceRecorded
        )

        def template(cls: type[p.Request], field: str, n: int) -> dict[str, Any]:
            """Valid values for every required field of ``cls`` (``field`` aside)."""
            unique = f"variant {n}"
            templates: dict[type[p.Request], dict[str, Any]] = {
                p.MemoryStore: {
                    "text": unique,
                    "kind": "fact" if field == "subject" else "entry",
                    "subject": "a subject" if field == "subject" else None,
                },
                p.MemoryUpdate: {"memory_id": base.record_id, "text": unique},
                p.MemoryVerify: {"memory_id": base.record_id},
                p.MemoryRecordUse: {"use_token": use_token},
                # One of accept or keep_id (the request's own rule): keep_id when it is tried.
                p.MemoryFactResolve: {"subject": "a subject"}
                | ({} if field == "keep_id" else {"accept": True}),
                p.CaptureEpisode: {"summary": unique},
                p.WorkResult: {"task_result": 1.0, "session_id": "s-fields"},
                p.Forget: {"record_id": "mem_nosuchrecord"},
                p.RecordExperience: {"description": unique},
                p.ForgetExperience: {"record_id": "exp_nosuchrecord"},
                p.RollUpExperience: {"session": "s-fields"},
                p.WorkspaceApprove: {"workspace": f"/ws/approved/{n}"},
                p.WorkspaceRevoke: {"workspace": f"/ws/approved/{n}"},
                p.AgentEnroll: {"agent": f"enrolled-{n}"},
                p.AgentRevoke: {"agent": f"enrolled-{n}"},
            }
            return templates.get(cls, {})

        tried = refused = 0
        secrets: list[str] = []
        for cls in write_types():
            if cls is p.Import:
                continue  # rows nest deeper: tried below, leaf by leaf
            for field, shape in string_fields(cls):
                n = len(secrets)
                value = secret(n)
                secrets.append(value)
                fields = template(cls, field, n)
                if shape == "str":
                    fields[field] = value
                elif shape == "list":
                    fields[field] = [value]
                else:
                    inner = shape.split(".", 1)[1]
                    link = {"id": base.record_id, "note": "why"} | {inner: value}
                    fields[field] = [p.DependsOn(**link)]
                if cls is p.WorkResult and field == "episode_id":
                    fields.pop("session_id")
                tried += 1
                try:
                    await rc.call(cls(**fields))
                except RemoteError as exc:
                    # Refused as an identifier holding a secret, or for being what it is
                    # (an unknown id): either way nothing of it was stored.
                    assert exc.code in {"invalid_request", "not_found", "forbidden"}, exc
                    refused += 1
        del episode, experience

        # Import: each string leaf of an export row, in a row of the kind that has it.
        for path in leaf_paths(p.ExportedRecord):
            n = len(secrets)
            value = secret(n)
            secrets.append(value)
            row = export_row(path[0] if path[0] in PARTS else "memory", n)
            place(row, path, value)
            tried += 1
            try:
                await rc.call(p.Import(records=[msgspec.convert(row, p.ExportedRecord)]))
            except (RemoteError, msgspec.ValidationError) as exc:
                assert not isinstance(exc, RemoteError) or exc.code == "invalid_request", exc
                refused += 1

    # The hello's own identifiers.
    for field in ("agent", "workspace", "client", "model", "session"):
        value = secret(len(secrets))
        secrets.append(value)
        hello: dict[str, Any] = {"agent": "hello-check", "workspace": WORKSPACE} | {field: value}
        with pytest.raises(RemoteError) as no:
            async with connect(path=d.socket, **hello):
                pass
        assert no.value.code == "invalid_request"
        tried += 1

    assert tried >= 40, f"only {tried} fields tried: is the walk over the protocol broken?"
    assert await d.stop() == 0
    written = b"".join(f.read_bytes() for f in d.data_dir.iterdir() if f.is_file())
    written += d.log_path.read_bytes()
    leaked = [s for s in secrets if s.encode() in written or s[4:].encode() in written]
    assert not leaked, f"stored as sent: {leaked[:3]}"
    FIGURES["secrets: request fields tried"] = tried
    FIGURES["secrets: ... of which refused"] = refused
