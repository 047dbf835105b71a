"""The documentation holds together: a short README whose first screen says what recalld is,
what it needs and the two commands; every relative link in the README, ARCHITECTURE.md, the
CHANGELOG and docs/ reaching a file and a heading that exist; no issue numbers outside the
CHANGELOG's history; a glossary entry for each word of recalld's own; and ARCHITECTURE.md true
to the code: every path, module and class it names exists, and where it says two packages
meet, the imports agree."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from tests.support.daemon import REPO
from tests.support.imports import graph, modules

DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "CHANGELOG.md", *DOCS]
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


def _prose(page: Path) -> str:
    """The page without its fenced code blocks (a link-like string in code is not a link)."""
    return FENCE.sub("", page.read_text())


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_is_short_and_its_first_screen_has_what_it_is_needs_and_the_commands() -> None:
    readme = (REPO / "README.md").read_text().splitlines()
    assert len(readme) < 250
    first_screen = "\n".join(readme[:40])
    python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python.startswith(">=")
    for needed in ("memory daemon", "Linux", f"Python {python[2:]}", "scripts/setup"):
        assert needed in first_screen, needed
    assert re.search(r"^scripts/run\b", first_screen, re.M)
    assert re.search(r"^scripts/test\b", first_screen, re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_reaches_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md":
            if anchor not in {_anchor(h) for h in HEADING.findall(_prose(file))}:
                broken.append(target)
    assert broken == []


@pytest.mark.parametrize(
    "page",
    [REPO / "README.md", *DOCS],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_no_issue_numbers_outside_the_changelog(page: Path) -> None:
    assert re.findall(r"(?i)\bissue \d+", page.read_text()) == []


def test_the_glossary_defines_every_word_of_recallds_own() -> None:
    glossary = (REPO / "docs" / "glossary.md").read_text()
    defined = set(re.findall(r"^\*\*([^*]+)\*\*:", glossary, re.M))
    words = {
        "seed", "cortex", "band", "reader contract", "episode", "experience", "lesson", "fact",
        "supersession", "drift", "staleness", "trust floor", "eligibility", "use token",
        "workspace", "contested", "pinned", "session context", "evidence", "verdict", "spool",
        "admin token", "tombstone", "authority", "visibility", "roll-up", "channel",
    }  # fmt: skip
    assert words - defined == set()


# ARCHITECTURE.md names the code by path (`store/port.py`, `edge/`) and by dotted name
# (`edge.server._failed`, `recall_client.protocol`): each must still be there.
ARCHITECTURE = REPO / "ARCHITECTURE.md"
# A path is from the repository's root, or a tail of a path in the code, the tests or the
# scripts (`store/port.py`, `sql/`, `recall_client/files.py`).
TREES = [REPO / "daemon", REPO / "clients", REPO / "tests", REPO / "scripts"]
PATH = re.compile(r"[\w*-]+(?:/[\w.*-]+)*/?(?:::\w+)?")
DOTTED = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\w*\))?")


def _our_modules() -> dict[str, Path]:
    """Our modules, and our packages (a folder of modules, with or without ``__init__.py``)."""
    found = modules()
    for name, path in list(found.items()):
        while "." in name:
            name = name.rpartition(".")[0]
            found.setdefault(name, path)
    return found


def _named(page: Path) -> list[str]:
    """Every word of every backticked span of the page's prose."""
    return [word for span in re.findall(r"`([^`\n]+)`", _prose(page)) for word in span.split()]


def _path_exists(word: str) -> bool:
    path, _, test = word.partition("::")
    path = path.rstrip("/")
    found = [*REPO.glob(path), *(f for tree in TREES for f in tree.rglob(path))]
    if test:
        return any(re.search(rf"^(?:async )?def {test}\(", f.read_text(), re.M) for f in found)
    return bool(found)


def _resolves(dotted: str, ours: dict[str, Path]) -> bool:
    """A module of ours whose name ends with a prefix of ``dotted`` (or an installed module
    of that name, as the MCP SDK's) has the rest of it as attributes; or ``dotted`` starts
    with a class of ours (`Server._admit`), which has the rest."""
    parts = dotted.split(".")
    for k in range(len(parts), -1, -1):
        prefix = ".".join(parts[:k])
        if k:
            candidates = [m for m in ours if m == prefix or m.endswith("." + prefix)]
            with contextlib.suppress(ImportError):
                if importlib.util.find_spec(prefix) is not None:
                    candidates.append(prefix)
        else:
            defines = re.compile(rf"^class {parts[0]}\b", re.M)
            candidates = [m for m, path in modules().items() if defines.search(path.read_text())]
        for name in candidates:
            thing: object = importlib.import_module(name)
            for attr in parts[k:]:
                thing = getattr(thing, attr, None)
            if thing is not None:
                return True
    return False


def test_every_path_architecture_names_exists() -> None:
    words = [w for w in _named(ARCHITECTURE) if PATH.fullmatch(w)]
    paths = [w for w in words if "/" in w or re.search(r"\.(py|json|toml)\b", w)]
    assert len(paths) > 50  # the pattern still finds them
    assert [w for w in paths if not _path_exists(w)] == []


def test_every_module_and_class_architecture_names_by_dotted_name_exists() -> None:
    ours = _our_modules()
    # A dotted name is ours when it starts with a module's or a package's name
    # (`edge.server`, `mcp.shim.main`) or a class's (`Server._admit`); `sys.modules` is not.
    firsts = {m.rsplit(".", 1)[-1] for m in ours}
    named = [
        m.group(1)
        for w in _named(ARCHITECTURE)
        if (m := DOTTED.fullmatch(w)) and not re.search(r"\.(py|json|toml)$", w)
    ]
    checked = [d for d in named if d.split(".")[0] in firsts or d[0].isupper()]
    assert len(checked) > 30
    assert [d for d in checked if not _resolves(d, ours)] == []


MEET = re.compile(r"`(\w+)` and `(\w+)`\s+meet only in ((?:`\w+`(?:,\s+|\s+and\s+)?)+)")


def test_peers_meet_only_where_architecture_says() -> None:
    """Where ARCHITECTURE.md says `X` and `Y` meet only in `A` and `B`, every module of ours
    that imports both is in A or B."""
    claims = MEET.findall(" ".join(_prose(ARCHITECTURE).split()))
    assert len(claims) >= 2
    edges = graph()
    wrong = []
    for x, y, where in claims:
        places = tuple(f"recalld.{w}" for w in re.findall(r"`(\w+)`", where))
        for module, deps in edges.items():
            if any(d.startswith(f"recalld.{x}") for d in deps) and any(
                d.startswith(f"recalld.{y}") for d in deps
            ):
                if not module.startswith(places):
                    wrong.append(f"{module} imports {x} and {y}")
    assert wrong == []
