"""Durable consumer state: one append-only log per stream, replayed through ``ConsumerState``.

The record format and its replay are ``records``'s. Deliveries and acks are appended on the loop
(page cache) and made durable in groups: at once when someone waits (an ack with a reply
subject — "double ack" — is answered only after its record is fsynced), else within
``sync_interval``. A crash therefore loses at most the last interval of plain acks and
deliveries: those messages are delivered again (at least once), never skipped.

A torn tail (crash mid-write) is truncated at the last whole record. A record that fails its CRC
with valid data after it is corruption: the log is moved aside and the consumers start from the
last state that could be read, which is logged loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from jetlog.consumer.records import (
    ACK,
    ACK_TAIL,
    CID,
    CID_SEQ,
    CID_SEQ_SEQ,
    CID_SEQ_TS,
    CID_TS,
    CREATE,
    CREATE_HEAD,
    DELETE,
    DELIVER,
    DELIVER_TAIL,
    DROP,
    FORGET,
    PAUSE,
    POLICIES,
    PURGE,
    START,
    U32,
    UPDATE,
    ConsumerTuple,
    Recovered,
    encode_image,
    record,
    replay,
    replayed,
)
from jetlog.errors import StorageError
from jetlog.fsutil import fsync_dir
from jetlog.wire.crc import crc32c

if TYPE_CHECKING:
    from jetlog.log.syncer import Syncer

log = logging.getLogger("jetlog.consumer.store")

LOG_NAME = "consumers.log"
COMPACT_BYTES = 16 * 1024 * 1024
FEED_BYTES = 4 * 1024 * 1024


class LoadedLog:
    """A consumer-state log opened and read by ``read_log``: ``ConsumerLog.open`` takes it
    over, or ``discard`` closes it."""

    __slots__ = ("data", "fd")

    def __init__(self, fd: int, data: bytes) -> None:
        self.fd = fd
        self.data = data

    def take(self) -> tuple[int, bytes]:
        """The fd and the bytes read, once: the caller owns the fd from here on."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            raise StorageError("a consumer-state log was taken over twice")
        return fd, self.data

    def discard(self) -> None:
        """Close the file without opening the log (nothing once taken)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


def read_log(directory: str) -> LoadedLog:
    """Open (creating) ``directory/consumers.log`` and read it whole (blocking: a thread).
    Raises ``StorageError``."""
    path = os.path.join(directory, LOG_NAME)
    try:
        # A new directory or file is durable only once the directory holding its entry is
        # synced (the log's own fdatasyncs do not cover that): a consumer acknowledged as
        # created must not vanish with its file after a power loss.
        if not os.path.isdir(directory):
            os.makedirs(directory, exist_ok=True)
            fsync_dir(os.path.dirname(os.path.abspath(directory)))
        new = not os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            if new:
                fsync_dir(directory)
            with open(path, "rb") as f:
                return LoadedLog(fd, f.read())
        except BaseException:
            os.close(fd)
            raise
    except OSError as e:
        raise StorageError(f"cannot open consumer state {path}: {e}") from e


class ConsumerLog:
    """The consumer-state log of one stream (see module docstring)."""

    def __init__(self, path: str, fd: int, sync_interval: float) -> None:
        self.path = path
        self._fd = fd
        self._buf: list[bytes] = []
        self._flush_scheduled = False
        self._size = 0
        self._unsynced = False
        self._waiters: list[asyncio.Future[None]] = []
        self._sync_interval = sync_interval
        self._next_cid = 1
        self.recovered: dict[str, Recovered] = {}
        self._syncer: Syncer | None = None
        self._handle = 0
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # Armed when unsynced data is written, so an idle log has no timer: with a periodic
        # wake-up per stream, 1,000 idle streams cost 1,000 task wake-ups a second.
        self._sync_timer: asyncio.TimerHandle | None = None
        # A rewrite (compaction, a follower's snapshot) replaces the file by rename while a
        # thread writes the new one: records appended meanwhile are held in ``_buf`` (written
        # to the old file they would vanish with it) and syncs wait for the switch.
        self._io_lock = asyncio.Lock()
        self._rewriting = False
        self._closed = False
        self.failed: BaseException | None = None
        self.on_large: Callable[[], None] | None = None  # asked to compact when the log grows
        # Replication (docs/cluster.md §5): records appended since this log was opened, a
        # bounded feed of the latest ones for followers, and a barrier ``sync`` also waits for
        # (every in-sync follower holds the records durably).
        self.appended = 0
        self._imaged = 0  # ``appended`` when the file was last rewritten as an image (or opened)
        self._feed: deque[bytes] | None = None
        self._feed_bytes = 0
        self.on_append: Callable[[], None] | None = None
        self.replicated: Callable[[int], Awaitable[None]] | None = None

    @classmethod
    async def open(
        cls, directory: str, sync_interval: float = 1.0, *, loaded: LoadedLog | None = None
    ) -> ConsumerLog:
        """Open (creating) ``directory/consumers.log`` and recover its consumers. ``loaded``:
        what ``read_log(directory)`` returned, read ahead in a thread of the caller's choosing
        (a node start reads every stream's in one thread); the log takes over its fd."""
        from jetlog.log.syncer import acquire_syncer

        path = os.path.join(directory, LOG_NAME)
        if loaded is None:
            loaded = await asyncio.to_thread(read_log, directory)
        fd, data = loaded.take()
        rp, valid, corrupt = replay(data)
        if corrupt:
            log.error(
                "consumer state %s is corrupt at offset %d; keeping the state read before it and "
                "moving the file aside",
                path,
                valid,
            )
        self = cls(path, fd, sync_interval)
        self._next_cid = rp.next_cid
        self.recovered = {c.name: c for c in rp.consumers.values()}
        self._syncer = acquire_syncer()
        self._handle = self._syncer.register(fd)
        if valid != len(data) or corrupt:
            # Rewrite from what was read: a clean file without the torn/corrupt tail.
            if corrupt:
                await asyncio.to_thread(_copy_aside, path, data)
            await self.compact(lambda: replayed(rp))
        else:
            self._size = len(data)
        self._task = asyncio.get_running_loop().create_task(self._syncer_loop(), name=f"consumer-log:{path}")
        return self

    # ---- appending -------------------------------------------------------------------------

    def _append(self, rec: bytes) -> None:
        self._append_many((rec,))

    def _append_many(self, recs: Sequence[bytes]) -> None:
        """Append records: counted for the followers' feed, written on the loop's next pass."""
        if self._closed or not recs:
            return
        self.appended += len(recs)
        feed = self._feed
        if feed is not None:
            feed.extend(recs)
            self._feed_bytes += sum(map(len, recs))
            while self._feed_bytes > FEED_BYTES and len(feed) > 1:
                self._feed_bytes -= len(feed.popleft())
            if self.on_append is not None:
                self.on_append()
        self._buf.extend(recs)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._buf or self._closed or self._rewriting:
            return
        data = b"".join(self._buf)
        self._buf.clear()
        try:
            # Appends of a few KB into the page cache: cheap enough for the loop.
            os.write(self._fd, data)
        except OSError as e:
            self._fail(e)
            return
        self._size += len(data)
        self._unsynced = True
        if self._sync_timer is None:
            # fsync within sync_interval of the first write that is not yet durable.
            self._sync_timer = asyncio.get_running_loop().call_later(self._sync_interval, self._sync_due)
        if self._size > COMPACT_BYTES and self.on_large is not None:
            self.on_large()

    def create(self, name: str, ack_policy: str, config: bytes, created: int) -> int:
        """Record a new consumer; returns its id in this log."""
        cid = self._next_cid
        self._next_cid += 1
        nb = name.encode()
        pol = POLICIES.index(ack_policy) if ack_policy in POLICIES else 2
        self._append(record(CREATE, CREATE_HEAD.pack(cid, pol, created, len(nb)) + nb + config))
        return cid

    def update(self, cid: int, config: bytes) -> None:
        self._append(record(UPDATE, CID.pack(cid) + config))

    def delete(self, cid: int) -> None:
        self._append(record(DELETE, CID.pack(cid)))

    def start(self, cid: int, sseq: int) -> None:
        self._append(record(START, CID_SEQ.pack(cid, sseq)))

    def deliver(self, cid: int, sseq: int, ts: int) -> None:
        tail = DELIVER_TAIL.pack(1 + CID_SEQ_TS.size, DELIVER, cid, sseq, ts)
        self._append(U32.pack(crc32c(tail)) + tail)

    def deliver_many(self, cid: int, sseqs: list[int], ts: int) -> None:
        """``deliver`` for each of ``sseqs`` (in order) at ``ts``: one delivery pass. The same
        DELIVER records, appended in one call: a push or pull pass delivers up to hundreds of
        messages, and the bookkeeping of ``_append`` per record (the feed, the followers'
        wake-up, the flush check) cost ~5 % of push's rate. Not a new record type: followers
        of another version (a rolling upgrade) read and replay these records unchanged."""
        pack, cpack, size = DELIVER_TAIL.pack, U32.pack, 1 + CID_SEQ_TS.size
        recs = []
        for sseq in sseqs:
            tail = pack(size, DELIVER, cid, sseq, ts)
            recs.append(cpack(crc32c(tail)) + tail)
        self._append_many(recs)

    def ack(self, cid: int, sseq: int, dseq: int) -> None:
        tail = ACK_TAIL.pack(1 + CID_SEQ_SEQ.size, ACK, cid, sseq, dseq)
        self._append(U32.pack(crc32c(tail)) + tail)

    def ack_many(self, cid: int, acks: list[tuple[int, int]]) -> None:
        """``ack`` for each ``(sseq, dseq)`` of ``acks`` (in order): the same ACK records in
        one append, like ``deliver_many``."""
        pack, cpack, size = ACK_TAIL.pack, U32.pack, 1 + CID_SEQ_SEQ.size
        recs = []
        for sseq, dseq in acks:
            tail = pack(size, ACK, cid, sseq, dseq)
            recs.append(cpack(crc32c(tail)) + tail)
        self._append_many(recs)

    def drop(self, cid: int, sseq: int) -> None:
        self._append(record(DROP, CID_SEQ.pack(cid, sseq)))

    def forget(self, cid: int, sseq: int) -> None:
        self._append(record(FORGET, CID_SEQ.pack(cid, sseq)))

    def purge(self, cid: int, seq: int) -> None:
        self._append(record(PURGE, CID_SEQ.pack(cid, seq)))

    def pause(self, cid: int, until: int) -> None:
        self._append(record(PAUSE, CID_TS.pack(cid, until)))

    # ---- replication -----------------------------------------------------------------------

    def enable_feed(self) -> None:
        """Keep the latest records (up to ``FEED_BYTES``) for followers (stream leader)."""
        if self._feed is None:
            self._feed = deque()
            self._feed_bytes = 0

    def records_after(self, idx: int, max_bytes: int) -> tuple[bytes, int] | None:
        """Records ``idx+1 .. `` (as many whole ones as fit in ``max_bytes``, at least one),
        and the index of the last one; None when ``idx`` is older than the feed holds."""
        feed = self._feed
        if feed is None or idx > self.appended:
            return None
        first = self.appended - len(feed)  # index of the record before feed[0]
        if idx < first:
            return None
        out: list[bytes] = []
        size = 0
        i = idx - first
        while i < len(feed):
            rec = feed[i]
            if out and size + len(rec) > max_bytes:
                break
            out.append(rec)
            size += len(rec)
            i += 1
        return b"".join(out), idx + len(out)

    def replica_append(self, data: bytes) -> None:
        """Follower: append records received from the leader (checked whole and valid)."""
        _, valid, corrupt = replay(data)
        if corrupt or valid != len(data):
            raise StorageError("consumer records from the leader are malformed")
        self._append_raw(data)

    def _append_raw(self, data: bytes) -> None:
        if self._closed or not data:
            return
        self._buf.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def replica_replace(self, image: bytes) -> None:
        """Follower: replace the whole log with the leader's snapshot image (atomic)."""
        _, valid, corrupt = replay(image)
        if corrupt or valid != len(image):
            raise StorageError("consumer snapshot from the leader is malformed")

        async def snapshot() -> bytes:
            return image

        # Records received before the snapshot are covered by it: dropped, not replayed on top.
        await self._rewrite(snapshot, discard_pending=True)

    # ---- durability ------------------------------------------------------------------------

    async def sync(self) -> None:
        """Wait until everything appended so far is fsynced (and, on a replicated stream's
        leader, held durably by every in-sync follower)."""
        if self.failed is not None:
            raise StorageError(f"consumer state {self.path} failed: {self.failed}")
        target = self.appended
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._wake.set()
        await fut
        if self.replicated is not None:
            try:
                await self.replicated(target)
            except TimeoutError:
                raise StorageError("consumer state not replicated to the in-sync followers in time") from None

    def _sync_due(self) -> None:
        self._sync_timer = None
        self._wake.set()

    def _cancel_sync_timer(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.cancel()
            self._sync_timer = None

    async def _syncer_loop(self) -> None:
        # Wakes for a sync() waiter or when the sync timer of unsynced data fires; sleeps
        # without a deadline otherwise.
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            await self._sync_now()

    async def _sync_now(self) -> None:
        async with self._io_lock:
            await self._sync_locked()

    async def _sync_locked(self) -> None:
        self._flush()
        waiters, self._waiters = self._waiters, []
        if not self._unsynced:
            for w in waiters:
                if not w.done():
                    w.set_result(None)
            return
        self._unsynced = False
        # This sync covers everything written so far; a write during it arms a new timer.
        self._cancel_sync_timer()
        try:
            assert self._syncer is not None
            await self._syncer.fdatasync(self._handle)
        except OSError as e:
            self._fail(e)
            for w in waiters:
                if not w.done():
                    w.set_exception(StorageError(f"consumer state {self.path}: fsync failed: {e}"))
            return
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _fail(self, e: BaseException) -> None:
        if self.failed is None:
            self.failed = e
            log.error("consumer state %s failed: %s (acks are no longer persisted)", self.path, e)

    @property
    def size(self) -> int:
        """Bytes in the log file."""
        return self._size

    def wants_compaction(self) -> bool:
        """True when the log grew large enough to be rewritten as snapshots."""
        return self._size > COMPACT_BYTES

    def unchanged(self) -> bool:
        """Nothing was appended since the log was opened or last rewritten as an image: a
        rewrite at close would write the same state again (three fsyncs and a rename per
        stream on every stop)."""
        return self.appended == self._imaged

    async def compact(self, snapshot: Callable[[], list[ConsumerTuple]]) -> None:
        """Rewrite the log as one CREATE + STATE per live consumer (atomic rename).

        ``snapshot()`` is called once the rewrite has the file to itself, right after the
        records appended so far are written: the image covers exactly those, and records
        appended later go after it in the new file (replaying one of the earlier records on
        top of the image would count a delivery twice)."""

        async def image() -> bytes:
            return encode_image(snapshot())

        await self._rewrite(image)

    async def compact_replica(self) -> None:
        """Follower: rewrite the log from its own replay (no live consumers on a follower)."""

        async def image() -> bytes:
            data = await asyncio.to_thread(_read_file, self.path)
            rp, _, _ = replay(data)
            return encode_image(replayed(rp))

        await self._rewrite(image)

    async def _rewrite(self, image: Callable[[], Awaitable[bytes]], *, discard_pending: bool = False) -> None:
        """Replace the file with ``await image()``, atomically (write, fsync, rename, fsync the
        directory, in a thread). Under the I/O lock: pending records are first written to the
        current file (or dropped with ``discard_pending``); from then on appends are held
        and written to the new file once it has the name."""
        async with self._io_lock:
            if discard_pending:
                self._buf.clear()
            else:
                self._flush()
            self._rewriting = True
            try:
                # Records appended from here on are held and go after the image: not in it.
                self._imaged = self.appended
                data = await image()
                job = asyncio.ensure_future(asyncio.to_thread(_replace_file, self.path, data))
                try:
                    await asyncio.shield(job)
                except asyncio.CancelledError:
                    # The thread renames the new file into place whatever happens to this
                    # task: finish the switch before the cancellation goes on, or later
                    # records would be written to the unlinked old file.
                    await asyncio.wait([job])
                    raise
                finally:
                    self._switch_file(job, len(data))
            finally:
                self._rewriting = False
                self._flush()  # the records held during the rewrite, now into the new file

    def _switch_file(self, job: asyncio.Future[int], size: int) -> None:
        if not job.done() or job.cancelled():
            self._fail(StorageError("consumer state rewrite did not finish"))
            return
        err = job.exception()
        if err is not None:
            self._fail(err)
            return
        new_fd = job.result()
        old_fd, old_handle = self._fd, self._handle
        self._fd = new_fd
        assert self._syncer is not None
        self._handle = self._syncer.register(new_fd)
        self._syncer.forget(old_handle)
        os.close(old_fd)
        self._size = size
        self._unsynced = False
        self._cancel_sync_timer()

    async def close(self) -> None:
        """Flush, fsync, stop the background task, release the fsync helper. Idempotent."""
        if self._closed:
            return
        with contextlib.suppress(StorageError):
            await self._sync_now()
        self._closed = True
        self._cancel_sync_timer()
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._syncer is not None:
            self._syncer.forget(self._handle)
            await self._syncer.release()
            self._syncer = None
        os.close(self._fd)


def _replace_file(path: str, data: bytes) -> int:
    """Write ``data`` to ``path.tmp``, fsync it, rename it over ``path``, fsync the directory;
    return the new file's fd (opened for appending)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))
    return fd


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _copy_aside(path: str, data: bytes) -> None:
    n = 0
    while os.path.exists(f"{path}.corrupt.{n}"):
        n += 1
    with open(f"{path}.corrupt.{n}", "wb") as f:
        f.write(data)
