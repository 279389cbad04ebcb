"""The replication primitives of ``FileStore`` (contract: ``store.ReplicaLog``).

Where batches are: every committed batch is in a segment's position table
(``positions.PosTable``: offset, size, last_seq), filled by recovery, by the commit of each job
(``pipeline.Flusher._commit``) and by compaction for the segments it rewrites. Batches not yet
committed are ``PendingBatch``es in the flusher's flights, then in the store's queue, in log
order; ``log_end`` is the position of the last of them, ``durable_end`` the last committed one.

Reads (``read_batches``) are synchronous and bounded: the committed batches following the
requested position are ``pread`` in one call per segment run (at most ``max_bytes``), pending
ones are served from memory (sealed on demand: an uncompressed pending batch is joined and
checksummed on the loop anyway when the flusher takes it; a compressed one is compressed with a
compressor of its own, since the flusher may be using the store's in a thread).

Follower appends (``append_batches``) queue the leader's bytes as sealed ``PendingBatch``es: the
flusher writes and syncs them like any job, so ``committed_seq``, the listeners and ``flush``
behave as for appends. Their index entries are added at once, in bulk (``replica.index_extend``), with
positions relative to the batch, shifted to file offsets at commit (``replica.shift_pos``): the
exact offset is only certain once the job is written. Until then a read of such a record is
decoded from the pending batch (``pending_payload``; the follower's readers normally stay below
its durable end anyway). Segments roll only before a batch holding records, which keeps every
segment's first batch at ``k == 0`` (``positions``).

``truncate`` and ``reset`` are rare (a leader change): correctness over speed. They flush,
stop the store's tasks, cut or delete files (later segments first, each step durable, so a
crash at any point leaves a prefix of the log), recover the directory like an open and take it
over (``FileStore._attach``). A failure in between fails the store (reopen it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from array import array
from bisect import bisect_right
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

import zstandard

from jetlog.errors import CorruptSegmentError, StorageError, StreamUnavailableError
from jetlog.log.commit import OpenBatch, PendingBatch, Roll, seal_pending
from jetlog.log.epochs import Entry, load_epochs, remove_file
from jetlog.log.index import Index
from jetlog.log.recovery import Recovered, build_index, recover
from jetlog.log.replica import (
    apply_reply,
    index_extend,
    parse_batches,
    pending_record,
    resolve,
    whole_or_chunk,
)
from jetlog.log.segment import Segment, SegmentIO, idx_name, seg_name
from jetlog.log.store import OutOfRangeError, Pos, PositionError, ReplicaError, ReplicaRead
from jetlog.wire import records as rc

log = logging.getLogger("jetlog.log.filereplica")

if TYPE_CHECKING:
    from jetlog.log.commit import StoreSync
    from jetlog.log.epochs import EpochCache
    from jetlog.log.maintenance import Maintenance
    from jetlog.log.pipeline import Flusher

_HDR = rc.HEADER_SIZE


class ReplicaHost(Protocol):
    """What the replication primitives use of their ``FileStore`` (which satisfies this
    structurally): nearly all of its state, since they append, truncate and reload it."""

    path: str
    epoch: int
    _io: SegmentIO
    _ix: Index
    _exec: ThreadPoolExecutor
    _ss: StoreSync
    _fl: Flusher
    _maint: Maintenance
    _epochs: EpochCache
    _compressed: bool
    _rcctx: zstandard.ZstdCompressor | None
    _dctx: zstandard.ZstdDecompressor
    _closed: bool
    _failed: BaseException | None
    _refuse: bool
    _busy: bool
    _segs: list[Segment]
    _seg: Segment
    _wseg: Segment
    _ob: OpenBatch
    _queue: list[PendingBatch | Roll]
    _end: Pos
    _durable: Pos
    _max_body: int
    _segment_bytes: int

    async def flush(self) -> None: ...
    def seal(self) -> Pos: ...
    def _attach(self, rec: Recovered, ix: Index, epochs: list[tuple[int, Pos]]) -> None: ...
    def _check_writable(self) -> None: ...
    def _roll(self) -> OpenBatch: ...
    def _mutated(self) -> None: ...
    def _open_fd(self, seg: Segment) -> int: ...
    def _close_fd(self, seg: Segment) -> None: ...


def start_pos(segs: list[Segment]) -> Pos:
    """The position before the first batch of a log whose first segment is ``segs[0]``."""
    return (segs[0].base - 1, -1)


def recovered_end(segs: list[Segment]) -> Pos:
    """The position of the last batch in the segments' tables (the start when none)."""
    for seg in reversed(segs):
        if len(seg.table):
            return seg.table.pos(len(seg.table) - 1)
    return start_pos(segs)


