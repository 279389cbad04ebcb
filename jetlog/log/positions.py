"""Batch positions of a log (``store.Pos``): the per-segment table that maps them to bytes.

A position is ``(last_seq, k)``; ``k`` counts the earlier batches with the same ``last_seq``.
Only batches holding nothing but removal ops repeat a ``last_seq``, and the first batch of a
segment always starts a new one (a segment is only ever started for a batch that assigns a
sequence: a writer rolls when it appends a record, a follower only before a batch with
records; a rewritten segment starts with its records or with its sequence high-water mark).
So ``k`` can be computed inside one segment, and the segment holding ``(s, k)`` is the last
one whose base is ≤ ``s``.

*Null* batches (no record, no op, ``last_seq == base_seq``) change nothing and have no
position: the header-only batch that remembers an empty store's first sequence, and the empty
tail batch a rewrite may leave. Tables leave them out, and so does replication.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import chain, compress, islice
from operator import sub

from jetlog.log.store import Pos
from jetlog.wire import records as rc

NULL_LAST = (1 << 64) - 1
"""``last_seq`` recorded for a null batch in index files (it has no position)."""


def is_null(h: rc.BatchHeader) -> bool:
    """True for a batch that changes nothing (see the module docstring)."""
    return not h.n_records and not h.n_ops and h.last_seq == h.base_seq


class PosTable:
    """The position-bearing batches of one segment (or of a memory log), in log order:
    file offset, stored size and ``last_seq`` of each. Memory: 24 bytes per batch."""

    __slots__ = ("_end", "_size", "last", "off")

    def __init__(self) -> None:
        self.off = array("Q")
        self._size: array[int] | None = array("Q")
        self._end = 0  # with ``_size`` None: where the last batch ends
        self.last = array("Q")

    @property
    def size(self) -> array[int]:
        """Stored size of each batch. A table built at recovery works it out on first use:
        most segments of a restarted log are never read by position before they are dropped,
        and the subtraction is a Python step per batch (~0.5M batches for 10M messages)."""
        if self._size is None:
            off = self.off
            self._size = array("Q", map(sub, chain(islice(off, 1, None), (self._end,)), off))
        return self._size

    def __len__(self) -> int:
        return len(self.last)

    def add(self, off: int, size: int, last: int) -> None:
        self.size.append(size)
        self.off.append(off)
        self.last.append(last)

    def k(self, i: int) -> int:
        """``k`` of entry ``i`` (batches before it with the same ``last_seq``)."""
        return i - bisect_left(self.last, self.last[i])

    def pos(self, i: int) -> Pos:
        return (self.last[i], self.k(i))

    def find(self, pos: Pos) -> int:
        """The entry at ``pos``, or -1."""
        s, k = pos
        if k < 0:
            return -1
        i = bisect_left(self.last, s) + k
        return i if i < len(self.last) and self.last[i] == s else -1

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` entries."""
        del self.size[n:]
        del self.off[n:]
        del self.last[n:]

    @classmethod
    def from_batches(cls, offsets: array[int], lasts: array[int], covered: int) -> PosTable:
        """The table of a segment from its index columns: every batch's offset and
        ``last_seq`` (``NULL_LAST`` for null batches) and the bytes they cover."""
        t = cls()
        if not offsets:
            return t
        nulls = _nulls(lasts)
        if nulls <= 1 and (not nulls or lasts[0] == NULL_LAST):
            # No null batch, or only the header-only batch a store starts with (the usual
            # case; slices are C copies): each kept batch ends where the next begins, so the
            # sizes can wait for first use (``size``).
            k = 1 if nulls else 0
            t.off, t.last = offsets[k:], lasts[k:]  # copies: the index's columns stay its own
            t._size, t._end = None, covered
            return t
        # Sizes from the next batch's offset (a null batch included), then the nulls dropped.
        sizes = array("Q", map(sub, chain(islice(offsets, 1, None), (covered,)), offsets))
        keep = bytes(map(NULL_LAST.__ne__, lasts))
        t.off = array("Q", compress(offsets, keep))
        t._size = array("Q", compress(sizes, keep))
        t.last = array("Q", compress(lasts, keep))
        return t


_NULL_BYTES = NULL_LAST.to_bytes(8, "little")


def _nulls(lasts: array[int]) -> int:
    """How many entries of ``lasts`` are ``NULL_LAST``: a byte search (``array.count`` makes
    an int per entry). A hit must be 8-byte aligned; the all-ones pattern reads the same in
    either byte order."""
    raw = lasts.tobytes()
    n = 0
    i = raw.find(_NULL_BYTES)
    while i >= 0:
        if i % 8 == 0:
            n += 1
            i = raw.find(_NULL_BYTES, i + 8)
        else:
            i = raw.find(_NULL_BYTES, i + 1)
    return n
