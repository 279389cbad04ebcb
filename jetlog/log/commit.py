"""Group commit: the pending-batch structures the loop fills and the job the flusher runs.

The loop encodes each mutation into the open batch at once (records are fully encoded, with
their CRC, in ``append``). The flusher (``pipeline.py``) takes everything pending as one job,
seals it (joins, checksums and, for compressed stores, compresses each batch), writes it with
``writev`` and requests one ``fdatasync`` through a ``SyncService`` (normally the helper process
of ``syncer.py``). While a job is in flight new mutations accumulate for the next one, which
may be written and its sync requested before the previous sync returned
(``pipeline.MAX_INFLIGHT``).

Where the work runs: everything but the sync runs on the event loop. A thread would have to
win this process's GIL back from a busy loop to report completion, which under load costs far
more than the work itself (see ``syncer.py``). The write goes to the page cache and normally
takes microseconds; the trade-off is that under dirty-page throttling (writeback far behind,
e.g. another process flooding the disk) ``write`` can block the whole loop for as long as the
kernel throttles it. At most ``pipeline.MAX_INFLIGHT`` jobs are written and not yet synced, so
this store keeps at most that many jobs' bytes dirty per stream.

Crash ordering:
- Acknowledgement: a commit is reported only after the sync covering it succeeded; a job's
  sync is issued after all of its writes returned. With jobs pipelined, commits are still
  reported in job order (``pipeline.py``).
- A segment roll inside a job syncs the old segment before the new file is created, so a later
  segment never holds data whose predecessor's tail could be missing (recovery treats a damaged
  non-last segment as corruption, not as a torn tail). The directory is fsynced after the create
  and before anything written to the new file is reported durable. A job holding a roll is
  never pipelined: it starts when nothing else is in flight and the next job starts after it
  is committed (``run_job``); jobs without one are written by ``write_job``.
- Preallocation (``reserve``): the writer segment is extended ahead of its data with
  ``posix_fallocate``, by as much as it holds (``PREALLOC_MIN`` to ``PREALLOC``). An
  ``fdatasync`` of an append that grows the file must commit the new size to the file
  system's journal; one inside allocated space does not
  (188 vs 124 µs per 200-byte synchronous append on the test machine's ext4). The space past the
  data reads as zeros, so after a crash the last segment can end in zeros, and pages of an
  unsynced tail may have reached the disk in any order (zeros, then data). Recovery calls an
  invalid tail with a zero-filled sector in it torn (``recordscan.scan``); none of it was
  acknowledged, since a sync covering any of it would have made the zeros before it durable
  too. A segment is cut back to its data (``ftruncate``) and fsynced at its roll, before the
  next file exists, and the writer at a clean close: a sealed segment always ends at its last
  batch.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from jetlog.errors import StorageError
from jetlog.log.segment import Segment, SegmentIO
from jetlog.log.syncer import Syncer, SyncService
from jetlog.log.syncledger import LEDGER
from jetlog.wire import records as rc
from jetlog.wire.crc import crc32c

log = logging.getLogger("jetlog.store")

PREALLOC = 1 << 20
"""The writer segment is preallocated at most this far past the data written (``reserve``)."""
PREALLOC_MIN = 64 << 10
"""... and at least this far: ahead by as much as it holds already, so a small stream (there
may be thousands) holds 64 KiB of allocated space, not 1 MiB."""

# Compressed stores compress on the loop: zstd level 3 runs ~300 MB/s here (a full 1 MiB batch is
# ~4 ms of loop time), while a thread's result can take seconds to reach a busy loop (measured in
# ``bench/commit_latency_bench.py --compression-study``). Only batches above this (a single
# message over 1 MiB) go to the store thread.
COMPRESS_INLINE_MAX = rc.SPLIT_BODY
_YIELD_EVERY = 256 << 10  # let other tasks run after compressing this much inline


class OpenBatch:
    """The batch currently being filled (loop side)."""

    __slots__ = ("base_seq", "body", "first_rec", "last_rec", "limit", "nrec", "ops", "parts", "pos", "seg")

    def __init__(self, seg: Segment, pos: int, base_seq: int, limit: int = rc.SPLIT_BODY) -> None:
        self.seg = seg
        self.pos = pos  # file offset its header will have (an estimate when compressing)
        self.base_seq = base_seq
        self.limit = limit  # room for records: the body limit minus the ops' bytes
        self.parts: list[bytes] = []
        self.body = 0
        self.nrec = 0
        self.first_rec = 0
        self.last_rec = 0
        self.ops: list[tuple[int, int]] = []


class PendingBatch(NamedTuple):
    """A closed batch waiting for the flusher. ``pos`` is the expected file offset (-1 when
    compressed: only the writer knows it). ``k``: the ``k`` of its position ``(last_seq, k)``.
    ``rel``: a replicated batch (``append_batches``): its index entries hold positions
    relative to the batch start, shifted by the batch's file offset when it commits."""

    seg: Segment
    pos: int
    parts: list[bytes]
    nrec: int
    ops: list[tuple[int, int]]
    epoch: int
    base_seq: int
    last_seq: int
    last_ts: int
    first_rec: int
    last_rec: int
    sealed: bool = False  # ``parts`` is already ``[header, body]``
    k: int = 0
    rel: bool = False


