"""Replication primitives of both stores (``ReplicaLog``): positions, ``read_batches`` (whole
batches, chunks, pending batches served from memory, errors), ``append_batches`` (verification,
no partial state, group commit), ``seal`` and ``max_batch_bytes``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from jetlog.log import (
    BatchInputError,
    FileStore,
    MemStore,
    OutOfRangeError,
    PositionError,
    ReplicaError,
)
from jetlog.wire import records as rc
from tests.unit.replica_util import BIG, batch_list, positions, replicate, snapshot, split, start_of
from tests.unit.test_store_pipeline import GatedSync

HDR = b"NATS/1.0\r\nX: y\r\n\r\n"


async def _store(kind: str, path: Path, **kw: Any) -> Any:
    first_seq = kw.pop("first_seq", 1)
    if kind == "mem":
        kw.pop("compression", None)
        return MemStore(first_seq, replicated=True)
    kw.setdefault("segment_bytes", 4096)
    kw.setdefault("auto_compact", False)
    return await FileStore.open(str(path), first_seq=first_seq, **kw)


KINDS = ["file", "mem"]


@pytest.mark.parametrize("kind", KINDS)
async def test_positions_count_batches_sharing_a_last_seq(tmp_path: Path, kind: str) -> None:
    ld = await _store(kind, tmp_path / "L")
    assert ld.log_end() == (0, -1) and ld.epochs() == []
    for i in range(5):
        ld.append("a.b", b"", b"x%d" % i, 100 + i)
    assert ld.seal() == (5, 0)
    ld.remove(2)
    assert ld.seal() == (5, 1)  # an op-only batch: no sequence, same last_seq
    ld.remove(3)
    assert ld.seal() == (5, 2)
    assert ld.seal() == (5, 2)  # nothing to seal
    ld.skip(2, ts=200)
    assert ld.seal() == (7, 0)
    await ld.flush()
    assert ld.durable_end() == ld.log_end() == (7, 0)
    assert [p for p, _ in batch_list(ld)] == [(5, 0), (5, 1), (5, 2), (7, 0)]
    # one batch at a time
    got = []
    after = (0, -1)
    while True:
        r = ld.read_batches(after, 1 << 20)
        if not r.nbatches:
            assert r.last == after == ld.log_end() and r.data == b""
            break
        bs = split(r.data)
        got.append(r.last)
        after = r.last
        assert len(bs) == r.nbatches
    assert got == [(7, 0)]  # 1 MiB holds them all
    r = ld.read_batches((5, 1), 1 << 20)
    assert r.nbatches == 2 and r.last == (7, 0)
    assert [rc.decode_header(b).n_ops for b in split(r.data)] == [1, 0]
    assert ld.epochs() == [(0, (0, -1))]  # single-node history: epoch 0 from the start
    await ld.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_read_batches_errors(tmp_path: Path, kind: str) -> None:
    ld = await _store(kind, tmp_path / "L", first_seq=10)
    assert ld.log_end() == (9, -1)
    for i in range(6):
        ld.append("a.b", b"", b"x" * 10, 100 + i)
        if i % 2:
            ld.seal()
    await ld.flush()
    assert [p for p, _ in batch_list(ld)] == [(11, 0), (13, 0), (15, 0)]
    with pytest.raises(OutOfRangeError) as exc:
        ld.read_batches((8, 0), 100)
    assert exc.value.start == (9, -1)
    with pytest.raises(PositionError):
        ld.read_batches((12, 0), 100)  # inside a batch
    with pytest.raises(PositionError):
        ld.read_batches((13, 1), 100)  # no second batch ends at 13
    with pytest.raises(PositionError) as perr:
        ld.read_batches((16, 0), 100)  # beyond the end
    assert perr.value.end == (15, 0)
    with pytest.raises(ValueError):
        ld.read_batches((9, -1), 0)
    r = ld.read_batches((9, -1), 100)  # a batch is ~150 bytes: a chunk
    assert r.partial and r.offset == 0 and len(r.data) == 100 and r.last == (11, 0)
    with pytest.raises(ValueError):
        ld.read_batches((9, -1), 100, offset=r.size)
    r = ld.read_batches((15, 0), 100)
    assert (r.data, r.nbatches, r.last, r.partial) == (b"", 0, (15, 0), False)
    await ld.close()


async def test_out_of_range_after_retention_then_reset(tmp_path: Path) -> None:
    ld = await _store("file", tmp_path / "L")
    for i in range(120):
        ld.append(f"a.{i % 3}", b"", b"p" * 100, 1000 + i)
    ld.purge()
    for i in range(30):
        ld.append("b.c", HDR, b"q" * 50, 2000 + i, 5000 if i % 4 == 0 else 0)
    await ld.compact()  # retention deletes the dead prefix
    start = start_of(ld)
    assert start[0] > 1 and ld.segments[0].base == start[0] + 1
    fl = await _store("file", tmp_path / "F")
    with pytest.raises(OutOfRangeError) as exc:
        ld.read_batches(fl.log_end(), 1 << 20)
    assert exc.value.start == start
    first = batch_list(ld)[0][0]
    if first[0] > start[0] + 1:  # a position inside the deleted prefix is no better
        with pytest.raises(OutOfRangeError):
            ld.read_batches((start[0] + 1, 0), 1 << 20)
    await fl.reset(start[0] + 1)
    assert fl.log_end() == start and fl.state().first_seq == start[0] + 1
    await replicate(ld, fl, 777)
    await fl.flush()
    assert snapshot(fl) == snapshot(ld)
    assert batch_list(fl) == batch_list(ld)
    assert fl.epochs() == ld.epochs() == [(0, start)]
    await ld.close()
    await fl.close()


def _good_input(ld: Any) -> list[bytes]:
    return split(ld.read_batches(start_of(ld), BIG).data)


@pytest.mark.parametrize("kind", KINDS)
async def test_append_batches_rejects_bad_input_and_applies_nothing(tmp_path: Path, kind: str) -> None:
    ld = await _store(kind, tmp_path / "L")
    for i in range(8):
        ld.append("a.b", HDR if i % 2 else b"", b"d%d" % i, 100 + i, 9000 if i == 3 else 0)
        if i % 3 == 2:
            ld.seal()
    ld.remove(2)
    ld.seal()
    await ld.flush()
    good = _good_input(ld)
    assert len(good) >= 3
    fl = await _store(kind, tmp_path / "F")
    fl.append_batches(good[0])
    base = (fl.log_end(), snapshot(fl))

    flipped = bytearray(good[1])
    flipped[rc.HEADER_SIZE + 5] ^= 1
    null = rc.encode_batch([], base_seq=fl.last_seq, last_seq=fl.last_seq)
    h = rc.decode_header(good[1])
    bad_op = rc.encode_batch([], [(1, h.last_seq + 5)], base_seq=fl.last_seq, last_seq=fl.last_seq)
    cases = {
        "body crc": good[1] + bytes(flipped),
        "torn": good[1] + good[2][:-1],
        "gap": good[2],
        "again": good[0],
        "null batch": null,
        "op beyond": good[1] + bad_op,
        "garbage": b"\x00" * 80,
    }
    for name, data in cases.items():
        with pytest.raises(BatchInputError):
            fl.append_batches(data)
        assert (fl.log_end(), snapshot(fl)) == base, name
    await fl.flush()
    assert (fl.log_end(), snapshot(fl), fl.committed_seq) == (*base, base[1][0][4])
    assert fl.append_batches(b"".join(good[1:])) == ld.log_end()
    await fl.flush()
    assert snapshot(fl) == snapshot(ld) and batch_list(fl) == batch_list(ld)
    # a follower that wrote something itself must seal before taking replicated batches
    fl.append("x.y", b"", b"local", 999)
    with pytest.raises(ReplicaError, match="seal"):
        fl.append_batches(b"")
    await ld.close()
    await fl.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_batches_below_the_latest_epoch_are_refused(tmp_path: Path, kind: str) -> None:
    ld = await _store(kind, tmp_path / "L")
    ld.append("a.b", b"", b"x", 1)
    ld.seal()
    fl = await _store(kind, tmp_path / "F")
    await fl.begin_epoch(5)  # it led epoch 5 (and never wrote)
    with pytest.raises(BatchInputError, match="epoch"):
        fl.append_batches(ld.read_batches((0, -1), BIG).data)
    await fl.truncate((0, -1))  # KIP-279: nothing of epoch 5 is known to the leader
    assert fl.epochs() == []
    await replicate(ld, fl)
    assert snapshot(fl) == snapshot(ld)
    await ld.close()
    await fl.close()


@pytest.mark.parametrize("compression", [False, True])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_big_batch_travels_in_chunks(tmp_path: Path, kind: str, compression: bool) -> None:
    ld = await _store(kind, tmp_path / "L", compression=compression, segment_bytes=1 << 20)
    big = os.urandom(150_000) + bytes(150_000)
    ld.append("a.b", HDR, b"small", 1)
    ld.seal()
    ld.append("a.big", HDR, big, 2, 60_000)
    ld.append("a.b", b"", b"after", 3)
    end = ld.seal()
    fl = await _store(kind, tmp_path / "F", segment_bytes=1 << 20)
    r = ld.read_batches(fl.log_end(), 10_000)  # the small first batch, whole
    assert r.nbatches == 1 and not r.partial
    fl.append_batches(r.data)
    parts = []
    off = 0
    while True:
        r = ld.read_batches(fl.log_end(), 10_000, off)
        assert r.partial and r.offset == off and 0 < len(r.data) <= 10_000 and r.last == end
        parts.append(r.data)
        off += len(r.data)
        if r.complete:
            break
    assert len(parts) >= 3 and off == r.size
    data = b"".join(parts)
    h = rc.decode_header(data)
    assert h.size == len(data) and h.compressed == (compression and kind == "file") and h.n_records == 2
    assert fl.append_batches(data) == end
    assert fl.load(2).data == big and fl.load(3).data == b"after"  # before it is written
    assert fl.read_batches((1, 0), 1 << 20).data == data  # served back from memory
    await fl.flush()
    await ld.flush()
    assert snapshot(fl) == snapshot(ld) and batch_list(fl) == batch_list(ld)
    assert fl.load(2).data == big
    await ld.close()
    await fl.close()


@pytest.mark.parametrize("compression", [False, True])
async def test_pending_batches_are_served_with_the_bytes_later_written(
    tmp_path: Path, compression: bool
) -> None:
    gs = GatedSync()
    ld = await _store("file", tmp_path / "L", compression=compression, syncer=gs)
    fl = await _store("file", tmp_path / "F")
    for i in range(30):
        ld.append(f"a.{i % 4}", HDR, os.urandom(40) * 3, 10 + i)
        if i % 7 == 0:
            ld.seal()
            await asyncio.sleep(0)  # the flusher takes a job: written, its sync held
        if i == 20:
            ld.remove(5)
    ld.seal()
    assert ld.durable_end() < ld.log_end() and gs.held
    await replicate(ld, fl, 300)  # from the flights and the queue
    assert fl.log_end() == ld.log_end() and fl.last_seq == ld.last_seq
    gs.hold = False
    while gs.held:
        gs.complete(0)
    await ld.flush()
    await fl.flush()
    assert ld.durable_end() == ld.log_end()
    assert batch_list(fl) == batch_list(ld)  # now read from the leader's files
    assert snapshot(fl) == snapshot(ld)
    await ld.close()
    await fl.close()


async def test_follower_commits_through_the_group_commit(tmp_path: Path) -> None:
    ld = await _store("file", tmp_path / "L")
    for i in range(50):
        ld.append("a.b", b"", b"m" * 200, i + 1)
        if i % 5 == 4:
            ld.seal()
    ld.remove(7)
    ld.seal()
    fl = await _store("file", tmp_path / "F")
    seen: list[int] = []
    fl.add_commit_listener(seen.append)
    fl.append_batches(ld.read_batches((0, -1), BIG).data)
    assert fl.committed_seq == 0 and fl.durable_end() == (0, -1)
    assert fl.load(7) is None and fl.load(8).data == b"m" * 200  # readable before it is durable
    await fl.flush()
    assert seen and seen[-1] == 50 == fl.committed_seq and seen == sorted(seen)
    assert fl.durable_end() == fl.log_end() == (50, 1)
    assert len(fl.segments) > 2  # rolled like a writer
    assert all(seg.table.last[0] >= seg.base for seg in fl.segments if len(seg.table))
    await fl.close()
    fl = await _store("file", tmp_path / "F")
    assert fl.log_end() == (50, 1) and snapshot(fl) == snapshot(ld)
    await ld.close()
    await fl.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_max_batch_bytes(tmp_path: Path, kind: str) -> None:
    ld = await _store(kind, tmp_path / "L", segment_bytes=1 << 20)
    with pytest.raises(ValueError):
        ld.max_batch_bytes = 100
    assert ld.max_batch_bytes == rc.HEADER_SIZE + rc.SPLIT_BODY
    ld.max_batch_bytes = 2048
    for i in range(60):
        ld.append(f"s.{i % 2}", b"", b"r" * 300, i + 1)
    ld.append("big", b"", b"B" * 5000, 100)
    ld.append("s.0", b"", b"r" * 300, 101)
    ld.seal()
    ld.purge(subject="s.1")  # 31 disjoint ranges: ops of their own
    ld.seal()
    await ld.flush()
    heads = [rc.decode_header(b) for _, b in batch_list(ld)]
    assert len(heads) >= 12
    for h in heads:
        assert h.size <= 2048 or h.n_records == 1
    assert any(h.n_records == 1 and h.size > 5000 for h in heads)
    assert sum(h.n_ops for h in heads) >= 30
    await ld.close()


async def test_memstore_without_the_flag_has_no_replicated_log() -> None:
    m = MemStore()
    m.append("a.b", b"", b"x", 1)
    assert m._log is None
    for call in (m.log_end, m.seal, lambda: m.read_batches((0, -1), 10), lambda: m.epochs()):
        with pytest.raises(ReplicaError):
            call()
    with pytest.raises(ReplicaError):
        await m.truncate((0, -1))


async def test_positions_of_segment_tables_match_the_log(tmp_path: Path) -> None:
    """Every segment starts a new ``last_seq`` (k computed per segment is the global k), on the
    writer and on a follower, across reopen."""
    ld = await _store("file", tmp_path / "L", segment_bytes=4096)
    for i in range(300):
        ld.append("a.b", b"", b"z" * 60, i + 1)
        if i % 9 == 0:
            ld.remove(i)
            ld.seal()
            ld.remove(i // 2 + 1)
            ld.seal()
    fl = await _store("file", tmp_path / "F", segment_bytes=4096)
    await replicate(ld, fl, 1000)
    await ld.flush()
    await fl.flush()
    for s in (ld, fl):
        want = [p for p, _ in batch_list(s)]
        assert len(s.segments) > 5
        assert [t.pos(j) for t in (g.table for g in s.segments) for j in range(len(t))] == want
        assert want == positions([b for _, b in batch_list(s)])
    await ld.close()
    await fl.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_max_raw_bounds_the_decompressed_size_of_a_reply(tmp_path: Path, kind: str) -> None:
    ld = await _store(kind, tmp_path / "L", compression=True, segment_bytes=1 << 20)
    for i in range(400):
        ld.append("a.b", b"", bytes(2000), i)  # compresses ~100x in a file store
        if i % 20 == 19:
            ld.seal()
    await ld.flush()
    whole = ld.read_batches((0, -1), 1 << 20)
    assert whole.nbatches == 20
    r = ld.read_batches((0, -1), 1 << 20, max_raw=100_000)
    raws = [rc.decode_header(b).raw_len + rc.HEADER_SIZE for b in split(r.data)]
    assert 1 <= r.nbatches == len(raws) < 20 and sum(raws) <= 100_000
    assert whole.data.startswith(r.data) and r.last == positions(split(r.data))[-1]
    r = ld.read_batches((0, -1), 1 << 20, max_raw=10)  # still one batch
    assert r.nbatches == 1 and r.last == batch_list(ld)[0][0]
    fl = await _store(kind, tmp_path / "F")
    after = fl.log_end()
    while (r := ld.read_batches(after, 1 << 20, max_raw=100_000)).nbatches:
        after = fl.append_batches(r.data)
    assert snapshot(fl) == snapshot(ld)
    await ld.close()
    await fl.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_removal_mark_moves_with_every_removal_and_truncation(tmp_path: Path, kind: str) -> None:
    """Consumers skip per-message liveness checks while the mark is unchanged: it must move
    whenever a message stops being live, and never for appends."""
    st = await _store(kind, tmp_path / "S")
    try:
        for i in range(10):
            st.append("a.b" if i % 2 else "a.c", b"", b"x%d" % i, 100 + i)
        marks = [st.removal_mark()]
        st.append_run(["a.b", "a.c"], [b"y", b"z"], 200)
        st.skip(1)
        assert st.removal_mark() == marks[-1]  # appends and skips remove nothing
        st.remove(3)
        marks.append(st.removal_mark())
        st.purge("a.c", keep=1)
        marks.append(st.removal_mark())
        st.purge(None, seq=6)  # everything below 6
        marks.append(st.removal_mark())
        end = st.seal()
        await st.flush()
        st.append("a.b", b"", b"later", 300)
        await st.truncate(end)  # drops the record above ``end``
        marks.append(st.removal_mark())
        st.purge(None)
        marks.append(st.removal_mark())
        assert len({(id(ix), n) for ix, n in marks}) == len(marks)
        assert not st.is_live(st.last_seq)
    finally:
        await st.close()
