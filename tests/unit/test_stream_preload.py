"""A node start reads every stream directory in one thread (``stream/preload.py``) and the
loop takes the results over: the same streams, messages and offline reasons as opening each
stream on its own, a few thread hops whatever the number of streams, and nothing left locked
or open when a start fails half way."""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from typing import Any

import pytest

from jetlog.api.models import decode_stored_config, decode_stream_config, encode_stored_config
from jetlog.config import Storage
from jetlog.consumer.store import LoadedLog, read_log
from jetlog.errors import StorageError
from jetlog.log.fileopen import recover_dir
from jetlog.stream.config import normalize_stream_config
from jetlog.stream.manager import StreamManager
from jetlog.stream.preload import Preloaded, preload


class _Capture:
    """The upstream side the manager subscribes stream subjects on (records them)."""

    def __init__(self) -> None:
        self.subjects: list[str] = []

    def subscribe(self, subject: str, cb: Any, run_cb: Any = None) -> str:
        self.subjects.append(subject)
        return subject

    def unsubscribe(self, handle: str) -> None:
        self.subjects.remove(handle)

    async def flush(self, timeout: float = 5.0) -> None:
        return None


class _Out:
    def send(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        return None


class _Attach:
    """The consumer hook: what each stream was given (the directory and the state read)."""

    def __init__(self) -> None:
        self.calls: dict[str, tuple[str | None, Any]] = {}

    async def __call__(self, stream: Any, directory: str | None, loaded: Any = None) -> None:
        self.calls[stream.name] = (directory, loaded)
        if isinstance(loaded, LoadedLog):
            loaded.discard()  # taken over (a ConsumerLog would keep the fd)


def _manager(data: str, decode: Any = decode_stored_config, attach: Any = None) -> StreamManager:
    return StreamManager(
        data,
        Storage(),
        _Out(),
        _Capture(),
        decode_config=decode,
        encode_config=encode_stored_config,
        attach_consumers=attach,
        read_consumers=read_log,
    )


def _config(name: str, storage: str = "file") -> Any:
    body = f'{{"name": "{name}", "subjects": ["{name.lower()}.>"], "storage": "{storage}"}}'
    return normalize_stream_config(decode_stream_config(body.encode()))


async def _fill(data: str, streams: dict[str, int], memory: tuple[str, ...] = ()) -> None:
    m = _manager(data)
    for name, n in streams.items():
        s = await m.create(_config(name))
        for i in range(n):
            s.store.append(f"{name.lower()}.x", b"", b"m%d" % i, time.time_ns())
        await s.store.flush()
    for name in memory:
        await m.create(_config(name, "memory"))
    await m.close()


def _locked(path: str) -> bool:
    fd = os.open(os.path.join(path, "LOCK"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _log_dir(data: str, name: str) -> str:
    return os.path.join(data, "streams", name, "log")


async def test_load_gives_every_stream_its_messages_and_consumer_state(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path)
    await _fill(data, {"A": 3, "B": 0, "C": 7}, memory=("M",))
    attach = _Attach()
    m = _manager(data, attach=attach)
    await m.load()
    try:
        assert {n: s.store.state().messages for n, s in m.streams.items()} == {"A": 3, "B": 0, "C": 7, "M": 0}
        assert m.streams["C"].store.load(7).data == b"m6"
        assert sorted(m.capture.subjects) == ["a.>", "b.>", "c.>", "m.>"]  # type: ignore[attr-defined]
        # File streams got their consumer-state log read ahead; a memory stream keeps none.
        for name in ("A", "B", "C"):
            directory, loaded = attach.calls[name]
            assert directory == os.path.join(data, "streams", name, "consumers")
            assert isinstance(loaded, LoadedLog) and loaded.data == b""
        assert attach.calls["M"] == (None, None)
        assert m.offline == {}
        # One budget for what the node's fenced leaders hold (``stream/held.py``), loaded or created.
        s = await m.create(_config("D"))
        assert {id(x.held._budget) for x in m.streams.values()} == {id(m.hold_budget)}
        assert s.held._budget is m.hold_budget
    finally:
        await m.close()
    assert not _locked(_log_dir(data, "A"))


async def test_load_takes_a_few_thread_hops_whatever_the_number_of_streams(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path)
    await _fill(data, {f"S{i}": 2 for i in range(12)})
    hops: list[str] = []
    real = asyncio.to_thread

    async def counting(fn: Any, *args: Any, **kw: Any) -> Any:
        hops.append(getattr(fn, "__name__", type(fn).__name__))
        return await real(fn, *args, **kw)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    m = _manager(data, attach=_Attach())
    await m.load()
    try:
        assert len(m.streams) == 12
        # The listing only (the reading runs in ``LOAD_THREADS`` threads of its own); before,
        # five hops per stream.
        assert hops == ["_list_dirs"], hops
    finally:
        await m.close()


async def test_damaged_metadata_is_offline_with_its_reason_and_the_rest_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path)
    await _fill(data, {"A": 1, "BAD": 2, "C": 3})
    with open(os.path.join(data, "streams", "BAD", "stream.json"), "wb") as f:
        f.write(b'{"config": {"name": "BAD", "subj')
    os.makedirs(os.path.join(data, "streams", "EMPTY"))  # no stream.json: not a stream
    m = _manager(data, attach=_Attach())
    await m.load()
    try:
        assert sorted(m.streams) == ["A", "C"]
        assert list(m.offline) == ["BAD"]
        assert m.offline["BAD"].startswith("unable to load stream metadata: ")
    finally:
        await m.close()
    # The offline stream's store was never locked; its files are left for repair.
    assert not _locked(_log_dir(data, "BAD"))
    assert os.listdir(_log_dir(data, "BAD"))


async def test_an_unexpected_error_is_raised_after_the_others_and_nothing_stays_locked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path)
    await _fill(data, {"A": 1, "B": 2, "C": 3})

    def decode(raw: bytes) -> Any:
        cfg = decode_stored_config(raw)
        if cfg.name == "B":
            raise RuntimeError("boom")
        return cfg

    m = _manager(data, decode=decode, attach=_Attach())
    with pytest.raises(RuntimeError, match="boom"):
        await m.load()
    try:
        # The streams read beside the failed one are registered (closing the manager closes them).
        assert sorted(m.streams) == ["A", "C"]
    finally:
        await m.close()
    for name in ("A", "B", "C"):
        assert not _locked(_log_dir(data, name)), name


async def test_a_load_cancelled_after_reading_releases_what_it_read(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path)
    await _fill(data, {"A": 1, "B": 1})
    m = _manager(data, attach=_Attach())
    opened: list[str] = []

    async def failing_open(config: Any, created: int, pre: Any = None) -> Any:
        opened.append(config.name)
        assert _locked(_log_dir(data, config.name))  # read ahead: locked until taken over
        raise asyncio.CancelledError

    monkeypatch.setattr(m, "_open", failing_open)
    with pytest.raises(asyncio.CancelledError):
        await m.load()
    assert opened == ["A"]
    assert not _locked(_log_dir(data, "A")) and not _locked(_log_dir(data, "B"))
    consumers = os.path.join(data, "streams", "B", "consumers", "consumers.log")
    assert os.path.exists(consumers)  # B's consumer log was read ahead, then closed again


def test_preload_marks_a_store_it_cannot_lock_offline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path)
    asyncio.run(_fill(data, {"A": 2}))
    root = os.path.join(data, "streams")
    held = recover_dir(_log_dir(data, "A"))  # another owner of the directory
    try:
        out: list[Preloaded] = []
        preload(
            root,
            ["A"],
            out,
            decode_config=decode_stored_config,
            recover_args=lambda cfg: {},
            read_consumers=read_log,
        )
        assert [p.name for p in out] == ["A"]
        assert isinstance(out[0].offline, StorageError)
        assert "in use by another process" in str(out[0].offline)
        assert out[0].store is None and out[0].consumers is None
    finally:
        held.discard()
    assert not _locked(_log_dir(data, "A"))


