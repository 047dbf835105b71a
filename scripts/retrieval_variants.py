"""Harder variants of a benchdata folder (LoCoMo's shape), for checking that retrieval levers
generalise beyond the data they were tuned on.

Each variant is a folder of the same format (``memories.jsonl``, ``queries.jsonl``) written
under OUT, the questions and their evidence unchanged unless said:

- ``shuffled``: the ``ts`` values permuted inside each session (``random.seed(7)``): the
  order of a session's turns carries nothing.
- ``nosession``: no ``session`` field (in recalld each record then takes its connection's
  session: one per workspace, in ``ts`` order).
- ``synonyms``: the questions' content words swapped for synonyms from a small hand-written
  map (names, numbers and words without an entry stay), so a question shares fewer words
  with its evidence.
- ``single``: every turn a memory on its own: no ``session`` field, and the ``ts`` values
  permuted over the whole conversation, so neither sessions nor order carry anything.
- ``oneworkspace``: all conversations in one workspace (scope ``all``): each question is
  searched among everyone's memories, the other conversations as distractors.

Run as ``python scripts/retrieval_variants.py ../shared/benchdata/locomo OUT [--only NAME]``;
stdlib only.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["SYNONYMS", "VARIANTS", "swap_synonyms", "write_variant"]

Row = dict[str, Any]

# Content words of questions and a synonym that does not share their stem (so the lexical
# channel cannot match it through stemming). Written by hand for LoCoMo's frequent question
# words; ambiguity is accepted, as a person's paraphrase would have it.
SYNONYMS: dict[str, str] = {
    "kind": "sort",
    "type": "variety",
    "new": "fresh",
    "get": "obtain",
    "game": "match",
    "games": "matches",
    "start": "begin",
    "started": "began",
    "go": "head",
    "going": "heading",
    "make": "create",
    "made": "created",
    "dog": "hound",
    "dogs": "hounds",
    "activity": "pastime",
    "activities": "pastimes",
    "take": "grab",
    "trip": "journey",
    "family": "relatives",
    "favorite": "preferred",
    "feel": "sense",
    "share": "tell",
    "plan": "intend",
    "plans": "intentions",
    "planning": "intending",
    "friends": "pals",
    "friend": "pal",
    "long": "lengthy",
    "book": "novel",
    "books": "novels",
    "enjoy": "relish",
    "describe": "portray",
    "first": "initial",
    "car": "vehicle",
    "cars": "vehicles",
    "inspired": "motivated",
    "painting": "artwork",
    "find": "discover",
    "dance": "ballet",
    "partner": "spouse",
    "together": "jointly",
    "play": "perform",
    "playing": "performing",
    "visit": "tour",
    "visited": "toured",
    "work": "job",
    "job": "occupation",
    "writing": "composing",
    "music": "tunes",
    "photo": "picture",
    "picture": "photograph",
    "give": "offer",
    "help": "assist",
    "helped": "assisted",
    "team": "squad",
    "meet": "encounter",
    "met": "encountered",
    "pet": "animal",
    "pets": "animals",
    "project": "undertaking",
    "projects": "undertakings",
    "mention": "bring up",
    "mentioned": "brought up",
    "gaming": "video games",
    "suggest": "propose",
    "group": "club",
    "use": "employ",
    "used": "employed",
    "tournament": "competition",
    "tournaments": "competitions",
    "try": "attempt",
    "tried": "attempted",
    "trying": "attempting",
    "charity": "nonprofit",
    "career": "profession",
    "park": "gardens",
    "say": "state",
    "store": "shop",
    "receive": "get",
    "received": "got",
    "event": "occasion",
    "events": "occasions",
    "kids": "children",
    "children": "kids",
    "year": "twelvemonth",
    "reading": "perusing",
    "old": "aged",
    "movie": "film",
    "movies": "films",
    "workshop": "seminar",
    "stay": "remain",
    "mom": "mother",
    "mother": "mom",
    "want": "wish",
    "class": "course",
    "classes": "courses",
    "experience": "encounter",
    "show": "display",
    "country": "nation",
    "keep": "retain",
    "road": "highway",
    "city": "town",
    "support": "backing",
    "adopt": "take in",
    "often": "frequently",
    "working": "laboring",
    "shelter": "refuge",
    "name": "title",
    "community": "neighborhood",
    "times": "occasions",
    "beach": "shore",
    "choose": "pick",
    "place": "spot",
    "advice": "guidance",
    "studio": "workroom",
    "main": "primary",
    "camping": "tenting",
    "sign": "signal",
    "join": "enter",
    "people": "folks",
    "buy": "purchase",
    "motivated": "driven",
    "recommend": "advise",
    "see": "watch",
    "love": "adore",
    "turtles": "tortoises",
    "stress": "strain",
    "practice": "rehearse",
    "adoption": "fostering",
    "gift": "present",
    "health": "wellbeing",
    "create": "produce",
    "decide": "choose",
    "festival": "fair",
    "video": "clip",
    "special": "particular",
    "younger": "junior",
    "summer": "summertime",
    "attend": "go to",
    "attended": "went to",
    "excited": "thrilled",
    "design": "layout",
    "finish": "complete",
    "someone": "somebody",
    "teammates": "squadmates",
    "organize": "arrange",
    "organized": "arranged",
    "cats": "kitties",
    "pursue": "chase",
    "interested": "curious",
    "art": "artwork",
    "important": "significant",
    "accident": "crash",
    "learning": "studying",
    "learn": "study",
    "win": "triumph",
    "live": "reside",
    "blog": "weblog",
    "memories": "recollections",
    "cooking": "cuisine",
    "big": "large",
    "free": "spare",
    "organization": "association",
    "hobby": "pastime",
    "run": "jog",
    "running": "jogging",
    "pottery": "ceramics",
    "home": "house",
    "watching": "viewing",
    "watch": "view",
    "church": "chapel",
    "party": "celebration",
    "impact": "effect",
    "visiting": "touring",
    "week": "sennight",
    "diet": "eating",
    "injury": "wound",
    "training": "coaching",
    "girlfriend": "sweetheart",
    "passion": "enthusiasm",
    "issue": "problem",
    "lately": "recently",
    "recently": "lately",
    "journey": "voyage",
    "care": "concern",
    "childhood": "youth",
    "life": "existence",
    "happened": "occurred",
    "online": "on the internet",
    "food": "meals",
    "travel": "journey",
    "recipes": "dishes",
    "recipe": "dish",
    "conference": "convention",
    "homeless": "unhoused",
    "area": "region",
    "places": "spots",
    "good": "fine",
    "near": "close to",
    "meeting": "gathering",
    "hike": "trek",
    "celebrate": "commemorate",
    "walk": "stroll",
    "relax": "unwind",
    "artist": "painter",
    "business": "company",
    "money": "cash",
    "volunteer": "helper",
    "weekend": "days off",
    "puppy": "pup",
    "room": "chamber",
    "dish": "plate",
    "sports": "athletics",
    "ankle": "foot",
    "nature": "outdoors",
    "school": "academy",
    "song": "track",
    "married": "wed",
    "tattoo": "ink",
    "internship": "traineeship",
    "mountains": "peaks",
    "color": "hue",
    "dessert": "sweets",
    "company": "firm",
    "ocean": "sea",
    "guitar": "six-string",
    "snake": "serpent",
    "snakes": "serpents",
    "bird": "fowl",
    "parents": "mom and dad",
}

_WORD = re.compile(r"[A-Za-z]+")


def swap_synonyms(query: str) -> str:
    """``query`` with each word that has an entry in :data:`SYNONYMS` replaced (case kept
    for a capitalised first letter)."""

    def swap(m: re.Match[str]) -> str:
        word = m.group(0)
        repl = SYNONYMS.get(word.lower())
        if repl is None:
            return word
        return repl[:1].upper() + repl[1:] if word[:1].isupper() else repl

    return _WORD.sub(swap, query)


def _shuffled(memories: list[Row], queries: list[Row]) -> tuple[list[Row], list[Row]]:
    random.seed(7)
    by_session: dict[Any, list[Row]] = {}
    for m in memories:
        by_session.setdefault(m.get("session"), []).append(m)
    out = []
    for rows in by_session.values():
        stamps = [m["ts"] for m in rows]
        random.shuffle(stamps)
        out += [m | {"ts": ts} for m, ts in zip(rows, stamps, strict=True)]
    return out, queries


def _nosession(memories: list[Row], queries: list[Row]) -> tuple[list[Row], list[Row]]:
    return [{k: v for k, v in m.items() if k != "session"} for m in memories], queries


def _synonyms(memories: list[Row], queries: list[Row]) -> tuple[list[Row], list[Row]]:
    return memories, [q | {"query": swap_synonyms(q["query"])} for q in queries]


def _single(memories: list[Row], queries: list[Row]) -> tuple[list[Row], list[Row]]:
    rng = random.Random(11)
    by_scope: dict[Any, list[Row]] = {}
    for m in memories:
        by_scope.setdefault(m.get("scope"), []).append(m)
    out = []
    for rows in by_scope.values():
        stamps = [m["ts"] for m in rows]
        rng.shuffle(stamps)
        out += [
            {k: v for k, v in m.items() if k != "session"} | {"ts": ts}
            for m, ts in zip(rows, stamps, strict=True)
        ]
    return out, queries


def _oneworkspace(memories: list[Row], queries: list[Row]) -> tuple[list[Row], list[Row]]:
    return [m | {"scope": "all"} for m in memories], [q | {"scope": "all"} for q in queries]


VARIANTS: dict[str, Callable[[list[Row], list[Row]], tuple[list[Row], list[Row]]]] = {
    "shuffled": _shuffled,
    "nosession": _nosession,
    "synonyms": _synonyms,
    "single": _single,
    "oneworkspace": _oneworkspace,
}


def _read(path: Path) -> list[Row]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _write(path: Path, rows: Iterable[Row]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_variant(source: Path, out: Path, name: str) -> Path:
    """Write variant ``name`` of the folder ``source`` to ``out/name``; returns that folder."""
    memories, queries = VARIANTS[name](
        _read(source / "memories.jsonl"), _read(source / "queries.jsonl")
    )
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "memories.jsonl", memories)
    _write(folder / "queries.jsonl", queries)
    return folder


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="retrieval_variants", description=__doc__.split("\n")[0])
    ap.add_argument("source", type=Path, help="a benchdata folder (memories.jsonl, queries.jsonl)")
    ap.add_argument("out", type=Path, help="where the variant folders are written")
    ap.add_argument("--only", choices=sorted(VARIANTS), action="append", help="just these")
    args = ap.parse_args(argv)
    for name in args.only or VARIANTS:
        print(write_variant(args.source, args.out, name))


if __name__ == "__main__":
    main()
