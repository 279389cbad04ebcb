"""The flusher of a ``FileStore``: group commits, with up to ``MAX_INFLIGHT`` in flight.

A job (``commit.Job``: everything pending when the flusher takes it) is written on the loop
(``commit.write_job``) and its fdatasync is requested from the ``SyncService`` at once. While
that sync runs, the next job can already be taken, written and its sync requested, so the
helper process starts the next fdatasync the moment the previous one returns (it coalesces
same-file requests received before a sync starts, and queues the ones that arrive during a
sync for the next round). Without that, the disk idles between consecutive fsyncs for the
reply → loop wake → commit → take → write → request → helper wake round trip.

A sync's completion is handled in a done callback (``Flusher._synced``): it commits every
finished job at the head of the pipeline, in job order, and wakes the flusher task, which takes
the next job when a slot is free. The task itself only takes, seals and writes jobs.

Invariants (each also stated where it is enforced):

- Order: jobs are committed strictly in job order (the pipeline is a FIFO and only its head
  is ever committed); ``committed_seq`` and the commit listeners only advance in order; job
  k+1 is never reported durable before job k, even when k+1's sync returns first (the thread
  fallback of the syncer can finish them out of order).
- Fail closed: a failed write or sync fails the store; no job behind it in the pipeline is
  committed or acknowledged (their syncs are cancelled, their records stay readable).
- Rolls: a job holding a ``Roll`` is never pipelined. It is taken only when nothing is in
  flight and runs to its commit (``commit.run_job``: old segment synced before the new file
  exists, directory fsynced) before the next job is taken.
- Sizes: ``Flusher.wsize`` is what has been *written* to the writer segment (jobs in flight
  included); the next job starts there. ``Segment.size`` is the committed size, set when a job
  commits.
- Reads: a record is served from memory until its job is committed (the open batch's
  ``FileStore._pend``, then its ``Flight.recs``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from jetlog.errors import StorageError
from jetlog.log.commit import (
    Job,
    JobResult,
    OpenBatch,
    PendingBatch,
    Roll,
    StoreSync,
    run_job,
    seal_compressed,
    seal_pending,
    start_sync,
    write_job,
)
from jetlog.log.replica import shift_pos

if TYPE_CHECKING:
    import zstandard

    from jetlog.log.index import Index
    from jetlog.log.segment import Segment, SegmentIO
    from jetlog.log.store import Pos

log = logging.getLogger("jetlog.log.pipeline")

INLINE_SYNC_MAX_RECORDS = 4
INLINE_SYNC_MAX_BYTES = 64 * 1024
"""A job of at most ``INLINE_SYNC_MAX_RECORDS`` records and this many bytes may be synced on the
loop (``Syncer.try_inline_fdatasync``) when it is the only one in flight: a synchronous
publisher is waiting for it and nothing else is, and it skips the helper's round trip."""

INLINE_BULK_MAX_BYTES = 1024 * 1024
"""A larger job (load: pipelined publishes) of at most this many bytes is synced on the loop
too while the disk is fast (``Syncer.try_inline_fdatasync(bulk=True)``: off for a while after
a bulk sync slower than ``syncer.INLINE_BULK_SLOW``). Measured on the 2-core host, 128 B
messages, window 256: the helper's round trip per job (three thread wake-ups in two processes)
cost more than the sync it overlapped, 30k vs 43k msgs/s and a quarter less server CPU per
message inline (docs/internals.md, twelfth pass). Above this size a job's sync goes to the
helper, overlapped with the next job."""

MAX_INFLIGHT = 2
"""Jobs written but not yet committed, at most (1: each job's sync completes before the next
job is written)."""

PIPELINE_MIN_BYTES = 64 * 1024
"""The next job is written while one is still syncing only behind a job of at least this many
bytes, or when at least this many are pending (``Flusher.pipeline_min``). Overlapping a sync
with the next job's write pays when the writes are large (bulk loads); behind a small job it
only cuts what is pending into more, smaller jobs, each with its own write, sync request and
commit (many streams on one node: ~2 messages per job). Figures: docs/internals.md,
seventeenth pass."""

Records = dict[int, tuple[bytes, bytes]]  # seq → (hdr, data)


