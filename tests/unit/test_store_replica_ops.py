"""Replication primitives that change a log's history: ``truncate`` (state and bytes exactly as
at the position, removals undone), the leader-epoch checkpoint (persistence, recovery from the
batch headers, KIP-279 truncation cases), ``reset`` and ``compact_floor``."""

from __future__ import annotations

import asyncio
import glob
import os
import random
from pathlib import Path
from typing import Any

import pytest

from jetlog.log import NO_FLOOR, EpochError, FileStore, MemStore, OutOfRangeError, PositionError
from tests.unit.replica_util import batch_list, replicate, snapshot, start_of
from tests.unit.test_store_pipeline import GatedSync

HDR = b"NATS/1.0\r\nX: y\r\n\r\n"
KINDS = ["file", "mem"]


async def _store(kind: str, path: Path, **kw: Any) -> Any:
    first_seq = kw.pop("first_seq", 1)
    if kind == "mem":
        kw.pop("compression", None)
        return MemStore(first_seq, replicated=True)
    kw.setdefault("segment_bytes", 4096)
    kw.setdefault("auto_compact", False)
    return await FileStore.open(str(path), first_seq=first_seq, **kw)


async def _history(store: Any, rng: random.Random, n: int) -> list[tuple[Any, Any, Any]]:
    """Random writes; after each seal ``(log_end, snapshot, batches)``: the state at that
    position."""
    out = [(store.log_end(), snapshot(store), batch_list(store))]
    ts = 1000
    for _ in range(n):
        what = rng.random()
        ts += 1
        if what < 0.55:
            store.append(
                rng.choice(["a.b", "a.c", "x.y"]),
                rng.choice([b"", HDR]),
                os.urandom(rng.randint(0, 400)),
                ts,
                rng.choice([0, 0, 7000]),
            )
        elif what < 0.7 and store.msgs:
            store.remove(rng.randint(store.first_seq, store.last_seq))
        elif what < 0.75:
            store.purge(subject=rng.choice([None, "a.*", "x.y"]), keep=rng.choice([0, 2]))
        elif what < 0.8:
            store.skip(rng.randint(1, 3), ts=ts)
        elif what < 0.85 and store.msgs:
            store.purge(seq=store.first_seq + rng.randint(0, 5))
        if rng.random() < 0.3:
            store.seal()
            if not out or store.log_end() != out[-1][0]:
                out.append((store.log_end(), snapshot(store), batch_list(store)))
    return out


@pytest.mark.parametrize("kind", KINDS)
async def test_truncate_restores_the_state_at_any_position(tmp_path: Path, kind: str) -> None:
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    st = await _store(kind, tmp_path / "L", compression=rng.random() < 0.5)
    hist = await _history(st, rng, 250)
    await st.flush()
    assert len(hist) > 10
    targets = sorted(rng.sample(range(len(hist)), 6), reverse=True)
    for t in targets:
        pos, snap, batches = hist[t]
        await st.truncate(pos)
        assert st.log_end() == st.durable_end() == pos
        assert snapshot(st) == snap, f"state at {pos} (seed {seed})"
        assert batch_list(st) == batches
        assert st.committed_seq == st.last_seq
        if kind == "file":
            await st.close()
            st = await _store(kind, tmp_path / "L")
            assert (st.log_end(), snapshot(st), batch_list(st)) == (pos, snap, batches)
    # and it is a working log again
    seq = st.append("a.b", b"", b"again", 10**9)
    assert seq == hist[targets[-1]][1][0][4] + 1
    await st.flush()
    assert st.load(seq).data == b"again"
    await st.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_truncate_undoes_removals(tmp_path: Path, kind: str) -> None:
    st = await _store(kind, tmp_path / "L")
    for i in range(10):
        st.append("a.b" if i % 2 else "x.y", b"", b"m%d" % i, 100 + i, 50_000 if i == 3 else 0)
    p = st.seal()
    before = snapshot(st)
    st.remove(4)
    st.purge(subject="x.y")  # 1, 3, 5, 7, 9 (3 had a TTL)
    st.purge(seq=7)
    st.seal()
    st.skip(3, ts=999)
    st.seal()
    assert st.msgs == 2 and not list(st.ttl_entries())
    await st.truncate(p)
    assert snapshot(st) == before and st.msgs == 10 and st.last_seq == 10
    assert st.subjects_state()["x.y"].msgs == 5 and dict(st.ttl_entries()) == {4: 103 + 50_000}
    await st.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_truncate_errors(tmp_path: Path, kind: str) -> None:
    st = await _store(kind, tmp_path / "L", first_seq=5)
    for i in range(6):
        st.append("a.b", b"", b"x", i)
        if i % 3 == 2:
            st.seal()
    assert st.log_end() == (10, 0)
    for bad in [(9, 0), (7, 1), (11, 0)]:
        with pytest.raises(PositionError):
            await st.truncate(bad)
    with pytest.raises(OutOfRangeError):
        await st.truncate((3, -1))
    assert st.log_end() == (10, 0) and st.msgs == 6
    await st.truncate((4, -1))  # the start: empty again
    assert st.log_end() == (4, -1) and st.msgs == 0 and st.last_seq == 4
    assert st.append("a.b", b"", b"y", 9) == 5
    await st.close()


