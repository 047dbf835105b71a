"""Our modules and what each imports, read from the source (every import statement, those
under TYPE_CHECKING and inside functions included), for the tests that hold the layout and
the documentation to the code."""

from __future__ import annotations

import ast
from pathlib import Path

from .daemon import REPO

PACKAGES = {
    "recalld": REPO / "daemon" / "recalld",
    "recall_client": REPO / "clients" / "recall_client",
}


def modules() -> dict[str, Path]:
    out = {}
    for package, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join((package, *parts))
            out[name.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ours ``name`` imports (a ``from package import module`` counts as the
    module)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}
