"""JLR1: stored records passed through as they are, for bulk reads that decode in the reader.

The JLC1 columnar frame (:mod:`jetlog.wire.columnar`) costs the node Python work per record
(slice, check, re-lay into columns), and one node core is what limits a Spark read. A JLR1 frame
instead carries *runs of records exactly as the log stores them* (:data:`records.REC` layout,
each with its own CRC32C), cut out of segment files by position, plus the positions the index
already holds. The node's work is per run, not per record; the reader (a Spark executor, with
numpy) finds, checks and columnizes the records in parallel with other readers. This is the
Kafka design: the broker ships record batches, the consumer decodes them.

Layout (little-endian, sections 8-byte aligned)::

    header  16 bytes   magic b"JLR1" | version u16 (1) | flags u16 (0) | n_records u32 | n_runs u32
    runs    24 x n_runs   count u32 | data_off u32 | data_len u32 | pos_base u32 | flags u32 | crc u32
    pos     4 x n_records  the records' positions as stored (u32), run after run
    data    the runs' bytes, run after run

Record ``k`` of a run starts at ``data_start + data_off + (pos[k] - pos_base)`` in the frame and
lies wholly inside the run's ``data_len`` bytes. ``pos`` values of one run increase. A run may
hold one record re-encoded by the node (``pos_base`` 0, ``pos`` 0): records of compressed
batches and other slow-path reads.

Run flag :data:`RUN_WHOLE_BATCH`: the run is the complete body of one stored batch, and ``crc``
is that batch's stored body CRC32C — the reader checks the run with one CRC call instead of one
per record (the common case: a run is cut short only by deletions, the committed mark, the
reader's own range ends or the byte budget; the node joins the pieces an index block boundary
cuts a batch into).

Run flag :data:`RUN_CHECKED`: the run is part of one stored batch, the node checked that whole
batch against its stored body CRC, and ``crc`` is the CRC32C of the run's bytes as sent; the
reader checks it with one call too. The node sets it on the runs the reader's own range cut
(the first and last of a frame). Without either flag ``crc`` is 0 and every record's own CRC
is checked (a reader that knows neither flag checks every record, which stays correct).

Sans-I/O: pure functions; :func:`layout` validates everything a vectorized decoder relies on
except the records' own contents (their CRCs and field lengths), which :func:`decode` checks.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from jetlog.errors import JetlogError
from jetlog.wire import records as rc
from jetlog.wire.crc import crc32c

MAGIC = b"JLR1"
VERSION = 1
_HEAD = struct.Struct("<4sHHII")
HEADER_SIZE = _HEAD.size  # 16
RUN = struct.Struct("<IIIIII")
RUN_SIZE = RUN.size  # 24
RUN_WHOLE_BATCH = 0x1
RUN_CHECKED = 0x2
RUN_ONE_CRC = RUN_WHOLE_BATCH | RUN_CHECKED
"""Flags under which ``crc`` covers the whole run (one CRC call checks it)."""
POS_SIZE = 4
RUN_OVERHEAD = RUN_SIZE
ROW_OVERHEAD = POS_SIZE
FRAME_OVERHEAD = HEADER_SIZE + 16  # header + worst-case padding of two sections


class RawFrameError(JetlogError):
    """A JLR1 frame is malformed."""


class Run(NamedTuple):
    """One run: ``count`` records in ``data`` whose stored positions are ``pos`` (u32 bytes)."""

    nrec: int
    pos: bytes
    pos_base: int
    data: bytes | memoryview
    flags: int = 0
    crc: int = 0


class RunInfo(NamedTuple):
    nrec: int
    data_off: int
    data_len: int
    pos_base: int
    flags: int
    crc: int


class RawLayout(NamedTuple):
    n: int
    runs: list[RunInfo]
    pos_start: int
    data_start: int
    size: int


def _pad(n: int) -> int:
    return -n % 8


def encode(runs: Sequence[Run]) -> list[bytes | memoryview]:
    """The frame's parts (``b"".join`` them, or write them out in order)."""
    n = sum(r.nrec for r in runs)
    table = bytearray()
    off = 0
    for r in runs:
        if len(r.pos) != POS_SIZE * r.nrec:
            raise RawFrameError("run positions do not match its count")
        table += RUN.pack(r.nrec, off, len(r.data), r.pos_base, r.flags, r.crc)
        off += len(r.data)
    parts: list[bytes | memoryview] = [_HEAD.pack(MAGIC, VERSION, 0, n, len(runs)), bytes(table)]
    parts.extend(r.pos for r in runs)
    pos_len = POS_SIZE * n
    if _pad(pos_len):
        parts.append(b"\0" * _pad(pos_len))
    parts.extend(r.data for r in runs)
    return parts