async def test_truncate_refuses_to_cut_into_a_rewritten_segment(tmp_path: Path) -> None:
    st = await _store("file", tmp_path / "L")
    for i in range(200):
        st.append("a.b", b"", b"p" * 90, i)
        if i % 10 == 9:
            st.seal()
    st.append("a.b", b"", b"p" * 90, 1000)  # segment 1 keeps a live message: no retention
    for s in range(2, 40):
        st.remove(s)
    await st.compact()
    seg = st.segments[0]
    assert seg.rewritten and len(seg.table) > 1
    with pytest.raises((PositionError, OutOfRangeError)):
        await st.truncate(seg.table.pos(0))
    with pytest.raises(OutOfRangeError):  # nor serve from inside it
        st.read_batches(seg.table.pos(0), 1 << 20)
    snap = snapshot(st)
    await st.truncate(seg.table.pos(len(seg.table) - 1))  # its end is a boundary
    assert snapshot(st)[2]  # something is left
    assert st.last_seq == seg.last_seq and snap[0][4] > st.last_seq
    await st.close()


# ---- epochs ------------------------------------------------------------------------------------


async def _kip(kind: str, tmp_path: Path) -> None:
    a = await _store(kind, tmp_path / "A")
    b = await _store(kind, tmp_path / "B")
    for i in range(3):
        a.append("a.b", b"", b"e0-%d" % i, i)
    await a.begin_epoch(1)
    with pytest.raises(EpochError):
        await a.begin_epoch(1)
    for i in range(3):
        a.append("a.b", b"", b"e1-%d" % i, 10 + i)
    m3 = a.seal()
    await replicate(a, b)
    assert b.epochs() == a.epochs() == [(0, (0, -1)), (1, (3, 0))]
    for i in range(2):  # A writes on, B never gets it
        a.append("a.b", b"", b"lost-%d" % i, 20 + i)
    a.seal()
    # B becomes leader of epoch 2
    await b.begin_epoch(2)
    for i in range(3):
        b.append("a.b", b"", b"e2-%d" % i, 30 + i)
    b.seal()
    # A follows B (KIP-279): it asks for the end of its latest epoch
    ea, end_a = a.epochs()[-1][0], None
    e, end = b.epoch_end(ea)
    assert (e, end) == (1, m3)
    own = a.epoch_end(e)
    assert own == (1, a.log_end())
    end_a = min(end, own[1])
    await a.truncate(end_a)
    assert a.epochs()[-1][0] == 1 and b.epoch_end(1) == (1, a.log_end())
    await replicate(b, a)
    assert snapshot(a) == snapshot(b) and batch_list(a) == batch_list(b)
    assert a.epochs() == b.epochs() == [(0, (0, -1)), (1, (3, 0)), (2, m3)]
    # A leads epoch 3 briefly (nothing reaches B), then B leads epoch 4
    await a.begin_epoch(3)
    a.append("a.b", b"", b"e3", 40)
    a.seal()
    await b.begin_epoch(4)
    b.append("a.b", b"", b"e4", 50)
    b4 = b.epochs()[-1][1]
    b.seal()
    # A holds epoch 3, which B never saw: B answers epoch 2 and where it ends
    e, end = b.epoch_end(3)
    assert (e, end) == (2, b4)
    own = a.epoch_end(2)
    await a.truncate(min(end, own[1]))
    assert [x for x, _ in a.epochs()] == [0, 1, 2] and b.epoch_end(2)[1] == a.log_end()
    await replicate(b, a)
    assert snapshot(a) == snapshot(b) and a.epochs() == b.epochs()
    # edge answers
    assert b.epoch_end(-1) == (-1, (0, -1))
    assert b.epoch_end(99) == (4, b.log_end())
    with pytest.raises(EpochError):
        await b.begin_epoch(4)
    if kind == "file":  # the checkpoint survives a restart on both
        want = (a.epochs(), b.epochs())
        await a.close()
        await b.close()
        a = await _store(kind, tmp_path / "A")
        b = await _store(kind, tmp_path / "B")
        assert (a.epochs(), b.epochs()) == want
        assert b.epoch >= 4
    await a.close()
    await b.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_kip279_truncation_cases(tmp_path: Path, kind: str) -> None:
    await _kip(kind, tmp_path)


