"""Scanning a segment's bytes for its batches (``scan``): where the valid ones end and whether
what follows is a torn tail a crash may leave or corruption. Sans-I/O, over ``bytes``; the
batch layout is ``records``'.
"""

from __future__ import annotations

from typing import NamedTuple

from jetlog.wire.records import HEADER_SIZE, MAGIC, BatchError, BatchHeader, check_body, decode_header

OK = "ok"
TORN = "torn"
CORRUPT = "corrupt"


class ScanResult(NamedTuple):
    """Outcome of scanning a buffer of consecutive batches.

    ``batches``: ``(offset, header)`` of every valid batch up to ``end`` (the offset after the
    last valid batch before any problem). ``status``: ``ok`` (clean end), ``torn`` (the buffer
    ends in an incomplete batch, or in bytes that hold nothing valid: a tail a crash may leave),
    ``corrupt`` (invalid bytes followed by valid data, or in a region known to be complete).
    ``resume``: for ``corrupt``, the offset of the next valid batch, or -1 if none.
    """

    batches: list[tuple[int, BatchHeader]]
    end: int
    status: str
    reason: str
    resume: int


def find_next_batch(buf: bytes | bytearray | memoryview, start: int, *, verify: bool = True) -> int:
    """Offset of the first fully valid batch (header and body CRC) at or after ``start``, or
    -1. Used to resynchronise after corruption."""
    data = buf if isinstance(buf, bytes | bytearray) else bytes(buf)
    p = data.find(MAGIC, start)
    while p >= 0:
        try:
            h = decode_header(data, p)
            if verify:
                check_body(data, p, h)
            elif p + h.size > len(data):
                raise BatchError(p, "incomplete body", torn=True)
            return p
        except BatchError:
            p = data.find(MAGIC, p + 1)
    return -1


SECTOR = 512


def lost_write(buf: bytes | bytearray | memoryview, p: int, end: int) -> bool:
    """Whether the invalid batch at ``p`` (whose bytes end at ``end``) shows a write that never
    reached the disk: a sector overlapping it that is all zeros from ``p`` on (to the end of
    ``buf`` at most)."""
    data = buf if isinstance(buf, bytes | bytearray) else bytes(buf)
    n = len(data)
    for s in range(p // SECTOR * SECTOR, min(end, n), SECTOR):
        lo = max(s, p)
        hi = min(s + SECTOR, n)
        if data.count(0, lo, hi) == hi - lo:
            return True
    return False


def _extent(buf: bytes | bytearray | memoryview, p: int) -> int:
    """Where the invalid batch at ``p`` ends: at its own size when its header is intact (a
    missing write that explains a bad body lies inside the batch), else after its header."""
    try:
        h = decode_header(buf, p)
    except BatchError:
        return p + HEADER_SIZE
    return p + h.size


def scan(
    buf: bytes | bytearray | memoryview, offset: int = 0, *, complete_to: int = 0, verify: bool = True
) -> ScanResult:
    """Walk the batches of ``buf`` from ``offset``.

    ``complete_to`` is a length the caller knows was fully written (e.g. an index file proved
    it): any problem before it is corruption, never a torn tail. ``verify`` checks body CRCs.

    Torn vs corrupt (a crash can only leave an *incomplete* tail: what was written after the
    last sync, in a file preallocated with zeros past it, whose pages may have reached the disk
    in any order):
    - fewer bytes than a header, or a valid header whose body runs past the end: torn;
    - beyond ``complete_to``, an invalid batch where a write went missing (a 512-byte sector
      overlapping its header, or its body when the header is intact, zero from the batch on):
      torn, even with valid batches after it (pages written out of order);
    - an invalid header with no valid batch after it: torn if the rest is zeros or its magic
      is not intact (garbage a power loss may leave), corrupt if the magic is intact (a header
      that was written whole and then damaged);
    - a body CRC mismatch, or anything invalid with a valid batch after it: corrupt.
    """
    batches: list[tuple[int, BatchHeader]] = []
    n = len(buf)
    p = offset
    while p < n:
        try:
            h = decode_header(buf, p)
            if verify:
                check_body(buf, p, h)
            elif p + h.size > n:
                raise BatchError(p, "incomplete body", torn=True)
        except BatchError as err:
            return _classify(buf, batches, p, err, complete_to, verify)
        batches.append((p, h))
        p += h.size
    return ScanResult(batches, p, OK, "", -1)


def _classify(
    buf: bytes | bytearray | memoryview,
    batches: list[tuple[int, BatchHeader]],
    p: int,
    err: BatchError,
    complete_to: int,
    verify: bool,
) -> ScanResult:
    nxt = find_next_batch(buf, p + 1, verify=verify)
    if p >= complete_to and lost_write(buf, p, _extent(buf, p)):
        # CRASH: the tail after the last sync, with a sector that never reached the disk. No
        # batch from here on was acknowledged: a sync covering any of them would have made
        # that sector durable too. (Damage that zeroes a whole sector of synced data beyond
        # the index-proven region looks the same and is cut as well: the price of a
        # preallocated writer, bounded by ``complete_to``.)
        return ScanResult(batches, p, TORN, "unsynced tail (a zero-filled sector)", -1)
    if nxt >= 0:
        return ScanResult(batches, p, CORRUPT, err.reason, nxt)
    if p < complete_to:
        return ScanResult(batches, p, CORRUPT, err.reason + " (inside the indexed region)", -1)
    if err.torn:
        return ScanResult(batches, p, TORN, err.reason, -1)
    rest = bytes(memoryview(buf)[p:])
    if rest.count(0) == len(rest):
        return ScanResult(batches, p, TORN, "zero-filled tail", -1)
    if rest[:4] == MAGIC:
        # A whole header (or a whole batch, for a body CRC mismatch) was written and later
        # damaged: an append-only writer cannot produce this by crashing.
        return ScanResult(batches, p, CORRUPT, err.reason, -1)
    return ScanResult(batches, p, TORN, "garbage tail: " + err.reason, -1)
