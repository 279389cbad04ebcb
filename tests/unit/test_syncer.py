"""The fsync helper process (``jetlog.log.syncer``): syncs, concurrency, helper death, fd identity,
lifecycle per event loop, thread fallback, and no leaked processes or fds."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import jetlog.log.pipeline as pipeline_mod
import jetlog.log.syncer as syncer_mod
from jetlog.log import FileStore, syncpolicy
from jetlog.log.syncer import Syncer, acquire_syncer

# ---- helpers -------------------------------------------------------------------------------


def _children() -> set[int]:
    """Pids of this process's live children (any thread)."""
    out: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/children") as f:
            out.update(int(p) for p in f.read().split())
    return out


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def _gone(pid: int) -> bool:
    """True once ``pid`` is neither running nor a zombie (it was reaped)."""
    return not os.path.exists(f"/proc/{pid}")


def _helper_inodes(pid: int) -> set[tuple[int, int]]:
    """(dev, inode) of every regular file or directory the helper holds open."""
    out = set()
    for n in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            st = os.stat(f"/proc/{pid}/fd/{n}")
            out.add((st.st_dev, st.st_ino))
    return out


def _ino(fd_or_path: int | str) -> tuple[int, int]:
    st = os.stat(fd_or_path)
    return st.st_dev, st.st_ino


async def _until(pred: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.005)


async def _running(s: Syncer, timeout: float = 10.0) -> int:
    """Wait until a helper runs; its pid."""
    await _until(lambda: s.pid is not None, timeout)
    pid = s.pid
    assert pid is not None
    return pid


@pytest.fixture(autouse=True)
def _fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syncer_mod, "BACKOFF", (0.01, 0.02, 0.05))


# ---- the syncer on its own -----------------------------------------------------------------


async def test_sync_works_and_errors_travel_back(tmp_path: Path) -> None:
    s = acquire_syncer()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_APPEND)
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        h = s.register(fd)
        dh = s.register(dfd)
        pid = await _running(s)
        for i in range(20):
            os.write(fd, b"x" * (100 * i + 1))
            await s.fdatasync(h)
        await s.fsync(dh)
        s.inject_error(errno.EIO)
        with pytest.raises(OSError) as ei:
            await s.fdatasync(h)
        assert ei.value.errno == errno.EIO and "fsync helper" in str(ei.value)
        await s.fdatasync(h)  # the injection was for one round only
        assert s.stats["errors"] == 1 and s.stats["restarts"] == 0 and s.pid == pid
        s.forget(h)
        s.forget(dh)
    finally:
        os.close(fd)
        os.close(dfd)
        await s.release()
    assert s.mode == "closed" and _gone(pid)


async def test_request_is_sent_before_fdatasync_returns(tmp_path: Path) -> None:
    """The file store pipelines commits on this: the helper has the request as soon as
    ``fdatasync`` returns its future, without waiting for the loop to run again."""
    s = acquire_syncer()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        h = s.register(fd)
        await _running(s)
        await s.fdatasync(h)
        os.write(fd, b"x" * 100)
        fut = s.fdatasync(h)
        assert isinstance(fut, asyncio.Future) and not fut.done()
        time.sleep(0.3)  # noqa: ASYNC251 -- the loop is blocked: only a request already sent is answered
        for _ in range(3):  # read the reply
            await asyncio.sleep(0)
        assert fut.done() and fut.exception() is None
        s.forget(h)
    finally:
        os.close(fd)
        await s.release()


async def test_many_concurrent_syncs(tmp_path: Path) -> None:
    s = acquire_syncer()
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT | os.O_APPEND) for i in range(8)]
    try:
        hs = [s.register(fd) for fd in fds]
        for fd in fds:
            os.write(fd, b"y" * 4096)
        # 8 files x 40 requests in flight at once: different files sync in parallel in the
        # helper, requests for one file are coalesced into few rounds.
        await asyncio.wait_for(asyncio.gather(*[s.fdatasync(h) for h in hs for _ in range(40)]), 30)
        assert s.stats["syncs"] == 320 and s.stats["errors"] == 0
        for h in hs:
            s.forget(h)
    finally:
        for fd in fds:
            os.close(fd)
        await s.release()


