"""Opening a store directory after anything (clean close, kill -9, power loss, bit rot).

Runs in a worker thread before the store exists; the result is handed to the loop.

Per segment, in base order:
1. Load its ``.idx`` if it parses, its CRC is valid and its batch offsets tile the segment with
   valid batches (CRCs checked when ``verify``). Otherwise scan the whole segment and (for a
   sealed segment) write a fresh index.
2. For the last segment, always scan what lies beyond the index (the index is written at close;
   later appends go after it).
3. A torn tail (an incomplete batch, garbage that holds nothing valid, or an invalid batch where
   a write never reached the disk — the writer is preallocated, so that reads as a zero-filled
   sector, possibly with valid batches after it — at the end of the last segment, beyond any
   region an index proved complete) is what a crash leaves: truncate it (ftruncate + fsync).
   It was never acknowledged: acks follow the fsync that covers them.
4. Anything else invalid is corruption: quarantine the segment — salvage every valid batch
   (before *and* after the damage, resynchronising on the batch magic) into a rewritten segment,
   move the original to ``quarantine/``, report the sequences of the unreadable region as lost.
   Opening never raises for corruption.

Ops (removal ranges) are applied after all records are loaded. This is equivalent to replaying
in log order because an op only targets sequences assigned before it was issued, and every
record stored after an op has a higher sequence than any the op covers.

Known limit: ops inside an unreadable region are lost with it, so messages they had removed may
reappear after a quarantine (they are real messages of the stream, never wrong bytes).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

import zstandard

from jetlog.errors import StorageError
from jetlog.log.idxfile import encode_idx, map_idx, verify_idx
from jetlog.log.index import Index
from jetlog.log.positions import NULL_LAST, is_null
from jetlog.log.segblocks import bulk_load
from jetlog.log.segment import (
    Segment,
    SegmentData,
    SegmentIO,
    idx_name,
    mapped_crc,
    read_file,
    seg_name,
    seg_table,
)
from jetlog.wire import records as rc
from jetlog.wire import recordscan as rs
from jetlog.wire.crc import crc32c

log = logging.getLogger("jetlog.log.recovery")

LOST_SEQS_CAP = 1_000_000


@dataclass
class Recovered:
    """What recovery found; consumed by ``FileStore`` to build its index."""

    segments: list[Segment] = field(default_factory=list)
    datas: list[SegmentData] = field(default_factory=list)
    truncated_bytes: int = 0
    rebuilt_indexes: int = 0
    quarantined: list[str] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    lost_bytes: int = 0
    last_seq: int = 0
    last_ts: int = 0
    epoch: int = 0


PROGRESS_EVERY = 5.0
"""Seconds between progress lines of a long recovery scan."""


def _lose(out: Recovered, first: int, last: int) -> None:
    room = LOST_SEQS_CAP - len(out.lost)
    if last < first or room <= 0:
        return
    if last - first + 1 > room:
        log.error("lost sequence list capped at %d entries", LOST_SEQS_CAP)
        last = first + room - 1
    out.lost.extend(range(first, last + 1))


def prepare_dir(path: str, io: SegmentIO) -> int:
    """Create the store directory if needed (durably) and lock it; return the lock fd."""
    try:
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            io.sync_dir(os.path.dirname(os.path.abspath(path)))  # the directory entry is durable
        lock_fd = os.open(os.path.join(path, "LOCK"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StorageError(f"cannot use store directory {path}: {exc}") from exc
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(lock_fd)
        raise StorageError(f"store directory {path} is in use by another process") from exc
    return lock_fd


def list_segments(path: str, io: SegmentIO) -> list[int]:
    """Base sequences of the segments in ``path``; removes leftovers of interrupted work."""
    bases: list[int] = []
    names = os.listdir(path)
    logs = {n for n in names if n.endswith(".log")}
    changed = False
    for n in names:
        full = os.path.join(path, n)
        if n.endswith(".tmp"):
            os.unlink(full)  # an interrupted compaction or quarantine: the original is intact
            changed = True
        elif n.endswith(".idx") and n[:-4] + ".log" not in logs:
            os.unlink(full)
            changed = True
        elif n.endswith(".log"):
            try:
                bases.append(int(n[:-4]))
            except ValueError:
                log.warning("ignoring unexpected file %s", full)
    if changed:
        io.sync_dir(path)
    return sorted(bases)


def recover(
    path: str, io: SegmentIO, *, verify: bool = True, first_seq: int = 1, lazy: bool = False
) -> Recovered:
    """Load every segment of ``path`` (see the module docstring). ``lazy``: a segment whose
    index file vouches for all of it (content CRC, size) is not read; it is marked ``trusted``
    for the background check (``scrub``)."""
    out = Recovered()
    dctx = zstandard.ZstdDecompressor()
    bases = list_segments(path, io)
    prev_max = 0
    started = said = time.monotonic()
    for k, base in enumerate(bases):
        now = time.monotonic()
        if now - said >= PROGRESS_EVERY:
            # A long scan (many segments, verify on) says how far it is, not just nothing.
            said = now
            log.info(
                "recovering %s: segment %d of %d (%.0f%%), %.0fs so far",
                path,
                k,
                len(bases),
                100 * k / len(bases),
                now - started,
            )
        last = k == len(bases) - 1
        upper = bases[k + 1] - 1 if not last else 0
        seg = Segment(path, base)
        data = _load_segment(path, seg, io, out, dctx, last=last, upper=upper, verify=verify, lazy=lazy)
        if data.seqs and data.seqs[0] <= prev_max:
            # CRC-valid records that overlap older ones: not something a crash produces.
            log.error("segment %s overlaps earlier sequences; quarantining it whole", seg.path)
            _move_to_quarantine(path, seg_name(base), io, out)
            data = SegmentData(base)
            _write_empty(path, seg, io, data)
        if data.seqs:
            prev_max = data.seqs[-1]
        seg.size = data.covered
        seg.nrecords = len(data.seqs)
        seg.min_seq = data.seqs[0] if data.seqs else 0
        seg.max_seq = data.seqs[-1] if data.seqs else 0
        seg.last_seq = max(data.last_seq, base - 1)
        seg.last_ts = data.last_ts
        seg.table = seg_table(data)
        seg.rewritten = data.rewritten
        if last:
            seg.ops = array("Q", data.ops)
            seg.batches = array("Q", data.batches)
            seg.blast = array("Q", data.blast)
            seg.ttl = dict(data.ttl)
        else:
            seg.sealed = True
            seg.idx_ok = True
        if seg.last_seq >= out.last_seq:
            out.last_seq = seg.last_seq
            if data.has_batches:
                out.last_ts = data.last_ts
        out.epoch = max(out.epoch, data.epoch)
        out.segments.append(seg)
        out.datas.append(data)
    if said != started:
        log.info("recovered %s: %d segments in %.1fs", path, len(bases), time.monotonic() - started)
    if not bases:
        seg = Segment(path, max(first_seq, 1))
        data = SegmentData(seg.base)
        _write_empty(path, seg, io, data)
        seg.size = data.covered
        seg.batches = array("Q", data.batches)
        seg.blast = array("Q", data.blast)
        seg.last_seq = seg.base - 1
        out.last_seq = seg.base - 1
        out.segments.append(seg)
        out.datas.append(data)
    return out


def _trustworthy(io: SegmentIO, path: str, idx: SegmentData) -> bool:
    """What a lazy open checks before taking a segment on its index's word: the file is as
    long as the index says, and the first and last batches it lists are whole and valid, with
    the ``last_seq`` it records (two reads). The epoch checkpoint reads those batches' headers
    and a stream reads its last message as it starts, so damage there must send the segment
    down the full path (quarantine) rather than fail the open."""
    if not idx.batches:
        return False
    fd = io.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size != idx.covered:
            return False
        for k in {0, len(idx.batches) - 1}:
            off = idx.batches[k]
            try:
                h = rc.decode_header(io.pread(fd, rc.HEADER_SIZE, off))
                rc.check_body(io.pread(fd, h.size, off), 0, h)
            except rc.BatchError:
                return False
            if idx.blast[k] != (NULL_LAST if is_null(h) else h.last_seq):
                return False
        return True
    finally:
        io.close(fd)


def _write_empty(path: str, seg: Segment, io: SegmentIO, data: SegmentData) -> None:
    """Create the segment file holding one header-only batch that records ``base - 1`` as the
    last sequence (so an empty store remembers its first sequence)."""
    batch = rc.encode_batch([], [], base_seq=seg.base - 1, last_seq=seg.base - 1, last_ts=0)
    fd = io.open(seg.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        io.write(fd, [batch], 0)
        io.sync(fd)
    finally:
        io.close(fd)
    io.sync_dir(path)
    seg.wcrc, seg.wlen = crc32c(batch), len(batch)  # written by us: the running CRC starts
    data.batches.append(0)
    data.blast.append(NULL_LAST)
    data.covered = len(batch)
    data.has_batches = True
    data.last_seq = seg.base - 1


def _load_segment(
    path: str,
    seg: Segment,
    io: SegmentIO,
    out: Recovered,
    dctx: Any,
    *,
    last: bool,
    upper: int,
    verify: bool,
    lazy: bool = False,
) -> SegmentData:
    # The index's per-message columns are views of the mapped file (``map_idx``), not copies;
    # the full path below copies them (``own``) only where a scan appends to them.
    idx = map_idx(seg.idx_path, seg.base)
    if idx is not None and idx.content_crc is not None and idx.covered > 0:
        # The common case after a clean close: an index that vouches for the whole file (its
        # size and the CRC32C of every byte) leaves nothing to scan. ``lazy``: the size is
        # checked now and the bytes later, in the background (``scrub``; every read checks
        # its records' CRCs meanwhile); else the CRC is checked here, over a mapping (the
        # segment is not read into memory). Anything else takes the full path below. The CRC
        # is that of the bytes as written: appends extend it, and the index written at close
        # need not read the file back (``Segment.wcrc``).
        # Size equality is enough to trust the layout: bytes below an index's ``covered`` are
        # never rewritten while that index exists (a truncation, a compaction or a quarantine
        # removes or replaces the index file first), so only damage at rest can differ.
        trusted = lazy and _trustworthy(io, seg.path, idx)
        if trusted or (verify and mapped_crc(io, seg.path, idx.covered) == idx.content_crc):
            seg.wcrc, seg.wlen = idx.content_crc, idx.covered
            if idx.size_sums is not None:
                seg.idx_file = (idx.covered, idx.content_crc, idx.epoch)
            if trusted:
                seg.trusted = (idx.covered, idx.content_crc)
            return idx
    buf = read_file(io, seg.path)
    complete_to = 0 if last else len(buf)
    idx_hint = idx if idx is not None and idx.covered <= len(buf) else None
    if idx is not None:
        if idx.covered <= len(buf):
            complete_to = max(complete_to, idx.covered)
        if (not last and idx.covered != len(buf)) or not verify_idx(idx, buf, check_crc=verify):
            log.warning("index %s does not match its segment; rebuilding", seg.idx_path)
            idx = None
    if idx is not None and (idx.covered == len(buf) or last):
        data = idx
        data.own()  # the scan below appends to its columns
        start = idx.covered
    else:
        data = SegmentData(seg.base)
        start = 0
        out.rebuilt_indexes += 1
    res = rs.scan(buf, start, complete_to=complete_to, verify=True)
    try:
        data.add_batches(buf, res.batches, dctx)
    except rc.BatchError as exc:
        log.error("segment %s: %s", seg.path, exc)
        res = rs.ScanResult([], exc.offset, rs.CORRUPT, exc.reason, -1)
    if res.status == rs.TORN:
        cut = len(buf) - res.end
        log.warning(
            "segment %s: truncating torn tail of %d bytes at %d (%s)", seg.path, cut, res.end, res.reason
        )
        fd = io.open(seg.path, os.O_RDWR)
        try:
            io.truncate(fd, res.end)
            io.sync(fd)
        finally:
            io.close(fd)
        out.truncated_bytes += cut
    elif res.status == rs.CORRUPT:
        known = (idx_hint.last_seq, idx_hint.last_ts) if idx_hint is not None else (0, 0)
        return _quarantine(path, seg, io, out, buf, dctx, last=last, upper=upper, known=known)
    if last and (verify or start == 0):
        # Every byte kept was checked (the scan checks each batch's CRC; below ``start`` the
        # index's content CRC or batch checks did): the writer's running CRC starts here, so
        # the index written when this segment rolls need not read the file back (64 MiB).
        seg.wcrc, seg.wlen = crc32c(memoryview(buf)[: res.end]), res.end
    if not last and start == 0:
        _write_idx(seg, io, data, buf)
    return data


def _quarantine(
    path: str,
    seg: Segment,
    io: SegmentIO,
    out: Recovered,
    buf: bytes,
    dctx: Any,
    *,
    last: bool,
    upper: int,
    known: tuple[int, int] = (0, 0),
) -> SegmentData:
    """Salvage every valid batch of a corrupt segment, move the original aside, report the
    sequences of the unreadable regions as lost. ``known``: (last_seq, last_ts) the segment's
    index file recorded, if it had a readable one."""
    good: list[tuple[int, rc.BatchHeader]] = []
    prev_last = seg.base - 1
    high = known
    p = 0
    while True:
        res = rs.scan(buf, p, complete_to=len(buf), verify=True)
        for off, h in res.batches:
            try:
                rc.iter_record_meta(rc.raw_body(h, rc.check_body(buf, off, h), dctx, off), h, off)
            except rc.BatchError:
                continue  # CRC-valid but unusable: treat as part of the damage
            good.append((off, h))
        if good:
            prev_last = max(prev_last, good[-1][1].last_seq)
        if res.status == rs.OK:
            break
        if res.resume >= 0:
            nxt = rc.decode_header(buf, res.resume)
            _lose(out, prev_last + 1, nxt.base_seq)
            out.lost_bytes += res.resume - res.end
            p = res.resume
            continue
        out.lost_bytes += len(buf) - res.end
        if not last:
            _lose(out, prev_last + 1, upper)
        else:
            try:
                # A damaged body under an intact header still tells how far sequences went.
                hdr = rc.decode_header(buf, res.end)
                if hdr.last_seq > high[0]:
                    high = (hdr.last_seq, hdr.last_ts)
            except rc.BatchError:
                if not high[0]:
                    log.error("segment %s: cannot tell which sequences its damaged tail held", seg.path)
            _lose(out, prev_last + 1, high[0])
        break
    parts = [bytes(buf[off : off + h.size]) for off, h in good]
    if high[0] > prev_last:
        # Keep the sequence high-water mark so new appends never reuse a lost sequence.
        parts.append(rc.encode_batch([], base_seq=prev_last, last_seq=high[0], last_ts=high[1]))
    salvaged = b"".join(parts)
    tmp = seg.path + ".tmp"
    fd = io.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        if salvaged:
            io.write(fd, [salvaged], 0)
        io.sync(fd)
    finally:
        io.close(fd)
    _move_to_quarantine(path, seg_name(seg.base), io, out)
    os.rename(tmp, seg.path)
    try:
        os.unlink(seg.idx_path)
    except FileNotFoundError:
        pass
    io.sync_dir(path)
    log.error(
        "segment %s is corrupt: salvaged %d batches, moved the original to quarantine/ (%d bytes lost so far)",
        seg.path,
        len(good),
        out.lost_bytes,
    )
    data = SegmentData(seg.base)
    res = rs.scan(salvaged, 0, verify=True)
    data.add_batches(salvaged, res.batches, dctx)
    if not last:
        _write_idx(seg, io, data, salvaged)
    return data


def _move_to_quarantine(path: str, name: str, io: SegmentIO, out: Recovered) -> None:
    qdir = os.path.join(path, "quarantine")
    try:
        os.makedirs(qdir, exist_ok=True)
        dest = os.path.join(qdir, f"{name}.{time.time_ns()}")
        os.rename(os.path.join(path, name), dest)
        io.sync_dir(qdir)
        io.sync_dir(path)
    except OSError as exc:
        raise StorageError(f"cannot quarantine {name} in {path}: {exc}") from exc
    out.quarantined.append(dest)


def _write_idx(seg: Segment, io: SegmentIO, d: SegmentData, checked: bytes | memoryview) -> None:
    """Write the index of a segment just scanned; ``checked``: its content, every batch of
    which the scan verified (so its crc can vouch for the file)."""
    write_idx_file(
        seg,
        io,
        encode_idx(
            seg.base,
            d.covered,
            d.seqs,
            d.ts,
            d.pos,
            d.aux,
            d.size,
            d.lsid,
            d.subjects,
            d.ttl,
            d.ops,
            d.batches,
            d.blast,
            d.last_seq,
            d.last_ts,
            d.epoch,
            d.rewritten,
            content_crc=crc32c(memoryview(checked)[: d.covered]),
        ),
    )


def write_idx_file(seg: Segment, io: SegmentIO, blob: bytes, *, unless_same: bool = False) -> None:
    """Atomically (tmp + fsync + rename + dir fsync) write a segment's index file.
    ``unless_same``: leave the file alone when it already holds exactly ``blob`` (a store
    closed without changes since it was opened: three fsyncs saved per stream on shutdown)."""
    if unless_same:
        try:
            with open(seg.idx_path, "rb") as f:
                if f.read(len(blob) + 1) == blob:
                    return
        except OSError:
            pass  # written below
    tmp = os.path.join(seg.dir, idx_name(seg.base) + ".tmp")
    fd = io.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        io.write(fd, [blob], 0)
        io.sync(fd)
    finally:
        io.close(fd)
    os.rename(tmp, seg.idx_path)
    io.sync_dir(seg.dir)


def build_index(rec: Recovered) -> Index:
    """The index of a recovered directory (records minus every op)."""
    ix = Index(rec.last_seq + 1)
    ix.last_seq = rec.last_seq
    ix.last_ts = rec.last_ts
    pairs = sorted((d.ops[i], d.ops[i + 1]) for d in rec.datas for i in range(0, len(d.ops), 2))
    merged: list[list[int]] = []
    for a, b in pairs:
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    k = 0
    last = rec.segments[-1]
    for seg, d in zip(rec.segments, rec.datas, strict=True):
        n = len(d.seqs)
        live = bytearray(b"\x01") * n
        if n:
            lo, hi = d.seqs[0], d.seqs[-1]
            while k < len(merged) and merged[k][1] < lo:
                k += 1
            j = k
            while j < len(merged) and merged[j][0] <= hi:
                i0 = bisect_left(d.seqs, merged[j][0])
                i1 = bisect_right(d.seqs, merged[j][1])
                live[i0:i1] = bytes(i1 - i0)
                j += 1
        gsid = {k: ix.subjects.intern(s) for k, s in d.subjects.items()}
        # The file's subject keys are usually the index's ids already (one stream's subjects
        # interned in the same order): then no per-record mapping at all.
        sids = d.lsid if all(k == v for k, v in gsid.items()) else array("I", map(gsid.__getitem__, d.lsid))
        # An index file's size sums and a one-name subject table spare the load a pass over
        # the ``size`` and subject columns (the file's CRC vouched for both, and decoding
        # checked that every record's subject key is in the table).
        one = next(iter(gsid.values())) if len(gsid) == 1 else None
        sums = (d.sum_chunk, d.size_sums)
        bulk_load(ix, seg, d.seqs, d.ts, sids, d.size, d.pos, d.aux, live, seg is last, sums, one)
        for s, exp in d.ttl.items():
            i = bisect_left(d.seqs, s)
            if i < n and live[i]:
                ix.ttl[s] = exp
    if not ix.msgs:
        ix.first = ix.last_seq + 1
    return ix