def recover_all(
    path: str, io: SegmentIO, verify: bool, first_seq: int, lazy: bool = False
) -> tuple[Recovered, Index, list[Entry]]:
    """Recovery of a store directory: segments, index, epoch checkpoint (blocking; a thread)."""
    rec = recover(path, io, verify=verify, first_seq=first_seq, lazy=lazy)
    ix = build_index(rec)
    end = recovered_end(rec.segments)
    try:
        epochs = load_epochs(path, io, rec.segments, start_pos(rec.segments), end)
    except rc.BatchError:
        if not lazy:
            raise
        # A batch header inside a segment a lazy open trusted is damaged (a log that changed
        # epoch searches its headers): open it the full way, which quarantines the damage.
        log.warning("%s: a batch header in a trusted segment is damaged; checking every segment", path)
        return recover_all(path, io, verify, first_seq, lazy=False)
    return rec, ix, epochs


# ---- locating batches -------------------------------------------------------------------


def _pending(st: ReplicaHost) -> list[tuple[list[PendingBatch | Roll], int]]:
    """``(list, index)`` of every batch not committed yet, in log order."""
    out: list[tuple[list[PendingBatch | Roll], int]] = []
    for fl in st._fl.flights:
        acts = fl.job.actions
        out.extend((acts, i) for i, a in enumerate(acts) if isinstance(a, PendingBatch))
    q = st._queue
    out.extend((q, i) for i, a in enumerate(q) if isinstance(a, PendingBatch))
    return out


def _pb(ref: tuple[list[PendingBatch | Roll], int]) -> PendingBatch:
    act = ref[0][ref[1]]
    assert isinstance(act, PendingBatch)
    return act


def _first(st: ReplicaHost, pend: list[tuple[list[PendingBatch | Roll], int]]) -> Pos | None:
    for seg in st._segs:
        if len(seg.table):
            return seg.table.pos(0)
    if pend:
        b = _pb(pend[0])
        return (b.last_seq, b.k)
    return None


def first_pos(st: ReplicaHost) -> Pos | None:
    """The position of the first batch of the log (None when it holds none)."""
    return _first(st, _pending(st))


def _committed_at(st: ReplicaHost, pos: Pos) -> tuple[int, int]:
    """``(segment index, table index)`` of the committed batch at ``pos``; the table index is
    -1 when no batch is there (and the segment index -1 when no segment could hold it)."""
    segs = st._segs
    si = bisect_right(segs, pos[0], key=lambda s: s.base) - 1
    if si < 0:
        return -1, -1
    return si, segs[si].table.find(pos)


def _locate(
    st: ReplicaHost, after: Pos, pend: list[tuple[list[PendingBatch | Roll], int]]
) -> tuple[int, int, int]:
    """Where the batches following ``after`` begin: ``(segment index, table index, pending
    index)``; the pending index is -1 while committed batches remain to be read. ``pend``:
    ``_pending(st)``."""
    start = start_pos(st._segs)
    if resolve(after, start, st._end, _first(st, pend)):
        return 0, 0, -1
    if after <= st._durable:
        si, j = _committed_at(st, after)
        if si >= 0 and st._segs[si].rewritten and j != len(st._segs[si].table) - 1:
            # Compaction regrouped this segment: the reader's copy up to ``after`` is not a
            # prefix of what follows here any more.
            raise OutOfRangeError(after, start)
        if j < 0:
            raise PositionError(after, st._end, "no batch ends there")
        return si, j + 1, -1
    for n, ref in enumerate(pend):
        b = _pb(ref)
        if (b.last_seq, b.k) == after:
            return len(st._segs), 0, n + 1
    raise PositionError(after, st._end, "no batch ends there")