async def test_replies_split_across_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper that dribbles its replies a few bytes at a time: the loop side reassembles."""
    script = tmp_path / "slow_helper.py"
    script.write_text(
        "import os, socket, struct, sys, time\n"
        "s = socket.socket(fileno=int(sys.argv[1]))\n"
        "def out(b):\n"
        "    for i in range(0, len(b), 5):\n"
        "        s.sendall(b[i:i + 5]); time.sleep(0.001)\n"
        "out(struct.pack('<Qi4x', 0, os.getpid()))\n"
        "buf = b''\n"
        "while True:\n"
        "    d = s.recv(7)\n"  # and reads requests in odd chunks
        "    if not d: break\n"
        "    buf += d\n"
        "    while len(buf) >= 16:\n"
        "        op, h, arg = struct.unpack('<BxxxIQ', buf[:16]); buf = buf[16:]\n"
        "        if op in (3, 4): out(struct.pack('<Qi4x', arg, 0))\n"
    )
    monkeypatch.setattr(syncer_mod, "helper_command", lambda fd: [sys.executable, str(script), str(fd)])
    s = acquire_syncer()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        h = s.register(fd)
        await asyncio.wait_for(asyncio.gather(*[s.fdatasync(h) for _ in range(25)]), 20)
        assert s.mode == "helper" and s.stats["syncs"] == 25
        s.forget(h)
    finally:
        os.close(fd)
        await s.release()


async def test_fd_identity_survives_rename_over_and_restart(tmp_path: Path) -> None:
    """The helper syncs the inode the caller opened, even after another file was renamed over
    its path, and still after a restart (re-registration passes fds, never paths)."""
    s = acquire_syncer()
    a, b = tmp_path / "a.log", tmp_path / "b.tmp"
    fd = os.open(a, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        orig = _ino(fd)
        h = s.register(fd)
        b.write_bytes(b"new content")
        os.rename(b, a)  # what compaction does: the path now names another inode
        renamed = _ino(str(a))
        assert renamed != orig
        os.write(fd, b"still the old file")
        await s.fdatasync(h)
        pid = await _running(s)
        held = _helper_inodes(pid)
        assert orig in held and renamed not in held
        os.kill(pid, signal.SIGKILL)
        await s.fdatasync(h)  # re-issued or issued to the restarted helper
        pid2 = await _running(s)
        assert pid2 != pid and s.stats["restarts"] == 1
        held = _helper_inodes(pid2)
        assert orig in held and renamed not in held
        s.forget(h)
    finally:
        os.close(fd)
        await s.release()


async def test_an_fd_goes_to_the_helper_with_its_first_request(tmp_path: Path) -> None:
    """Registration is local: the helper gets a file's fd with the first sync asked for it
    (most files a restart opens are never synced before they close), also across a restart
    that happens before that first request, and a handle never sent is forgotten locally."""
    s = acquire_syncer()
    fa, fb = tmp_path / "a.log", tmp_path / "b.log"
    a = os.open(fa, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    b = os.open(fb, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    try:
        ha, hb = s.register(a), s.register(b)
        pid = await _running(s)
        await asyncio.sleep(0.05)  # anything sent at registration would have arrived by now
        assert _ino(a) not in _helper_inodes(pid) and _ino(b) not in _helper_inodes(pid)
        os.write(a, b"x")
        await s.fdatasync(ha)
        assert _ino(a) in _helper_inodes(pid) and _ino(b) not in _helper_inodes(pid)
        # A restart re-registers what the helper had; ``b`` still goes with its first request.
        os.kill(pid, signal.SIGKILL)
        await _until(lambda: s.pid not in (None, pid))
        pid2 = s.pid
        assert pid2 is not None
        await s.fdatasync(ha)
        assert _ino(a) in _helper_inodes(pid2) and _ino(b) not in _helper_inodes(pid2)
        os.write(b, b"y")
        await s.fsync(hb)
        assert _ino(b) in _helper_inodes(pid2)
        s.forget(ha)
        s.forget(hb)
        hc = s.register(a)
        s.forget(hc)  # never sent: nothing to tell the helper
        await s.fdatasync(s.register(b))
        assert s.stats["errors"] == 0
    finally:
        os.close(a)
        os.close(b)
        await s.release()


async def test_fd_number_reuse_cannot_redirect_a_sync(tmp_path: Path) -> None:
    s = acquire_syncer()
    fd = os.open(tmp_path / "first", os.O_RDWR | os.O_CREAT)
    first = _ino(fd)
    h1 = s.register(fd)
    await s.fdatasync(h1)
    pid = await _running(s)
    s.forget(h1)
    os.close(fd)
    fd2 = os.open(tmp_path / "second", os.O_RDWR | os.O_CREAT)
    try:
        assert fd2 == fd  # the number is reused at once
        h2 = s.register(fd2)
        assert h2 != h1
        await s.fdatasync(h2)
        with pytest.raises(KeyError):
            await s.fdatasync(h1)  # a forgotten handle is never silently another file
        await _until(lambda: first not in _helper_inodes(pid))  # FORGET closed its copy
        assert _ino(fd2) in _helper_inodes(pid)
        s.forget(h2)
    finally:
        os.close(fd2)
        await s.release()


# ---- with stores ---------------------------------------------------------------------------


async def test_helper_killed_mid_stream_store_keeps_committing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGSTOP the helper: nothing is acknowledged while it cannot answer. SIGKILL it: the
    store neither fails nor acknowledges early; the unanswered syncs are re-issued to a new
    helper and commits resume. Repeated a few times while appends (and segment rolls) run."""
    # Every commit through the helper: a job may otherwise be synced on the loop.
    monkeypatch.setattr(pipeline_mod, "INLINE_SYNC_MAX_BYTES", 0)
    monkeypatch.setattr(pipeline_mod, "INLINE_BULK_MAX_BYTES", 0)
    store = await FileStore.open(str(tmp_path / "s"), segment_bytes=8192, auto_compact=False)
    s = store.syncer
    assert isinstance(s, Syncer)
    acked: list[int] = []
    store.add_commit_listener(acked.append)
    stop = asyncio.Event()

    async def writer() -> None:
        i = 0
        while not stop.is_set():
            for _ in range(5):
                i += 1
                store.append(f"k.{i % 7}", b"", str(i).encode() * 20, i)
            await asyncio.sleep(0.001)

    task = asyncio.create_task(writer())
    try:
        for _ in range(3):
            pid = await _running(s)
            await _until(lambda: store.committed_seq > 0 and store.last_seq > store.committed_seq)
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(0.05)  # anything in flight finishes its loop step
            frozen = store.committed_seq
            await asyncio.sleep(0.25)
            assert store.committed_seq == frozen, "acknowledged while the helper could not answer"
            assert store.last_seq > frozen
            os.kill(pid, signal.SIGKILL)
            await _until(lambda f=frozen: store.committed_seq > f)
            assert s.pid != pid and store.failed is None
    finally:
        stop.set()
        await task
    await store.flush()
    assert store.failed is None and s.stats["restarts"] == 3 and s.stats["reissued"] >= 3
    assert acked == sorted(acked) and acked[-1] == store.last_seq
    last = store.last_seq
    await store.close()
    store = await FileStore.open(str(tmp_path / "s"), segment_bytes=8192, auto_compact=False)
    try:
        assert store.recovery.quarantined == () and store.last_seq == last
        assert all(store.load(q) is not None for q in range(1, last + 1))
    finally:
        await store.close()