def seal_pending(b: PendingBatch, compressor: Any) -> PendingBatch:
    """Join and checksum a pending batch (``parts`` becomes ``[header, stored body]``).

    Uncompressed stores do this on the loop when a job is taken (a memcpy and a CRC, cheap).
    Compressed stores call it from the flusher (see ``FileStore._seal``).
    """
    if b.sealed:
        return b
    raw = b"".join(b.parts)
    if b.ops:
        raw += rc.encode_ops(b.ops)
    hdr, body = rc.seal_batch(
        raw,
        n_records=b.nrec,
        n_ops=len(b.ops),
        epoch=b.epoch,
        base_seq=b.base_seq,
        last_seq=b.last_seq,
        last_ts=b.last_ts,
        compressor=compressor if b.nrec else None,
    )
    # Built field by field: ``_replace`` (a Python-level map over the fields) was two thirds
    # of this function, ~5 % of the loop with 200 streams committing small batches.
    return PendingBatch(
        b.seg,
        b.pos,
        [hdr, body],
        b.nrec,
        b.ops,
        b.epoch,
        b.base_seq,
        b.last_seq,
        b.last_ts,
        b.first_rec,
        b.last_rec,
        True,
        b.k,
        b.rel,
    )


async def seal_compressed(
    actions: list[PendingBatch | Roll], compressor: Any, executor: ThreadPoolExecutor
) -> list[PendingBatch | Roll]:
    """Compress and seal a compressed store's batches, on the loop (see ``COMPRESS_INLINE_MAX``).
    Appends made while this yields go to the next job."""
    out: list[PendingBatch | Roll] = []
    done = 0
    for act in actions:
        if isinstance(act, PendingBatch) and not act.sealed:
            raw = sum(len(p) for p in act.parts)
            if raw > COMPRESS_INLINE_MAX:
                loop = asyncio.get_running_loop()
                act = await loop.run_in_executor(executor, seal_pending, act, compressor)
            else:
                if done >= _YIELD_EVERY:
                    await asyncio.sleep(0)
                    done = 0
                act = seal_pending(act, compressor)
                done += raw
        out.append(act)
    return out


class Roll(NamedTuple):
    """Seal ``old`` and start writing ``new`` (a new file)."""

    old: Segment
    new: Segment


