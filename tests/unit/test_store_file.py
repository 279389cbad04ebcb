"""FileStore specifics: recovery, torn tails, quarantine, index files, retention, compaction and
the op carry-forward invariant, failure injection, fsync modes."""

from __future__ import annotations

import asyncio
import errno
import glob
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from jetlog.errors import StorageError, StreamUnavailableError
from jetlog.log import FileStore, OsIO
from jetlog.log.syncer import Syncer, SyncService
from jetlog.wire import records as rc
from jetlog.wire import recordscan as rs
from tests.unit.test_store_model import Model, check_store

SEG = 4096


# Small synchronous file helpers (the tests poke at files between store operations).
def _read(path: str | Path) -> bytes:
    return Path(path).read_bytes()


def _write(path: str | Path, data: bytes) -> None:
    Path(path).write_bytes(data)


def _append(path: str | Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _exists(path: str | Path) -> bool:
    return os.path.exists(path)


def _size(path: str | Path) -> int:
    return os.path.getsize(path)


def _isfile(path: str | Path) -> bool:
    return os.path.isfile(path)


async def _open(path: Path, **kw: Any) -> FileStore:
    kw.setdefault("segment_bytes", SEG)
    kw.setdefault("auto_compact", False)
    return await FileStore.open(str(path), **kw)


def _logs(path: Path) -> list[str]:
    return sorted(glob.glob(str(path / "*.log")))


def _batches(file: str) -> list[tuple[int, rc.BatchHeader]]:
    buf = _read(file)
    res = rs.scan(buf)
    # A writer left open (a crash) is preallocated: zeros follow its data.
    assert res.status == rs.OK or buf.count(0, res.end) == len(buf) - res.end
    return res.batches


def _data_size(file: str) -> int:
    """Where a segment's batches end (a preallocated writer's file goes on with zeros)."""
    off, h = _batches(file)[-1]
    return off + h.size


def _ops_in(file: str) -> list[tuple[int, int]]:
    buf = _read(file)
    out: list[tuple[int, int]] = []
    import zstandard

    for off, _ in rs.scan(buf).batches:
        batch, _ = rc.decode_batch(buf, off, decompressor=zstandard.ZstdDecompressor())
        out.extend(batch.ops)
    return out


async def _fill(
    store: FileStore, model: Model, n: int, size: int = 100, subj: str = "a.b", ts0: int = 1
) -> None:
    for _ in range(n):
        data = (f"{model.last_seq + 1}:".encode() + b"p" * size)[:size]
        assert store.append(subj, b"", data, ts0 + model.last_seq) == model.append(
            subj, b"", data, ts0 + model.last_seq
        )


class FlakyIO(OsIO):
    """Real I/O with injectable failures and counters."""

    def __init__(self) -> None:
        self.fail_sync = False
        self.fail_write = False
        self.syncs = 0

    def write(self, fd: int, bufs: list[bytes], at: int) -> None:
        if self.fail_write:
            raise OSError(errno.ENOSPC, "injected write failure")
        super().write(fd, bufs, at)

    def sync(self, fd: int) -> None:
        self.syncs += 1
        if self.fail_sync:
            raise OSError(errno.EIO, "injected fsync failure")
        super().sync(fd)


class FlakySync:
    """A ``SyncService`` wrapper whose directory fsyncs can be made to fail."""

    def __init__(self, inner: SyncService) -> None:
        self.inner = inner
        self.fail_dir = False
        self.dir_syncs = 0

    def register(self, fd: int) -> int:
        return self.inner.register(fd)

    def forget(self, handle: int) -> None:
        self.inner.forget(handle)

    async def fdatasync(self, handle: int) -> None:
        await self.inner.fdatasync(handle)

    async def fsync(self, handle: int) -> None:
        self.dir_syncs += 1
        if self.fail_dir:
            raise OSError(errno.EIO, "injected directory fsync failure")
        await self.inner.fsync(handle)


# ---- opening --------------------------------------------------------------------------------


async def test_layout_and_clean_reopen_uses_indexes(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 100)
    await store.close()
    logs = _logs(tmp_path)
    assert len(logs) >= 3
    assert os.path.basename(logs[0]) == "00000000000000000001.log"
    assert all(_exists(p[:-4] + ".idx") for p in logs)
    store = await _open(tmp_path)
    assert store.recovery.rebuilt_indexes == 0 and store.recovery.truncated_bytes == 0
    assert store.recovery.segments == len(logs) and store.recovery.messages == 100
    check_store(store, model)
    await store.close()


async def test_unusable_directory_and_lock(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"x")
    with pytest.raises(StorageError):
        await FileStore.open(str(f))
    store = await _open(tmp_path / "s")
    with pytest.raises(StorageError, match="in use"):
        await _open(tmp_path / "s")
    await store.close()
    store = await _open(tmp_path / "s")  # the lock is released by close
    await store.close()


async def test_indexes_rebuilt_when_missing_or_damaged(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 100)
    store.purge(seq=20)
    model.purge(seq=20)
    await store.close()
    idxs = sorted(glob.glob(str(tmp_path / "*.idx")))
    os.unlink(idxs[0])
    raw = bytearray(_read(idxs[1]))
    raw[len(raw) // 2] ^= 0x10
    _write(idxs[1], bytes(raw))
    store = await _open(tmp_path)
    assert store.recovery.rebuilt_indexes == 2
    assert store.recovery.quarantined == () and store.recovery.lost_seqs == ()
    check_store(store, model)
    await store.close()
    store = await _open(tmp_path)
    assert store.recovery.rebuilt_indexes == 0
    check_store(store, model)
    await store.close()


async def test_leftover_tmp_files_are_removed(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 60)
    await store.close()
    first = _logs(tmp_path)[0]
    _write(first + ".tmp", b"half a rewrite")
    _write(str(tmp_path / "00000000000000000999.idx"), b"orphan")
    store = await _open(tmp_path)
    assert not glob.glob(str(tmp_path / "*.tmp"))
    assert not _exists(tmp_path / "00000000000000000999.idx")
    check_store(store, model)
    await store.close()


# ---- crashes and corruption -----------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 30, 64, 65, 150])
async def test_torn_tail_is_truncated(tmp_path: Path, cut: int) -> None:
    store = await _open(tmp_path, segment_bytes=1 << 20)
    model = Model()
    await _fill(store, model, 10)
    await store.flush()
    committed = model.copy()
    await _fill(store, model, 5)  # one more batch
    await store.flush()
    await store._abandon()
    last = _logs(tmp_path)[-1]
    size = _data_size(last)
    assert _size(last) > size  # preallocated
    batch_len = _batches(last)[-1][1].size
    assert cut < batch_len
    os.truncate(last, size - cut)
    store = await _open(tmp_path, segment_bytes=1 << 20)
    assert store.recovery.truncated_bytes == batch_len - cut
    assert store.recovery.quarantined == ()
    check_store(store, committed)
    assert _size(last) == size - batch_len
    assert store.append("a.b", b"", b"next", 99) == 11
    await store.close()


async def test_writer_is_preallocated_ahead_by_what_it_holds(tmp_path: Path) -> None:
    from jetlog.log.commit import PREALLOC_MIN

    store = await FileStore.open(str(tmp_path), segment_bytes=64 << 20, auto_compact=False)
    model = Model()
    await _fill(store, model, 1)
    await store.flush()
    (seg,) = _logs(tmp_path)
    end = _data_size(seg)
    assert _size(seg) == end + PREALLOC_MIN  # a small stream holds 64 KiB ahead, not 1 MiB
    await _fill(store, model, 300, size=1000)  # one job past what was allocated
    await store.flush()
    end = _data_size(seg)
    assert PREALLOC_MIN < end < 1 << 20
    assert _size(seg) == 2 * end  # ahead by as much as it holds
    await store.close()
    assert _size(seg) == end  # cut back to its data
    store = await _open(tmp_path, segment_bytes=64 << 20)
    check_store(store, model)
    await store.close()


async def test_zero_filled_tail_is_truncated(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 10)
    await store.flush()
    await store._abandon()
    last = _logs(tmp_path)[-1]
    data = _data_size(last)
    _append(last, bytes(4096))  # past the preallocated zeros
    size = _size(last)
    assert size >= data + 4096
    store = await _open(tmp_path)
    assert store.recovery.truncated_bytes == size - data
    assert store.recovery.quarantined == ()
    assert _size(last) == data
    check_store(store, model)
    await store.close()


async def test_corrupt_sealed_segment_is_quarantined(tmp_path: Path) -> None:
    store = await _open(tmp_path, segment_bytes=1 << 20)
    model = Model()
    for _ in range(4):  # four batches of five records
        await _fill(store, model, 5)
        await store.flush()
    store.remove(2)
    model.remove(2)
    await store.close()
    seg = _logs(tmp_path)[0]
    batches = _batches(seg)
    off, h = batches[2]  # records 6..10
    assert (h.base_seq, h.last_seq) == (5, 10)
    raw = bytearray(_read(seg))
    raw[off + 64 + 40] ^= 0x04
    _write(seg, bytes(raw))
    store = await _open(tmp_path, segment_bytes=1 << 20)
    rep = store.recovery
    assert len(rep.quarantined) == 1 and _exists(rep.quarantined[0])
    assert os.path.dirname(rep.quarantined[0]) == str(tmp_path / "quarantine")
    assert rep.lost_seqs == (6, 7, 8, 9, 10)
    st = store.state()
    assert st.lost_seqs == (6, 7, 8, 9, 10) and st.lost_bytes == h.size
    for s in range(6, 11):
        model.remove(s)
    check_store(store, model)
    # the store stays usable, and the salvaged segment reopens cleanly
    assert store.append("a.b", b"", b"after", 100) == 21
    model.append("a.b", b"", b"after", 100)
    await store.close()
    store = await _open(tmp_path, segment_bytes=1 << 20)
    assert store.recovery.quarantined == ()
    check_store(store, model)
    await store.close()


async def test_corruption_in_last_batch_keeps_sequence_high_water(tmp_path: Path) -> None:
    store = await _open(tmp_path, segment_bytes=1 << 20)
    model = Model()
    await _fill(store, model, 5)
    await store.flush()
    await _fill(store, model, 5)
    await store.close()
    seg = _logs(tmp_path)[-1]
    off, _ = _batches(seg)[-1]
    raw = bytearray(_read(seg))
    raw[off + 10] ^= 0x80  # inside the last batch's header
    _write(seg, bytes(raw))
    store = await _open(tmp_path, segment_bytes=1 << 20)
    assert len(store.recovery.quarantined) == 1
    assert store.recovery.lost_seqs == (6, 7, 8, 9, 10)
    assert store.last_seq == 10  # from the index: lost sequences are never reused
    assert store.append("a.b", b"", b"x", 50) == 11
    await store.close()


async def test_non_last_segment_torn_is_corruption(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 100)
    await store.close()
    logs = _logs(tmp_path)
    first = logs[0]
    os.unlink(first[:-4] + ".idx")
    batches = _batches(first)
    os.truncate(first, _size(first) - 10)
    store = await _open(tmp_path)
    lost_first = batches[-1][1].base_seq + 1
    upper = int(os.path.basename(logs[1])[:-4]) - 1
    assert store.recovery.lost_seqs == tuple(range(lost_first, upper + 1))
    assert store.recovery.truncated_bytes == 0
    for s in range(lost_first, upper + 1):
        model.remove(s)
    check_store(store, model)
    await store.close()


async def test_read_verifies_record_crc(tmp_path: Path) -> None:
    store = await _open(tmp_path, verify=False)
    model = Model()
    await _fill(store, model, 3)
    await store.close()
    seg = _logs(tmp_path)[0]
    raw = bytearray(_read(seg))
    i = raw.rfind(b"p" * 20)
    raw[i] ^= 0x01  # payload of record 3
    _write(seg, bytes(raw))
    # verify=False trusts the index: the damage is only found by the record CRC on read
    store = await _open(tmp_path, verify=False)
    assert store.load(1) == model.msg(1)
    with pytest.raises(StorageError, match="record crc mismatch"):
        store.load(3)
    await store.close()
    store = await _open(tmp_path)  # verify=True finds it at open and quarantines it
    assert store.recovery.lost_seqs == (1, 2, 3) and store.load(3) is None
    await store.close()


# ---- failures -------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["write", "helper-sync", "thread-sync"])
async def test_io_failure_fails_closed(tmp_path: Path, what: str) -> None:
    """A failing write (on the loop) or fdatasync (an errno reported by the helper process, or
    raised in the thread path) fails the store closed; nothing after it is acknowledged."""
    io = FlakyIO()
    store = await _open(tmp_path, io=io, syncer="thread" if what == "thread-sync" else "helper")
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    store.append("a.b", b"", b"ok", 1)
    await store.flush()
    assert seen == [1] and store.committed_seq == 1
    if what == "write":
        io.fail_write = True
    elif what == "thread-sync":
        io.fail_sync = True
    else:
        assert isinstance(store.syncer, Syncer) and store.syncer.mode == "helper"
        store.syncer.inject_error(errno.EIO)
    store.append("a.b", b"", b"doomed", 2)
    with pytest.raises(StreamUnavailableError):
        await store.flush()
    assert store.failed is not None
    assert "injected" in str(store.failed) or "fsync helper" in str(store.failed)
    assert seen == [1] and store.committed_seq == 1
    with pytest.raises(StreamUnavailableError):
        store.append("a.b", b"", b"no", 3)
    with pytest.raises(StreamUnavailableError):
        store.remove(1)
    with pytest.raises(StreamUnavailableError):
        store.purge()
    with pytest.raises(StreamUnavailableError):
        store.skip()
    with pytest.raises(StreamUnavailableError):
        await store.flush()
    assert store.load(1) is not None  # reads of durable data still work
    await store.close()
    store = await _open(tmp_path)
    assert store.load(1) is not None and store.last_seq in (1, 2)
    await store.close()


async def test_dir_fsync_failure_at_roll_fails_closed(tmp_path: Path) -> None:
    """The directory fsync after a segment roll is part of the commit: if it fails, nothing
    written to the new segment is acknowledged and the store fails closed."""
    st0 = await _open(tmp_path / "other")  # keeps the loop's helper alive for the wrapper
    flaky = FlakySync(st0.syncer)
    store = await _open(tmp_path / "s", syncer=flaky)
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    model = Model()
    await _fill(store, model, 5)
    await store.flush()
    committed = store.committed_seq
    assert len(store.segments) == 1 and flaky.dir_syncs == 0
    flaky.fail_dir = True
    await _fill(store, model, 60)  # rolls at least once
    with pytest.raises(StreamUnavailableError):
        await store.flush()
    assert flaky.dir_syncs == 1 and "directory fsync" in str(store.failed)
    assert store.committed_seq == committed and seen[-1] == committed
    await store.close()
    await st0.close()
    store = await _open(tmp_path / "s")
    assert store.last_seq >= committed
    for s in range(1, committed + 1):
        assert store.load(s) == model.msg(s)
    await store.close()


@pytest.mark.parametrize("syncer", ["helper", "thread"])
async def test_interval_mode_commits_after_write_and_syncs_later(tmp_path: Path, syncer: str) -> None:
    store = await _open(
        tmp_path, fsync="interval", sync_interval=3600.0, segment_bytes=1 << 20, syncer=syncer
    )
    seen: list[int] = []
    store.add_commit_listener(seen.append)
    for i in range(50):
        store.append("a.b", b"", b"x", i)
        await store.flush()
    assert seen[-1] == 50 and store.committed_seq == 50
    assert store.syncs <= 1  # at most the first one; no per-commit fsync
    await store.close()
    store = await _open(tmp_path, fsync="interval", sync_interval=0.3, segment_bytes=1 << 20, syncer=syncer)
    assert store.syncs == 0
    store.append("a.b", b"", b"x", 99)
    await store.flush()  # reported committed without an fsync ...
    assert store.committed_seq == 51 and store.syncs == 0
    for _ in range(500):  # ... which the timer does soon after
        if store.syncs:
            break
        await asyncio.sleep(0.01)
    assert store.syncs == 1
    await store.close()


async def test_bad_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        await FileStore.open(str(tmp_path), fsync="never")
    with pytest.raises(ValueError):
        await FileStore.open(str(tmp_path), segment_bytes=10)


# ---- batching -------------------------------------------------------------------------------


async def test_large_pending_batches_are_split(tmp_path: Path) -> None:
    store = await _open(tmp_path, segment_bytes=64 << 20)
    model = Model()
    await _fill(store, model, 40, size=100_000)  # ~4 MB pending before the first flush
    await store.flush()
    batches = _batches(_logs(tmp_path)[0])
    assert len(batches) >= 4
    assert all(h.body_len <= rc.SPLIT_BODY for _, h in batches)
    check_store(store, model, full=False)
    await store.close()
    store = await _open(tmp_path, segment_bytes=64 << 20)
    check_store(store, model, full=False)
    await store.close()


async def test_segments_roll_at_size(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 200)
    await store.flush()
    logs = _logs(tmp_path)
    assert len(logs) >= 5
    for p in logs[:-1]:
        assert _size(p) <= SEG + 300
    bases = [int(os.path.basename(p)[:-4]) for p in logs]
    assert bases == sorted(bases) and bases[0] == 1
    await store.close()


# ---- retention and compaction ---------------------------------------------------------------


async def test_retention_deletes_dead_prefix_but_never_last_segment(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 200)
    await store.flush()
    n0 = len(_logs(tmp_path))
    store.purge(seq=120)
    model.purge(seq=120)
    await store.compact()
    logs = _logs(tmp_path)
    assert len(logs) < n0
    first_base = int(os.path.basename(logs[0])[:-4])
    assert first_base <= 120
    check_store(store, model)
    store.purge()
    model.purge()
    await store.compact()
    assert len(_logs(tmp_path)) == 1
    check_store(store, model)
    await store.close()
    for p in glob.glob(str(tmp_path / "*.idx")):
        os.unlink(p)  # force full scans
    store = await _open(tmp_path)
    check_store(store, model)
    assert store.append("a.b", b"", b"x", 999) == 201
    await store.close()


async def test_compaction_carries_ops_forward(tmp_path: Path) -> None:
    """An op in segment S deleting a record of an older segment T survives S's rewrite while T
    still holds the record; a full-scan recovery never resurrects it."""
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 30)  # T
    await store.flush()
    while len(store.segments) < 2:
        await _fill(store, model, 1)
    t_seg, s_seg = store.segments[0], store.segments[1]
    assert t_seg.max_seq < s_seg.base
    for s in (3, 4, 9):  # a few removals in T: T stays below the compaction threshold
        store.remove(s)
        model.remove(s)
    while len(store.segments) < 3:  # fill and seal S
        await _fill(store, model, 1)
    s_recs = list(range(s_seg.base, store.segments[2].base))
    for s in s_recs[:-2]:  # S becomes mostly dead (these ops go to the third segment)
        store.remove(s)
        model.remove(s)
    await store.compact()
    s_file = os.path.join(str(tmp_path), f"{s_seg.base:020d}.log")
    kept = _ops_in(s_file)
    covered = {x for a, b in kept for x in range(a, b + 1)}
    assert {3, 4, 9} <= covered  # carried: T still physically holds 3, 4, 9
    assert all(b < s_seg.base for _, b in kept)  # clipped to older segments
    assert s_seg.nrecords == 2
    check_store(store, model)
    await store.close()
    for p in glob.glob(str(tmp_path / "*.idx")):
        os.unlink(p)
    store = await _open(tmp_path)
    check_store(store, model)  # 3, 4, 9 stay removed after a full scan
    # now compact T too: its dead records go, and the next rewrite of S may drop the op
    for s in range(10, 31):
        if s in model.live:
            store.remove(s)
            model.remove(s)
    await store.compact()
    t_file = _logs(tmp_path)[0]
    t_seqs = {
        m.seq
        for off, h in _batches(t_file)
        for m in rc.iter_record_meta(rc.check_body(_read(t_file), off, h), h)
    }
    assert t_seqs == {s for s in model.live if s < s_seg.base}
    await store.close()
    for p in glob.glob(str(tmp_path / "*.idx")):
        os.unlink(p)
    store = await _open(tmp_path)
    check_store(store, model)
    await store.close()


async def test_erase_removes_payload_from_disk(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 10)
    secret = b"TOP-SECRET-PAYLOAD-0123456789"
    seq = store.append("a.b", b"", secret, 100)
    model.append("a.b", b"", secret, 100)
    await _fill(store, model, 60)
    await store.flush()
    assert store.segments[0].max_seq >= seq  # sealed segment holds it
    assert store.remove(seq, erase=True)
    model.remove(seq)
    await store.compact()
    for p in glob.glob(str(tmp_path / "*")):
        if _isfile(p):
            assert secret not in _read(p), p
    check_store(store, model)
    await store.close()


@pytest.mark.parametrize("compression", [False, True])
async def test_reads_stay_correct_during_compaction(tmp_path: Path, compression: bool) -> None:
    store = await _open(tmp_path, compression=compression)
    model = Model()
    await _fill(store, model, 150)
    await store.flush()
    for s in range(1, 150):
        if s % 3:
            store.remove(s)
            model.remove(s)
    reached = threading.Event()
    release = threading.Event()

    def hook(step: str) -> None:
        if step == "renamed":
            reached.set()
            assert release.wait(10)

    orig = store._rewrite_job

    def job(seg: Any, live: Any, older: Any) -> Any:
        from jetlog.log.compaction import rewrite_segment

        return lambda: rewrite_segment(store._io, store.path, seg.base, live, older, compression, hook=hook)

    store._rewrite_job = job  # type: ignore[method-assign]
    task = asyncio.create_task(store.compact())
    assert await asyncio.to_thread(reached.wait, 10)
    # the new file has replaced the old one on disk; the index still points at the old layout
    check_store(store, model)
    release.set()
    await asyncio.wait_for(task, 10)
    store._rewrite_job = orig  # type: ignore[method-assign]
    check_store(store, model)
    assert any(s.gen for s in store.segments)
    await store.close()
    store = await _open(tmp_path, compression=compression)
    check_store(store, model)
    await store.close()


async def test_crash_inside_compaction_leaves_a_consistent_directory(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 150)
    await store.flush()
    for s in range(10, 40):
        store.remove(s)
        model.remove(s)
    await store.flush()

    def job(seg: Any, live: Any, older: Any) -> Any:
        from jetlog.log.compaction import rewrite_segment

        def crash(step: str) -> None:
            if step == "renamed":
                raise OSError(errno.EIO, "simulated crash between renames")

        return lambda: rewrite_segment(store._io, store.path, seg.base, live, older, False, hook=crash)

    store._rewrite_job = job  # type: ignore[method-assign]
    await store.compact()
    assert store.segments[0].broken
    await store._abandon()
    assert glob.glob(str(tmp_path / "*.idx.tmp"))
    store = await _open(tmp_path)
    assert not glob.glob(str(tmp_path / "*.tmp"))
    assert store.recovery.quarantined == ()
    check_store(store, model)
    await store.close()


async def test_auto_compaction_runs_in_background(tmp_path: Path) -> None:
    store = await FileStore.open(str(tmp_path), segment_bytes=SEG, auto_compact=True)
    model = Model()
    await _fill(store, model, 200)
    await store.flush()
    n0 = len(_logs(tmp_path))
    for s in range(1, 150):
        store.remove(s)
        model.remove(s)
    await asyncio.wait_for(store.maintenance.wait_until(lambda m: m.deleted > 0), 10)
    assert len(_logs(tmp_path)) < n0
    check_store(store, model)
    await store.close()


async def test_removals_in_the_writer_segment_do_not_wake_maintenance(tmp_path: Path) -> None:
    store = await FileStore.open(str(tmp_path), segment_bytes=SEG, auto_compact=True)
    model = Model()
    await _fill(store, model, 200)
    await store.flush()
    await store.maintenance.indexes_written()
    m = store.maintenance
    await asyncio.wait_for(m.wait_until(lambda m: not m._event.is_set()), 10)
    writer = store.segments[-1]
    passes = m.passes
    # A removal from the writer segment (a KV update of a recent key): no pass can help.
    assert writer.min_seq < model.last_seq
    for s in range(writer.min_seq, model.last_seq):
        assert store.remove(s)
        model.remove(s)
    await _spin_loop()
    assert m.passes == passes and not m._event.is_set()
    # One from a sealed segment does wake it, and retention then deletes emptied segments.
    for s in range(1, store.segments[1].min_seq):
        assert store.remove(s)
        model.remove(s)
    await asyncio.wait_for(m.wait_until(lambda m: m.deleted > 0), 10)
    assert m.passes > passes
    check_store(store, model)
    await store.close()


async def _spin_loop() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_read_fds_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jetlog.log.filestore as fsmod

    monkeypatch.setattr(fsmod, "_FD_CACHE", 2)
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 150)
    await store.flush()
    assert len(store.segments) > 4
    check_store(store, model)  # reads every segment, reopening evicted ones
    assert sum(1 for s in store.segments if s.fd is not None) <= 3
    await store.close()
    store = await _open(tmp_path)
    check_store(store, model)
    assert sum(1 for s in store.segments if s.fd is not None) <= 3
    await store.close()


