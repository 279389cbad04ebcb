"""fsync off the event loop without a second thread of this process: a helper *process*.

Why: a group commit must wait for ``fdatasync``. Done in a worker thread (``run_in_executor``),
the thread needs this process's GIL to report completion, and a busy event loop (the normal
state under publish load) keeps it away: on a 2-vCPU VM an fsync that takes 0.3 ms took
hundreds of milliseconds to seconds to be reported. A helper process has its own GIL; the loop
only does non-blocking socket I/O (``loop.add_reader``) to talk to it.

``Syncer`` (one per event loop, shared by every ``FileStore`` on it, refcounted through
``acquire_syncer``/``Syncer.release``) starts ``syncworker.py`` with one end of a socketpair,
passes it file descriptors once (``SCM_RIGHTS``) and then asks for ``fdatasync(handle)`` /
``fsync(handle)`` (directories) by handle. See ``syncworker`` for the wire protocol.

Inline syncs: a lone small commit (nothing else in flight, the job within
``pipeline.INLINE_SYNC_MAX_RECORDS`` and ``INLINE_SYNC_MAX_BYTES``) is synced on the loop itself (``try_inline_fdatasync``):
there is nothing to overlap it with, and the round trip to the helper and back (two process
wake-ups) cost about 190 µs of a 770 µs synchronous publish on the 2-core test machine. A slow
one (``INLINE_SLOW``) sends every sync to the helper for a while (``INLINE_BACKOFF``, doubling
while they stay slow), so a stalling disk blocks the loop once in a while, not at every commit.
A larger job (pipelined publishes, up to ``pipeline.INLINE_BULK_MAX_BYTES``) is synced inline
too while such syncs stay under ``INLINE_BULK_SLOW``: on the 2-core host the helper's round
trip per job cost more CPU than overlapping the sync with the next job won back.

File descriptor lifetime (the dangerous part):
- Files are passed as fds, never as paths: compaction renames files over others, and a path
  opened later could name a different inode than the one the store writes.
- ``register`` duplicates the caller's fd and keeps the duplicate until ``forget`` *and* every
  sync of that handle has finished. The caller may close its own fd right after ``forget``;
  fd-number reuse by the caller can never redirect a sync, because requests name handles
  (never reused) and the helper and this class hold their own references to the open file.
  The duplicate is also what re-registers the file with a restarted helper and what the thread
  fallback syncs.

Helper failure:
- Death is seen as EOF/error on the socket or through a pidfd. Requests without a reply stay
  pending (they are *not* reported as successful, and not as failed), the helper is restarted
  with backoff, every live handle is re-registered and the pending requests are sent again.
  Re-issuing is safe: a sync only makes durable what is already written, and nothing reported
  an I/O error. Residual risk: if the helper's fdatasync *failed* and the helper died before
  the reply left, the error was consumed by the dead process (the kernel reports a writeback
  error once per open file) and the re-issued sync may succeed. That needs a SIGKILL within
  microseconds of an I/O error.
- A sync that the helper answers with an errno is a real I/O error: ``fdatasync`` raises
  ``OSError`` and the store fails closed (no retry: after a failed fsync the page cache state is
  unknown).
- After ``MAX_RESTARTS`` consecutive failures (a helper that cannot start, or dies before its
  hello), syncs fall back to a thread executor (logged), and a new helper is tried again every
  ``FALLBACK_RETRY`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from jetlog.log import syncworker as wire
from jetlog.log.helperproc import HelperProcess
from jetlog.log.syncledger import LEDGER
from jetlog.log.syncpolicy import (
    INLINE_BULK_SLOW,
    INLINE_SLOW,
    SYNCFS_BACKOFF,
    SYNCFS_MIN,
    SYNCFS_SLOW,
    SlowGuard,
    SyncLatency,
    shared_groups,
    syncfs_reports_errors,
)
from jetlog.log.syncseam import FileHandle, SyncRequest, SyncService, ThreadSync, sync_fd

log = logging.getLogger("jetlog.log.syncer")

MAX_RESTARTS = 3
BACKOFF = (0.02, 0.2, 1.0)  # seconds before restart attempt 1, 2, 3
FALLBACK_RETRY = 60.0
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "syncworker.py")

__all__ = ["SyncService", "Syncer", "ThreadSync", "acquire_syncer", "helper_command"]


def helper_command(fd: int) -> list[str]:
    """The helper's command line (tests replace this to make the helper unstartable).

    ``-I -S``: no site, no user paths, no ``PYTHONPATH`` — the worker uses the stdlib only and
    starts in a few tens of milliseconds."""
    return [sys.executable, "-I", "-S", _WORKER, str(fd)]


_HELPER, _RESTARTING, _THREAD, _CLOSED = "helper", "restarting", "thread", "closed"


class Syncer:
    """The fsync service of one event loop (see the module docstring). Get it with
    ``acquire_syncer()``; give it back with ``await syncer.release()``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._refs = 0
        self._handles: dict[int, FileHandle] = {}
        self._handle_ids = itertools.count(1)
        self._rids = itertools.count(1)  # 0 is the hello
        self._pending: dict[int, SyncRequest] = {}  # for a helper (sent, or to send once one is up)
        self._threaded = 0  # requests running in the fallback executor
        self._helper: HelperProcess | None = None
        self._state = _RESTARTING
        self._fails = 0  # consecutive helper failures since the last hello
        self._restart_task: asyncio.Task[None] | None = None
        self._reapers: set[asyncio.Task[None]] = set()
        self._exec: ThreadPoolExecutor | None = None
        self._retry_at = math.inf
        self._inject = (0, 0)  # (errno, count) for the thread fallback / the next helper
        self.stats = {
            "syncs": 0,
            "errors": 0,
            "restarts": 0,
            "reissued": 0,
            "fallbacks": 0,
            "threaded": 0,
            "inline": 0,
            "inline_bulk": 0,
            "syncfs": 0,  # shared syncs sent (one syncfs each)
            "shared": 0,  # requests answered by one
        }
        # Any sync on the loop, judged on its own (``off_until`` is inf once a fault was
        # injected); bulk ones also by their average.
        self.inline = SlowGuard("fdatasyncs on the loop", INLINE_SLOW, alpha=1.0)
        self.bulk = SlowGuard("bulk fdatasyncs on the loop", INLINE_BULK_SLOW)
        self.shared = SlowGuard("shared syncs (syncfs)", SYNCFS_SLOW, backoff=SYNCFS_BACKOFF)
        self.use_syncfs = syncfs_reports_errors()
        # This loop pass (``_open_pass``): the file synced on the loop in it, and the helper
        # requests held back to be sent together at its end (``_end_pass``).
        self._pass_handle: int | None = None
        self._batch: list[SyncRequest] | None = None
        self._groups: dict[int, tuple[float, list[SyncRequest]]] = {}  # syncfs id -> (sent, requests)
        self.latency = SyncLatency()  # fdatasyncs (commits and rolls), not directory fsyncs

    # ---- public ---------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """Pid of the running helper (None while restarting, in fallback or closed)."""
        return self._helper.pid if self._helper is not None else None

    @property
    def mode(self) -> str:
        """``"helper"``, ``"restarting"``, ``"thread"`` (fallback) or ``"closed"``."""
        return self._state

    def register(self, fd: int) -> int:
        if self._state == _CLOSED:
            raise RuntimeError("syncer is closed")
        handle = next(self._handle_ids)
        h = self._handles[handle] = FileHandle(fd)
        if LEDGER is not None and (path := LEDGER.path_of(fd)) is not None:
            h.path = path
            LEDGER.note("R", os.fstat(fd).st_size, path)
        return handle

    def forget(self, handle: int) -> None:
        h = self._handles.pop(handle, None)
        if h is None:
            return
        h.forgotten = True
        if self._batch and h.inflight:
            # Its syncs held back in this pass go first: sent after the FORGET, the helper
            # would answer them EBADF (and fail every file of a shared syncfs named by it).
            kept = []
            for r in self._batch:
                if r.handle == handle:
                    self._send(r.rid, r.op, r.handle, r.h)
                else:
                    kept.append(r)
            self._batch = kept
        if self._helper is not None and h.sent:
            self._helper.send(wire.REQ.pack(wire.OP_FORGET, handle, 0))
        if not h.inflight and h.owned:
            os.close(h.fd)

    def fdatasync(self, handle: int) -> asyncio.Future[None]:
        """The first request of a loop pass is sent (or queued for a restarting helper) before
        this returns; later ones of the same pass are held to its end (a callback scheduled by
        the first), where several files of one filesystem share one ``syncfs``. The sync covers
        whatever was written before the helper starts it, so holding a request back can only
        make it cover more."""
        return self._request(wire.OP_FDATASYNC, handle)

    def try_inline_fdatasync(self, handle: int, bulk: bool = False) -> bool:
        """``fdatasync`` right here, on the loop, when the helper has nothing in flight: a lone
        small commit (one synchronous publish) then skips the round trip to the helper and
        back, about 190 µs of a 770 µs PubAck on the 2-core test machine. ``bulk``: a larger
        job of pipelined publishes (``pipeline.INLINE_BULK_MAX_BYTES``), synced here only while
        bulk syncs stay under ``INLINE_BULK_SLOW``. Returns False, having done nothing, when
        anything else is in flight (those syncs overlap in the helper) or an inline sync was
        slow within its backoff: a stalling disk then blocks the loop once, not at every
        commit. Raises ``OSError`` as a failed sync would (the store fails closed)."""
        helper = self._helper
        if self._state != _HELPER or helper is None or not helper.hello or self._pending or self._threaded:
            # Not before the helper said hello either: until then it may not yet ignore the
            # Ctrl-C meant for the node (the first commits going through it keep that so).
            return False
        if self._pass_handle is not None and self._pass_handle != handle:
            # Another file was synced on the loop in this pass: many streams committing at once
            # (one socket read can hold a message for each). Serial syncs on the loop would
            # add up (200 streams: ~2.5 messages per sync, all of them in a row); the helper
            # runs them side by side.
            return False
        t0 = time.monotonic()
        if not self.inline.allowed(t0) or (bulk and not self.bulk.allowed(t0)):
            return False
        h = self._handles[handle]
        size = LEDGER.size_of(h.path, h.fd) if h.path is not None and LEDGER is not None else 0
        self.stats["syncs"] += 1
        try:
            os.fdatasync(h.fd)
        except OSError:
            self.stats["errors"] += 1
            raise
        dt = time.monotonic() - t0
        self.stats["inline"] += 1
        self.latency.observe(dt)
        if self._pass_handle is None:
            self._pass_handle = handle
            self._open_pass()
        if bulk:
            self.stats["inline_bulk"] += 1
            self.bulk.observe(t0, dt)
        self.inline.observe(t0, dt)
        if h.path is not None and LEDGER is not None:
            LEDGER.note("S", size, h.path)  # before anything it covers is acked
        return True

    def fsync(self, handle: int) -> asyncio.Future[None]:
        return self._request(wire.OP_FSYNC, handle)

    def inject_error(self, err: int, count: int = 1) -> None:
        """Test seam: the next ``count`` sync rounds fail with ``err`` without touching the disk
        (in the helper when one runs, so the errno travels the real reply path)."""
        # Injected faults travel the helper's reply path: no more inline syncs (test seam).
        self.inline.off_until = math.inf
        if self._helper is not None:
            self._helper.send(wire.REQ.pack(wire.OP_INJECT, 0, count << 32 | err))
        else:
            self._inject = (err, count)

    async def release(self) -> None:
        """Drop one reference; the last one stops the helper and waits until it is reaped."""
        self._refs -= 1
        if self._refs > 0:
            return
        with _registry_lock:
            if _registry.get(self._loop) is self:
                del _registry[self._loop]
        await self._close()

    # ---- requests -------------------------------------------------------------------------
    def _request(self, op: int, handle: int) -> asyncio.Future[None]:
        if self._state == _CLOSED:
            raise RuntimeError("syncer is closed")
        h = self._handles[handle]
        if not h.owned:
            h.fd, h.owned = os.dup(h.fd), True
        req = SyncRequest(next(self._rids), op, handle, h, self._loop.create_future())
        h.inflight += 1
        if self._state == _THREAD:
            if self._loop.time() >= self._retry_at and self._restart_task is None:
                self._retry_at = math.inf
                self._fails = MAX_RESTARTS  # a single attempt, then back to threads
                self._start_restart(0.0)
            self._run_threaded(req)
        else:
            self._pending[req.rid] = req
            if op == wire.OP_FDATASYNC:
                if self._batch is not None:
                    # Not the first of this pass: sent at its end, maybe with others in one
                    # syncfs (``_end_pass``).
                    self._batch.append(req)
                    return req.fut
                self._open_pass()
            self._send(req.rid, op, handle, h)
        return req.fut

    def _send(self, rid: int, op: int, handle: int, h: FileHandle) -> None:
        helper = self._helper
        if helper is not None:
            # A send may find the helper dead (and drop it): the second one then does
            # nothing, and the restart registers the handle and sends the request.
            if not h.sent:
                h.sent = True
                helper.send(wire.REQ.pack(wire.OP_REGISTER, handle, 0), h.fd)
            helper.send(wire.REQ.pack(op, handle, rid))
        # else: restarting; ``_connect`` sends every pending request

    def _open_pass(self) -> None:
        """Hold back this loop pass's further helper syncs until it ends. The flushers kicked
        by one socket read run in the same pass; a callback scheduled now runs after them."""
        if self._batch is None:
            self._batch = []
            self._loop.call_soon(self._end_pass)

    def _end_pass(self) -> None:
        """Send the syncs held back in this pass: one ``syncfs`` for each filesystem with
        ``SYNCFS_MIN`` files or more among them (while ``self.shared`` allows), one request
        per file for the rest."""
        self._pass_handle = None
        batch, self._batch = self._batch, None
        if not batch or self._helper is None:
            return  # nothing, or a restarting helper: ``_connect`` sends every pending request
        shared: set[int] = set()
        if self.use_syncfs and len(batch) >= SYNCFS_MIN and self.shared.allowed(time.monotonic()):
            devs = {r.handle: self._dev(r.h) for r in batch}
            for handles in shared_groups(devs):
                members = set(handles)
                group = [r for r in batch if r.handle in members]
                rid = next(self._rids)
                self._groups[rid] = (time.monotonic(), group)
                self.stats["syncfs"] += 1
                # Any one of the files names the filesystem; the helper syncs it whole.
                self._send(rid, wire.OP_SYNCFS, group[0].handle, group[0].h)
                shared.update(handles)
        for r in batch:
            if r.handle not in shared:
                self._send(r.rid, r.op, r.handle, r.h)

    @staticmethod
    def _dev(h: FileHandle) -> int:
        if h.dev is None:
            h.dev = os.fstat(h.fd).st_dev
        return h.dev

    def _reply(self, rid: int, err: int) -> None:
        entry = self._groups.pop(rid, None)
        if entry is not None:
            # One syncfs answered them all: each was asked for after its data was written and
            # before the helper started the syncfs, which writes back the whole filesystem.
            sent, group = entry
            self.shared.observe(sent, time.monotonic() - sent)
            self.stats["shared"] += len(group)
            for r in group:
                self._reply(r.rid, err)
            return
        req = self._pending.pop(rid, None)
        if req is not None:  # None: answered before (a duplicate after a re-issue)
            self._finish(req, err)

    def _finish(self, req: SyncRequest, err: int, ran: bool = True, via: str = "the fsync helper") -> None:
        if ran:
            self.stats["syncs"] += 1
            if err:
                self.stats["errors"] += 1
            elif req.op != wire.OP_FSYNC:
                self.latency.observe(time.monotonic() - req.t0)
        if not req.fut.done():  # done: the awaiting task was cancelled
            if err:
                req.fut.set_exception(OSError(err, f"{os.strerror(err)} (reported by {via})"))
            else:
                if req.h.path is not None and LEDGER is not None:
                    LEDGER.note("S", req.size, req.h.path)  # before anything it covers is acked
                req.fut.set_result(None)
        h = req.h
        h.inflight -= 1
        if h.forgotten and not h.inflight and h.owned:
            os.close(h.fd)

    # ---- helper lifecycle -----------------------------------------------------------------
    def _start(self) -> None:
        try:
            self._connect()
        except OSError as exc:
            self._failed(f"cannot start: {exc}")

    def _connect(self) -> None:
        """Start a helper, register every handle a helper had or a waiting request names,
        send every unanswered request."""
        helper = HelperProcess(self, helper_command)  # looked up now: tests replace it
        self._helper = helper
        self._state = _HELPER
        # Every pending request goes again below, one per file: a syncfs sent to a dead helper
        # is forgotten, and a request held back in this pass is sent now, not twice.
        self._groups.clear()
        if self._batch:
            self._batch = []
        for handle, h in self._handles.items():
            if h.sent or h.inflight:
                h.sent = True
                helper.send(wire.REQ.pack(wire.OP_REGISTER, handle, 0), h.fd)
        err, count = self._inject
        if count:
            helper.send(wire.REQ.pack(wire.OP_INJECT, 0, count << 32 | err))
            self._inject = (0, 0)
        for rid, req in list(self._pending.items()):
            if req.fut.done():  # nobody waits for it any more
                del self._pending[rid]
                self._finish(req, 0, ran=False)
            else:
                helper.send(wire.REQ.pack(req.op, req.handle, rid))

    def _hello(self, helper: HelperProcess) -> None:
        if helper is self._helper:
            self._fails = 0

    def _helper_died(self, helper: HelperProcess, why: str) -> None:
        task = self._loop.create_task(helper.reaped(), name=f"jetlog-sync-reap:{helper.pid}")
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)
        if helper is not self._helper or self._state == _CLOSED:
            return
        self._helper = None
        self.stats["restarts"] += 1
        self.stats["reissued"] += len(self._pending)
        log.warning(
            "fsync helper %d died (%s); %d unanswered syncs will be re-issued",
            helper.pid,
            why,
            len(self._pending),
        )
        self._failed(why)

    def _failed(self, why: str) -> None:
        """A helper could not start or died: restart with backoff, or fall back to threads."""
        self._fails += 1
        if self._fails > MAX_RESTARTS:
            self._fallback(why)
            return
        self._state = _RESTARTING
        self._start_restart(BACKOFF[min(self._fails, len(BACKOFF)) - 1])

    def _start_restart(self, delay: float) -> None:
        if self._restart_task is None:
            self._restart_task = self._loop.create_task(self._restart(delay), name="jetlog-sync-restart")

    async def _restart(self, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        finally:
            # Cleared before connecting: a helper that dies inside ``_connect`` must be able to
            # schedule the next attempt.
            self._restart_task = None
        if self._state == _CLOSED:
            return
        try:
            self._connect()
        except OSError as exc:
            self._failed(f"cannot start: {exc}")

    def _fallback(self, why: str) -> None:
        self._state = _THREAD
        self.stats["fallbacks"] += 1
        self._retry_at = self._loop.time() + FALLBACK_RETRY
        log.warning(
            "fsync helper unavailable (%s): syncing in threads (slow under load), retrying in %.0fs",
            why,
            FALLBACK_RETRY,
        )
        pending = list(self._pending.values())
        self._pending.clear()
        for req in pending:
            self._run_threaded(req)

    def _run_threaded(self, req: SyncRequest) -> None:
        err, count = self._inject
        if count:
            self._inject = (err, count - 1)
            self._loop.call_soon(self._finish, req, err, True, "a sync thread")
            return
        if self._exec is None:
            self._exec = ThreadPoolExecutor(2, thread_name_prefix="jetlog-sync")
        self._threaded += 1
        self.stats["threaded"] += 1
        fut = self._loop.run_in_executor(self._exec, sync_fd, req.h.fd, req.op)

        def done(f: asyncio.Future[int]) -> None:
            self._threaded -= 1
            err = errno.EIO if f.cancelled() or f.exception() else f.result()
            self._finish(req, err, via="a sync thread")

        fut.add_done_callback(done)

    async def _close(self) -> None:
        self._state = _CLOSED
        if self._restart_task is not None:
            self._restart_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._restart_task
            self._restart_task = None
        helper, self._helper = self._helper, None
        if helper is not None:
            helper.close()
            await helper.reaped()
        if self._reapers:
            await asyncio.gather(*self._reapers, return_exceptions=True)
        for req in list(self._pending.values()):  # a store closed without waiting: not durable
            if not req.fut.done():
                req.fut.set_exception(RuntimeError("fsync helper stopped before answering"))
        self._pending.clear()
        for h in self._handles.values():
            if not h.inflight and h.owned:
                os.close(h.fd)
            h.forgotten = True
        self._handles.clear()
        if self._exec is not None:
            self._exec.shutdown(wait=False)  # running syncs finish; their threads then exit
            self._exec = None

    def _abandon(self) -> None:
        """Synchronous cleanup for a syncer whose loop was closed under it."""
        self._state = _CLOSED
        if self._helper is not None:
            self._helper.reap_now()
            self._helper = None
        for h in self._handles.values():
            if h.owned:
                with contextlib.suppress(OSError):
                    os.close(h.fd)
        self._handles.clear()


_registry: dict[asyncio.AbstractEventLoop, Syncer] = {}
_registry_lock = threading.Lock()  # loops may run in different threads


def current_syncer() -> Syncer | None:
    """The running loop's ``Syncer`` if one was started (metrics read its figures)."""
    with _registry_lock:
        return _registry.get(asyncio.get_running_loop())


def acquire_syncer() -> Syncer:
    """The ``Syncer`` of the running loop, started on first use; pair with ``release``.

    Never a process-wide object: each loop gets its own (a syncer's futures and socket readers
    belong to one loop), and the last ``release`` on a loop stops its helper."""
    loop = asyncio.get_running_loop()
    with _registry_lock:
        dead = [_registry.pop(lp) for lp in list(_registry) if lp.is_closed()]
        s = _registry.get(loop)
        fresh = s is None
        if s is None:
            s = _registry[loop] = Syncer(loop)
        s._refs += 1
    for other in dead:
        log.warning("event loop closed with file stores still open; stopping its fsync helper")
        other._abandon()
    if fresh:
        s._start()
    return s