async def test_stores_share_one_helper_and_the_last_close_stops_it(tmp_path: Path) -> None:
    a = await FileStore.open(str(tmp_path / "a"))
    b = await FileStore.open(str(tmp_path / "b"))
    assert a.syncer is b.syncer
    s = a.syncer
    assert isinstance(s, Syncer)
    pid = await _running(s)
    assert pid in _children()
    a.append("x", b"", b"1", 1)
    b.append("y", b"", b"2", 1)
    await asyncio.gather(a.flush(), b.flush())
    await a.close()
    assert not _gone(pid) and s.mode == "helper"
    b.append("y", b"", b"3", 2)
    await b.flush()
    await b.close()
    assert _gone(pid) and pid not in _children() and s.mode == "closed"
    c = await FileStore.open(str(tmp_path / "a"))  # a new helper on the next open
    assert c.syncer is not s
    await c.close()


def test_each_loop_gets_its_own_helper_and_dead_loops_are_cleaned(tmp_path: Path) -> None:
    async def grab() -> tuple[Syncer, int]:
        s = acquire_syncer()
        return s, await _running(s)

    loop1 = asyncio.new_event_loop()
    s1, pid1 = loop1.run_until_complete(grab())
    loop1.close()  # closed while holding a reference (a bug elsewhere): the helper lingers ...
    assert not _gone(pid1)
    loop2 = asyncio.new_event_loop()
    try:
        s2, pid2 = loop2.run_until_complete(grab())
        assert s2 is not s1 and pid2 != pid1
        assert _gone(pid1)  # ... until the next acquire reaps it
        loop2.run_until_complete(s2.release())
        assert _gone(pid2)
    finally:
        loop2.close()