def single(record: bytes) -> Run:
    """A run of one re-encoded record."""
    return Run(1, b"\0\0\0\0", 0, record)


def layout(buf: bytes | memoryview) -> RawLayout:
    """Validate the frame's structure (sizes, run bounds, positions inside their runs)."""
    mv = memoryview(buf).cast("B")
    size = len(mv)
    if size < HEADER_SIZE:
        raise RawFrameError("frame shorter than its header")
    magic, version, _flags, n, nruns = _HEAD.unpack_from(mv, 0)
    if magic != MAGIC:
        raise RawFrameError("bad magic")
    if version != VERSION:
        raise RawFrameError(f"unsupported version {version}")
    pos_start = HEADER_SIZE + RUN_SIZE * nruns
    data_start = pos_start + POS_SIZE * n + _pad(POS_SIZE * n)
    if data_start > size:
        raise RawFrameError("frame truncated")
    runs = [RunInfo(*RUN.unpack_from(mv, HEADER_SIZE + RUN_SIZE * i)) for i in range(nruns)]
    total = 0
    expect_off = 0
    for r in runs:
        if r.data_off != expect_off:
            raise RawFrameError("runs are not back to back")
        expect_off += r.data_len
        total += r.nrec
    if total != n:
        raise RawFrameError("run counts do not add up to the record count")
    if data_start + expect_off != size:
        raise RawFrameError("data area size does not match the runs")
    return RawLayout(n, runs, pos_start, data_start, size)


def record_offsets(buf: bytes | memoryview, lay: RawLayout) -> list[int]:
    """Frame offset of every record (pure Python; the vectorized reader computes the same)."""
    mv = memoryview(buf).cast("B")
    pos = struct.unpack_from(f"<{lay.n}I", mv, lay.pos_start) if lay.n else ()
    out: list[int] = []
    k = 0
    for r in lay.runs:
        base = lay.data_start + r.data_off
        prev = -1
        for p in pos[k : k + r.nrec]:
            rel = p - r.pos_base
            if rel < 0 or rel <= prev or rel + rc.REC_SIZE > r.data_len:
                raise RawFrameError("record position outside its run")
            out.append(base + rel)
            prev = rel
        k += r.nrec
    return out


def decode(buf: bytes | memoryview) -> list[rc.Record]:
    """Every record of the frame, CRC-checked (reference decoder: tests and tools)."""
    lay = layout(buf)
    mv = memoryview(buf).cast("B")
    out: list[rc.Record] = []
    offs = record_offsets(buf, lay)
    ends: list[int] = []
    for r in lay.runs:
        start = lay.data_start + r.data_off
        if r.flags & RUN_ONE_CRC and crc32c(mv[start : start + r.data_len]) != r.crc:
            raise RawFrameError(f"batch crc mismatch in the run at {start}")
        ends.extend([start + r.data_len] * r.nrec)
    for off, end in zip(offs, ends, strict=True):
        try:
            rec, _next = rc.decode_record(mv[:end], off)
        except rc.BatchError as exc:
            raise RawFrameError(f"record at {off}: {exc.reason}") from None
        out.append(rec)
    return out
