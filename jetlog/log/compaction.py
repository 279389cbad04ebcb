"""Segment rewrite (compaction), run in the maintenance thread.

THE OP INVARIANT (what makes a full-scan recovery never resurrect a removed message):

    Every record physically present in the log whose message was removed is covered by an op
    that is also physically present, later in log order.

- Appends keep it trivially: the op for a removal is written after the record it removes.
- Retention deletes only a *prefix* of segments in which nothing is live (never the last
  segment). An op only targets sequences assigned before it, so ops inside the prefix only
  cover records inside the prefix, which are deleted with them; ops after the prefix may now
  cover nothing, which is harmless.
- Compaction rewrites one sealed segment S in place (same name, same position in log order).
  Dead records of S are dropped, so ops whose only targets were in S become unnecessary. An op
  of S is *kept* (clipped to ``[a, min(b, S.base - 1)]``, i.e. to sequences older than S) when
  that range intersects the record range of an older segment T that still physically holds
  dead records. When T is compacted later, those records go and S's op becomes unnecessary
  (it is dropped the next time S is rewritten). Kept ops are written in S's last batch, after
  S's surviving records; that is safe because every op in S covers only dead sequences, none of
  S's survivors.
- Liveness used by a rewrite is a snapshot taken *after* every removal before it is durable
  (the maintenance task flushes first), so a crash can never leave a record dropped from S
  while the op that removed it was lost.

Erased messages (``remove(erase=True)``) are gone from the rewritten file; the original file is
unlinked (not overwritten in place).

Replication: a rewrite changes the batches, hence the positions, inside the segment. The index
file marks it (``rewritten``) and the store never rewrites a segment at or above its
``compact_floor``. Every batch of the new file keeps epochs non-decreasing along the log: the
trailing batch carries the highest epoch of the original segment.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_right
from collections.abc import Callable
from typing import NamedTuple

import zstandard

from jetlog.errors import CorruptSegmentError
from jetlog.log.idxfile import encode_idx
from jetlog.log.positions import NULL_LAST
from jetlog.log.segment import (
    COMPRESSED,
    SegmentData,
    SegmentIO,
    file_msg_size,
    idx_name,
    read_file,
    seg_name,
)
from jetlog.wire import records as rc
from jetlog.wire import recordscan as rs
from jetlog.wire.crc import crc32c
from jetlog.wire.subjects import subject_from_bytes


class Rewritten(NamedTuple):
    """Result of a rewrite: the new content's columns and an open read fd of the new file."""

    data: SegmentData
    fd: int
    size: int


def keep_op(
    a: int, b: int, base: int, older_dead: list[tuple[int, int]], starts: list[int]
) -> tuple[int, int] | None:
    """The clipped op to keep, or None (see the module docstring). ``older_dead`` are the
    sorted, disjoint record ranges of older segments holding dead records; ``starts`` their
    first elements."""
    b = min(b, base - 1)
    if a > b:
        return None
    k = bisect_right(starts, b) - 1
    if k >= 0 and older_dead[k][1] >= a:
        return a, b
    return None


