"""JLC1: the compact columnar framing of a bulk committed-range read (``$JETLOG.API.FETCH``).

One reply carries many records as columns, so a reader (the Spark source) builds Arrow arrays
straight from the buffers (``pyarrow.Array.from_buffers``) with no per-record Python work, and
the core package needs no pyarrow. All integers little-endian; every section starts on an
8-byte boundary (zero padding), so the offsets/values can be viewed in place.

Layout::

    0   magic   b"JLC1"
    4   u8      version (1)
    5   u8      flags (bit 0: header columns present)
    6   u16     reserved (0)
    8   u32     n   rows
    12  u32     m   header entries over all rows (0 without headers)
    16  i64[n]  seq
        i64[n]  ts (ns since the epoch, as stored)
        i32[n+1] subject offsets, then subject bytes (UTF-8)
        i32[n+1] data offsets, then data bytes
      with flag 1:
        i32[n+1] row -> first header entry (Arrow list offsets)
        i32[m+1] key offsets, then key bytes
        i32[m+1] value offsets, then value bytes

Offsets start at 0 and are Arrow's 32-bit offsets, so one frame must stay below 2 GiB (it is
bounded by the NATS max payload anyway).
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import NamedTuple

MAGIC = b"JLC1"
VERSION = 1
FLAG_HEADERS = 1
HEADER_SIZE = 16
_HEAD = struct.Struct("<4sBBHII")
_LITTLE = sys.byteorder == "little"

# Fixed framing cost per row (seq + ts + two offsets) and per frame (header, trailing offsets,
# worst-case padding of every section); used by writers to stay within a byte budget.
ROW_OVERHEAD = 8 + 8 + 4 + 4
ROW_HEADER_OVERHEAD = 4
ENTRY_OVERHEAD = 8
FRAME_OVERHEAD = HEADER_SIZE + 5 * 4 + 10 * 7  # header, the n+1/m+1 offsets, padding


class ColumnarError(ValueError):
    """A JLC1 frame is malformed."""


class Row(NamedTuple):
    """One decoded record."""

    seq: int
    ts: int
    subject: str
    data: bytes
    headers: list[tuple[str, str]] | None


class Section(NamedTuple):
    """Byte range of one section in a frame."""

    start: int
    length: int


class Layout(NamedTuple):
    """Where each column lives in a frame (for zero-copy readers)."""

    n: int
    m: int
    has_headers: bool
    seq: Section
    ts: Section
    subj_off: Section
    subj: Section
    data_off: Section
    data: Section
    hdr_off: Section | None
    key_off: Section | None
    key: Section | None
    val_off: Section | None
    val: Section | None


def _pad(n: int) -> int:
    return (-n) & 7


def _i64(values: Sequence[int]) -> bytes:
    a = array("q", values)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        a.byteswap()
    return a.tobytes()


def _i32(values: Sequence[int]) -> bytes:
    a = array("i", values)
    if not _LITTLE:  # pragma: no cover
        a.byteswap()
    return a.tobytes()


def _varlen(items: Sequence[bytes]) -> list[bytes]:
    """Offsets section + values section (each padded) for a list of byte strings."""
    offs = [0] * (len(items) + 1)
    total = 0
    for i, b in enumerate(items):
        total += len(b)
        offs[i + 1] = total
    if total >= 1 << 31:
        raise ColumnarError("column larger than 2 GiB")
    o = _i32(offs)
    body = b"".join(items)
    return [o, b"\0" * _pad(len(o)), body, b"\0" * _pad(len(body))]


def encode(
    seqs: Sequence[int],
    tss: Sequence[int],
    subjects: Sequence[bytes],
    datas: Sequence[bytes],
    headers: Sequence[Sequence[tuple[bytes, bytes]]] | None = None,
) -> bytes:
    """Build a frame from parallel columns. ``headers`` (one list of (key, value) per row)
    adds the header columns; None leaves them out."""
    n = len(seqs)
    if not (len(tss) == len(subjects) == len(datas) == n):
        raise ColumnarError("columns differ in length")
    parts: list[bytes] = []
    flags = 0
    m = 0
    hdr_parts: list[bytes] = []
    if headers is not None:
        if len(headers) != n:
            raise ColumnarError("header column differs in length")
        flags |= FLAG_HEADERS
        row_offs = [0] * (n + 1)
        keys: list[bytes] = []
        vals: list[bytes] = []
        for i, pairs in enumerate(headers):
            for k, v in pairs:
                keys.append(k)
                vals.append(v)
            row_offs[i + 1] = len(keys)
        m = len(keys)
        ro = _i32(row_offs)
        hdr_parts = [ro, b"\0" * _pad(len(ro)), *_varlen(keys), *_varlen(vals)]
    parts.append(_HEAD.pack(MAGIC, VERSION, flags, 0, n, m))
    parts.append(_i64(seqs))
    parts.append(_i64(tss))
    parts.extend(_varlen(subjects))
    parts.extend(_varlen(datas))
    parts.extend(hdr_parts)
    return b"".join(parts)


def encode_rows(rows: Iterable[Row]) -> bytes:
    """Convenience encoder from decoded rows (tests, tools)."""
    rs = list(rows)
    with_headers = any(r.headers is not None for r in rs)
    return encode(
        [r.seq for r in rs],
        [r.ts for r in rs],
        [r.subject.encode() for r in rs],
        [r.data for r in rs],
        [[(k.encode(), v.encode()) for k, v in (r.headers or ())] for r in rs] if with_headers else None,
    )


def layout(buf: bytes | memoryview) -> Layout:
    """Validate a frame's structure and return where its sections are.

    Checks sizes, monotonic offsets and bounds, so readers may build arrays over the sections
    without further validation. Raises :class:`ColumnarError`.
    """
    mv = memoryview(buf).cast("B")
    size = len(mv)
    if size < HEADER_SIZE:
        raise ColumnarError("frame shorter than its header")
    magic, version, flags, _res, n, m = _HEAD.unpack_from(mv, 0)
    if magic != MAGIC:
        raise ColumnarError("bad magic")
    if version != VERSION:
        raise ColumnarError(f"unsupported version {version}")
    has_headers = bool(flags & FLAG_HEADERS)
    if not has_headers and m:
        raise ColumnarError("header entries without header columns")
    pos = HEADER_SIZE

    def take(nbytes: int) -> Section:
        nonlocal pos
        if nbytes < 0 or pos + nbytes > size:
            raise ColumnarError("frame truncated")
        s = Section(pos, nbytes)
        pos += nbytes + _pad(nbytes)
        if pos > size:
            raise ColumnarError("frame truncated")
        return s

    def offsets(count: int) -> tuple[Section, int]:
        sec = take(4 * (count + 1))
        offs = _offsets(mv, sec, count)
        if offs[0] != 0:
            raise ColumnarError("offsets must start at 0")
        for a, b in pairwise(offs):
            if b < a:
                raise ColumnarError("offsets decrease")
        return sec, offs[-1]

    seq = take(8 * n)
    ts = take(8 * n)
    subj_off, subj_len = offsets(n)
    subj = take(subj_len)
    data_off, data_len = offsets(n)
    data = take(data_len)
    hdr_off = key_off = key = val_off = val = None
    if has_headers:
        hdr_off, entries = offsets(n)
        if entries != m:
            raise ColumnarError("header row offsets do not end at the entry count")
        key_off, key_len = offsets(m)
        key = take(key_len)
        val_off, val_len = offsets(m)
        val = take(val_len)
    if pos != size:
        raise ColumnarError("trailing bytes after the last section")
    return Layout(
        n, m, has_headers, seq, ts, subj_off, subj, data_off, data, hdr_off, key_off, key, val_off, val
    )


def _offsets(mv: memoryview, sec: Section, count: int) -> array[int]:
    a = array("i")
    a.frombytes(mv[sec.start : sec.start + 4 * (count + 1)])
    if not _LITTLE:  # pragma: no cover
        a.byteswap()
    return a


def _ints(mv: memoryview, sec: Section) -> array[int]:
    a = array("q")
    a.frombytes(mv[sec.start : sec.start + sec.length])
    if not _LITTLE:  # pragma: no cover
        a.byteswap()
    return a


def decode(buf: bytes | memoryview) -> list[Row]:
    """Decode a whole frame into rows (pure Python; the Spark reader uses :func:`layout`)."""
    lay = layout(buf)
    mv = memoryview(buf).cast("B")
    seqs = _ints(mv, lay.seq)
    tss = _ints(mv, lay.ts)
    so = _offsets(mv, lay.subj_off, lay.n)
    do = _offsets(mv, lay.data_off, lay.n)
    sb = bytes(mv[lay.subj.start : lay.subj.start + lay.subj.length])
    db = bytes(mv[lay.data.start : lay.data.start + lay.data.length])
    hdrs: list[list[tuple[str, str]]] | None = None
    if lay.has_headers:
        assert lay.hdr_off and lay.key_off and lay.key and lay.val_off and lay.val
        ho = _offsets(mv, lay.hdr_off, lay.n)
        ko = _offsets(mv, lay.key_off, lay.m)
        vo = _offsets(mv, lay.val_off, lay.m)
        kb = bytes(mv[lay.key.start : lay.key.start + lay.key.length])
        vb = bytes(mv[lay.val.start : lay.val.start + lay.val.length])
        hdrs = [
            [
                (
                    kb[ko[j] : ko[j + 1]].decode("utf-8", "replace"),
                    vb[vo[j] : vo[j + 1]].decode("utf-8", "replace"),
                )
                for j in range(ho[i], ho[i + 1])
            ]
            for i in range(lay.n)
        ]
    return [
        Row(
            seqs[i],
            tss[i],
            sb[so[i] : so[i + 1]].decode("utf-8", "replace"),
            db[do[i] : do[i + 1]],
            hdrs[i] if hdrs is not None else None,
        )
        for i in range(lay.n)
    ]