async def test_a_load_cancelled_while_reading_releases_what_the_threads_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import threading

    data = str(tmp_path)
    await _fill(data, {"A": 1, "B": 1})
    gate = threading.Event()
    reached = threading.Event()

    def decode(raw: bytes) -> Any:
        cfg = decode_stored_config(raw)
        if cfg.name == "B":  # B's reading waits: the load is cancelled meanwhile
            reached.set()
            assert gate.wait(10)
        return cfg

    m = _manager(data, decode=decode, attach=_Attach())
    task = asyncio.ensure_future(m.load())
    assert await asyncio.to_thread(reached.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()  # B is recovered (and locked) after the cancellation...
    deadline = time.monotonic() + 10
    while _locked(_log_dir(data, "A")) or _locked(_log_dir(data, "B")):  # ...and released
        assert time.monotonic() < deadline, "a store read by a cancelled load stayed locked"
        await asyncio.sleep(0.02)
    assert m.streams == {}


async def test_a_replica_opens_with_compaction_held_until_its_role_sets_a_floor(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Cluster replicas open through ``open_replica``: file stores come up compacting nothing
    (floor 0) until the leader's replica floor arrives; a standalone stream has no floor."""
    data = str(tmp_path / "streams")
    m = _manager(data)
    try:
        alone = await m.create(_config("ALONE"))
        assert alone.store.compact_floor > 1 << 62
        replica, had = await m.open_replica(_config("REP"), 0)
        assert not had and replica.store.compact_floor == 0
    finally:
        await m.close()


async def test_a_read_ahead_is_what_the_load_takes_over(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = str(tmp_path)
    await _fill(data, {"A": 2, "B": 5})
    m = _manager(data, attach=_Attach())
    task = m.read_ahead()  # a node starts it before its links connect
    reading, _ = await task
    await asyncio.gather(*(asyncio.wrap_future(f) for f in reading))
    # Read and locked, not loaded yet.
    assert m.streams == {} and _locked(_log_dir(data, "A")) and _locked(_log_dir(data, "B"))
    await m.load()
    try:
        assert m._reading is None
        assert {n: s.store.state().messages for n, s in m.streams.items()} == {"A": 2, "B": 5}
    finally:
        await m.close()
    assert not _locked(_log_dir(data, "A")) and not _locked(_log_dir(data, "B"))


async def test_a_read_ahead_never_loaded_is_released(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A node whose links fail to connect after the read-ahead began: its start gives up, and
    # another start (in the same process) must find the stores unlocked.
    data = str(tmp_path)
    await _fill(data, {"A": 1, "B": 1})
    m = _manager(data, attach=_Attach())
    m.read_ahead()
    m.abandon_read_ahead()  # before the threads even started: they release when done
    deadline = time.monotonic() + 10
    while _locked(_log_dir(data, "A")) or _locked(_log_dir(data, "B")):
        assert time.monotonic() < deadline, "a store read ahead and abandoned stayed locked"
        await asyncio.sleep(0.02)
    m2 = _manager(data, attach=_Attach())
    task = m2.read_ahead()
    await asyncio.gather(*(asyncio.wrap_future(f) for f in (await task)[0]))
    await m2.close()  # closed without a load: what was read is released
    assert m2.streams == {}
    while _locked(_log_dir(data, "A")) or _locked(_log_dir(data, "B")):
        assert time.monotonic() < deadline, "a store read ahead and closed stayed locked"
        await asyncio.sleep(0.02)
    m3 = _manager(data, attach=_Attach())
    await m3.load()
    try:
        assert {n: s.store.state().messages for n, s in m3.streams.items()} == {"A": 1, "B": 1}
    finally:
        await m3.close()
