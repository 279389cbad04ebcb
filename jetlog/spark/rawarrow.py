"""JLR1 frame (runs of stored records) → ``pyarrow.RecordBatch``, vectorized with numpy.

The node ships records exactly as stored (:mod:`jetlog.wire.rawframe`); this is where they are
checked and columnized, in the executor, in parallel with the other tasks:

1. :func:`rawframe.layout` validates the frame's structure;
2. the records' frame offsets come from the shipped positions (one numpy expression per frame);
3. their fixed 32-byte heads are gathered into a structured array (seq, ts, lengths, flags);
4. every record is bounds-checked against its run; a run that is a whole stored batch is
   checked against the batch's stored CRC32C in one call, any other record against its own
   (the one per-record Python step);
5. the subject and data bytes are gathered into contiguous Arrow value buffers with offsets.

Headers, when asked for, are parsed per record that has any (header blocks are rare and small).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from jetlog.wire import headers as H
from jetlog.wire import rawframe as rf
from jetlog.wire import records as rc

_HEAD = np.dtype(
    [
        ("crc", "<u4"),
        ("seq", "<u8"),
        ("ts", "<i8"),
        ("slen", "<u2"),
        ("flags", "u1"),
        ("rsv", "u1"),
        ("hlen", "<u4"),
        ("dlen", "<u4"),
    ]
)
assert _HEAD.itemsize == rc.REC_SIZE
_HEAD_COLS = np.arange(rc.REC_SIZE, dtype=np.int64)
TS_TYPE = pa.timestamp("us", tz="UTC")


class RawDecodeError(rf.RawFrameError):
    """A record of a JLR1 frame is damaged (bounds, CRC, UTF-8)."""


def _gather(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[pa.Buffer, pa.Buffer]:
    """Arrow (offsets, values) buffers of the byte strings ``buf[starts[i]:starts[i]+lens[i]]``."""
    n = len(lens)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        idx = np.repeat(starts - offsets[:-1], lens)
        idx += np.arange(total, dtype=np.int64)
        values = buf[idx]
    else:
        values = np.zeros(0, dtype=np.uint8)
    return pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(values)


def _header_column(frame: memoryview, h_start: np.ndarray, hlen: np.ndarray, htype: pa.DataType) -> pa.Array:
    rows: list[list[dict[str, str]]] = []
    for a, ln in zip(h_start.tolist(), hlen.tolist(), strict=True):
        if not ln:
            rows.append([])
            continue
        try:
            _code, _desc, pairs = H.parse(bytes(frame[a : a + ln]))
        except ValueError as exc:
            raise RawDecodeError(f"unreadable header block: {exc}") from None
        rows.append([{"key": k, "value": v} for k, v in pairs])
    return pa.array(rows, type=htype)


def raw_frame_to_batch(
    frame: bytes, stream: str, schema: pa.Schema, *, verify: bool = True
) -> pa.RecordBatch:
    """Decode a JLR1 frame into a batch of ``schema`` (stream, seq, subject, data, timestamp
    [, headers]). Raises :class:`RawDecodeError` / :class:`rf.RawFrameError` on damage."""
    lay = rf.layout(frame)
    n = lay.n
    buf = np.frombuffer(frame, dtype=np.uint8)
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    counts = np.fromiter((r.nrec for r in lay.runs), dtype=np.int64, count=len(lay.runs))
    run_start = np.fromiter(
        (lay.data_start + r.data_off for r in lay.runs), dtype=np.int64, count=len(lay.runs)
    )
    run_end = run_start + np.fromiter((r.data_len for r in lay.runs), dtype=np.int64, count=len(lay.runs))
    pos_base = np.fromiter((r.pos_base for r in lay.runs), dtype=np.int64, count=len(lay.runs))
    pos = np.frombuffer(frame, dtype="<u4", count=n, offset=lay.pos_start).astype(np.int64)
    offs = pos + np.repeat(run_start - pos_base, counts)
    starts_r = np.repeat(run_start, counts)
    ends_r = np.repeat(run_end, counts)
    if bool((offs < starts_r).any()) or bool((offs + rc.REC_SIZE > ends_r).any()):
        raise RawDecodeError("record position outside its run")
    heads = buf[offs[:, None] + _HEAD_COLS].view(_HEAD).ravel()
    slen = heads["slen"].astype(np.int64)
    hlen = heads["hlen"].astype(np.int64)
    dlen = heads["dlen"].astype(np.int64)
    subj = offs + rc.REC_SIZE + 8 * (heads["flags"] & rc.RF_TTL).astype(np.int64)
    h_start = subj + slen
    d_start = h_start + hlen
    end = d_start + dlen
    if bool((end > ends_r).any()):
        raise RawDecodeError("record overruns its run")
    if n > 1 and bool((end[:-1] > offs[1:])[starts_r[1:] == starts_r[:-1]].any()):
        raise RawDecodeError("records overlap")
    seq = heads["seq"].astype(np.int64)
    if n > 1 and not bool((seq[1:] > seq[:-1]).all()):
        raise RawDecodeError("sequences are not increasing")
    mv = memoryview(frame).cast("B")
    if verify:
        # Whole stored batches: one CRC call per run against the batch's stored body CRC.
        whole = np.fromiter(
            (bool(r.flags & rf.RUN_WHOLE_BATCH) for r in lay.runs), dtype=bool, count=len(lay.runs)
        )
        for r in lay.runs:
            if r.flags & rf.RUN_WHOLE_BATCH:
                a = lay.data_start + r.data_off
                if crc32c(mv[a : a + r.data_len]) != r.crc:
                    raise RawDecodeError(f"batch crc mismatch in the run at frame offset {a}")
        # Every other record: its own CRC.
        rest = ~np.repeat(whole, counts)
        for a, b, c in zip(offs[rest].tolist(), end[rest].tolist(), heads["crc"][rest].tolist(), strict=True):
            if crc32c(mv[a + 4 : b]) != c:
                raise RawDecodeError(f"record crc mismatch at frame offset {a}")
    s_off, s_val = _gather(buf, subj, slen)
    subject = pa.Array.from_buffers(pa.string(), n, [None, s_off, s_val])
    try:
        subject.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise RawDecodeError(f"subject is not UTF-8: {exc}") from None
    d_off, d_val = _gather(buf, d_start, dlen)
    data = pa.Array.from_buffers(pa.binary(), n, [None, d_off, d_val])
    ts = pa.array(heads["ts"] // 1000, type=pa.int64()).cast(TS_TYPE)
    cols: list[pa.Array] = [
        pa.repeat(pa.scalar(stream, pa.string()), n),
        pa.array(seq, type=pa.int64()),
        subject,
        data,
        ts,
    ]
    if "headers" in schema.names:
        cols.append(_header_column(mv, h_start, hlen, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)