# ---- reads --------------------------------------------------------------------------------


def read_batches(st: ReplicaHost, after: Pos, max_bytes: int, offset: int) -> ReplicaRead:
    """See ``ReplicaLog.read_batches``."""
    if st._closed:
        raise StreamUnavailableError(f"store {st.path} is closed")
    if max_bytes < 1:
        raise ValueError("max_bytes must be positive")
    pend = _pending(st)  # one list for the whole read: a leader answers every fetch with one
    si, j, pi = _locate(st, after, pend)
    out: list[bytes] = []
    used = count = 0
    last = after
    segs = st._segs
    while pi < 0 and si < len(segs):
        seg = segs[si]
        t = seg.table
        if j >= len(t):
            si, j = si + 1, 0
            continue
        if not count and whole_or_chunk(t.size[j], max_bytes, offset):
            n = min(max_bytes, t.size[j] - offset)
            return ReplicaRead(_pread(st, seg, t.off[j] + offset, n), 0, t.pos(j), offset, t.size[j])
        e = j
        run = 0
        while e < len(t) and used + run + t.size[e] <= max_bytes:
            run += t.size[e]
            e += 1
        if e > j:
            out.append(_read_run(st, seg, j, e, run))
            used += run
            count += e - j
            last = t.pos(e - 1)
        if e < len(t):
            return ReplicaRead(b"".join(out), count, last)
        si, j = si + 1, 0
    for ref in pend[max(pi, 0) :]:
        b = _sealed(st, ref)
        size = len(b.parts[0]) + len(b.parts[1])
        if not count and whole_or_chunk(size, max_bytes, offset):
            data = b"".join(b.parts)[offset : offset + max_bytes]
            return ReplicaRead(data, 0, (b.last_seq, b.k), offset, size)
        if used + size > max_bytes:
            break
        out.extend(b.parts)
        used += size
        count += 1
        last = (b.last_seq, b.k)
    return ReplicaRead(b"".join(out), count, last)


def _sealed(st: ReplicaHost, ref: tuple[list[PendingBatch | Roll], int]) -> PendingBatch:
    """The pending batch, sealed (and left sealed in its list, so the flusher reuses it)."""
    b = _pb(ref)
    if not b.sealed:
        cctx = None
        if st._compressed:
            if st._rcctx is None:
                st._rcctx = zstandard.ZstdCompressor(level=3)
            cctx = st._rcctx
        b = seal_pending(b, cctx)
        ref[0][ref[1]] = b
    return b


def _read_run(st: ReplicaHost, seg: Segment, j: int, e: int, run: int) -> bytes:
    """Table entries ``j..e-1`` of ``seg`` (``run`` bytes), checked against their headers."""
    t = seg.table
    if t.off[e - 1] + t.size[e - 1] - t.off[j] != run:  # not back to back (a null batch between)
        return b"".join(_read_run(st, seg, i, i + 1, t.size[i]) for i in range(j, e))
    data = _pread(st, seg, t.off[j], run)
    for i, at in ((j, 0), (e - 1, run - t.size[e - 1])):
        try:
            h = rc.decode_header(data, at)
        except rc.BatchError as exc:
            raise CorruptSegmentError(seg.path, t.off[i], exc.reason) from exc
        if h.last_seq != t.last[i] or h.size != t.size[i]:
            raise CorruptSegmentError(seg.path, t.off[i], "batch does not match the position table")
    return data


def _pread(st: ReplicaHost, seg: Segment, off: int, n: int) -> bytes:
    try:
        fd = seg.fd if seg.fd is not None else st._open_fd(seg)
        data = st._io.pread(fd, n, off)
    except OSError as exc:
        raise StorageError(f"cannot read {seg.path}: {exc}") from exc
    if len(data) != n:
        raise StorageError(f"short read of {seg.path} at {off}: {len(data)} of {n} bytes")
    return data