class FlusherHost(Protocol):
    """What the flusher uses of its ``FileStore`` (which satisfies this structurally)."""

    path: str
    _io: SegmentIO
    _ix: Index
    _ss: StoreSync
    _exec: ThreadPoolExecutor
    _compressed: bool
    _cctx: zstandard.ZstdCompressor | None
    _sync_interval: int
    _segment_bytes: int
    ship_first: bool
    _failed: BaseException | None
    _wseg: Segment
    _queue: list[PendingBatch | Roll]
    _ob: OpenBatch
    _rolls: int
    _pend: Records
    _committed: int
    _durable: Pos

    def _raise_if_failed(self) -> None: ...
    def _has_pending(self) -> bool: ...
    def _fail(self, exc: BaseException) -> None: ...
    def _close_batch(self) -> OpenBatch: ...
    def _schedule_index(self, seg: Segment) -> None: ...
    def _track_fd(self, seg: Segment) -> None: ...
    def _notify(self, seq: int) -> None: ...


class Wake:
    """``asyncio.Event``'s ``set`` / ``clear`` / ``wait`` for a single waiter (a flusher task).

    ``Event.wait`` checks the running loop and keeps a deque of waiters on every call; with 200
    streams committing small jobs that was ~5 % of the loop. A ``set`` between ``clear`` and
    ``wait`` is kept (the flag), as with ``Event``: a kick is never lost."""

    __slots__ = ("_fut", "_loop", "_set")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._set = False
        self._fut: asyncio.Future[None] | None = None

    def set(self) -> None:
        if not self._set:
            self._set = True
            fut = self._fut
            if fut is not None and not fut.done():
                fut.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        if self._set:
            return
        fut = self._fut = self._loop.create_future()
        try:
            await fut
        finally:
            self._fut = None


class Flight:
    """A taken job until it is committed. ``res``: its write result (None until written);
    ``fut``: its sync (None: nothing to wait for, e.g. interval mode between syncs)."""

    __slots__ = ("big", "fut", "job", "recs", "res")

    def __init__(self, job: Job, recs: Records) -> None:
        self.job = job
        self.recs = recs
        self.res: JobResult | None = None
        self.fut: asyncio.Future[None] | None = None
        self.big = False  # wrote at least ``Flusher.pipeline_min`` bytes: the next job may follow

    def ready(self) -> bool:
        return self.res is not None and (self.fut is None or self.fut.done())


