"""The search workers' turns: a connection that pipelines reads cannot make another's one read
wait behind all of them."""

from __future__ import annotations

from recalld.retrieval.search_actor import _ReadJob, _Turns


def _job(asker: int, seq: int) -> _ReadJob:
    return _ReadJob(fn=lambda reader: None, asker=asker, seq=seq)


def test_the_asker_with_fewest_reads_running_goes_next_first_come_among_equals() -> None:
    turns = _Turns()
    hogs = [_job(asker, seq) for seq, asker in enumerate([1, 1, 2, 2, 3, 3, 4, 4])]
    for job in hogs:
        turns.put(job)
    # Two workers take the two oldest reads of different askers.
    first, second = turns.take(), turns.take()
    assert (first.asker, second.asker) == (1, 2)
    polite = _job(5, 8)
    turns.put(polite)
    # Askers 3, 4 and 5 have nothing running; 3 has waited longest, then 4, then the
    # polite one, ahead of the hogs' second reads.
    assert [turns.take().asker for _ in range(3)] == [3, 4, 5]
    turns.done(first)
    turns.done(second)
    assert [(j.asker, j.seq) for j in (turns.take(), turns.take(), turns.take())] == [
        (1, 1),
        (2, 3),
        (3, 5),
    ]


def test_reads_of_one_asker_keep_their_order_and_done_frees_its_turn() -> None:
    turns = _Turns()
    for seq in range(4):
        turns.put(_job(7, seq))
    taken = [turns.take() for _ in range(2)]
    assert [j.seq for j in taken] == [0, 1]
    turns.put(_job(8, 4))
    assert turns.take().asker == 8  # nothing of 8's running, two of 7's
    for job in taken:
        turns.done(job)
    assert [turns.take().seq for _ in range(2)] == [2, 3]