async def test_ttl_survives_purges_compaction_and_reopen(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    for i in range(120):
        ttl = 1000 if i % 4 == 0 else 0
        assert store.append("t.x", b"", b"v" * 50, i + 1, ttl) == model.append(
            "t.x", b"", b"v" * 50, i + 1, ttl
        )
    await store.flush()
    store.purge(seq=30)
    model.purge(seq=30)
    for s in range(31, 100):
        if s % 3:
            store.remove(s)
            model.remove(s)
    check_store(store, model)
    await store.compact()
    assert store.maintenance.rewritten >= 1
    check_store(store, model)
    await store.close()
    store = await _open(tmp_path)
    check_store(store, model)
    await store.close()
    for p in glob.glob(str(tmp_path / "*.idx")):
        os.unlink(p)
    store = await _open(tmp_path)
    check_store(store, model)
    await store.close()


async def test_removals_during_compaction_stay_removed(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    model = Model()
    await _fill(store, model, 150)
    await store.flush()
    for s in range(1, 20):
        store.remove(s)
        model.remove(s)
    reached = threading.Event()
    release = threading.Event()

    def hook(step: str) -> None:
        if step == "written":
            reached.set()
            assert release.wait(10)

    def job(seg: Any, live: Any, older: Any) -> Any:
        from jetlog.log.compaction import rewrite_segment

        return lambda: rewrite_segment(store._io, store.path, seg.base, live, older, False, hook=hook)

    store._rewrite_job = job  # type: ignore[method-assign]
    task = asyncio.create_task(store.compact())
    assert await asyncio.to_thread(reached.wait, 10)
    for s in (20, 21, 25):  # removed while the rewrite (which still keeps them) runs
        store.remove(s)
        model.remove(s)
    release.set()
    await asyncio.wait_for(task, 10)
    seg = store.segments[0]
    assert seg.nrecords > seg.nlive  # the rewritten file still holds 20, 21, 25 ...
    check_store(store, model)
    await store.close()
    for p in glob.glob(str(tmp_path / "*.idx")):
        os.unlink(p)
    store = await _open(tmp_path)
    check_store(store, model)  # ... and the ops keep them removed after a full scan
    await store.close()


async def test_damaged_body_of_tail_batch_keeps_its_sequences_reserved(tmp_path: Path) -> None:
    store = await _open(tmp_path, segment_bytes=1 << 20)
    model = Model()
    await _fill(store, model, 5)
    await store.flush()
    await _fill(store, model, 5)
    store.skip(3, ts=100)
    await store.flush()
    await store._abandon()  # no index file: only the batch header can tell how far it went
    seg = _logs(tmp_path)[-1]
    off, h = _batches(seg)[-1]
    assert h.last_seq == 13
    raw = bytearray(_read(seg))
    raw[off + 64 + 5] ^= 0x20
    _write(seg, bytes(raw))
    store = await _open(tmp_path, segment_bytes=1 << 20)
    assert store.recovery.lost_seqs == tuple(range(6, 14))
    assert store.last_seq == 13 and store.append("a.b", b"", b"x", 200) == 14
    await store.close()
    store = await _open(tmp_path, segment_bytes=1 << 20)  # the reservation is durable
    assert store.last_seq == 14
    await store.close()