class StoreSync:
    """One store's sync endpoints: its ``SyncService``, the sync handle of the writer segment
    (``writer``) and the store directory's fd and handle (``dir``). Files are registered as fds
    once, never synced by path (see ``syncer.py``). ``owned``: a shared ``Syncer`` reference
    released by ``close``."""

    def __init__(
        self, io: SegmentIO, service: SyncService, path: str, writer_fd: int, owned: Syncer | None
    ) -> None:
        self.io = io
        self.service = service
        self.owned = owned
        self.syncs = 0  # fdatasyncs of segment files done for commits
        self.dir_fd = -1
        self.writer = self.dir = 0
        try:
            self.dir_fd = io.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            self.writer = service.register(writer_fd)
            self.dir = service.register(self.dir_fd)
        except BaseException:
            self.forget()
            raise

    async def sync_writer(self) -> None:
        await self.service.fdatasync(self.writer)
        self.syncs += 1

    def rolled(self, handle: int) -> None:
        """The old writer was synced by its roll and never is again: ``handle`` (the new
        segment's) replaces it. The old segment's own fd stays open for reads."""
        self.service.forget(self.writer)
        self.writer = handle

    def forget(self) -> None:
        for h in (self.writer, self.dir):
            if h:
                self.service.forget(h)
        self.writer = self.dir = 0
        if self.dir_fd >= 0:
            try:
                self.io.close(self.dir_fd)
            except OSError:
                pass
            self.dir_fd = -1

    async def close(self) -> None:
        """Forget every handle; the last store on a loop stops the helper. A sync still running
        in the helper is harmless: ``forget`` lets it finish on the helper's copy of the fd."""
        self.forget()
        if self.owned is not None:
            owned, self.owned = self.owned, None
            await owned.release()


class Job(NamedTuple):
    """Everything one group commit writes (every batch sealed). ``fd``/``handle``: the writer
    segment's fd and its sync handle; ``size``: the bytes already *written* to it (including
    jobs still in flight), where this job's first batch goes. ``rolls``: holds a ``Roll``."""

    number: int
    actions: list[PendingBatch | Roll]
    last_seq: int
    seg: Segment
    fd: int
    handle: int
    size: int
    sync: bool
    rolls: bool = False
    cap: int = 0
    """Preallocate a segment up to this size at most (the store's segment size); 0: never."""


class JobResult(NamedTuple):
    batch_pos: list[int]
    sizes: list[tuple[Segment, int]]
    opened: list[tuple[Segment, int, int]]  # new segment, its fd, its sync handle
    syncs: int  # fdatasyncs of segment files done


