"""The documentation holds together: a short README whose first screen says what recalld is,
what it needs and the two commands; every relative link in the README, ARCHITECTURE.md, the
CHANGELOG and docs/ reaching a file and a heading that exist; no issue numbers outside the
CHANGELOG's history; and a glossary entry for each word of recalld's own."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.support.daemon import REPO

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
