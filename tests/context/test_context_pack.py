"""The packing core of a context block: rank (sections take turns), dedupe (the session's ids,
the block's own ids and texts), fit (every line that fits the budget, the whole block counted
by the same tokenizer as the daemon's)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from recalld.retrieval import host_tokens
from recalld.retrieval.context_pack import Candidate, Section, pack

count = host_tokens.count


def tokens(text: str) -> int:
    return count([text])[0]


def cands(prefix: str, *words: str) -> list[Candidate]:
    return [Candidate(id=f"{prefix}{i}", line=f"- [{prefix}{i}] {w}") for i, w in enumerate(words)]


def names(items: Sequence[tuple[str, Candidate, int]]) -> list[str]:
    return [c.id for _, c, _ in items]


FACTS = Section("facts", "Facts:", cands("f", "deploys on friday", "owner is ada", "db is pg"))
MEMS = Section("memories", "Memories:", cands("m", "cart uses decimal", "tests run in ci"))


def test_sections_take_turns_and_the_block_keeps_their_order() -> None:
    packed = pack("Memory:", [FACTS, MEMS], 1_000, set(), count)
    assert names(packed.items) == ["f0", "f1", "f2", "m0", "m1"]  # grouped under headings
    assert packed.text.splitlines() == [
        "Memory:",
        "Facts:",
        *(c.line for c in FACTS.candidates),
        "Memories:",
        *(c.line for c in MEMS.candidates),
    ]
    assert packed.tokens == tokens(packed.text) and packed.left_out == 0


def test_a_small_budget_takes_each_sections_best_first() -> None:
    # Room for the preamble, both headings and two lines: f0 and m0, not f0 and f1.
    need = tokens("Memory:") + tokens("Facts:") + tokens("Memories:")
    need += tokens(FACTS.candidates[0].line) + tokens(MEMS.candidates[0].line)
    packed = pack("Memory:", [FACTS, MEMS], need, set(), count)
    assert names(packed.items) == ["f0", "m0"]
    assert packed.tokens == tokens(packed.text) == need
    assert packed.left_out == 3


def test_a_line_too_long_is_left_out_and_shorter_ones_still_fit() -> None:
    long = Candidate(id="m9", line="- [m9] " + "word " * 200)
    section = Section("memories", "Memories:", [long, *MEMS.candidates])
    packed = pack("Memory:", [section], 40, set(), count)
    assert names(packed.items) == ["m0", "m1"] and packed.left_out == 1
    assert tokens(packed.text) <= 40


def test_what_the_session_was_given_or_the_block_holds_already_is_skipped() -> None:
    again = Section(
        "memories",
        "Memories:",
        [
            Candidate(id="f0", line="- [f0] deploys on friday"),  # the same id as a fact
            Candidate(id="m7", line="-  [f1]   Owner is Ada"),  # another's text, respaced
            *MEMS.candidates,
        ],
    )
    packed = pack("Memory:", [FACTS, again], 1_000, {"m0", "f2"}, count)
    assert names(packed.items) == ["f0", "f1", "m1"]
    assert packed.given_before == 2


def test_nothing_fits_or_a_zero_budget_gives_no_block_not_a_bare_preamble() -> None:
    assert pack("Memory:", [FACTS], 0, set(), count).text == ""
    tight = pack("Memory:", [FACTS], tokens("Memory:") + 1, set(), count)
    assert tight.text == "" and tight.items == [] and tight.left_out == 3
    assert pack("Memory:", [FACTS], 1_000, {"f0", "f1", "f2"}, count).text == ""


_line = st.text(alphabet="abc xyz.,", min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(
    budget=st.integers(min_value=0, max_value=120),
    lines=st.lists(st.lists(_line, max_size=6), min_size=1, max_size=4),
)
def test_the_block_never_exceeds_its_budget(budget: int, lines: list[list[str]]) -> None:
    sections = [
        Section(f"s{n}", f"Section {n}:", cands(f"s{n}_", *texts)) for n, texts in enumerate(lines)
    ]
    packed = pack("recalld memory:", sections, budget, set(), count)
    # Each line is counted with its newline: the block, one newline short, costs less.
    assert host_tokens.estimate(packed.text) <= packed.tokens <= budget
    assert len(packed.items) + packed.left_out <= sum(len(s.candidates) for s in sections)