@pytest.mark.parametrize("how", ["missing-binary", "exits-at-once"])
async def test_fallback_to_threads_when_the_helper_cannot_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    if how == "missing-binary":
        cmd = [str(tmp_path / "no-such-python")]
    else:
        cmd = [sys.executable, "-c", "raise SystemExit(3)"]
    monkeypatch.setattr(syncer_mod, "helper_command", lambda fd: cmd)
    caplog.set_level(logging.WARNING, logger="jetlog.log.syncer")
    store = await FileStore.open(str(tmp_path / "s"), segment_bytes=4096)
    s = store.syncer
    assert isinstance(s, Syncer)
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    for i in range(1, 120):
        store.append("a", b"", b"z" * 100, i)
    await asyncio.wait_for(store.flush(), 20)
    assert seen[-1] == 119 and store.failed is None
    assert s.mode == "thread" and s.stats["fallbacks"] == 1 and s.stats["threaded"] > 0
    assert any("syncing in threads" in r.getMessage() for r in caplog.records)
    # an I/O error in the fallback still fails the store closed
    s.inject_error(errno.EIO)
    store.append("a", b"", b"doomed", 200)
    with pytest.raises(Exception, match="failed"):
        await store.flush()
    assert seen[-1] == 119
    await store.close()


async def test_fallback_retries_the_helper_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = syncer_mod.helper_command
    monkeypatch.setattr(syncer_mod, "helper_command", lambda fd: [str(tmp_path / "nope")])
    monkeypatch.setattr(syncer_mod, "FALLBACK_RETRY", 0.2)
    s = acquire_syncer()
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        h = s.register(fd)
        await s.fdatasync(h)
        assert s.mode == "thread"
        monkeypatch.setattr(syncer_mod, "helper_command", real)
        await asyncio.sleep(0.25)
        await s.fdatasync(h)  # served by a thread, and triggers a new attempt
        pid = await _running(s)
        await s.fdatasync(h)
        assert s.mode == "helper" and pid in _children()
        s.forget(h)
    finally:
        os.close(fd)
        await s.release()


async def test_no_processes_threads_or_fds_leak(tmp_path: Path) -> None:
    fds0 = _open_fds()
    kids0 = _children()
    threads0 = {t.ident for t in threading.enumerate()}

    def ours() -> set[str]:  # store, maintenance and sync threads (the loop's own executor is not ours)
        return {t.name for t in threading.enumerate() if t.ident not in threads0 and "jetlog" in t.name}

    pids: list[int] = []
    for r in range(3):
        stores = [
            await FileStore.open(str(tmp_path / f"s{i}"), segment_bytes=4096, compression=i == 1)
            for i in range(3)
        ]
        s = stores[0].syncer
        assert isinstance(s, Syncer)
        for st in stores:
            for i in range(150):  # several segment rolls each
                st.append("a.b", b"", b"q" * 100, i + 1)
        pid = await _running(s)
        pids.append(pid)
        if r == 1:
            os.kill(pid, signal.SIGKILL)  # a restart in the middle must not leak either
        await asyncio.gather(*(st.flush() for st in stores))
        for st in stores:
            await st.close()
    assert all(_gone(p) for p in pids)
    assert _children() == kids0
    assert _open_fds() == fds0
    await _until(lambda: not ours(), 5)


# ---- syncs on the loop (Syncer.try_inline_fdatasync) ----------------------------------------


async def _greeted(s: Syncer) -> None:
    """Until the helper said hello (inline syncs wait for that, see try_inline_fdatasync)."""
    await _until(lambda: s._helper is not None and s._helper.hello)


async def _commit_one(store: FileStore, size: int) -> None:
    before = store.committed_seq
    store.append("k", b"", b"x" * size, time.time_ns())
    await store.flush()
    assert store.committed_seq == before + 1


