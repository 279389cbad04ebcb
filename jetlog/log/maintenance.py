"""Background retention and compaction of a ``FileStore`` (loop side; the file work runs in the
maintenance thread, see ``compaction.py`` for the rules and the op invariant).

Retention: delete the longest prefix of sealed segments that hold no live message (never the
last segment). Compaction: rewrite the sealed segment with the highest dead fraction above the
threshold (or holding an erased message), one at a time, never one whose last sequence is at
or above the store's ``compact_floor`` (replication: positions a follower may still fetch must
not change). Both first flush the store so every removal they rely on is durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from jetlog.errors import StorageError
from jetlog.log.idxfile import checked_content_crc, encode_idx
from jetlog.log.recovery import write_idx_file
from jetlog.log.segblocks import (
    drop_segments,
    make_blocks,
    replace_blocks,
    segment_columns,
    segment_live_seqs,
)
from jetlog.log.segment import seg_table
from jetlog.log.store import NO_FLOOR

if TYPE_CHECKING:
    from jetlog.log.compaction import Rewritten
    from jetlog.log.index import Index
    from jetlog.log.segment import Segment, SegmentIO

log = logging.getLogger("jetlog.log.maintenance")

WRITER_INDEX_QUIET = 2.0
"""Seconds without a commit after which the writer segment's index file is written."""
WRITER_INDEX_MIN_GROWTH = 1 << 20
"""...once the writer grew by this many bytes, and by a quarter of its size, since its last."""


class MaintenanceHost(Protocol):
    """What maintenance (and ``idx_snapshot``) uses of its ``FileStore`` (which satisfies this
    structurally)."""

    path: str
    epoch: int
    compact_floor: int
    _io: SegmentIO
    _ix: Index
    _closed: bool
    _segs: list[Segment]
    _wseg: Segment
    _fd_lru: OrderedDict[Segment, None]

    @property
    def failed(self) -> BaseException | None: ...
    def writer_quiet(self) -> bool: ...

    async def flush(self) -> None: ...
    def _close_fd(self, seg: Segment) -> None: ...
    def _delete_segments_job(self, bases: list[int]) -> Any: ...
    def _rewrite_job(self, seg: Segment, live: array[int], older: list[tuple[int, int]]) -> Any: ...


