"""Pipelined group commit (``jetlog.log.pipeline``): jobs in flight together commit in order, a
failure fails closed, rolls are not pipelined, reads of records in flight, flush/close."""

from __future__ import annotations

import asyncio
import errno
import glob
import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jetlog.errors import StreamUnavailableError
from jetlog.log import FileStore, SyncService
from jetlog.log.pipeline import MAX_INFLIGHT, PIPELINE_MIN_BYTES, Wake
from jetlog.log.syncer import Syncer
from tests.unit.test_store_file import _data_size
from tests.unit.test_store_model import Model, check_store

SEG = 4096


def _path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


class GatedSync:
    """A ``SyncService`` whose file fdatasyncs wait for the test (``complete``), in any order;
    the real fdatasync runs then. With ``hold`` off, they complete at once. Directory fsyncs
    always complete at once. ``events`` records registrations and syncs by file path."""

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}
        self.ids = itertools.count(1)
        self.hold = True
        self.held: list[tuple[int, asyncio.Future[None]]] = []
        self.events: list[tuple[str, str]] = []

    def register(self, fd: int) -> int:
        h = next(self.ids)
        self.fds[h] = fd
        self.events.append(("register", _path(fd)))
        return h

    def forget(self, handle: int) -> None:
        self.fds.pop(handle, None)

    def fdatasync(self, handle: int) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.events.append(("fdatasync", _path(self.fds[handle])))
        if self.hold:
            self.held.append((handle, fut))
        else:
            os.fdatasync(self.fds[handle])
            fut.set_result(None)
        return fut

    def fsync(self, handle: int) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.events.append(("fsync", _path(self.fds[handle])))
        os.fsync(self.fds[handle])
        fut.set_result(None)
        return fut

    def complete(self, i: int = 0, err: int = 0) -> None:
        """Finish the ``i``-th held sync (in request order), with ``err`` as its errno."""
        handle, fut = self.held.pop(i)
        if fut.done():  # cancelled: the store failed or was abandoned
            return
        if err:
            fut.set_exception(OSError(err, "injected sync failure"))
            return
        if handle in self.fds:
            os.fdatasync(self.fds[handle])
        fut.set_result(None)


class Gate:
    """Wraps a real ``Syncer``: requests go to the helper at once, but each completes only when
    the helper answered *and* the test opened its gate (``open``)."""

    def __init__(self, inner: SyncService) -> None:
        self.inner = inner
        self.gates: list[asyncio.Future[None]] = []

    def register(self, fd: int) -> int:
        return self.inner.register(fd)

    def forget(self, handle: int) -> None:
        self.inner.forget(handle)

    def fsync(self, handle: int) -> Any:
        return self.inner.fsync(handle)

    def fdatasync(self, handle: int) -> asyncio.Future[None]:
        real = asyncio.ensure_future(self.inner.fdatasync(handle))
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.gates.append(gate)

        async def both() -> None:
            try:
                await real
            finally:
                await gate

        return asyncio.ensure_future(both())

    def open(self, i: int) -> None:
        self.gates[i].set_result(None)


async def _until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.001)


async def _spin(n: int = 20) -> None:
    """Let the flusher run (a few loop iterations and a little time)."""
    for _ in range(n):
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)


def _append(store: FileStore, model: Model, data: bytes, subj: str = "a.b") -> int:
    ts = model.last_seq + 1
    seq = store.append(subj, b"", data, ts)
    assert seq == model.append(subj, b"", data, ts)
    return seq


async def _two_in_flight(store: FileStore, gs: GatedSync, model: Model) -> None:
    """Job 1 (seq 1..2) and job 2 (seq 3) written with their syncs held; seq 4 in the open batch.
    Pipelined behind any job, however small (``pipeline_min`` 0)."""
    store._fl.pipeline_min = 0
    _append(store, model, b"one")
    _append(store, model, b"two")
    await _until(lambda: len(gs.held) == 1)
    _append(store, model, b"three")
    await _until(lambda: len(gs.held) == 2)  # written and requested while job 1 is unsynced
    _append(store, model, b"four")
    await _spin()
    assert len(gs.held) == MAX_INFLIGHT == 2  # no third job: seq 4 waits in the open batch
    assert store.committed_seq == 0


