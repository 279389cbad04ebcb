"""``PosTable.from_batches`` (built in C at recovery) equals the table built batch by batch."""

from __future__ import annotations

from array import array

from hypothesis import example, given
from hypothesis import strategies as st

from jetlog.log.positions import NULL_LAST, PosTable


def _reference(offsets: list[int], lasts: list[int], covered: int) -> PosTable:
    t = PosTable()
    for i, (off, last) in enumerate(zip(offsets, lasts, strict=True)):
        if last != NULL_LAST:
            end = offsets[i + 1] if i + 1 < len(offsets) else covered
            t.add(off, end - off, last)
    return t


@given(st.lists(st.tuples(st.integers(1, 5000), st.booleans()), max_size=40), st.integers(0, 100))
# What every store starts with: one header-only (null) batch, then batches with records.
@example([(48, True)] + [(100 + i, False) for i in range(30)], 0)
@example([(48, True), (70, False), (48, True), (90, False)], 5)
def test_from_batches_matches_reference(batches: list[tuple[int, bool]], tail: int) -> None:
    offsets, lasts = [], []
    p, seq = 0, 0
    for size, null in batches:
        offsets.append(p)
        seq += 0 if null else 1
        lasts.append(NULL_LAST if null else seq)
        p += size
    covered = p + tail
    got = PosTable.from_batches(array("Q", offsets), array("Q", lasts), covered)
    want = _reference(offsets, lasts, covered)
    assert (list(got.off), list(got.size), list(got.last)) == (
        list(want.off),
        list(want.size),
        list(want.last),
    )