class Flusher:
    """Takes, writes and commits the jobs of one ``FileStore`` (its flusher task and pipeline).
    All of it runs on the loop."""

    def __init__(self, store: FlusherHost, always: bool) -> None:
        self._st = store
        self._always = always
        self.flights: deque[Flight] = deque()  # taken, not committed, in job order
        self.wsize = store._wseg.size  # bytes written to the writer segment (≥ its committed size)
        self.jobs_taken = 0
        self.jobs_done = 0
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []  # (job number, flush future)
        self.idle = False  # the task waits for the next mutation: mutations must ``kick``
        self.stopping = False
        self.dead = False  # failed or stopped: nothing is committed any more
        self.unsynced = False  # interval mode: written since the last sync
        self.last_sync = time.monotonic_ns()
        self.pipeline_min = PIPELINE_MIN_BYTES  # tests set 0 to pipeline behind any job
        # The real Syncer can sync a job on the loop (a lone small one, or a bulk one while the
        # disk is fast); test services that gate or fail syncs have no such method and always
        # take the asynchronous path.
        self._inline: Callable[[int, bool], bool] | None = getattr(
            store._ss.service, "try_inline_fdatasync", None
        )
        loop = asyncio.get_running_loop()
        self._wake = Wake(loop)
        self.task = loop.create_task(self._run(), name=f"jetlog-flush:{store.path}")

    # ---- store side -----------------------------------------------------------------------
    def kick(self) -> None:
        self.idle = False
        self._wake.set()

    def record(self, seq: int) -> tuple[bytes, bytes] | None:
        """(hdr, data) of a record in a job not committed yet (None if in none)."""
        for fl in self.flights:
            t = fl.recs.get(seq)
            if t is not None:
                return t
        return None

    async def flush(self) -> None:
        st = self._st
        st._raise_if_failed()
        pending = st._has_pending()
        if not pending and self.jobs_taken == self.jobs_done:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Everything pending now goes into the next job taken (it takes all of it).
        self.waiters.append((self.jobs_taken + (1 if pending else 0), fut))
        self.kick()
        await fut

    def fail(self, err: BaseException) -> None:
        """The store failed: commit nothing more, fail every flush waiter, stop the task."""
        self._drop()
        for _, fut in self.waiters:
            if not fut.done():
                fut.set_exception(err)
        self.waiters = []
        self.kick()

    def _drop(self) -> None:
        # FAIL CLOSED: once dead, ``_synced`` commits nothing, so no job still in the pipeline
        # is acknowledged even if its sync succeeds. The flights stay for reads.
        self.dead = True
        for fl in self.flights:
            fut = fl.fut
            if fut is None:
                continue
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled():
                fut.exception()  # retrieved: no "never retrieved" warning

    # ---- the task -------------------------------------------------------------------------
    async def _run(self) -> None:
        st = self._st
        loop = asyncio.get_running_loop()
        flights = self.flights
        try:
            while st._failed is None:
                pending = st._has_pending()
                if pending and len(flights) < MAX_INFLIGHT and (not flights or self._may_follow()):
                    await self._start_job()
                    continue
                if flights:
                    # Wait for ``_synced`` (a sync finished: it commits and kicks) or, with a
                    # slot free behind a big job and nothing pending, for the next mutation.
                    self.idle = not pending and len(flights) < MAX_INFLIGHT and flights[-1].big
                    self._wake.clear()
                    await self._wake.wait()
                    self.idle = False
                    continue
                if self.stopping:
                    return
                timer = None
                if self.unsynced:
                    delay = max(0.0, (self.last_sync + st._sync_interval - time.monotonic_ns()) / 1e9)
                    timer = loop.call_later(delay, self.kick)
                self.idle = True
                self._wake.clear()
                await self._wake.wait()
                self.idle = False
                if timer is not None:
                    timer.cancel()
                due = self.unsynced and time.monotonic_ns() - self.last_sync >= st._sync_interval
                if due and not st._has_pending() and not flights and st._failed is None:
                    await st._ss.sync_writer()  # interval mode's periodic sync
                    self.last_sync = time.monotonic_ns()
                    self.unsynced = False
        except asyncio.CancelledError:
            raise
        except (OSError, StorageError) as exc:
            st._fail(exc)
        except Exception as exc:
            log.exception("flusher of %s crashed", st.path)
            st._fail(exc)
        finally:
            self._drop()

    def _may_follow(self) -> bool:
        """Whether the next job may be written while the ones in flight are not committed yet.
        ROLLS: a job with a roll only when nothing else is in flight. PIPELINE: behind a big
        job, or with a batch already closed (full, or sealed for a replication fetch) or an
        open one of ``pipeline_min`` bytes; otherwise the next job waits for the sync and then
        takes everything pending. Asked when the task looks again (a job written, a sync
        done): a growing open batch does not wake it."""
        st = self._st
        if st._rolls:
            return False
        return self.flights[-1].big or bool(st._queue) or st._ob.body >= self.pipeline_min

    async def _start_job(self) -> None:
        st = self._st
        fl = self._take()
        self.flights.append(fl)  # READS: its records are served from ``fl.recs`` until committed
        job = fl.job
        if st._compressed:
            job = fl.job = job._replace(actions=await seal_compressed(job.actions, st._cctx, st._exec))
            if st._failed is not None:
                return  # an earlier job's sync failed meanwhile: write nothing more
        if job.rolls:
            # ROLLS: nothing else is in flight (see ``_run``); ``run_job`` syncs the old segment
            # before creating the new one and fsyncs the directory, then this job commits before
            # the next is taken.
            assert len(self.flights) == 1
            res = await run_job(st._io, st._ss.service, st._ss.dir, job)
            fl.res = res
            self.wsize = res.sizes[-1][1]
            self._commit_ready()
            return
        fl.res = res = write_job(st._io, job)
        # SIZES: the next job is written after this one, whether or not this one is committed.
        self.wsize = res.sizes[-1][1]
        nbytes = self.wsize - job.size
        fl.big = nbytes >= self.pipeline_min
        if job.sync:
            # Requested only now that the whole job is written: the sync covers all of it.
            small = len(fl.recs) <= INLINE_SYNC_MAX_RECORDS and nbytes <= INLINE_SYNC_MAX_BYTES
            bulk = not small and nbytes <= INLINE_BULK_MAX_BYTES
            inline = self._inline if len(self.flights) == 1 and (small or bulk) else None
            if inline is not None and st.ship_first:
                # An inline sync stalls the loop: a replicated stream's leader first lets what
                # is already scheduled run, its followers' fetch replies (scheduled by the same
                # append that kicked this task): shipped before the fsync, the followers' fsyncs
                # overlap the leader's instead of following it (R3 sync publish p50 -100 µs).
                # Not for other stores: the loop pass costs a lone publisher ~20 µs. No other
                # task adds flights; a failure meanwhile is checked below.
                await asyncio.sleep(0)
                if st._failed is not None:
                    return
            if inline is not None and inline(job.handle, bulk):  # raises OSError like a failed sync
                fut = fl.fut = asyncio.get_running_loop().create_future()
                fut.set_result(None)
                self._synced(fut)  # durable now: commit without a loop round
                return
            fut = fl.fut = start_sync(st._ss.service, job.handle)
            fut.add_done_callback(self._synced)
        elif len(self.flights) == 1:
            self._commit_ready()  # interval mode, no sync due: committed once written
        # else: interval mode, committed right after the job ahead of it (``_commit_ready``)

    def _take(self) -> Flight:
        st = self._st
        st._close_batch()
        actions = st._queue
        st._queue = []
        rolls = st._rolls > 0
        st._rolls = 0
        if not st._compressed:
            actions = [seal_pending(a, None) if isinstance(a, PendingBatch) else a for a in actions]
        recs = st._pend
        st._pend = {}
        self.jobs_taken += 1
        sync = self._always or time.monotonic_ns() - self.last_sync >= st._sync_interval
        wseg = st._wseg
        fd = wseg.fd
        assert fd is not None
        # SIZES: starts at the written size, which counts jobs still in flight.
        job = Job(
            self.jobs_taken,
            actions,
            st._ix.last_seq,
            wseg,
            fd,
            st._ss.writer,
            self.wsize,
            sync,
            rolls,
            st._segment_bytes,  # preallocation cap (``commit.reserve``)
        )
        return Flight(job, recs)

    # ---- completion -----------------------------------------------------------------------
    def _synced(self, fut: asyncio.Future[None]) -> None:
        """Done callback of a flight's sync (any flight's: only the head is committed)."""
        if not fut.cancelled():
            fut.exception()  # retrieved; an error is acted on when its flight is the head
        if self.dead:
            return  # FAIL CLOSED: nothing is committed after a failure
        try:
            self._commit_ready()
        except Exception as exc:
            log.exception("commit of %s failed", self._st.path)
            self._st._fail(exc)
        self.kick()  # a slot may be free (or the store failed: the task stops)

    def _commit_ready(self) -> None:
        """Commit the finished jobs at the head of the pipeline, in job order."""
        flights = self.flights
        # ORDER: only the head is ever committed; a later job whose sync finished first waits
        # here until every job before it is committed.
        while flights and not self.dead and flights[0].ready():
            fl = flights[0]
            fut = fl.fut
            if fut is not None:
                err = StorageError("internal: commit sync cancelled") if fut.cancelled() else fut.exception()
                if err is not None:
                    # FAIL CLOSED: this job and every later one stay uncommitted (``_st._fail``
                    # marks the pipeline dead and cancels their syncs).
                    self._st._fail(err)
                    return
            flights.popleft()
            assert fl.res is not None
            self._commit(fl.job, fl.res)

    def _commit(self, job: Job, res: JobResult) -> None:
        st = self._st
        # ORDER: jobs commit one after another, by number.
        assert job.number == self.jobs_done + 1, (job.number, self.jobs_done)
        it = iter(res.batch_pos)
        opened = {seg: (fd, h) for seg, fd, h in res.opened}
        st._ss.syncs += res.syncs
        for act in job.actions:
            if isinstance(act, Roll):
                act.old.sealed = True
                st._schedule_index(act.old)
                st._track_fd(act.old)
                act.new.fd, handle = opened[act.new]
                st._ss.rolled(handle)
                st._wseg = act.new
                continue
            bpos = next(it)
            seg = act.seg
            seg.batches.append(bpos)
            seg.blast.append(act.last_seq)  # writers and followers never queue a null batch
            seg.table.add(bpos, len(act.parts[0]) + len(act.parts[1]), act.last_seq)
            st._durable = (act.last_seq, act.k)
            for a, b in act.ops:
                seg.ops.append(a)
                seg.ops.append(b)
            seg.last_seq = act.last_seq
            seg.last_ts = act.last_ts
            if act.pos < 0 and act.nrec:
                if act.rel:
                    shift_pos(st._ix, act.first_rec, act.last_rec, bpos)
                else:
                    st._ix.set_pos(act.first_rec, act.last_rec, bpos)
        for seg, size in res.sizes:
            seg.size = size  # SIZES: the committed size (``wsize`` may be ahead)
        if job.sync:
            self.last_sync = time.monotonic_ns()
            self.unsynced = False
        else:
            self.unsynced = True
        self.jobs_done = job.number
        if self.waiters:
            keep = []
            for target, fut in self.waiters:
                if target <= job.number:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    keep.append((target, fut))
            self.waiters = keep
        # ORDER: ``committed_seq`` and the listeners only move forward, one job at a time.
        if job.last_seq > st._committed:
            st._committed = job.last_seq
            st._notify(job.last_seq)
