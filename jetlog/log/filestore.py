"""``FileStore``: a stream's messages in a directory of segment files (see ``segment.py`` for the
layout, ``recovery.py`` and ``fileopen.py`` for opening, ``fileclose.py`` for closing,
``commit.py`` for group commit, ``compaction.py`` for the rewrite rules and the op invariant).

Where work runs: the commit path (seal, write, sync) runs on the loop, with the fsyncs done by
the per-loop helper process of ``syncer.py`` (no thread of this process is involved, so a busy
loop cannot starve it of the GIL). One maintenance thread does index files of sealed segments,
segment deletion and rewrites; one store thread handles the rare big compressions and index
writes at close. Every in-memory structure is mutated on the loop only; threads get immutable
snapshots and return results that the loop applies.

Write path: ``append`` encodes the record (with its CRC) into the open batch at once and
indexes it; the record is readable immediately (served from memory until committed). The
flusher (``pipeline.py``) takes everything pending as one job (group commit): it writes it on
the loop and requests one fdatasync from the helper; when that returns it advances
``committed_seq`` and calls the commit listeners. The next job may be written and its sync
requested while the previous sync runs (``pipeline.MAX_INFLIGHT``); commits are still
reported in job order. A write or fsync error fails the store for good (no retry: after a
failed fsync the page cache state is unknown). A dead helper is not an fsync error: the syncer
restarts it and re-issues the syncs it did not answer (see ``syncer.py``).

Replication (``store.ReplicaLog``): ``filereplica.py`` serves and appends stored batches
verbatim, truncates and resets; ``epochs.py`` keeps the leader-epoch checkpoint; every segment
keeps the positions of its batches (``positions.py``). The writer tracks ``log_end`` as it closes
batches, the commit path ``durable_end``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import zstandard

from jetlog.errors import CorruptSegmentError, StorageError, StreamUnavailableError
from jetlog.log import fileclose
from jetlog.log import filereplica as fr
from jetlog.log.base import IndexedStore
from jetlog.log.commit import OpenBatch, PendingBatch, Roll, StoreSync
from jetlog.log.compaction import delete_segments, rewrite_segment
from jetlog.log.epochs import EpochCache
from jetlog.log.fileappend import append_records
from jetlog.log.fileopen import RecoveredDir, recover_dir
from jetlog.log.index import Block, Index
from jetlog.log.maintenance import Maintenance
from jetlog.log.pipeline import Flusher
from jetlog.log.rawread import RunReader, bulk_reader, run_reader, stored_headers
from jetlog.log.recovery import Recovered
from jetlog.log.replica import cap_raw, check_max_batch, merge_op
from jetlog.log.scrub import Scrub
from jetlog.log.segment import Segment, SegmentIO, read_record
from jetlog.log.store import NO_FLOOR, Pos, RecoveryReport, ReplicaRead, StoredHeaders, StoredMsg
from jetlog.log.syncer import Syncer, SyncService, ThreadSync, acquire_syncer
from jetlog.wire import records as rc

log = logging.getLogger("jetlog.log.filestore")

DEFAULT_SEGMENT_BYTES = 64 << 20
_HDR = rc.HEADER_SIZE
_SPLIT = rc.SPLIT_BODY
_OPS = rc.OP_SIZE
_FD_CACHE = 64

__all__ = ["DEFAULT_SEGMENT_BYTES", "FileStore"]


class FileStore(IndexedStore):
    """Durable ``MsgStore`` on segment files with group commit. Create with ``await
    FileStore.open(path, ...)``."""

    def __init__(
        self,
        path: str,
        io: SegmentIO,
        rec: Recovered,
        ix: Index,
        lock_fd: int,
        *,
        compression: bool,
        fsync: str,
        segment_bytes: int,
        sync_interval: float,
        auto_compact: bool,
        compact_threshold: float,
        syncer: SyncService | str,
        owned_syncer: Syncer | None = None,
        epochs: list[tuple[int, Pos]] | None = None,
    ) -> None:
        super().__init__(ix)
        self.path = path
        self._io = io
        self._lock_fd = lock_fd
        self._compressed = compression
        self._always = fsync == "always"
        self._segment_bytes = segment_bytes
        self._sync_interval = int(sync_interval * 1e9)  # ns
        self._auto = (auto_compact, compact_threshold)
        # never below an epoch this store already knows (a leader must not reuse one)
        self.epoch = max(rec.epoch, epochs[-1][0] if epochs else 0)
        self._compact_floor = NO_FLOOR
        self._max_body = _SPLIT  # ``max_batch_bytes`` minus the header
        self._exec = ThreadPoolExecutor(1, thread_name_prefix="jetlog-store")
        # "helper" was resolved by ``open``; "thread" syncs in this store's thread
        self._service = ThreadSync(io, self._exec) if isinstance(syncer, str) else syncer
        self._owned = owned_syncer
        self._cctx = zstandard.ZstdCompressor(level=3) if compression else None
        self._rcctx: zstandard.ZstdCompressor | None = None  # ``read_batches``' own (not thread-safe)
        self._dctx = zstandard.ZstdDecompressor()
        self._closed = False
        try:
            self._attach(rec, ix, epochs or [])
        except BaseException:
            self._exec.shutdown(wait=False)
            raise

    def _attach(self, rec: Recovered, ix: Index, epochs: list[tuple[int, Pos]]) -> None:
        """Take over a recovered directory (at open, and after ``truncate``/``reset``)."""
        self._ix = ix
        self._segs: list[Segment] = rec.segments
        self._seg = self._segs[-1]
        self._wseg = self._seg
        self._seg.fd = self._io.open(self._seg.path, os.O_RDWR)
        try:
            self._ss = StoreSync(self._io, self._service, self.path, self._seg.fd, self._owned)
        except BaseException:
            self._io.close(self._seg.fd)
            self._seg.fd = None
            raise
        self._ob = OpenBatch(self._seg, self._seg.size, ix.last_seq, self._max_body)
        self._queue: list[PendingBatch | Roll] = []
        self._rolls = 0  # ``Roll``s in ``_queue``
        self._pend: dict[int, tuple[bytes, bytes]] = {}  # records of the open batch and ``_queue``
        self._committed = ix.last_seq
        self._end = self._durable = fr.recovered_end(self._segs)  # replication positions
        self._epochs = EpochCache(epochs, self.path)
        self._failed: BaseException | None = None
        self._refuse = self._busy = False
        self._fd_lru: OrderedDict[Segment, None] = OrderedDict()
        self._bodies: OrderedDict[tuple[int, int, int], bytes] = OrderedDict()
        self._chunks: OrderedDict[tuple[int, int, int], bytes] = OrderedDict()
        self._lost_seqs = tuple(rec.lost)
        self._lost_bytes = rec.lost_bytes
        self.recovery = RecoveryReport(
            segments=len(rec.segments),
            messages=ix.msgs,
            truncated_bytes=rec.truncated_bytes,
            rebuilt_indexes=rec.rebuilt_indexes,
            quarantined=tuple(rec.quarantined),
            lost_seqs=tuple(rec.lost),
        )
        self._maint = Maintenance(self, *self._auto)
        self._fl = Flusher(self, self._always)
        if self._wseg.idx_file is None:
            # A writer without a current index file (a crash's scan rebuilt it): written once
            # the store is quiet, as after commits, so that a second crash does not scan again.
            self._maint.note_commit()
        self.scrub = Scrub(self.path, lambda: self._segs)
        self.scrub.start()

    @classmethod
    async def open(
        cls,
        path: str,
        *,
        compression: bool = False,
        fsync: str = "always",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        first_seq: int = 1,
        sync_interval: float = 1.0,
        io: SegmentIO | None = None,
        verify: bool = True,
        lazy_verify: bool = False,
        auto_compact: bool = True,
        compact_threshold: float = 0.5,
        syncer: SyncService | str = "helper",
        recovered: RecoveredDir | None = None,
    ) -> FileStore:
        """Open (creating if needed) the store in directory ``path`` and recover it.

        ``fsync``: ``"always"`` (group commit: a commit is reported only after fdatasync) or
        ``"interval"`` (commits are reported after the write; fdatasync at most every
        ``sync_interval`` seconds — acknowledged data can be lost on power failure). ``first_seq``
        only applies to a new store. ``verify`` checks every batch CRC on open even where an
        index file is valid. ``lazy_verify``: a segment whose index file vouches for all of it
        is not read at open; it is checked in the background afterwards (``scrub``). Raises
        ``StorageError`` for an unusable directory; corruption never raises (see ``recovery``).

        ``syncer``: ``"helper"`` (the loop's shared fsync helper process, ``syncer.py``),
        ``"thread"`` (fsync in a thread of this process: the old path, slow under a busy loop)
        or any ``SyncService`` (owned by the caller; tests inject failures this way).

        ``recovered``: the directory as ``recover_dir`` (with the same ``io``, ``verify``,
        ``first_seq`` and ``lazy_verify``) left it, done ahead in a thread of the caller's
        choosing (a node start recovers every stream in one thread); the store takes it over.
        """
        if fsync not in ("always", "interval"):
            raise ValueError(f"fsync must be 'always' or 'interval', not {fsync!r}")
        if isinstance(syncer, str) and syncer not in ("helper", "thread"):
            raise ValueError(f"syncer must be 'helper', 'thread' or a SyncService, not {syncer!r}")
        if not 4096 <= segment_bytes <= 1 << 30:
            raise ValueError("segment_bytes must be between 4 KiB and 1 GiB")
        if recovered is None:
            recovered = await asyncio.to_thread(
                recover_dir, path, io=io, verify=verify, first_seq=first_seq, lazy_verify=lazy_verify
            )
        sio, lock_fd, rec, ix, epochs = recovered.take()
        owned: Syncer | None = None
        try:
            if syncer == "helper":
                owned = acquire_syncer()
                syncer = owned
            return cls(
                path,
                sio,
                rec,
                ix,
                lock_fd,
                compression=compression,
                fsync=fsync,
                segment_bytes=segment_bytes,
                sync_interval=sync_interval,
                auto_compact=auto_compact,
                compact_threshold=compact_threshold,
                syncer=syncer,
                owned_syncer=owned,
                epochs=epochs,
            )
        except BaseException as exc:
            os.close(lock_fd)
            if owned is not None:
                await owned.release()
            if isinstance(exc, OSError):
                raise StorageError(f"cannot open store {path}: {exc}") from exc
            raise

    # ---- state --------------------------------------------------------------------------
    @property
    def committed_seq(self) -> int:
        return self._committed

    @property
    def failed(self) -> BaseException | None:
        """The I/O error that failed the store, if any."""
        return self._failed

    @property
    def maintenance(self) -> Maintenance:
        """The background retention/compaction runner (counters, ``wait_until``)."""
        return self._maint

    @property
    def syncer(self) -> SyncService:
        """The sync service this store uses (the loop's shared ``Syncer`` by default)."""
        return self._ss.service

    @property
    def syncs(self) -> int:
        """fdatasyncs of segment files done for commits (tests, metrics)."""
        return self._ss.syncs

    @property
    def segments(self) -> list[Segment]:
        """The live segment list (read-only view for tests and metrics)."""
        return list(self._segs)

    def _check_writable(self) -> None:
        if self._failed is not None:
            raise StreamUnavailableError(f"store {self.path} failed: {self._failed}")
        if self._closed:
            raise StreamUnavailableError(f"store {self.path} is closed")
        if self._busy:
            raise StreamUnavailableError(f"store {self.path} is being truncated or reset")

    # ---- writes ---------------------------------------------------------------------------
    def append(self, subject: str, hdr: bytes, data: bytes, ts: int, ttl: int = 0) -> int:
        return append_records(self, [subject], [hdr] if hdr else None, [data], ts, ttl)

    def append_run(self, subjects: list[str], datas: list[bytes], ts: int) -> int:
        return append_records(self, subjects, None, datas, ts)

    def remove(self, seq: int, erase: bool = False) -> bool:
        if erase:
            blk, _ = self._ix.live_entry(seq)
            if blk is not None:
                blk.seg.erase = True
        return super().remove(seq, erase)

    def _log_removal(self, ranges: list[tuple[int, int]], erase: bool) -> None:
        for a, b in ranges:
            ob = self._ob
            if merge_op(ob.ops, a, b, self._ix.next_live):
                continue
            if ob.body + _OPS > ob.limit and (ob.nrec or ob.ops):
                ob = self._close_batch()
            ob.ops.append((a, b))
            ob.limit -= _OPS
        if self._fl.idle:
            self._fl.kick()

    def _skipped(self) -> None:
        if self._fl.idle:
            self._fl.kick()

    def _mutated(self) -> None:
        self._ix.prune()
        self._maint.poke()

    @property
    def compact_floor(self) -> int:
        """Compaction leaves segments whose last sequence is at or above this alone (positions a
        follower may still fetch; ``NO_FLOOR``: no limit). Set by replication."""
        return self._compact_floor

    @compact_floor.setter
    def compact_floor(self, floor: int) -> None:
        if floor != self._compact_floor:
            self._compact_floor = floor
            self._maint.floor_moved(floor)

    def _removed(self, blk: Block) -> None:
        # A message removed from the writer segment (a KV update replacing a recent value,
        # a per-subject limit) cannot make retention or compaction worthwhile: both skip the
        # writer, and its index file, written once it is sealed, pokes maintenance then. Not
        # waking maintenance for it saves a task switch and a pass per such removal.
        self._ix.prune()
        if blk.seg is None or blk.seg is not self._wseg:
            self._maint.poke()

    def _close_batch(self) -> OpenBatch:
        ob = self._ob
        ix = self._ix
        if ob.nrec or ob.ops or ix.last_seq != ob.base_seq:
            end = self._end
            k = end[1] + 1 if ix.last_seq == end[0] else 0
            self._end = (ix.last_seq, k)
            if self.epoch > self._epochs.latest:
                self._epochs.observe(self.epoch, end)
            self._queue.append(
                PendingBatch(
                    ob.seg,
                    -1 if self._compressed else ob.pos,
                    ob.parts,
                    ob.nrec,
                    ob.ops,
                    self.epoch,
                    ob.base_seq,
                    ix.last_seq,
                    ix.last_ts,
                    ob.first_rec,
                    ob.last_rec,
                    k=k,
                )
            )
            nxt = ob.pos + _HDR + ob.body + _OPS * len(ob.ops)
            self._ob = OpenBatch(ob.seg, nxt, ix.last_seq, self._max_body)
        return self._ob

    def _roll(self) -> OpenBatch:
        self._close_batch()
        old = self._seg
        new = Segment(self.path, self._ix.last_seq + 1)
        new.wcrc = 0  # created empty by the job that rolls (O_EXCL): every byte is ours
        self._queue.append(Roll(old, new))
        self._rolls += 1
        self._segs.append(new)
        self._seg = new
        self._ob = OpenBatch(new, 0, self._ix.last_seq, self._max_body)
        return self._ob

    def _notify(self, seq: int) -> None:
        super()._notify(seq)
        self._maint.note_commit()

    def writer_quiet(self) -> bool:
        """Nothing is pending, in flight or unsynced, and the writer's running CRC covers all
        of it: its index file can be written as a clean close would (``maintenance``)."""
        fl, seg = self._fl, self._wseg
        return (
            self._failed is None
            and not (self._closed or self._busy or fl.dead or fl.stopping or fl.unsynced)
            and fl.jobs_taken == fl.jobs_done
            and not self._has_pending()
            and seg.wcrc is not None
            and seg.wlen == seg.size
            and seg.fd is not None
        )

    def _has_pending(self) -> bool:
        ob = self._ob
        return bool(self._queue or ob.nrec or ob.ops or self._ix.last_seq != ob.base_seq)

    # ---- replication (``store.ReplicaLog``; the work is in ``filereplica.py``) ---------------
    @property
    def max_batch_bytes(self) -> int:
        return self._max_body + _HDR

    @max_batch_bytes.setter
    def max_batch_bytes(self, value: int) -> None:
        self._max_body = check_max_batch(value) - _HDR
        self._ob.limit = self._max_body - _OPS * len(self._ob.ops)

    def log_end(self) -> Pos:
        return self._end

    def durable_end(self) -> Pos:
        return self._durable

    def seal(self) -> Pos:
        if not (self._refuse or self._busy):
            self._close_batch()
            if self._fl.idle:
                self._fl.kick()
        return self._end

    def read_batches(self, after: Pos, max_bytes: int, offset: int = 0, max_raw: int = 0) -> ReplicaRead:
        return cap_raw(after, fr.read_batches(self, after, max_bytes, offset), max_raw)

    def append_batches(self, data: bytes) -> Pos:
        return fr.append_batches(self, data)

    async def truncate(self, to: Pos) -> None:
        await fr.truncate(self, to)

    async def reset(self, first_seq: int) -> None:
        await fr.reset(self, first_seq)

    def epochs(self) -> list[tuple[int, Pos]]:
        return self._epochs.view(fr.start_pos(self._segs), fr.first_pos(self))

    async def begin_epoch(self, epoch: int) -> None:
        await fr.begin_epoch(self, epoch)

    def epoch_end(self, epoch: int) -> tuple[int, Pos]:
        return self._epochs.end_of(epoch, fr.start_pos(self._segs), fr.first_pos(self), self._end)

    # ---- group commit (``pipeline.Flusher``) --------------------------------------------
    async def flush(self) -> None:
        await self._fl.flush()

    def _raise_if_failed(self) -> None:
        if self._failed is not None:
            raise StreamUnavailableError(f"store {self.path} failed: {self._failed}")

    def _fail(self, exc: BaseException) -> None:
        if self._failed is not None:
            return
        self._failed = exc
        self._refuse = True
        log.error("store %s failed, refusing further writes: %s", self.path, exc)
        self._fl.fail(StreamUnavailableError(f"store {self.path} failed: {exc}"))
        self._maint.poke()

    # ---- index files ----------------------------------------------------------------------
    def _schedule_index(self, seg: Segment) -> None:
        self._maint.schedule_index(seg)

    # ---- reads ----------------------------------------------------------------------------
    def _read(self, blk: Block, i: int) -> StoredMsg:
        seq = blk.seqs[i]
        if seq > self._committed:  # not committed: in the open batch or a job in flight
            t = (
                self._pend.get(seq)
                or self._fl.record(seq)
                or fr.pending_payload(self, seq, blk.pos[i], blk.aux[i])
            )
            if t is not None:
                return StoredMsg(seq, self._ix.subjects.names[blk.sid[i]], t[0], t[1], blk.ts[i])
        seg: Segment = blk.seg
        pos = blk.pos[i]
        aux = blk.aux[i]
        try:
            fd = seg.fd if seg.fd is not None else self._open_fd(seg)
            r = read_record(self._io, seg, fd, pos, aux, self._dctx, self._bodies, self._chunks)
        except rc.BatchError as exc:
            raise CorruptSegmentError(seg.path, pos, exc.reason) from exc
        except OSError as exc:
            raise StorageError(f"cannot read {seg.path}: {exc}") from exc
        if r.seq != seq:
            raise CorruptSegmentError(seg.path, pos, f"index expects sequence {seq}, record has {r.seq}")
        return StoredMsg(seq, r.subject, r.hdr, r.data, r.ts)

    def _bulk_reader(self) -> Callable[[Block, int], StoredMsg]:
        return bulk_reader(self)

    def _run_reader(self) -> RunReader:
        return run_reader(self)

    def iter_headers(self, start: int, last: int) -> Iterator[StoredHeaders]:
        # Committed records come from stored runs, one pread per few MiB and no per-record
        # decoding of records without headers; the uncommitted tail takes the generic path.
        hi = min(last, self._committed)
        while start <= hi:
            big = yield from stored_headers(self, start, hi)
            if big > hi:
                break
            m = self.load(big)  # one record larger than a scan read
            if m is not None and m.hdr:
                yield m.seq, m.ts, m.hdr
            start = big + 1
        yield from super().iter_headers(max(start, hi + 1), last)

    def _open_fd(self, seg: Segment) -> int:
        fd = seg.fd = self._io.open(seg.path, os.O_RDONLY)
        self._track_fd(seg)
        return fd

    def _track_fd(self, seg: Segment) -> None:
        """Keep at most ``_FD_CACHE`` sealed segments open (the writer's file always is)."""
        self._fd_lru[seg] = None
        while len(self._fd_lru) > _FD_CACHE:
            old, _ = self._fd_lru.popitem(last=False)
            if old is self._wseg or old is self._seg or old.compacting or old.fd is None:
                continue
            self._io.close(old.fd)
            old.fd = None

    def _close_fd(self, seg: Segment) -> None:
        self._fd_lru.pop(seg, None)
        if seg.fd is not None:
            with contextlib.suppress(OSError):
                self._io.close(seg.fd)
            seg.fd = None

    # ---- maintenance hooks (used by ``Maintenance``) --------------------------------------
    async def compact(self) -> None:
        """Run retention and compaction now and wait for them (also runs in the background
        when ``auto_compact``)."""
        await self.flush()
        await self._maint.indexes_written()
        await self._maint.run_now()

    def _delete_segments_job(self, bases: list[int]) -> Any:
        return lambda: delete_segments(self._io, self.path, bases)

    def _rewrite_job(self, seg: Segment, live: array[int], older: list[tuple[int, int]]) -> Any:
        return lambda: rewrite_segment(self._io, self.path, seg.base, live, older, self._compressed)

    # ---- lifecycle --------------------------------------------------------------------------
    async def close(self) -> None:
        await fileclose.close(self)

    async def destroy(self) -> None:
        await self.close()
        await asyncio.to_thread(shutil.rmtree, self.path, True)

    async def _abandon(self) -> None:
        """Test hook: drop everything as a crash would (no flush, no index files)."""
        await fileclose.abandon(self)