async def test_lone_small_commit_is_synced_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(syncer_mod, "INLINE_SLOW", 10.0)  # no spike on a loaded machine turns it off
    store = await FileStore.open(str(tmp_path / "s"))
    s = store.syncer
    assert isinstance(s, Syncer)
    try:
        await _greeted(s)
        syncs = s.stats["syncs"]
        for _ in range(5):
            await _commit_one(store, 100)
        assert s.stats["inline"] == 5 and s.stats["syncs"] == syncs + 5
        assert s.stats["inline_bulk"] == 0
        # A job larger than INLINE_SYNC_MAX_BYTES is a bulk one: still on the loop.
        await _commit_one(store, pipeline_mod.INLINE_SYNC_MAX_BYTES + 1)
        assert s.stats["inline"] == 6 and s.stats["inline_bulk"] == 1 and s.stats["syncs"] == syncs + 6
        # So is a job of more records than INLINE_SYNC_MAX_RECORDS (load, not one publisher).
        for _ in range(pipeline_mod.INLINE_SYNC_MAX_RECORDS + 1):
            store.append("k", b"", b"x", time.time_ns())
        await store.flush()
        assert s.stats["inline"] == 7 and s.stats["inline_bulk"] == 2 and s.stats["syncs"] == syncs + 7
        # A job larger than INLINE_BULK_MAX_BYTES goes to the helper, overlapped with the next.
        await _commit_one(store, pipeline_mod.INLINE_BULK_MAX_BYTES + 1)
        assert s.stats["inline"] == 7 and s.stats["syncs"] == syncs + 8
    finally:
        await store.close()


