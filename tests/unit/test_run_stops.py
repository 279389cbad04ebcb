"""``run_stops`` (all entries at once, as big-integer lanes) gives exactly the bytes of
``run_stops_slow`` (the definition, one entry at a time) for any window of any index block:
contiguous records, batch headers between them, compressed entries, positions that would
make a lane carry."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.log.index import BLOCK_MAX, Block
from jetlog.log.runstops import run_stops, run_stops_slow
from jetlog.log.segment import COMPRESSED

# One entry: (gap before it in bytes, record length, compressed?)
_entry = st.tuples(
    st.sampled_from([0, 0, 0, 0, 64, 64, 1, 4096]),
    st.integers(1, 70_000),
    st.sampled_from([False] * 9 + [True]),
)


def _block(entries: list[tuple[int, int, bool]], start: int = 64) -> Block:
    blk = Block()
    p = start
    for gap, length, compressed in entries:
        p += gap
        blk.pos.append(p)
        blk.aux.append(COMPRESSED | length if compressed else length)
        p += length
    return blk


@settings(max_examples=300)
@given(st.lists(_entry, min_size=0, max_size=300), st.data())
def test_the_fast_stops_are_the_definition(entries: list[tuple[int, int, bool]], data: st.DataObject) -> None:
    blk = _block(entries)
    n = len(entries)
    i = data.draw(st.integers(0, n))
    j = data.draw(st.integers(i, n))
    got = run_stops(blk, i, j)
    assert got == run_stops_slow(blk, i, j)
    assert len(got) == max(j - i - 1, 0) and set(got) <= {0, 1}


def test_a_bulk_window_has_no_stop_and_headers_make_them() -> None:
    blk = _block([(0, 100, False)] * BLOCK_MAX)
    assert run_stops(blk, 0, BLOCK_MAX) == bytes(BLOCK_MAX - 1)  # one run: the fast exit
    blk = _block([(64 if k % 3 == 0 else 0, 100, False) for k in range(BLOCK_MAX)])
    want = bytes(1 if (t + 1) % 3 == 0 else 0 for t in range(BLOCK_MAX - 1))
    assert run_stops(blk, 0, BLOCK_MAX) == want == run_stops_slow(blk, 0, BLOCK_MAX)


def test_positions_a_lane_could_carry_from_take_the_definition() -> None:
    # A record ending past 2**32 - 1 would carry into the next lane: the high-bit guard
    # sends such a window to the slow path, which gives the same answer.
    blk = _block([(0, 0x7FFF_FFF0, False), (0, 0x7FFF_FFF0, False), (0, 100, False)], start=0x10)
    assert run_stops(blk, 0, 3) == run_stops_slow(blk, 0, 3) == b"\x00\x00"


@settings(max_examples=300)
@given(st.lists(_entry, min_size=1, max_size=200), st.data())
def test_the_last_stop_before_an_uncompressed_entry_is_the_last_gap(
    entries: list[tuple[int, int, bool]], data: st.DataObject
) -> None:
    # ``rawread._batch_start`` looks for the last run end before entry k with ``run_stops``,
    # which also ends runs next to compressed entries; before an uncompressed entry k that
    # last end is the last physical gap, what it used to compute.
    k = data.draw(st.integers(0, len(entries) - 1))
    entries[k] = (entries[k][0], entries[k][1], False)
    blk = _block(entries)
    lo = data.draw(st.integers(0, k))
    pos, aux = blk.pos, blk.aux
    gaps = bytes(int(pos[t] + aux[t] != pos[t + 1]) for t in range(lo, k))
    assert run_stops(blk, lo, k + 1).rfind(1) == gaps.rfind(1)