async def run_job(io: SegmentIO, sync: SyncService, dir_handle: int, job: Job) -> JobResult:
    """Write a job on the loop and make it durable through ``sync`` (see the module docstring
    for the ordering). Raises ``OSError`` on I/O failure (the store then fails closed) or
    ``StorageError`` if the layout drifted (a bug). ``dir_handle`` is the store directory's."""
    batch_pos: list[int] = []
    sizes: list[tuple[Segment, int]] = []
    opened: list[tuple[Segment, int, int]] = []
    syncs = 0
    seg, fd, handle, size = job.seg, job.fd, job.handle, job.size
    at = size  # where the staged ``bufs`` go
    bufs: list[bytes] = []
    try:
        for act in job.actions:
            if isinstance(act, Roll):
                if bufs:
                    _write(io, seg, fd, bufs, at, size, job.cap)
                    bufs = []
                # ORDER: the old segment is complete on disk, and ends at its last batch
                # (preallocated space cut off), before the new file exists.
                if seg.alloc > size:
                    io.truncate(fd, size)
                    seg.alloc = 0
                    await sync.fsync(handle)  # the size change too, not only the data
                else:
                    await sync.fdatasync(handle)
                syncs += 1
                sizes.append((seg, size))
                new_fd = io.open(act.new.path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
                try:
                    new_handle = sync.register(new_fd)
                except BaseException:
                    io.close(new_fd)
                    raise
                opened.append((act.new, new_fd, new_handle))
                await sync.fsync(dir_handle)  # the new file's directory entry
                seg, fd, handle, size = act.new, new_fd, new_handle, 0
                at = 0
                continue
            size = _stage(act, size, batch_pos, bufs)
        if bufs:
            _write(io, seg, fd, bufs, at, size, job.cap)
        if job.sync:
            await sync.fdatasync(handle)
            syncs += 1
    except BaseException:
        # Includes cancellation (a failed or abandoned store): files this job created are
        # closed; a new segment file that already exists is handled by recovery.
        for _, nfd, nh in opened:
            sync.forget(nh)
            try:
                io.close(nfd)
            except OSError:
                pass
        raise
    sizes.append((seg, size))
    return JobResult(batch_pos, sizes, opened, syncs)


def _write(io: SegmentIO, seg: Segment, fd: int, bufs: list[bytes], at: int, end: int, cap: int) -> None:
    """Write ``bufs`` to ``seg`` at ``at`` (ending at ``end``), preallocating ahead first."""
    reserve(io, seg, fd, at, end, cap)
    io.write(fd, bufs, at)
    note_written(seg, at, bufs)


def reserve(io: SegmentIO, seg: Segment, fd: int, at: int, end: int, cap: int) -> None:
    """Before writing ``[at, end)`` to the writer ``seg``: preallocate the file past ``end``
    when the write would go beyond what is allocated (by ``end`` again, within ``PREALLOC_MIN``
    and ``PREALLOC``, up to ``cap``). A file system that cannot preallocate (or is full) is
    written without: the failure is logged once per segment and the write itself decides."""
    if end <= seg.alloc or seg.alloc < 0 or end >= cap:
        return
    start = max(at, seg.alloc)
    target = min(end + min(PREALLOC, max(PREALLOC_MIN, end)), cap)
    try:
        io.preallocate(fd, start, target - start)
    except OSError as exc:
        seg.alloc = -1
        log.info("segment %s: not preallocated (%s); appending without", seg.path, exc)
        return
    seg.alloc = target


def note_written(seg: Segment, at: int, bufs: list[bytes]) -> None:
    """Extend ``seg``'s running content CRC by ``bufs``, just written at offset ``at``.

    The CRC is of the bytes this process wrote, never of bytes read back, so it cannot vouch
    for damage on disk: a segment damaged after the write fails the CRC check at open and is
    checked batch by batch. A segment found on disk starts from the CRC its index file proved
    at open (recovery's fast path), else it is unknown; writes not in order from there leave
    it unknown, and the index file's CRC is then computed from the file (``maintenance``)."""
    if LEDGER is not None:  # test-only: the size a sync now covers (see ``syncledger``)
        LEDGER.wrote(seg.path, at + sum(len(b) for b in bufs))
    c = seg.wcrc
    if c is None:
        return
    if at != seg.wlen:
        seg.wcrc = None
        return
    n = 0
    for b in bufs:
        c = crc32c(b, c)
        n += len(b)
    seg.wcrc = c
    seg.wlen = at + n


def _stage(act: PendingBatch, size: int, batch_pos: list[int], bufs: list[bytes]) -> int:
    """Queue one sealed batch for writing at offset ``size``; return the size after it."""
    if not act.sealed:
        raise StorageError("internal: unsealed batch in a job")
    hdr, body = act.parts
    if act.pos >= 0 and act.pos != size:
        raise StorageError(f"internal: batch expected at {act.pos}, segment is {size} bytes")
    batch_pos.append(size)
    bufs.append(hdr)
    bufs.append(body)
    return size + len(hdr) + len(body)


def write_job(io: SegmentIO, job: Job) -> JobResult:
    """Write a job without a ``Roll`` (synchronously, on the loop); its sync is the caller's
    (``start_sync``). ``syncs`` counts that sync. Raises like ``run_job``."""
    if job.rolls:
        raise StorageError("internal: write_job got a roll")
    batch_pos: list[int] = []
    bufs: list[bytes] = []
    size = job.size
    for act in job.actions:
        assert isinstance(act, PendingBatch)
        size = _stage(act, size, batch_pos, bufs)
    if bufs:
        _write(io, job.seg, job.fd, bufs, job.size, size, job.cap)
    return JobResult(batch_pos, [(job.seg, size)], [], 1 if job.sync else 0)


def start_sync(sync: SyncService, handle: int) -> asyncio.Future[None]:
    """Request ``fdatasync(handle)`` now and return its future. The ``Syncer`` sends the request
    before returning, or at the end of this loop pass when it is not the pass's first; a service
    whose ``fdatasync`` is a coroutine starts on the next loop step."""
    return asyncio.ensure_future(sync.fdatasync(handle))
