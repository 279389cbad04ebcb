"""The stream catalog of a node: create, update, delete, load at start, capture routing.

Layout under ``<data_dir>/streams/<name>/``: ``stream.json`` (the normalised config and the
creation time, replaced atomically) and ``log/`` (the file store). Memory streams keep their
``stream.json`` so they come back (empty) after a restart, as with nats-server.

A stream whose metadata cannot be read is reported offline (with the reason) instead of
stopping the node; its files are left untouched for repair.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import msgspec

from jetlog.errors import JetlogError, StorageError
from jetlog.fsutil import fsync_dir, write_atomic
from jetlog.log.fileopen import RecoveredDir
from jetlog.log.store import MsgStore
from jetlog.stream.held import HoldBudget
from jetlog.stream.preload import Discardable, Preloaded, preload
from jetlog.stream.stream import FOLLOWER, Outbound, Stream
from jetlog.wire.subjects import SubjectOwners, collide

log = logging.getLogger("jetlog.streams")

CaptureCallback = Callable[[str, "str | None", bytes, bytes], None]
RunCallback = Callable[[list[Any]], None]


class Capture(Protocol):
    """Subscribes stream subjects on the upstream (leaf link or client connection)."""

    def subscribe(self, subject: str, cb: CaptureCallback, run_cb: RunCallback | None = None) -> Any:
        """Start delivering messages published on ``subject`` to ``cb`` (or runs of them to
        ``run_cb``, where the link can); return a handle."""
        ...

    def unsubscribe(self, handle: Any) -> None:
        """Stop a subscription made by ``subscribe``."""
        ...

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the upstream registered every subscription made so far."""
        ...


class AttachConsumers(Protocol):
    """Gives a stream its consumers: recovered from ``directory`` (None: a memory stream),
    from the state ``read_consumers`` read ahead when ``loaded`` is given."""

    def __call__(self, stream: Stream, directory: str | None, loaded: Any = None, /) -> Awaitable[None]: ...


class StoreSettings(Protocol):
    """The node-wide storage settings a manager opens stores with."""

    @property
    def fsync(self) -> str: ...

    @property
    def sync_interval(self) -> float: ...

    @property
    def segment_bytes(self) -> int: ...

    @property
    def verify_on_open(self) -> str: ...


LOAD_THREADS = 2
"""Threads that read the stream directories at start (``preload``)."""
CLOSE_PARALLEL = 8
"""Streams closed at once on stop."""


