"""The layout keeps its one-way data flow: no import cycle, nothing imports the app, each
layer imports only those below it, SQL and the SQLite engine stay inside the store, and every
request type of the protocol has a route.

Read from the source (every import statement, those under TYPE_CHECKING and inside
functions included), so an arrow added anywhere is seen.
"""

from __future__ import annotations

import ast
import re
import typing

from recall_client import protocol as p
from recalld.edge.registry import ROUTES

from tests.support.daemon import REPO
from tests.support.imports import graph, modules

# recalld's layers, lowest first: a module may import its own layer's package and the
# layers below; peers of one layer are listed apart.
LAYERS = [
    {
        "recalld",
        "recalld.errors",
        "recalld.config",
        "recalld.actor",
        "recalld.stats",
        "recalld.systemd",
    },
    {"recalld.domain"},
    {"recalld.store", "recalld.ingest"},
    {"recalld.pipeline", "recalld.retrieval"},
    {"recalld.handlers"},
    {"recalld.edge"},
    {
        "recalld.app",
        "recalld.housekeeping",
        "recalld.listening",
        "recalld.main",
        "recalld.__main__",
    },
]
# The client's layers, likewise: what every client shares, then the three parts (the MCP
# shim, recallctl's commands, the web page), then the entry point that joins two of them.
CLIENT_LAYERS = [
    {
        "recall_client",
        "recall_client.protocol",
        "recall_client.vocabulary",
        "recall_client.files",
        "recall_client.paths",
        "recall_client.running",
    },
    {
        "recall_client.client",
        "recall_client.hello",
        "recall_client.launch",
        "recall_client.autostart",
        "recall_client.spool",
    },
    {"recall_client.mcp", "recall_client.ctl", "recall_client.ui"},
    {"recall_client.recallctl"},
]
# Peers of one layer that must not lean on each other.
APART = [
    ("recalld.store", "recalld.ingest"),
    ("recalld.pipeline", "recalld.retrieval"),
    ("recall_client.mcp", "recall_client.ctl"),
    ("recall_client.mcp", "recall_client.ui"),
    ("recall_client.ctl", "recall_client.ui"),
]
# What of the client the daemon may import: its shared bottom, never a part.
DAEMON_MAY_USE = set().union(*CLIENT_LAYERS[:2])


def layer_of(name: str) -> tuple[int, str]:
    best: tuple[int, str] | None = None
    for i, layer in enumerate(CLIENT_LAYERS if name.startswith("recall_client") else LAYERS):
        for prefix in layer:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[1]):
                    best = (i, prefix)
    assert best is not None, f"{name} is in no layer: add it to LAYERS"
    return best


def test_there_is_no_import_cycle() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_daemon_uses_only_the_clients_shared_bottom_and_only_ctl_the_daemon() -> None:
    """recalld imports the protocol, paths, the client and the spool, never the MCP shim,
    recallctl's commands or the page; of the client, only recallctl's admin commands (which
    set up and fill a store, or read the daemon's config) import the daemon."""
    wrong = []
    for module, deps in graph().items():
        for dep in deps:
            if module.startswith("recalld") and dep.startswith("recall_client"):
                if layer_of(dep)[1] not in DAEMON_MAY_USE:
                    wrong.append(f"{module} -> {dep}")
            if module.startswith("recall_client") and dep.startswith("recalld"):
                if not module.startswith("recall_client.ctl."):
                    wrong.append(f"{module} -> {dep}")
    assert not wrong, wrong


def test_nothing_imports_the_app() -> None:
    importers = [m for m, deps in graph().items() if "recalld.app" in deps and m != "recalld.main"]
    assert not importers, f"{importers} import recalld.app (use Services / StatusParts)"