class Maintenance:
    """Owns the maintenance task and thread of one file store."""

    def __init__(self, store: MaintenanceHost, auto: bool, threshold: float) -> None:
        self._store = store
        self._threshold = threshold
        self._event = asyncio.Event()
        self._lock = asyncio.Lock()
        self._exec = ThreadPoolExecutor(1, thread_name_prefix="jetlog-maint")
        self._task: asyncio.Task[None] | None = None
        if auto:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"jetlog-maint:{store.path}"
            )
        self.passes = 0
        # The last sequence of the segment where the last pass's pick stopped at the store's
        # ``compact_floor`` (NO_FLOOR: it did not; -1: no pass yet): a floor rising past it is
        # worth a pass.
        self.floor_blocked = -1
        self.rewritten = 0
        self.deleted = 0
        self._cond = asyncio.Condition()
        self._idx_tasks: set[asyncio.Task[None]] = set()
        self._indexed = asyncio.Event()  # set while no index file waits to be written
        self._indexed.set()
        self._last_commit = 0.0
        self._quiet: asyncio.TimerHandle | None = None  # armed by a commit, not while idle
        self._stopped = False

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The maintenance thread (index files, deletions, rewrites)."""
        return self._exec

    def poke(self) -> None:
        """Something changed that may make retention or compaction worthwhile."""
        if self._task is not None:
            self._event.set()

    def floor_moved(self, floor: int) -> None:
        """The store's ``compact_floor`` is now ``floor``. Nothing else wakes maintenance for
        this (a follower's plain appends do not): a pass when the floor passes the segment the
        last pass stopped at (once per segment, not on every fetch that moves the floor a few
        sequences), and at the first floor set (no pass yet)."""
        if floor > self.floor_blocked:
            self.poke()

    async def _run(self) -> None:
        while True:
            await self._event.wait()
            self._event.clear()
            try:
                async with self._lock:
                    await self._pass()
            except asyncio.CancelledError:
                raise
            except StorageError as exc:
                log.warning("maintenance of %s stopped: %s", self._store.path, exc)
            except Exception:
                log.exception("maintenance of %s failed", self._store.path)
            async with self._cond:
                self._cond.notify_all()

    async def wait_until(self, predicate: Callable[[Maintenance], bool]) -> None:
        """Wait until ``predicate(self)`` holds after some background pass (tests, tools)."""
        async with self._cond:
            await self._cond.wait_for(lambda: predicate(self))

    async def run_now(self) -> None:
        async with self._lock:
            await self._pass()

    async def stop(self) -> None:
        self._stopped = True
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        # A rewrite already running in the thread finishes (its result is dropped; the files
        # it leaves are consistent on their own).
        await asyncio.to_thread(self._exec.shutdown, True)

    async def _pass(self) -> None:
        st = self._store
        if st.failed is not None or st._closed:
            return
        self.passes += 1
        await self._retention()
        for _ in range(len(st._segs)):
            seg = self._pick()
            if seg is None:
                break
            await self._compact(seg)

    async def _retention(self) -> None:
        st = self._store
        victims: list[Segment] = []
        for seg in st._segs[:-1]:
            if seg.nlive or not seg.sealed or seg.compacting or seg is st._wseg:
                break
            victims.append(seg)
        if not victims:
            return
        await st.flush()  # the removals that emptied them are durable before the files go
        await asyncio.get_running_loop().run_in_executor(
            self._exec, st._delete_segments_job([s.base for s in victims])
        )
        gone = set(victims)
        st._segs = [s for s in st._segs if s not in gone]
        for s in victims:
            st._close_fd(s)
        drop_segments(st._ix, gone)
        self.deleted += len(victims)
        log.debug("retention deleted %d segments of %s", len(victims), st.path)

    def _pick(self) -> Segment | None:
        st = self._store
        best: Segment | None = None
        best_f = self._threshold
        floor = st.compact_floor
        self.floor_blocked = NO_FLOOR
        for seg in st._segs[:-1]:
            if not (seg.sealed and seg.idx_ok) or seg.compacting or seg.broken or seg is st._wseg:
                continue
            if seg.last_seq >= floor:
                self.floor_blocked = seg.last_seq
                break  # and so is every later segment
            if not seg.nrecords:
                continue
            dead = seg.nrecords - seg.nlive
            f = dead / seg.nrecords
            if seg.erase and dead:
                f = 2.0
            if f > best_f:
                best, best_f = seg, f
        return best

    async def _compact(self, seg: Segment) -> None:
        st = self._store
        seg.compacting = True
        try:
            live = segment_live_seqs(st._ix, seg)
            older = [
                (t.min_seq, t.max_seq)
                for t in st._segs
                if t.base < seg.base and t.nrecords and t.nrecords > t.nlive
            ]
            seg.erase = False
            await st.flush()  # every removal reflected in ``live`` is durable before the rewrite
            res = await asyncio.get_running_loop().run_in_executor(
                self._exec, st._rewrite_job(seg, live, older)
            )
        except (OSError, StorageError) as exc:
            if st.failed is None:
                log.error("cannot compact %s, leaving it as is: %s", seg.path, exc)
                seg.broken = True
            return
        finally:
            seg.compacting = False
        if seg not in st._segs or st._closed:
            st._io.close(res.fd)
            return
        self._swap(seg, res)
        self.rewritten += 1

    def _swap(self, seg: Segment, res: Rewritten) -> None:
        """Point the index at the rewritten file (one loop step: reads before it used the old
        file through the old fd, reads after it use the new one)."""
        st = self._store
        ix = st._ix
        d = res.data
        gsid = {k: ix.subjects.intern(n) for k, n in d.subjects.items()}
        sid = array("I", [gsid[x] for x in d.lsid])
        cur = segment_live_seqs(ix, seg)
        if len(cur) == len(d.seqs):
            live = bytearray(b"\x01") * len(d.seqs)
        else:
            alive = set(cur)
            live = bytearray(1 if s in alive else 0 for s in d.seqs)
        blocks = make_blocks(ix, seg, d.seqs, d.ts, sid, d.size, d.pos, d.aux, live, False)
        replace_blocks(ix, seg, blocks)
        st._close_fd(seg)
        seg.fd = res.fd
        st._fd_lru[seg] = None
        seg.size = res.size
        seg.wcrc = None  # a new file: the running CRC described the old one
        seg.nrecords = len(d.seqs)
        seg.nlive = sum(b.nlive for b in blocks)
        seg.min_seq = d.seqs[0] if d.seqs else 0
        seg.max_seq = d.seqs[-1] if d.seqs else 0
        seg.table = seg_table(d)
        seg.rewritten = True
        seg.gen += 1

    # ---- the writer segment's index file, once the store is quiet -----------------------------
    # A writer segment has no index file until it rolls or the store closes, and recovery after
    # a crash walks each of its records (~1.2 µs a record: 100,000 a second). Once the store has
    # been still for ``WRITER_INDEX_QUIET`` seconds with everything committed and synced, the
    # writer's index is written as a clean close would write it; recovery then scans only what
    # came after it. Only a commit arms the timer, so an idle store has none; the growth rule
    # bounds the rewrites of a stream that trickles (each writes the whole writer's index).
    def note_commit(self) -> None:
        """A job committed (``FileStore._notify``)."""
        self._last_commit = time.monotonic()
        if self._quiet is None and not self._stopped:
            self._quiet = asyncio.get_running_loop().call_later(WRITER_INDEX_QUIET, self._quiet_check)

    def _quiet_check(self) -> None:
        self._quiet = None
        if self._stopped:
            return
        still = time.monotonic() - self._last_commit
        if still < WRITER_INDEX_QUIET:  # committed again since the timer was armed
            self._quiet = asyncio.get_running_loop().call_later(WRITER_INDEX_QUIET - still, self._quiet_check)
            return
        st = self._store
        seg = st._wseg
        done = seg.idx_file[0] if seg.idx_file is not None else 0
        if seg.size - done >= max(WRITER_INDEX_MIN_GROWTH, seg.size // 4) and st.writer_quiet():
            self._track(self._write_writer_index(seg))

    async def _write_writer_index(self, seg: Segment) -> None:
        st = self._store
        # Checked again on this loop pass: the snapshot must be of a writer whose every byte is
        # written, committed and synced (a clean close's state; ``FileStore.writer_quiet``).
        if self._stopped or seg is not st._wseg or not st.writer_quiet():
            return
        covered, crc, epoch = seg.size, seg.wcrc, st.epoch
        build = idx_snapshot(st, seg)

        def work() -> None:
            write_idx_file(seg, st._io, build(), unless_same=True)

        try:
            await asyncio.get_running_loop().run_in_executor(self._exec, work)
        except OSError as exc:
            log.warning("could not write index of %s (a crash would scan it): %s", seg.path, exc)
            return
        assert crc is not None  # ``writer_quiet`` requires the running CRC
        # What a close compares with (``fileclose._idx_current``): unchanged, no rewrite.
        seg.idx_file = (covered, crc, epoch)

    def _track(self, coro: Any) -> None:
        """Run an index-file write as a task that ``indexes_written`` (close, truncation) waits
        for: no index file is written under a truncation's or a close's feet."""
        self._indexed.clear()
        task = asyncio.get_running_loop().create_task(coro)
        self._idx_tasks.add(task)
        task.add_done_callback(self._index_done)

    # ---- index files of sealed segments ------------------------------------------------------
    def schedule_index(self, seg: Segment) -> None:
        """Write a sealed segment's index file in the maintenance thread (off the commit path)."""
        self._track(self._write_index(seg))

    def _index_done(self, task: asyncio.Task[None]) -> None:
        self._idx_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("index writer of %s failed: %r", self._store.path, task.exception())
        if not self._idx_tasks:
            self._indexed.set()

    async def indexes_written(self) -> None:
        """Wait until every scheduled index file is written (or failed)."""
        if self._idx_tasks:
            await asyncio.gather(*self._idx_tasks, return_exceptions=True)
        await self._indexed.wait()

    async def cancel_indexes(self) -> None:
        for t in list(self._idx_tasks):
            t.cancel()
        await asyncio.gather(*self._idx_tasks, return_exceptions=True)

    async def _write_index(self, seg: Segment) -> None:
        st = self._store
        if seg not in st._segs:
            return  # deleted by retention meanwhile
        build = idx_snapshot(st, seg)

        def work() -> None:
            write_idx_file(seg, st._io, build())

        try:
            await asyncio.get_running_loop().run_in_executor(self._exec, work)
        except OSError as exc:
            log.warning("could not write index of %s (it will be rebuilt on open): %s", seg.path, exc)
            return
        seg.idx_ok = True
        seg.ops = array("Q")
        seg.batches = array("Q")
        seg.blast = array("Q")
        seg.ttl = {}
        for blk in st._ix.blocks:
            if blk.seg is seg:
                st._ix.release(blk)
        st._ix.prune()
        self.poke()


def idx_snapshot(store: MaintenanceHost, seg: Segment) -> Callable[[], bytes]:
    """Copy (on the loop) what ``seg``'s index file lists; the returned function encodes it in
    a thread. Subject ids are written as the file's subject keys (no per-record work)."""
    seqs, ts, sid, size, pos, aux = segment_columns(store._ix, seg)
    names = store._ix.subjects.names
    ttl = dict(seg.ttl)
    ops = array("Q", seg.ops)
    batches = array("Q", seg.batches)
    blast = array("Q", seg.blast)
    covered, last_seq, last_ts, epoch, base = seg.size, seg.last_seq, seg.last_ts, store.epoch, seg.base
    rewritten = seg.rewritten
    io, path = store._io, seg.path
    # The running CRC of the bytes as written, when they are all of the segment: no read-back.
    written = seg.wcrc if seg.wcrc is not None and seg.wlen == covered else None

    def build() -> bytes:
        subjects = {s: names[s] for s in set(sid)}
        crc = written if written is not None else checked_content_crc(io, path, covered, batches, blast)
        return encode_idx(
            base,
            covered,
            seqs,
            ts,
            pos,
            aux,
            size,
            sid,
            subjects,
            ttl,
            ops,
            batches,
            blast,
            last_seq,
            last_ts,
            epoch,
            rewritten,
            content_crc=crc,
        )

    return build
