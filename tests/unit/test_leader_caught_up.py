"""The leader's caught-up rule over its sampled log ends (``cluster.leaderfetch.caught_up_as_of``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jetlog.cluster.leaderfetch import caught_up_as_of

HIST = [(1.0, (10, 0)), (1.2, (20, 0)), (1.4, (20, 0)), (1.6, (35, 0)), (1.8, (50, 0))]


def test_latest_sample_at_or_below_the_position() -> None:
    assert caught_up_as_of(HIST, (20, 0)) == 1.4
    assert caught_up_as_of(HIST, (34, 0)) == 1.4
    assert caught_up_as_of(HIST, (35, 0)) == 1.6
    assert caught_up_as_of(HIST, (99, 0)) == 1.8


def test_behind_every_sample_is_never_caught_up() -> None:
    assert caught_up_as_of(HIST, (9, 0)) == 0.0
    assert caught_up_as_of([], (9, 0)) == 0.0


def test_positions_compare_by_sequence_then_offset() -> None:
    hist = [(1.0, (10, 0)), (2.0, (10, 5))]
    assert caught_up_as_of(hist, (10, 4)) == 1.0
    assert caught_up_as_of(hist, (10, 5)) == 2.0


@given(st.lists(st.integers(0, 1000), max_size=30), st.integers(0, 1000))
def test_matches_a_brute_force_search(ends: list[int], pos: int) -> None:
    hist = [(float(i + 1), (e, 0)) for i, e in enumerate(sorted(ends))]
    want = max((t for t, leo in hist if leo <= (pos, 0)), default=0.0)
    assert caught_up_as_of(hist, (pos, 0)) == want