class StreamManager:
    """All streams of one node."""

    def __init__(
        self,
        data_dir: str,
        storage: StoreSettings,
        outbound: Outbound,
        capture: Capture,
        *,
        decode_config: Callable[[bytes], Any],
        encode_config: Callable[[Any], bytes],
        domain: str | None = None,
        attach_consumers: AttachConsumers | None = None,
        read_consumers: Callable[[str], Discardable] | None = None,
    ) -> None:
        self.root = os.path.join(data_dir, "streams")
        self.storage = storage
        self.out = outbound
        self.capture = capture
        self.decode_config = decode_config
        self.encode_config = encode_config
        self.domain = domain or None
        self.attach_consumers = attach_consumers
        # Reads a consumer-state directory ahead (blocking), for ``attach_consumers``' third
        # argument: a start reads every stream's in its load thread.
        self.read_consumers = read_consumers
        self.streams: dict[str, Stream] = {}
        # What all fenced leaders of this node hold together (``stream/held.py``).
        self.hold_budget = HoldBudget()
        # Every open stream's subjects, kept beside ``streams`` (each place that adds, removes
        # or reconfigures a stream updates both) for the overlap check of a create.
        self._owners = SubjectOwners()
        self.offline: dict[str, str] = {}
        self._subs: dict[str, list[Any]] = {}
        self._lock = asyncio.Lock()
        self._reading: asyncio.Task[_Reading] | None = None

    # ---- startup / shutdown ---------------------------------------------------------------

    def read_ahead(self) -> asyncio.Task[_Reading]:
        """Start the disk half of :meth:`load` now, in its threads (once): a node starts it
        before its links connect (the loop only waits there), and ``load`` takes the results
        over. What is read and never loaded is released by :meth:`close`."""
        if self._reading is None:
            self._reading = asyncio.get_running_loop().create_task(self._read_all(), name="jetlog-read-ahead")
        return self._reading

    async def _read_all(self) -> _Reading:
        names = await asyncio.to_thread(_list_dirs, self.root)
        shares = [names[k::LOAD_THREADS] for k in range(min(LOAD_THREADS, len(names)))]
        read: list[list[Preloaded]] = [[] for _ in shares]
        read_all = functools.partial(
            preload,
            decode_config=self.decode_config,
            recover_args=self._recover_args,
            read_consumers=self.read_consumers,
        )
        ex = ThreadPoolExecutor(max(1, len(shares)), thread_name_prefix="jetlog-load")
        # Nothing is awaited from here on: once a share is submitted, the caller holds its
        # futures (a cancellation cannot strand a share's directory locks).
        reading = [ex.submit(read_all, self.root, sh, out) for sh, out in zip(shares, read, strict=True)]
        ex.shutdown(wait=False)
        return reading, read

    def abandon_read_ahead(self) -> None:
        """Release whatever a read-ahead that will not be loaded has read or will read (its
        threads finish their shares first)."""
        task, self._reading = self._reading, None
        if task is None:
            return
        if not task.done():
            task.cancel()  # still listing: nothing submitted yet (see ``_read_all``)
            return
        if task.cancelled() or task.exception() is not None:
            return
        _release_when_read(*task.result())

    async def load(self) -> None:
        """Open every stream found on disk. One thread does every stream's disk work in turn
        (``preload``: metadata, store recovery, consumer state); the loop then builds the
        streams from what it read, without further hops. ``LOAD_THREADS`` such threads share
        the streams (their reads and CRCs overlap: 0.41 s to ready against 0.43-0.45 with one,
        100 streams at rest; the same after a crash, whose record walk holds the GIL)."""
        reading, read = await self.read_ahead()
        self._reading = None
        try:
            await asyncio.gather(*(asyncio.wrap_future(f) for f in reading))
            pre = sorted((p for out in read for p in out), key=lambda p: p.name)
            failed: BaseException | None = None
            for p in pre:
                stream = None
                if p.offline is None and p.failure is None:
                    try:
                        stream = await self._open(p.config, p.created, p)
                    except (OSError, StorageError) as e:
                        p.offline = e
                    except Exception as e:
                        p.failure = e
                if p.offline is not None:
                    meta_path = os.path.join(self.root, p.name, "stream.json")
                    log.error("stream %s is offline: cannot load %s: %s", p.name, meta_path, p.offline)
                    self.offline[p.name] = f"unable to load stream metadata: {p.offline}"
                failed = failed or p.failure
                if stream is not None:
                    # A stream opened beside one that failed unexpectedly is still registered,
                    # so closing the manager closes it.
                    self._register(stream)
                    self._subscribe(stream)
                    log.info("stream %s loaded: %s", stream.config.name, _brief(stream))
        finally:
            # Whatever a failure left unopened: directory locks and files read ahead. A thread
            # still reading (the load was cancelled) releases its share when it is done: until
            # then only it touches that share.
            _release_when_read(reading, read)
        if failed is not None:
            raise failed

    def _recover_args(self, config: Any, replicated: bool = False) -> dict[str, Any] | None:
        """``recover_dir``'s arguments for the store of ``config`` (None: a memory stream)."""
        if config.storage == "memory":
            return None
        return {
            "first_seq": getattr(config, "first_seq", None) or 1,
            # A replica in a cluster checks every segment before it serves: a damaged one is then
            # rebuilt from its leader at once (the scrub of a lazy open would find it later).
            "lazy_verify": self.storage.verify_on_open == "lazy" and not replicated,
        }

    async def close(self) -> None:
        """Unsubscribe and close every stream (flushing their stores)."""
        self.abandon_read_ahead()
        for name in list(self.streams):
            self._unsubscribe(name)
        streams, self.streams = list(self.streams.values()), {}
        self._owners = SubjectOwners()
        # Several at a time: a close is mostly waits (the flusher's last sync, thread hops
        # for index files and fds), and one after another 100 streams took 0.7 s to stop.
        gate = asyncio.Semaphore(CLOSE_PARALLEL)

        async def one(s: Stream) -> None:
            async with gate:
                try:
                    await s.close()
                except StorageError as e:
                    log.error("stream %s: close failed: %s", s.name, e)

        await asyncio.gather(*(one(s) for s in streams))

    # ---- catalog operations ---------------------------------------------------------------

    def get(self, name: str) -> Stream | None:
        """The stream named ``name``, or None."""
        return self.streams.get(name)

    def overlaps(self, subjects: list[str], exclude: str | None = None) -> bool:
        """True if any of ``subjects`` collides with another stream's subjects."""
        return self._owners.collides(subjects, exclude)

    def _register(self, stream: Stream) -> None:
        self.streams[stream.name] = stream
        self._owners.set(stream.name, stream.config.subjects or ())

    def names(self, subject: str | None = None) -> list[str]:
        """Stream names in byte order, optionally only streams whose subjects collide."""
        out = [
            n
            for n, s in self.streams.items()
            if not subject or any(collide(subject, x) for x in s.config.subjects or ())
        ]
        return sorted(out, key=lambda n: n.encode())

    async def create(self, config: Any) -> Stream:
        """Create a new stream from a validated config (the caller checked name/overlap)."""
        async with self._lock:
            created = time.time_ns()
            await asyncio.to_thread(
                make_stream_dir,
                self.root,
                config.name,
                self._meta(config, created),
                fresh=True,
                files=config.storage != "memory",
            )
            stream = await self._open(config, created)
            self._register(stream)
            self._subscribe(stream)
            self.offline.pop(config.name, None)
            # The creator may publish as soon as it has our reply: the upstream must already
            # route the stream's subjects to us.
            await self.capture.flush()
            return stream

    async def update(self, stream: Stream, config: Any) -> None:
        """Persist and apply a validated new config; re-subscribe if subjects changed."""
        async with self._lock:
            await self._write_meta(config, stream.created)
            old_subjects = list(stream.config.subjects or ())
            stream.update_config(config)
            self._owners.set(stream.name, config.subjects or ())
            if list(config.subjects or ()) != old_subjects:
                self._unsubscribe(stream.name)
                self._subscribe(stream)
                await self.capture.flush()

    async def delete(self, name: str) -> bool:
        """Delete a stream and its data; False if unknown."""
        async with self._lock:
            stream = self.streams.pop(name, None)
            if stream is None:
                return False
            self._owners.drop(name)
            self._unsubscribe(name)
            await stream.destroy()
            await asyncio.to_thread(shutil.rmtree, os.path.join(self.root, name), True)
            return True

    # ---- replicas (cluster: the reconciler decides what this node holds) --------------------

    def local_names(self) -> list[str]:
        """Streams with metadata on this node's disk (open or not)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if os.path.isfile(os.path.join(self.root, n, "stream.json")))

    async def open_replica(self, config: Any, created: int, *, role: str = FOLLOWER) -> tuple[Stream, bool]:
        """Open this node's replica of a stream (creating it empty if absent) without
        attaching consumers or capturing its subjects (:meth:`capture_on` does, for the
        leader); returns (stream, whether data was already on disk)."""
        async with self._lock:
            existing = self.streams.get(config.name)
            if existing is not None:
                return existing, True
            had = await asyncio.to_thread(
                make_stream_dir, self.root, config.name, self._meta(config, created), fresh=False
            )
            store = await self._open_store(config, replicated=True)
            if hasattr(store, "compact_floor"):
                # A replica compacts nothing until its role sets the floor (the leader: what
                # its followers and the HW hold; a follower: the leader's, from its first
                # reply). Opened without one, it could rewrite a tail it is then truncated
                # into, or positions a follower of it still fetches (docs/cluster.md §4).
                store.compact_floor = 0
            stream = Stream(
                config, store, created, self.out, domain=self.domain, hold_budget=self.hold_budget
            )
            await stream.start(role, None)
            self._register(stream)
            self.offline.pop(config.name, None)
            return stream, had

    async def update_replica(self, stream: Stream, config: Any) -> None:
        """Apply a config the metadata changed (every replica; the leader enforces limits)."""
        async with self._lock:
            await self._write_meta(config, stream.created)
            old_subjects = list(stream.config.subjects or ())
            stream.update_config(config)
            self._owners.set(stream.name, config.subjects or ())
            if list(config.subjects or ()) != old_subjects and stream.name in self._subs:
                self._unsubscribe(stream.name)
                self._subscribe(stream)
                await self.capture.flush()

    async def capture_on(self, stream: Stream) -> None:
        """The stream leader captures its subjects; returns once the upstream has the interest.

        Only the leader subscribes, as in nats-server (a stream subscribes to its subjects
        where it leads): every follower subscribed too would have the upstream deliver each
        publish three times, and two replicas parse and drop it (~30 % of a follower's CPU under
        an async-publish flood). While no node leads, a publish request gets "no responders",
        which JetStream clients retry, as during nats-server's own elections."""
        if stream.name not in self._subs:
            self._subscribe(stream)
            await self.capture.flush()

    def capture_off(self, name: str) -> None:
        """A replica stops capturing (it no longer leads)."""
        self._unsubscribe(name)

    async def attach(self, stream: Stream) -> None:
        """Give a (new) writer its consumers, recovered from its consumer log."""
        if self.attach_consumers is not None and stream.consumers is None:
            await self.attach_consumers(stream, self._consumer_dir(stream.config))

    async def detach(self, stream: Stream) -> None:
        """Stop a former writer's consumers (their state stays in the log)."""
        cset, stream.consumers = stream.consumers, None
        if cset is not None:
            await cset.close()

    def _consumer_dir(self, config: Any) -> str | None:
        return None if config.storage == "memory" else os.path.join(self.root, config.name, "consumers")

    # ---- internals ------------------------------------------------------------------------

    def _meta(self, config: Any, created: int) -> bytes:
        return msgspec.json.encode({"config": msgspec.Raw(self.encode_config(config)), "created": created})

    async def _write_meta(self, config: Any, created: int) -> None:
        path = os.path.join(self.root, config.name, "stream.json")
        await asyncio.to_thread(write_atomic, path, self._meta(config, created))

    async def _open(self, config: Any, created: int, pre: Preloaded | None = None) -> Stream:
        """Open a stream's store, start it and attach its consumers; ``pre``: its directory as
        ``preload`` read it (the store and the consumer-state log are taken over from it)."""
        store = await self._open_store(config, recovered=pre.store if pre is not None else None)
        if pre is not None:
            pre.store = None  # the store owns the directory lock now
        stream = Stream(config, store, created, self.out, domain=self.domain, hold_budget=self.hold_budget)
        await stream.start()
        if self.attach_consumers is not None:
            # Consumer state lives beside the log (memory streams keep none on disk).
            loaded = None
            if pre is not None:
                loaded, pre.consumers = pre.consumers, None
            await self.attach_consumers(stream, self._consumer_dir(config), loaded)
        return stream

    async def _open_store(
        self, config: Any, replicated: bool = False, recovered: RecoveredDir | None = None
    ) -> MsgStore:
        from jetlog.log import FileStore, MemStore

        args = self._recover_args(config, replicated)
        if args is None:
            first_seq = getattr(config, "first_seq", None) or 1
            return (
                MemStore(first_seq=first_seq, replicated=True)
                if replicated
                else MemStore(first_seq=first_seq)
            )
        st = self.storage
        return await FileStore.open(
            os.path.join(self.root, config.name, "log"),
            compression=config.compression not in (None, "", "none"),
            fsync=st.fsync,
            sync_interval=st.sync_interval,
            segment_bytes=st.segment_bytes,
            recovered=recovered,
            **args,
        )

    def _subscribe(self, stream: Stream) -> None:
        self._subs[stream.name] = [
            self.capture.subscribe(subject, stream.process, stream.process_run)
            for subject in stream.config.subjects or ()
        ]

    def _unsubscribe(self, name: str) -> None:
        for h in self._subs.pop(name, []):
            try:
                self.capture.unsubscribe(h)
            except JetlogError as e:
                log.warning("stream %s: unsubscribe failed: %s", name, e)