def test_each_layer_imports_only_the_layers_below() -> None:
    wrong = []
    for module, deps in graph().items():
        package = module.split(".")[0]
        mine, my_prefix = layer_of(module)
        for dep in deps:
            if dep.split(".")[0] != package:
                continue
            theirs, their_prefix = layer_of(dep)
            if theirs > mine or (
                theirs == mine
                and their_prefix != my_prefix
                and (my_prefix, their_prefix) in APART + [(b, a) for a, b in APART]
            ):
                wrong.append(f"{module} -> {dep}")
    assert not wrong, "imports against the flow:\n" + "\n".join(sorted(wrong))


ENGINES = ("recalld.store.sqlite", "recalld.store.postgres")
# The mover (`recallctl migrate`) reads one engine's store and writes the other's.
MOVER = "recalld.store.moving"
SPEAKS_SQL = (*ENGINES, MOVER, "recalld.store.sql")


def test_only_the_app_knows_the_engines_and_only_the_store_speaks_sql() -> None:
    mods = modules()
    edges = graph()
    engine_users = sorted(
        m
        for m, deps in edges.items()
        if any(d.startswith(ENGINES) for d in deps)
        and not m.startswith(ENGINES)
        # The app picks the engine; `recallctl db init` and `recallctl migrate` set up and
        # fill one, which is the engine's own business.
        and m not in ("recalld.app", MOVER, "recall_client.ctl.db")
    )
    assert not engine_users, f"{engine_users} use an engine directly (use the port)"
    sql = re.compile(r"\b(?:SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b|\bMATCH\b|bm25\(")
    speaking = []
    for name, path in mods.items():
        if name.startswith(SPEAKS_SQL) or not name.startswith("recalld"):
            continue
        source = path.read_text()
        if "import sqlite3" in source or "import psycopg" in source or sql.search(source):
            speaking.append(name)
    assert not speaking, f"SQL or a driver outside the store: {speaking}"


def test_neither_engine_imports_the_other() -> None:
    """What needs both (the mover) sits above them."""
    wrong = [
        f"{m} -> {d}"
        for m, deps in graph().items()
        for mine, other in (ENGINES, ENGINES[::-1])
        if m.startswith(mine)
        for d in deps
        if d.startswith(other)
    ]
    assert not wrong, wrong


def test_the_shared_sql_knows_no_engine() -> None:
    """store.sql is written once for both engines: no driver, no engine package."""
    mods = modules()
    edges = graph()
    wrong = []
    for name, path in mods.items():
        if not name.startswith("recalld.store.sql."):
            continue
        source = path.read_text()
        if "sqlite3" in source or "psycopg" in source:
            wrong.append(name)
        wrong += [f"{name} -> {d}" for d in edges.get(name, ()) if d.startswith(ENGINES)]
    assert not wrong, wrong


def test_the_store_knows_rows_not_the_wire() -> None:
    """The store reads and writes rows; the use cases above it take requests and build
    replies. It may name the words a record is made of (``recall_client.vocabulary``), never
    the protocol's messages."""
    wrong = [
        f"{m} -> {d}"
        for m, deps in graph().items()
        if m == "recalld.store" or m.startswith("recalld.store.")
        for d in deps
        if d == "recall_client.protocol" or d.startswith("recall_client.protocol.")
    ]
    assert not wrong, wrong


def test_every_request_type_has_a_route() -> None:
    requests = set(typing.get_args(p.Requests)) - {p.Hello}
    assert requests == set(ROUTES), requests ^ set(ROUTES)


def test_no_test_module_imports_another_or_a_conftest() -> None:
    """What tests share lives in tests/support/ (fixtures in conftest.py, which pytest loads):
    a helper taken from another test module drags that module's tests and fixtures along."""
    tests_root = REPO / "tests"
    found = []
    for path in sorted(tests_root.rglob("*.py")):
        package = ".".join(("tests", *path.parent.relative_to(tests_root).parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                last = target.rsplit(".", 1)[-1]
                if target.startswith("tests") and (last.startswith("test_") or last == "conftest"):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} imports {target}")
    assert found == []