async def test_bulk_syncs_leave_the_loop_while_the_disk_is_slow_on_average(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bulk inline syncs go to the helper once their moving average passes INLINE_BULK_SLOW,
    not on one slow sync; lone small commits stay on the loop meanwhile."""
    monkeypatch.setattr(syncer_mod, "INLINE_SLOW", 10.0)
    store = await FileStore.open(str(tmp_path / "s"))
    s = store.syncer
    assert isinstance(s, Syncer)
    slow = syncer_mod.INLINE_BULK_SLOW
    try:
        await _greeted(s)
        t = time.monotonic()
        # One spike among fast syncs: still on the loop.
        for dt in (0.0002, 0.0002, 4 * slow, 0.0002):
            s.bulk.observe(t, dt)
        assert s.bulk.off_until == 0.0 and s.bulk.backoff == syncpolicy.INLINE_BACKOFF
        # Slow throughout: off within a few syncs, for INLINE_BACKOFF.
        trips = 0
        for _ in range(8):
            s.bulk.observe(t, 2.5 * slow)
            if s.bulk.off_until > t:
                trips += 1
                break
        assert trips == 1 and s.bulk.avg == 0.0
        assert t + syncpolicy.INLINE_BACKOFF <= s.bulk.off_until <= t + syncpolicy.INLINE_BACKOFF + 1
        assert s.bulk.backoff == 2 * syncpolicy.INLINE_BACKOFF
        inline, bulk = s.stats["inline"], s.stats["inline_bulk"]
        await _commit_one(store, pipeline_mod.INLINE_SYNC_MAX_BYTES + 1)  # bulk: the helper
        assert s.stats["inline"] == inline and s.stats["inline_bulk"] == bulk
        await _commit_one(store, 100)  # a lone small commit: still on the loop
        assert s.stats["inline"] == inline + 1
        # Slow again after the backoff (syncs started after the trip): the next trip is
        # longer. Fast again: it starts short.
        s.bulk.off_until = 0.0
        t += 1.0
        for _ in range(8):
            s.bulk.observe(t, 2.5 * slow)
            if s.bulk.off_until > t:
                break
        assert s.bulk.backoff == 4 * syncpolicy.INLINE_BACKOFF
        s.bulk.off_until = 0.0
        s.bulk.observe(t + 1.0, 0.0002)
        assert s.bulk.backoff == syncpolicy.INLINE_BACKOFF
        bulk = s.stats["inline_bulk"]
        await _commit_one(store, pipeline_mod.INLINE_SYNC_MAX_BYTES + 1)
        assert s.stats["inline_bulk"] == bulk + 1  # on the loop again
    finally:
        await store.close()


async def test_work_scheduled_by_the_append_runs_before_an_inline_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replicated stream's leader schedules its followers' fetch replies when a message is
    stored; an inline sync must not stall the loop before they leave (the followers' fsyncs
    would follow the leader's instead of overlapping it)."""
    monkeypatch.setattr(syncer_mod, "INLINE_SLOW", 10.0)
    order: list[str] = []
    real = Syncer.try_inline_fdatasync

    def inline(self: Syncer, handle: int, bulk: bool = False) -> bool:
        order.append("sync")
        return real(self, handle, bulk)

    monkeypatch.setattr(Syncer, "try_inline_fdatasync", inline)
    store = await FileStore.open(str(tmp_path / "s"))
    s = store.syncer
    assert isinstance(s, Syncer)
    try:
        await _greeted(s)
        loop = asyncio.get_running_loop()

        async def one(i: int) -> None:
            store.append("k", b"", b"x", time.time_ns())  # kicks the flusher first
            loop.call_soon(order.append, f"ship{i}")  # then the leader's wake-up
            await store.flush()

        store.ship_first = True  # a replicated stream's leader
        for i in range(3):
            await one(i)
        assert order == ["ship0", "sync", "ship1", "sync", "ship2", "sync"]
        # Any other store syncs at once (a lone publisher does not pay the loop pass).
        store.ship_first = False
        order.clear()
        await one(3)
        assert order == ["sync", "ship3"]
        assert store.committed_seq == 4
    finally:
        await store.close()


async def test_a_slow_inline_sync_sends_later_ones_to_the_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(syncer_mod, "INLINE_SLOW", 0.0)  # every inline sync counts as slow
    store = await FileStore.open(str(tmp_path / "s"))
    s = store.syncer
    assert isinstance(s, Syncer)
    try:
        await _greeted(s)
        for _ in range(4):
            await _commit_one(store, 100)
        assert s.stats["inline"] == 1  # the first; the helper for INLINE_BACKOFF after it
        assert s.inline.backoff == 2 * syncpolicy.INLINE_BACKOFF  # and longer after the next
        monkeypatch.setattr(s.inline, "off_until", 0.0)  # the backoff is over
        await _commit_one(store, 100)
        assert s.stats["inline"] == 2 and s.inline.backoff == 4 * syncpolicy.INLINE_BACKOFF
    finally:
        await store.close()


async def test_a_failed_inline_sync_fails_the_store_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No slow sync on a loaded machine may send the failing one to the helper instead (failed
    # once in make test: the store then committed through the helper and never failed).
    monkeypatch.setattr(syncer_mod, "INLINE_SLOW", 10.0)
    store = await FileStore.open(str(tmp_path / "s"))
    s = store.syncer
    assert isinstance(s, Syncer)
    try:
        await _greeted(s)
        await _commit_one(store, 100)
        committed = store.committed_seq

        def eio(fd: int) -> None:
            raise OSError(errno.EIO, "injected")

        monkeypatch.setattr(os, "fdatasync", eio)  # this process only: the helper is untouched
        monkeypatch.setattr(s.inline, "off_until", 0.0)  # no backoff left from the first commit
        store.append("k", b"", b"lost", time.time_ns())
        await _until(lambda: store.failed is not None)
        assert store.committed_seq == committed  # never acknowledged
    finally:
        monkeypatch.undo()
        await store.close()


# ---- many files in one pass: one syncfs (syncpolicy.SYNCFS_MIN) ------------------------------


needs_syncfs = pytest.mark.skipif(
    not syncer_mod.syncfs_reports_errors(), reason="syncfs is used on Linux 5.8+ only"
)


@contextlib.asynccontextmanager
async def _stores(tmp_path: Path, n: int) -> AsyncIterator[tuple[list[FileStore], Syncer]]:
    """``n`` stores under ``tmp_path`` and their shared syncer, closed on the way out (a failed
    store's close may raise: that one is not checked here)."""
    stores = [await FileStore.open(str(tmp_path / f"s{i}")) for i in range(n)]
    s = stores[0].syncer
    assert isinstance(s, Syncer)
    try:
        yield stores, s
    finally:
        for st in stores:
            if st.failed is None:
                await st.close()
            else:
                with contextlib.suppress(Exception):
                    await st.close()


async def _commit_each(stores: list[FileStore]) -> None:
    """One message into every store in the same loop pass, then wait for all of them."""
    for i, st in enumerate(stores):
        st.append("k", b"", b"m%d" % i, time.time_ns())
    await asyncio.gather(*(st.flush() for st in stores), return_exceptions=True)


@pytest.fixture
def helper_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every commit through the helper (none on the loop)."""
    monkeypatch.setattr(pipeline_mod, "INLINE_SYNC_MAX_BYTES", 0)
    monkeypatch.setattr(pipeline_mod, "INLINE_BULK_MAX_BYTES", 0)


@needs_syncfs
async def test_syncs_of_many_files_asked_for_in_one_pass_share_one_syncfs(
    tmp_path: Path, helper_only: None
) -> None:
    async with _stores(tmp_path, 5) as (stores, s):
        assert s.use_syncfs
        await _greeted(s)
        shared, calls = s.stats["shared"], s.stats["syncfs"]
        await _commit_each(stores)
        # The first store's sync went at once; the four asked for after it in the same pass
        # were answered by one syncfs.
        assert s.stats["syncfs"] == calls + 1 and s.stats["shared"] == shared + 4
        assert [st.committed_seq for st in stores] == [1] * 5
        # Below SYNCFS_MIN files in a pass: one sync each.
        await _commit_each(stores[:2])
        assert s.stats["syncfs"] == calls + 1 and [st.committed_seq for st in stores[:2]] == [2, 2]
    for i in range(5):  # durable and whole after a reopen
        st = await FileStore.open(str(tmp_path / f"s{i}"))
        try:
            assert st.last_seq == (2 if i < 2 else 1) and st.load(1) is not None
        finally:
            await st.close()


@needs_syncfs
async def test_a_failed_shared_syncfs_fails_every_store_it_answered(
    tmp_path: Path, helper_only: None
) -> None:
    async with _stores(tmp_path, 5) as (stores, s):
        await _greeted(s)
        await _commit_each(stores)
        s.inject_error(errno.EIO, count=2)  # the next two sync rounds in the helper: both
        calls = s.stats["syncfs"]
        await _commit_each(stores)
        assert s.stats["syncfs"] == calls + 1
        await _until(lambda: all(st.failed is not None for st in stores))
        assert [st.committed_seq for st in stores] == [1] * 5  # none acknowledged


@needs_syncfs
async def test_a_shared_syncfs_lost_with_its_helper_is_sent_again_one_file_each(
    tmp_path: Path, helper_only: None
) -> None:
    async with _stores(tmp_path, 5) as (stores, s):
        pid = await _running(s)
        await _greeted(s)
        os.kill(pid, signal.SIGSTOP)
        calls, reissued = s.stats["syncfs"], s.stats["reissued"]
        task = asyncio.ensure_future(_commit_each(stores))
        await _until(lambda: s.stats["syncfs"] == calls + 1)
        await asyncio.sleep(0.1)
        assert [st.committed_seq for st in stores] == [0] * 5, "acknowledged while nothing synced"
        os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(task, 10)
        assert [st.committed_seq for st in stores] == [1] * 5
        assert all(st.failed is None for st in stores)
        assert s.stats["reissued"] >= reissued + 5 and s.pid != pid


@needs_syncfs
async def test_a_file_forgotten_in_the_pass_of_its_held_back_sync_is_still_answered(
    tmp_path: Path,
) -> None:
    """A held-back request goes before the FORGET (the helper would answer it EBADF, and a
    shared syncfs named by that file would fail every file it covers)."""
    s = acquire_syncer()
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT | os.O_APPEND) for i in range(5)]
    try:
        hs = [s.register(fd) for fd in fds]
        await _greeted(s)
        await asyncio.gather(*(s.fdatasync(h) for h in hs))  # each one registered in the helper
        for fd in fds:
            os.write(fd, b"x" * 100)
        calls = s.stats["syncfs"]
        futs = [s.fdatasync(h) for h in hs]  # the first sent, the other four held back
        s.forget(hs[1])  # the first of the held-back ones
        await asyncio.wait_for(asyncio.gather(*futs), 10)  # none failed (EBADF would raise)
        assert s.stats["syncfs"] == calls + 1  # the other three still shared one
        for h in hs[:1] + hs[2:]:
            s.forget(h)
    finally:
        for fd in fds:
            os.close(fd)
        await s.release()
