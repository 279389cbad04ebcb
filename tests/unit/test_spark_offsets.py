"""Offsets, admission-control budget split, partition planning and the data-loss rule."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.spark.offsets import (
    DataLossError,
    SeqRange,
    StreamPosition,
    apply_data_loss_rule,
    canonical,
    parse_offset,
    plan_ranges,
    resolve_spec,
    split_budget,
)
from jetlog.spark.options import EARLIEST, LATEST


def test_canonical_is_sorted_ints() -> None:
    off = canonical({"b": 3, "a": True + 1, "c": 10})
    assert json.dumps(off) == '{"a": 2, "b": 3, "c": 10}'


def test_parse_offset_rejects_foreign_checkpoints() -> None:
    assert parse_offset({"A": 5}) == {"A": 5}
    for bad in ({"A": 0}, {"A": "5"}, {"A": 1.5}, {"A": True}):
        with pytest.raises(ValueError, match="invalid sequence"):
            parse_offset(bad)


def test_positions_earliest_latest() -> None:
    assert StreamPosition(0, 0).earliest == 1 and StreamPosition(0, 0).latest == 1  # never written
    assert StreamPosition(11, 10).earliest == 11 == StreamPosition(11, 10).latest  # purged
    assert (StreamPosition(5, 9).earliest, StreamPosition(5, 9).latest) == (5, 10)


def test_resolve_spec() -> None:
    pos = {"A": StreamPosition(5, 9), "B": StreamPosition(1, 100)}
    assert resolve_spec({"A": EARLIEST, "B": LATEST}, pos, "x") == {"A": 5, "B": 101}
    assert resolve_spec({"A": 7, "B": LATEST}, pos, "x") == {"A": 7, "B": 101}
    with pytest.raises(DataLossError, match="stream C not found"):
        resolve_spec({"C": LATEST}, {"C": None}, "startingOffsets")


def test_split_budget_proportional_with_remainder() -> None:
    start = {"A": 1, "B": 1, "C": 1}
    latest = {"A": 101, "B": 51, "C": 11}  # backlogs 100, 50, 10 = 160
    end = split_budget(start, latest, 50)
    # shares: 100*50//160 = 31, 50*50//160 = 15, 10*50//160 = 3 → 49; remainder 1 to A
    assert end == {"A": 33, "B": 16, "C": 4}
    assert sum(end[s] - start[s] for s in start) == 50
    assert split_budget(start, latest, 1000) == latest
    assert split_budget({"A": 5}, {"A": 5}, 10) == {"A": 5}


@given(
    st.dictionaries(
        st.sampled_from(list("ABCDE")), st.tuples(st.integers(1, 10**9), st.integers(0, 10**6)), min_size=1
    ),
    st.integers(1, 10**6),
)
@settings(max_examples=300, deadline=None)
def test_split_budget_properties(streams: dict[str, tuple[int, int]], budget: int) -> None:
    start = {s: a for s, (a, _) in streams.items()}
    latest = {s: a + n for s, (a, n) in streams.items()}
    end = split_budget(start, latest, budget)
    total = sum(n for _, n in streams.values())
    for s in streams:
        assert start[s] <= end[s] <= latest[s]
    assert sum(end[s] - start[s] for s in streams) == min(total, budget)
    assert list(end) == sorted(end)


def test_plan_ranges_max_records() -> None:
    assert plan_ranges({"A": 1}, {"A": 1001}, 1, 300) == [
        SeqRange("A", 1, 251),
        SeqRange("A", 251, 501),
        SeqRange("A", 501, 751),
        SeqRange("A", 751, 1001),
    ]
    assert plan_ranges({"A": 5}, {"A": 5}, 4, 10) == []


def test_plan_ranges_min_partitions_proportional() -> None:
    r = plan_ranges({"A": 1, "B": 1}, {"A": 901, "B": 101}, 4, 10**6)
    by = {s: [x for x in r if x.stream == s] for s in "AB"}
    assert len(by["A"]) == 4 and len(by["B"]) == 1
    assert [(x.start, x.end) for x in by["A"]] == [(1, 226), (226, 451), (451, 676), (676, 901)]
    # a range never gets smaller than one sequence
    assert plan_ranges({"A": 1}, {"A": 3}, 10, 100) == [SeqRange("A", 1, 2), SeqRange("A", 2, 3)]


@given(
    st.dictionaries(
        st.sampled_from(list("ABC")), st.tuples(st.integers(1, 10**6), st.integers(0, 5000)), min_size=1
    ),
    st.integers(1, 16),
    st.integers(1, 2000),
)
@settings(max_examples=300, deadline=None)
def test_plan_ranges_cover_exactly(streams: dict[str, tuple[int, int]], min_p: int, max_r: int) -> None:
    start = {s: a for s, (a, _) in streams.items()}
    end = {s: a + n for s, (a, n) in streams.items()}
    ranges = plan_ranges(start, end, min_p, max_r)
    for s in streams:
        mine = [r for r in ranges if r.stream == s]
        covered = [q for r in mine for q in range(r.start, r.end)]
        assert covered == list(range(start[s], end[s]))
        assert all(0 < len(r) <= max_r for r in mine)
    total = sum(n for _, n in streams.values())
    if total:
        assert len(ranges) >= min(min_p, total)


def test_data_loss_rule() -> None:
    pos = {"A": StreamPosition(50, 100), "B": StreamPosition(1, 100)}
    start, end = {"A": 10, "B": 10}, {"A": 80, "B": 20}
    with pytest.raises(DataLossError) as ei:
        apply_data_loss_rule(start, end, pos, fail=True)
    msg = str(ei.value)
    assert "stream A: sequences 10..49 were removed" in msg and "first stored sequence is now 50" in msg
    assert "failOnDataLoss=false" in msg
    assert apply_data_loss_rule(start, end, pos, fail=False) == {"A": 50, "B": 10}
    # the whole range is gone → start moves to its end (nothing to read)
    assert apply_data_loss_rule({"A": 10}, {"A": 30}, pos, fail=False) == {"A": 30}
    with pytest.raises(DataLossError, match=re.escape("sequences 10..29 were removed")):
        apply_data_loss_rule({"A": 10}, {"A": 30}, pos, fail=True)
    # empty ranges and streams new to the query are not errors
    assert apply_data_loss_rule({"A": 80}, {"A": 80}, pos, fail=True) == {"A": 80}
    assert apply_data_loss_rule({"A": 1}, {"A": 80}, pos, fail=True, new_streams=frozenset("A")) == {"A": 50}


def test_data_loss_deleted_stream() -> None:
    with pytest.raises(DataLossError, match="stream A no longer exists"):
        apply_data_loss_rule({"A": 1}, {"A": 5}, {"A": None}, fail=True)
    assert apply_data_loss_rule({"A": 1}, {"A": 5}, {"A": None}, fail=False) == {"A": 5}