def make_stream_dir(root: str, name: str, meta: bytes, *, fresh: bool, files: bool = False) -> bool:
    """Lay out a stream's directory durably in one go (blocking; a thread): with ``files`` (a
    file stream's leader) ``log/`` and ``consumers/``, then ``stream.json``, whose directory
    fsync also makes the subdirectories' entries durable, then the parent's fsync for the
    stream directory's own entry when it is new (on ext4 without a journal, as on this host,
    nothing else would). One thread hop instead of four. ``fresh``: remove leftovers of a
    stream deleted while its files were busy. Returns whether ``stream.json`` was there."""
    sdir = os.path.join(root, name)
    had = os.path.isfile(os.path.join(sdir, "stream.json"))
    if fresh and os.path.exists(sdir):
        shutil.rmtree(sdir, True)
        had = False
    new = not os.path.isdir(sdir)
    os.makedirs(sdir, exist_ok=True)
    if files:
        os.makedirs(os.path.join(sdir, "log"), exist_ok=True)
        os.makedirs(os.path.join(sdir, "consumers"), exist_ok=True)
    write_atomic(os.path.join(sdir, "stream.json"), meta)
    if new:
        fsync_dir(root)
    return had


_Reading = tuple[list[Future[None]], list[list[Preloaded]]]
"""A load's reading threads (one future per share) and what each share has read."""


def _discard_all(out: list[Preloaded], _done: Future[None]) -> None:
    for p in out:
        p.discard()


def _release_when_read(reading: list[Future[None]], read: list[list[Preloaded]]) -> None:
    """Discard what each share read and nobody took over, once its thread is done."""
    for f, out in zip(reading, read, strict=True):
        f.add_done_callback(functools.partial(_discard_all, out))


def _list_dirs(root: str) -> list[str]:
    os.makedirs(root, exist_ok=True)
    return sorted(os.listdir(root))


def _brief(stream: Stream) -> str:
    st = stream.store.state()
    return f"{st.messages} msgs, seq {st.first_seq}..{st.last_seq}"
