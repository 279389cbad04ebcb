"""Where runs of stored bytes end, for a window of index entries (pure; ``rawread`` uses it).

A bulk read serves consecutive live records as one ``pread`` while each record directly
follows the one before it in the file. For entries ``i..j-1`` of an index block, byte ``t - i``
of :func:`run_stops` is non-zero where a run must end after entry ``t``: the next entry does
not start where entry ``t`` ends (a batch header lies between them), or either of the two
lives in a compressed batch (``aux`` carries ``COMPRESSED``).

WHY two implementations. The straightforward one (:func:`run_stops_slow`) walks the columns
with ``map`` over ``operator`` functions: ~85 ns per entry, a fifth of the node's CPU while it
serves a Spark read of small records (py-spy, docs/internals.md, twentieth pass). The fast one
adds and compares all the entries at once as lanes of two big integers, 32 bits per entry:
``(pos[t] + aux[t]) ^ pos[t + 1]`` is zero exactly where entry ``t + 1`` follows entry ``t``.
A lane cannot carry into the next one as long as every ``pos`` and ``aux`` is below 2**31
(their sum then stays below 2**32): a segment is at most 1 GiB plus one record, and an
uncompressed ``aux`` is a record's length. Any window with a high bit set anywhere (a
compressed entry, or an impossible position) takes the slow path, which is the definition.
"""

from __future__ import annotations

import sys
from array import array
from operator import add, ne, or_
from typing import TYPE_CHECKING

from jetlog.log.segment import COMPRESSED

if TYPE_CHECKING:
    from jetlog.log.index import Block

_LANES = array("I").itemsize == 4 and sys.byteorder == "little"
"""The lane layout below needs 4-byte little-endian ``array("I")`` items (x86, arm64)."""

_HIGH_BITS = 8192 + 1  # lanes in the cached high-bit mask (an index block's entries, and one)
_HIGH = int.from_bytes(b"\x00\x00\x00\x80" * _HIGH_BITS, "little")
_NONZERO = bytes([0] + [1] * 255)  # translate table: any non-zero byte to 1


def run_stops_slow(blk: Block, i: int, j: int) -> bytes:
    """The definition (see the module docstring), one entry at a time: byte ``t - i`` is 1
    where a run ends after entry ``t``, for ``i <= t < j - 1``."""
    if j - i < 2:
        return b""
    pos, aux = blk.pos, blk.aux
    gap = map(ne, map(add, pos[i : j - 1], aux[i : j - 1]), pos[i + 1 : j])
    if max(aux[i:j]) < COMPRESSED:  # the common case: no compressed batch, gaps alone
        return bytes(gap)
    comp = bytes(map(COMPRESSED.__le__, aux[i:j]))
    return bytes(map(or_, gap, map(or_, comp[:-1], comp[1:])))


def run_stops(blk: Block, i: int, j: int) -> bytes:
    """:func:`run_stops_slow`'s bytes (1 where a run ends after entry ``t``, else 0), computed
    for all the entries at once as 32-bit lanes of big integers (module docstring)."""
    n = j - i - 1
    if n < 1:
        return b""
    if not _LANES or n >= _HIGH_BITS:
        return run_stops_slow(blk, i, j)
    # n + 1 lanes each: entry t's position and length are lane t - i.
    p = int.from_bytes(blk.pos[i:j].tobytes(), "little")
    a = int.from_bytes(blk.aux[i:j].tobytes(), "little")
    if (p | a) & _HIGH:
        return run_stops_slow(blk, i, j)  # a compressed entry (or a lane that could carry)
    # Lane t: end of entry t XOR start of entry t + 1 (``p >> 32``), for t < n; lane n is
    # the end of the last entry, which nothing follows in the window.
    x = (p + a) ^ (p >> 32)
    last = (blk.pos[j - 1] + blk.aux[j - 1]) << (32 * n)
    if x == last:
        return bytes(n)  # one run through the whole window (a bulk load's large batches)
    # Fold each lane's four bytes into its lowest (bytes of other lanes only reach the top
    # byte), keep every lane's lowest byte, and make it 0 or 1.
    x |= (x >> 8) | (x >> 16) | (x >> 24)
    return x.to_bytes(4 * (n + 1), "little")[0 : 4 * n : 4].translate(_NONZERO)