async def test_epoch_without_batches_is_persisted(tmp_path: Path) -> None:
    st = await _store("file", tmp_path / "L")
    assert st.epochs() == []
    await st.begin_epoch(7)
    assert st.epochs() == [(7, (0, -1))]
    await st.close()
    st = await _store("file", tmp_path / "L")
    assert st.epochs() == [(7, (0, -1))]
    st.append("a.b", b"", b"x", 1)
    await st.begin_epoch(9)  # epoch 7 covers a batch now
    await st.begin_epoch(10)  # epoch 9 covers none: replaced
    assert st.epochs() == [(7, (0, -1)), (10, (1, 0))]
    await st.close()


async def test_epochs_are_rederived_from_batch_headers(tmp_path: Path) -> None:
    ld = await _store("file", tmp_path / "L")
    fl = await _store("file", tmp_path / "F")
    for e in (0, 2, 3, 7):
        if e:
            await ld.begin_epoch(e)
        for i in range(40):
            ld.append("a.b", b"", b"x" * 50, e * 100 + i)
            if i % 9 == 0:
                ld.seal()
    ld.seal()
    await replicate(ld, fl, 2000)
    want = ld.epochs()
    assert fl.epochs() == want and len(want) == 4
    await fl.flush()
    # the follower never wrote its checkpoint: a crash loses nothing of it
    assert not os.path.exists(tmp_path / "F" / "epochs")
    await fl._abandon()
    fl = await _store("file", tmp_path / "F")
    assert fl.epochs() == want
    # a damaged checkpoint file is set aside and rebuilt the same way
    await ld.close()
    with open(tmp_path / "L" / "epochs", "r+b") as f:
        f.seek(10)
        f.write(b"\xff")
    ld = await _store("file", tmp_path / "L")
    assert ld.epochs() == want
    assert glob.glob(str(tmp_path / "L" / "quarantine" / "epochs.*"))
    await ld.close()
    await fl.close()


async def test_recovery_drops_epochs_beyond_the_recovered_end(tmp_path: Path) -> None:
    gs = GatedSync()
    gs.hold = False
    st = await _store("file", tmp_path / "L", syncer=gs)
    st.append("a.b", b"", b"durable", 1)
    await st.flush()
    await st.begin_epoch(1)
    end1 = st.log_end()
    gs.hold = True  # from now on nothing becomes durable
    for i in range(5):
        st.append("a.b", b"", b"not durable", 2 + i)
    await st.begin_epoch(2)  # starts after batches that never become durable
    assert st.epochs()[-1] == (2, (6, 0))
    seg = st.segments[-1]
    size = seg.size
    assert st.durable_end() == end1
    await st._abandon()
    os.truncate(seg.path, size)  # the unsynced tail is lost
    st = await _store("file", tmp_path / "L")
    assert st.log_end() == end1 == (1, 0)
    assert st.epochs() == [(0, (0, -1)), (1, (1, 0))]
    await st.close()


# ---- reset, compaction floor -------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_reset_wipes_everything(tmp_path: Path, kind: str) -> None:
    st = await _store(kind, tmp_path / "L")
    for i in range(100):
        st.append("a.b", b"", b"x" * 80, i)
    await st.begin_epoch(3)
    st.append("a.b", b"", b"x", 200)
    await st.flush()
    await st.reset(5000)
    assert st.log_end() == st.durable_end() == (4999, -1)
    assert st.epochs() == [] and st.msgs == 0 and st.last_seq == 4999 and st.first_seq == 5000
    assert st.state().last_ts == 0 and st.subjects_state() == {}
    if kind == "file":
        assert [os.path.basename(p) for p in glob.glob(str(tmp_path / "L" / "*.log"))] == [
            "00000000000000005000.log"
        ]
        assert not os.path.exists(tmp_path / "L" / "epochs")
        await st.close()
        st = await _store(kind, tmp_path / "L")
        assert st.log_end() == (4999, -1) and st.epochs() == []
    assert st.append("a.b", b"", b"new", 1) == 5000
    await st.close()