# ---- follower appends ---------------------------------------------------------------------


def append_batches(st: ReplicaHost, data: bytes | bytearray | memoryview) -> Pos:
    """See ``ReplicaLog.append_batches``."""
    st._check_writable()
    ob = st._ob
    ix = st._ix
    if ob.nrec or ob.ops or ix.last_seq != ob.base_seq:
        raise ReplicaError("the store has writes in an open batch: seal() before appending batches")
    r = parse_batches(data, ix.last_seq, st._epochs.latest, st._dctx, True)
    if not r.batches:
        return st._end
    segs: list[Segment] = []
    seqs = r.seqs
    queue = st._queue
    seg = st._seg
    opos = st._ob.pos  # where the next batch goes in ``seg``
    limit = st._segment_bytes
    end = st._end
    epochs = st._epochs
    for p in r.batches:
        h = p.h
        size = _HDR + h.body_len
        if opos + size > limit and h.n_records and seg.nrecords:
            ix.last_seq = st._ob.base_seq = h.base_seq  # the new segment's base follows it
            st._roll()
            seg = st._seg
            opos = 0
        segs.append(seg)
        first = last = 0
        if p.i1 > p.i0:
            first, last = seqs[p.i0], seqs[p.i1 - 1]
            if not seg.nrecords:
                seg.min_seq = first
            seg.nrecords += p.i1 - p.i0
            seg.max_seq = last
        k = end[1] + 1 if h.last_seq == end[0] else 0
        # READS: until the batch commits, its records are decoded from it (``pending_payload``);
        # their index ``pos`` is relative to the batch until then (``rel``).
        queue.append(
            PendingBatch(
                seg, -1, [p.hdr, p.body], p.i1 - p.i0, p.ops, h.epoch, h.base_seq, h.last_seq,
                h.last_ts, first, last, True, k, True,
            )
        )  # fmt: skip
        if h.epoch > epochs.latest:
            epochs.observe(h.epoch, end)
        end = (h.last_seq, k)
        opos += size
    st._end = end
    st._ob = OpenBatch(seg, opos, end[0], st._max_body)

    def add(seg: Segment, i0: int, i1: int, sids: array[int]) -> None:
        if i0 == 0 and i1 == len(seqs):
            index_extend(ix, seg, seqs, r.ts, sids, r.sizes, r.pos, r.aux, True)
        else:
            s = slice(i0, i1)
            index_extend(ix, seg, seqs[s], r.ts[s], sids[s], r.sizes[s], r.pos[s], r.aux[s], True)
        for q, e in r.ttl:
            if seqs[i0] <= q <= seqs[i1 - 1]:
                seg.ttl[q] = e

    if apply_reply(ix, r, add, segs):
        # Removals (limits, deletes, expiry from the leader) can empty index blocks and make
        # retention or compaction worthwhile. Plain appends cannot: no prune, no maintenance
        # pass per follower job (a floor that rises is the store's own poke).
        st._mutated()
    if st._fl.idle:
        st._fl.kick()
    return st._end


def pending_payload(st: ReplicaHost, seq: int, pos: int, aux: int) -> tuple[bytes, bytes] | None:
    """``(hdr, data)`` of a replicated record whose batch is not committed yet (None if there
    is no such batch)."""
    for ref in _pending(st):
        b = _pb(ref)
        if b.rel and b.first_rec <= seq <= b.last_rec:
            r = pending_record(b.parts[0], b.parts[1], pos, aux, st._dctx)
            return (r.hdr, r.data)
    return None


# ---- epochs, truncation, reset ------------------------------------------------------------


async def begin_epoch(st: ReplicaHost, epoch: int) -> None:
    """See ``ReplicaLog.begin_epoch``."""
    st._check_writable()
    st.seal()
    st._epochs.begin(epoch, st._end)
    st.epoch = epoch  # batches sealed from now on carry it
    await _persist_epochs(st)