def rewrite_segment(
    io: SegmentIO,
    directory: str,
    base: int,
    live: array[int],
    older_dead: list[tuple[int, int]],
    compress: bool,
    level: int = 3,
    hook: Callable[[str], None] | None = None,
) -> Rewritten:
    """Rewrite segment ``base`` keeping records whose sequence is in ``live`` (sorted) and the
    ops the invariant needs. Atomic: tmp file + fsync, old index unlinked (dir fsync), rename
    segment, rename index, dir fsync. ``hook`` is a test seam called between steps."""
    path = os.path.join(directory, seg_name(base))
    idx_path = os.path.join(directory, idx_name(base))
    dctx = zstandard.ZstdDecompressor()
    cctx = zstandard.ZstdCompressor(level=level) if compress else None
    buf = read_file(io, path)
    res = rs.scan(buf, 0, complete_to=len(buf))
    if res.status != rs.OK:
        raise CorruptSegmentError(path, res.end, res.reason)
    starts = [lo for lo, _ in older_dead]
    kept: list[tuple[bytes, rc.RecordMeta, int]] = []
    ops: list[tuple[int, int]] = []
    li = 0
    nlive = len(live)
    last_seq, last_ts = base - 1, 0
    top_epoch = 0
    for off, h in res.batches:
        top_epoch = max(top_epoch, h.epoch)
        body = rc.raw_body(h, rc.check_body(buf, off, h), dctx, off)
        mv = memoryview(body)
        for m in rc.iter_record_meta(body, h, off):
            while li < nlive and live[li] < m.seq:
                li += 1
            if li < nlive and live[li] == m.seq:
                kept.append((bytes(mv[m.off : m.off + m.length]), m, h.epoch))
        for a, b in rc.decode_ops(body, h):
            op = keep_op(a, b, base, older_dead, starts)
            if op is not None:
                ops.append(op)
        last_seq, last_ts = max(last_seq, h.last_seq), h.last_ts

    data = SegmentData(base)
    out: list[bytes] = []
    size = 0
    prev = base - 1

    def emit(
        recs: list[tuple[bytes, rc.RecordMeta, int]],
        bops: list[tuple[int, int]],
        lseq: int,
        lts: int,
        epoch: int,
    ) -> None:
        nonlocal size, prev
        raw = b"".join(r for r, _, _ in recs) + rc.encode_ops(bops)
        hdr, body = rc.seal_batch(
            raw,
            n_records=len(recs),
            n_ops=len(bops),
            epoch=epoch,
            base_seq=prev,
            last_seq=lseq,
            last_ts=lts,
            compressor=cctx if recs else None,
        )
        roff = 0
        for r, m, _ in recs:
            data.seqs.append(m.seq)
            data.ts.append(m.ts)
            if cctx is not None:
                data.pos.append(size)
                data.aux.append(COMPRESSED | roff)
            else:
                data.pos.append(size + rc.HEADER_SIZE + roff)
                data.aux.append(len(r))
            data.size.append(file_msg_size(len(m.subject), m.hdr_len, m.data_len))
            data.lsid.append(data.subject_index(subject_from_bytes(m.subject)))
            if m.ttl:
                data.ttl[m.seq] = m.ttl
            roff += len(r)
        for a, b in bops:
            data.ops.append(a)
            data.ops.append(b)
        data.batches.append(size)
        data.blast.append(NULL_LAST if not recs and not bops and lseq == prev else lseq)
        out.append(hdr)
        out.append(body)
        size += len(hdr) + len(body)
        prev = lseq

    group: list[tuple[bytes, rc.RecordMeta, int]] = []
    glen = 0
    for item in kept:
        if group and (glen + len(item[0]) > rc.SPLIT_BODY or item[2] != group[0][2]):
            emit(group, [], group[-1][1].seq, group[-1][1].ts, group[0][2])
            group, glen = [], 0
        group.append(item)
        glen += len(item[0])
    if group:
        emit(group, [], group[-1][1].seq, group[-1][1].ts, group[0][2])
    # Last batch: kept ops and the segment's sequence high-water mark.
    emit([], ops, max(last_seq, prev), last_ts, top_epoch)
    data.covered = size
    data.last_seq = max(last_seq, prev)
    data.last_ts = last_ts
    data.has_batches = True
    data.rewritten = True

    tmp = path + ".tmp"
    itmp = idx_path + ".tmp"
    fd = io.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        io.write(fd, out, 0)
        io.sync(fd)
    finally:
        io.close(fd)
    blob = encode_idx(
        base,
        size,
        data.seqs,
        data.ts,
        data.pos,
        data.aux,
        data.size,
        data.lsid,
        data.subjects,
        data.ttl,
        data.ops,
        data.batches,
        data.blast,
        data.last_seq,
        data.last_ts,
        top_epoch,
        True,
        content_crc=_crc_of(out),
    )
    fd = io.open(itmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        io.write(fd, [blob], 0)
        io.sync(fd)
    finally:
        io.close(fd)
    if hook:
        hook("written")
    # The old index must be gone before the new segment takes the name: a stale index must
    # never describe the new file (it is also checked batch by batch on open).
    try:
        os.unlink(idx_path)
    except FileNotFoundError:
        pass
    io.sync_dir(directory)
    os.rename(tmp, path)
    if hook:
        hook("renamed")
    os.rename(itmp, idx_path)
    io.sync_dir(directory)
    rfd = io.open(path, os.O_RDONLY)
    return Rewritten(data, rfd, size)


def delete_segments(io: SegmentIO, directory: str, bases: list[int]) -> None:
    """Unlink whole segments (retention) and make that durable before anyone relies on it."""
    for base in bases:
        for name in (seg_name(base), idx_name(base)):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
    io.sync_dir(directory)


def _crc_of(parts: list[bytes]) -> int:
    """CRC32C of ``parts`` written back to back (the new segment's content)."""
    crc = 0
    for b in parts:
        crc = crc32c(b, crc)
    return crc