async def test_compaction_respects_the_floor(tmp_path: Path) -> None:
    st = await _store("file", tmp_path / "L")
    for i in range(400):
        st.append("a.b", b"", b"c" * 90, i)
    for s in range(1, 400):
        if s % 10:
            st.remove(s)  # 90 % dead everywhere, one live message per segment or so
    await st.flush()
    segs = st.segments
    assert len(segs) > 6
    floor = segs[3].last_seq  # segments 0-2 may be rewritten, 3 and later may not
    st.compact_floor = floor
    tail_before = st.read_batches(segs[2].table.pos(len(segs[2].table) - 1), 1 << 30).data
    await st.compact()
    rewritten = [s.base for s in st.segments if s.rewritten]
    assert rewritten and all(s.last_seq < floor for s in st.segments if s.rewritten)
    assert all(not s.rewritten for s in st.segments if s.last_seq >= floor)
    # batches a follower may still fetch (after the floor) are unchanged, bytes and positions
    assert st.read_batches(segs[2].table.pos(len(segs[2].table) - 1), 1 << 30).data == tail_before
    n = st.maintenance.rewritten
    st.compact_floor = 1 << 64
    await st.compact()
    assert st.maintenance.rewritten > n
    await st.close()
    st = await _store("file", tmp_path / "L")
    assert any(s.rewritten for s in st.segments)  # remembered by the index files
    await st.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_reopened_and_reset_follower_catches_up(tmp_path: Path, kind: str) -> None:
    ld = await _store(kind, tmp_path / "L", first_seq=50)
    fl = await _store(kind, tmp_path / "F", first_seq=50)
    rng = random.Random(7)
    await _history(ld, rng, 120)
    ld.seal()
    await replicate(ld, fl, rng=rng, fetches=3)
    await fl.reset(start_of(ld)[0] + 1)
    await replicate(ld, fl, rng=rng)
    assert snapshot(fl) == snapshot(ld) and batch_list(fl) == batch_list(ld)
    await ld.close()
    await fl.close()


async def test_a_rising_floor_wakes_compaction_and_plain_appends_do_not(tmp_path: Path) -> None:
    """Maintenance runs in the background here (auto): nothing calls ``compact``. A follower's
    appends without removals start no pass; the floor passing the segment the last pass stopped
    at starts one, and so does an append carrying removals."""
    ld = await _store("file", tmp_path / "L")
    fl = await _store("file", tmp_path / "F", auto_compact=True)
    m = fl.maintenance
    try:
        # The first floor starts a pass (none has run yet), which stops at once.
        fl.compact_floor = 0
        await asyncio.wait_for(m.wait_until(lambda mm: mm.passes > 0), 5)
        assert m.floor_blocked == NO_FLOOR and not m.rewritten  # no sealed segment yet
        for i in range(400):
            ld.append("a.b", b"", b"c" * 90, i)
        for s in range(1, 400):
            if s % 10:
                ld.remove(s)  # 90 % dead everywhere
        ld.seal()
        await replicate(ld, fl)  # the removals start passes: the floor holds them back
        await fl.flush()
        await m.indexes_written()
        await asyncio.wait_for(m.wait_until(lambda mm: mm.floor_blocked == fl.segments[0].last_seq), 5)
        assert not m.rewritten
        segs = fl.segments
        assert len(segs) > 6
        fl.compact_floor = segs[3].last_seq
        # (segments 0-2 are below it, each 90 % dead)
        await asyncio.wait_for(m.wait_until(lambda mm: mm.rewritten == 3), 5)
        assert m.floor_blocked == segs[3].last_seq
        assert m.rewritten and all(s.last_seq < segs[3].last_seq for s in fl.segments if s.rewritten)
        passes, done = m.passes, m.rewritten
        # Plain appends (a few, small: no roll, whose index file would start a pass): no pass.
        nsegs = len(fl.segments)
        for i in range(3):
            ld.append("a.c", b"", b"d", i)
            ld.seal()
            await replicate(ld, fl)
        await fl.flush()
        await asyncio.sleep(0.05)
        assert len(fl.segments) == nsegs
        assert m.passes == passes
        # A floor move short of the blocked segment: no pass; past it: one, which compacts.
        fl.compact_floor = segs[3].last_seq - 1
        fl.compact_floor = segs[3].last_seq
        await asyncio.sleep(0.05)
        assert m.passes == passes
        fl.compact_floor = fl.segments[-1].last_seq
        await asyncio.wait_for(m.wait_until(lambda mm: mm.rewritten > done), 5)
        # An append carrying removals: a pass.
        passes = m.passes
        ld.remove(ld.last_seq)
        ld.seal()
        await replicate(ld, fl)
        await asyncio.wait_for(m.wait_until(lambda mm: mm.passes > passes), 5)
        assert snapshot(fl) == snapshot(ld)
    finally:
        await ld.close()
        await fl.close()