async def _persist_epochs(st: ReplicaHost) -> None:
    loop = asyncio.get_running_loop()
    try:
        await st._epochs.persist(lambda fn: loop.run_in_executor(st._exec, fn))
    except OSError as exc:
        raise StorageError(f"cannot write the epoch checkpoint of {st.path}: {exc}") from exc


async def truncate(st: ReplicaHost, to: Pos) -> None:
    """See ``ReplicaLog.truncate``."""
    st._check_writable()
    start = start_pos(st._segs)
    at_start = resolve(to, start, st._end, _first(st, _pending(st)))
    async with _busy(st):
        await st.flush()  # every batch is now in a segment's table
        si, j = (0, -1) if at_start else _committed_at(st, to)
        if j < 0 and not at_start:
            raise PositionError(to, st._end, "no batch ends there")
        seg = st._segs[si]
        if not at_start and seg.rewritten and j != len(seg.table) - 1:
            raise PositionError(to, st._end, "inside a segment compaction rewrote")
        st._epochs.clip(to)
        await _persist_epochs(st)
        if to == st._end:
            return
        t = seg.table
        cut = t.off[j] + t.size[j] if j >= 0 else (t.off[0] if len(t) else seg.size)
        later = [s.base for s in st._segs[si + 1 :]]
        await _reload(st, lambda: _cut(st.path, later, seg.base, cut, cut < seg.size), seg.base)


async def reset(st: ReplicaHost, first_seq: int) -> None:
    """See ``ReplicaLog.reset``."""
    st._check_writable()
    if first_seq < 1:
        raise ValueError("first_seq must be at least 1")
    async with _busy(st):
        await st.flush()
        st._epochs.entries = []
        path = st.path
        bases = [s.base for s in st._segs]

        def wipe() -> None:
            remove_file(path)
            _cut(path, bases, -1, 0, False)

        await _reload(st, wipe, first_seq)


@contextlib.asynccontextmanager
async def _busy(st: ReplicaHost) -> AsyncIterator[None]:
    """Refuse every mutation while the store is being truncated or reset."""
    st._busy = True
    st._refuse = True
    try:
        yield
    finally:
        st._busy = False
        st._refuse = st._failed is not None or st._closed


def _cut(path: str, later: list[int], base: int, cut: int, shorten: bool) -> None:
    """Delete the segments ``later`` (last first, each durably: a crash leaves a prefix of the
    log), then cut segment ``base`` to ``cut`` bytes (its index file first, which would describe
    more than the file holds). Blocking."""
    for b in reversed(later):
        for name in (idx_name(b), seg_name(b)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(path, name))
        _sync_dir(path)
    if base < 0 or not shorten:
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(path, idx_name(base)))
    _sync_dir(path)
    fd = os.open(os.path.join(path, seg_name(base)), os.O_RDWR | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, cut)
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def _reload(st: ReplicaHost, surgery: Callable[[], None], first_seq: int) -> None:
    """Stop the store's tasks, run ``surgery`` on its files, recover the directory and take it
    over. Any failure fails the store."""
    await _detach(st)
    try:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(st._exec, surgery)
        rec, ix, entries = await loop.run_in_executor(
            st._exec, recover_all, st.path, st._io, False, first_seq
        )
        st._attach(rec, ix, entries)
    except Exception as exc:
        st._failed = exc
        st._refuse = True
        raise StorageError(f"store {st.path} failed while truncating or resetting: {exc}") from exc
    except BaseException as exc:  # cancelled half-way: the files are a valid prefix, the object is not
        st._failed = exc
        st._refuse = True
        raise


async def _detach(st: ReplicaHost) -> None:
    """Stop the flusher and maintenance and release the files (after a flush: nothing is in
    flight). The lock, the store thread and the sync service stay."""
    fl = st._fl
    fl.stopping = True
    fl.kick()
    with contextlib.suppress(Exception):
        await fl.task
    if st._failed is None and fl.unsynced and st._wseg.fd is not None:
        await st._ss.sync_writer()  # interval mode: what the truncation keeps is durable
    await st._maint.indexes_written()
    await st._maint.stop()
    for seg in st._segs:
        st._close_fd(seg)
    st._ss.forget()