async def test_a_job_follows_one_still_syncing_only_when_that_one_was_big(tmp_path: Path) -> None:
    """Behind a small job the next one waits for its sync and then takes everything pending in
    one job (many streams: fewer, larger jobs); behind a job of ``PIPELINE_MIN_BYTES`` or more
    the next one is written while it syncs (bulk loads overlap the write with the sync)."""
    gs = GatedSync()
    store = await FileStore.open(str(tmp_path), syncer=gs, auto_compact=False)
    assert store._fl.pipeline_min == PIPELINE_MIN_BYTES
    model = Model()
    _append(store, model, b"small")
    await _until(lambda: len(gs.held) == 1)
    for _ in range(5):
        _append(store, model, b"waits")
        await _spin(5)
    assert len(gs.held) == 1 and len(store._fl.flights) == 1  # nothing written behind it
    for s in range(1, 7):
        assert store.load(s) == model.msg(s)
    gs.complete(0)
    await _until(lambda: len(gs.held) == 1)  # the five waiting ones: one job
    assert store.committed_seq == 1
    assert sorted(store._fl.flights[0].recs) == [2, 3, 4, 5, 6]
    gs.complete(0)
    await _until(lambda: store.committed_seq == 6)
    # A big job: the next one is written while it syncs (two in flight).
    for _ in range(PIPELINE_MIN_BYTES // 4096 + 1):
        _append(store, model, b"b" * 4096)
    await _until(lambda: len(gs.held) == 1)
    assert store._fl.flights[0].big
    _append(store, model, b"behind")
    await _until(lambda: len(gs.held) == 2)
    assert len(store._fl.flights) == 2 and not store._fl.flights[1].big
    _append(store, model, b"third")
    await _spin()
    assert len(gs.held) == 2  # MAX_INFLIGHT
    gs.complete(0)
    gs.complete(0)
    await _until(lambda: len(gs.held) == 1)
    gs.complete(0)
    await _until(lambda: store.committed_seq == model.last_seq)
    # A big job and a small one behind it in flight, and as much pending as a big job: when
    # the big one commits, the pending job is written while the small one still syncs.
    _append(store, model, b"B" * PIPELINE_MIN_BYTES)
    await _until(lambda: len(gs.held) == 1)
    _append(store, model, b"small")
    await _until(lambda: len(gs.held) == 2)
    _append(store, model, b"p" * PIPELINE_MIN_BYTES)
    await _spin()
    assert len(gs.held) == 2  # MAX_INFLIGHT
    gs.complete(0)
    await _until(lambda: len(gs.held) == 2)
    assert not store._fl.flights[0].big and store._fl.flights[1].big
    gs.complete(0)
    gs.complete(0)
    await _until(lambda: store.committed_seq == model.last_seq)
    check_store(store, model)
    await store.close()


@pytest.mark.parametrize("compression", [False, True])
async def test_two_jobs_in_flight_commit_in_order(tmp_path: Path, compression: bool) -> None:
    gs = GatedSync()
    store = await FileStore.open(str(tmp_path), syncer=gs, compression=compression, auto_compact=False)
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    model = Model()
    seg = store.segments[-1]
    opened_size = seg.size
    await _two_in_flight(store, gs, model)
    # reads: job 1, job 2 and the open batch are all served (from memory until committed)
    for s in (1, 2, 3, 4):
        assert store.load(s) == model.msg(s)
    check_store(store, model)
    # both jobs are written; only the committed size is on the segment
    on_disk = _data_size(seg.path)
    assert on_disk == store._fl.wsize > seg.size == opened_size
    assert os.path.getsize(seg.path) > on_disk  # preallocated past the data
    flush = asyncio.ensure_future(store.flush())
    gs.complete(1)  # job 2's sync returns first ...
    await _spin()
    assert store.committed_seq == 0 and seen == [] and not flush.done()  # ... and must wait for job 1
    assert store.load(3) == model.msg(3)
    gs.complete(0)
    await _until(lambda: store.committed_seq == 3)
    assert seen == [2, 3]  # in order, each job once
    assert seg.size == on_disk
    await _until(lambda: len(gs.held) == 1)  # seq 4's job starts once a slot is free
    assert not flush.done()
    gs.complete(0)
    await asyncio.wait_for(flush, 5)
    assert seen == [2, 3, 4] and store.committed_seq == 4
    check_store(store, model)
    gs.hold = False
    await store.close()
    store = await FileStore.open(str(tmp_path), compression=compression)
    assert store.recovery.truncated_bytes == 0
    check_store(store, model)
    await store.close()


@pytest.mark.parametrize("order", ["second-first", "first-first"])
async def test_failed_sync_of_first_inflight_job_fails_closed(tmp_path: Path, order: str) -> None:
    gs = GatedSync()
    store = await FileStore.open(str(tmp_path), syncer=gs, auto_compact=False)
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    model = Model()
    await _two_in_flight(store, gs, model)
    flush = asyncio.ensure_future(store.flush())
    if order == "second-first":
        gs.complete(1)  # job 2 is durable, but job 1 is not: neither may be reported
        await _spin()
        gs.complete(0, errno.EIO)
    else:
        gs.complete(0, errno.EIO)
        await _spin()
        gs.complete(0)  # job 2's sync succeeds after the failure: still never reported
    await _spin()
    assert store.failed is not None and "injected" in str(store.failed)
    with pytest.raises(StreamUnavailableError):
        await flush
    assert store.committed_seq == 0 and seen == []
    with pytest.raises(StreamUnavailableError):
        store.append("a.b", b"", b"no", 9)
    with pytest.raises(StreamUnavailableError):
        await store.flush()
    for s in (1, 2, 3, 4):  # reads keep working, in flight or not
        assert store.load(s) == model.msg(s)
    await store.close()
    assert seen == [] and store.committed_seq == 0


async def test_failed_sync_with_the_real_helper_fails_closed(tmp_path: Path) -> None:
    """The same through the helper process: its first sync round fails (``inject_error``); the
    job behind it is never reported, whether or not the helper synced it separately."""
    st0 = await FileStore.open(str(tmp_path / "other"))  # keeps the loop's helper alive
    syncer = st0.syncer
    assert isinstance(syncer, Syncer) and syncer.mode == "helper"
    gate = Gate(syncer)
    store = await FileStore.open(str(tmp_path / "s"), syncer=gate, auto_compact=False)
    store._fl.pipeline_min = 0  # the job behind the failing one is written while it syncs
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    store.append("a.b", b"", b"ok", 1)
    await _until(lambda: len(gate.gates) == 1)
    gate.open(0)
    await store.flush()
    assert seen == [1]
    syncer.inject_error(errno.EIO)
    store.append("a.b", b"", b"doomed", 2)
    await _until(lambda: len(gate.gates) == 2)
    store.append("a.b", b"", b"behind", 3)
    await _until(lambda: len(gate.gates) == 3)  # two jobs in flight
    assert store.load(2) is not None and store.load(3) is not None
    gate.open(2)
    await _spin()
    assert store.committed_seq == 1
    gate.open(1)
    await _until(lambda: store.failed is not None)
    assert "fsync helper" in str(store.failed)
    await _spin()
    assert seen == [1] and store.committed_seq == 1
    await store.close()
    await st0.close()


async def test_abandon_with_jobs_in_flight_reports_nothing(tmp_path: Path) -> None:
    gs = GatedSync()
    store = await FileStore.open(str(tmp_path), syncer=gs, auto_compact=False)
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    await _two_in_flight(store, gs, Model())
    await store._abandon()
    assert all(f.cancelled() for _, f in gs.held)
    gs.complete(0)
    gs.complete(0)
    await _spin()
    assert seen == [] and store.committed_seq == 0


async def test_roll_waits_until_nothing_is_in_flight(tmp_path: Path) -> None:
    gs = GatedSync()
    store = await FileStore.open(str(tmp_path), syncer=gs, segment_bytes=SEG, auto_compact=False)
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    model = Model()
    _append(store, model, b"x" * 100)
    await _until(lambda: len(gs.held) == 1)
    first = os.path.realpath(store.segments[0].path)
    while len(store.segments) == 1:  # fill past the segment size: a Roll is queued
        _append(store, model, b"y" * 100)
    await _spin()
    # the roll's job does not start while job 1 is in flight: no new file, no new request
    assert len(gs.held) == 1
    assert [os.path.realpath(p) for p in glob.glob(str(tmp_path / "*.log"))] == [first]
    check_store(store, model)  # every record readable: job 1 in flight, the rest pending
    gs.events.clear()
    gs.hold = False
    gs.complete(0)
    await store.flush()
    assert store.committed_seq == model.last_seq
    assert seen == sorted(set(seen)) and seen[-1] == model.last_seq
    new = os.path.realpath(store.segments[1].path)
    # crash ordering of the roll: old segment cut back to its data (it was preallocated) and
    # synced with its size, then the new file exists, then the directory entry is durable,
    # then the new segment's data is synced
    ev = gs.events
    assert os.path.getsize(first) == _data_size(first) == store.segments[0].size
    i_old = ev.index(("fsync", first))
    i_new = ev.index(("register", new))
    i_dir = ev.index(("fsync", os.path.realpath(tmp_path)))
    i_data = ev.index(("fdatasync", new))
    assert i_old < i_new < i_dir < i_data
    # pipelining resumes on the new segment
    gs.hold = True
    await _two_in_flight_more(store, gs, model)
    gs.hold = False
    gs.complete(0)
    gs.complete(0)
    await store.flush()
    check_store(store, model)
    await store.close()
    store = await FileStore.open(str(tmp_path), segment_bytes=SEG)
    assert store.recovery.truncated_bytes == 0 and store.recovery.quarantined == ()
    check_store(store, model)
    await store.close()


async def _two_in_flight_more(store: FileStore, gs: GatedSync, model: Model) -> None:
    store._fl.pipeline_min = 0  # pipelined behind any job
    n = len(gs.held)
    _append(store, model, b"p")
    await _until(lambda: len(gs.held) == n + 1)
    _append(store, model, b"q")
    await _until(lambda: len(gs.held) == n + 2)
    assert store.committed_seq == model.last_seq - 2
    for s in (model.last_seq - 1, model.last_seq):
        assert store.load(s) == model.msg(s)


async def test_close_waits_for_jobs_in_flight(tmp_path: Path) -> None:
    gs = GatedSync()
    store = await FileStore.open(str(tmp_path), syncer=gs, auto_compact=False)
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    model = Model()
    await _two_in_flight(store, gs, model)
    closing = asyncio.ensure_future(store.close())
    await _spin()
    assert not closing.done()
    gs.hold = False
    gs.complete(0)
    gs.complete(0)
    await asyncio.wait_for(closing, 5)
    assert seen == [2, 3, 4]
    store = await FileStore.open(str(tmp_path))
    check_store(store, model)
    await store.close()


class Counting:
    """Counts the fdatasyncs outstanding at once (real helper underneath)."""

    def __init__(self, inner: SyncService) -> None:
        self.inner = inner
        self.out = 0
        self.max = 0

    def register(self, fd: int) -> int:
        return self.inner.register(fd)

    def forget(self, handle: int) -> None:
        self.inner.forget(handle)

    def fsync(self, handle: int) -> Any:
        return self.inner.fsync(handle)

    def fdatasync(self, handle: int) -> asyncio.Future[None]:
        fut = asyncio.ensure_future(self.inner.fdatasync(handle))
        self.out += 1
        self.max = max(self.max, self.out)
        fut.add_done_callback(self._done)
        return fut

    def _done(self, _: Any) -> None:
        self.out -= 1


@pytest.mark.parametrize("compression", [False, True])
async def test_pipelines_under_load_with_the_real_helper(tmp_path: Path, compression: bool) -> None:
    st0 = await FileStore.open(str(tmp_path / "other"))
    counting = Counting(st0.syncer)
    store = await FileStore.open(
        str(tmp_path / "s"), syncer=counting, segment_bytes=64 << 10, compression=compression
    )
    store._fl.pipeline_min = 0  # small appends: pipelined behind any job
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    model = Model()
    for i in range(200):
        for _ in range(10):
            _append(store, model, os.urandom(20).hex().encode() * (1 + i % 5), subj=f"s.{i % 7}")
        await asyncio.sleep(0)
        assert len(store._fl.flights) <= MAX_INFLIGHT
        if i % 40 == 0:
            check_store(store, model, full=False)
    await store.flush()
    assert counting.max == MAX_INFLIGHT  # it did pipeline, and never beyond the limit
    assert seen == sorted(set(seen)) and seen[-1] == model.last_seq
    assert len(store.segments) > 2
    check_store(store, model)
    await store.close()
    store = await FileStore.open(str(tmp_path / "s"), segment_bytes=64 << 10, compression=compression)
    check_store(store, model)
    await store.close()
    await st0.close()


async def test_the_flusher_wake_keeps_a_set_made_before_the_wait_and_survives_cancellation() -> None:
    """``Wake`` (the flusher's ``asyncio.Event`` replacement): a ``set`` between ``clear`` and
    ``wait`` is not lost; a ``set`` while waiting wakes the waiter; a cancelled wait leaves it
    usable; ``clear`` re-arms it."""
    w = Wake(asyncio.get_running_loop())
    w.set()
    await asyncio.wait_for(w.wait(), 1)  # set before the wait: returns at once
    w.clear()
    w.set()
    await asyncio.wait_for(w.wait(), 1)  # set between clear and wait: kept
    w.clear()
    waiter = asyncio.ensure_future(w.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    w.set()
    await asyncio.wait_for(waiter, 1)  # set while waiting wakes it
    w.set()  # already set: nothing to do, no error
    w.clear()
    cancelled = asyncio.ensure_future(w.wait())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    w.set()  # the cancelled wait's future is gone: no InvalidStateError
    await asyncio.wait_for(w.wait(), 1)
    w.clear()
    late = asyncio.ensure_future(w.wait())
    await asyncio.sleep(0.01)
    assert not late.done()  # cleared: waits for the next set
    w.set()
    await asyncio.wait_for(late, 1)
