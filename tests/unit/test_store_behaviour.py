"""Observable behaviour of the ``MsgStore`` contract, run against every store kind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from jetlog.errors import StreamUnavailableError
from jetlog.log import FileStore, MemStore, MsgStore
from jetlog.log.store import StoredMsg, SubjectState
from tests.unit.test_store_model import SUBJECTS, Model, check_store

KINDS = ["mem", "file", "file-zstd"]
HDR = b"NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n"


async def _open(kind: str, path: Path, first_seq: int = 1, **kw: Any) -> FileStore | MemStore:
    if kind == "mem":
        return MemStore(first_seq=first_seq)
    return await FileStore.open(
        str(path / "store"), first_seq=first_seq, segment_bytes=4096, compression=kind == "file-zstd", **kw
    )


@pytest.fixture(params=KINDS)
async def kind_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, Any]]:
    store = await _open(request.param, tmp_path)
    yield request.param, store
    await store.close()


async def _reopen(kind: str, store: Any, tmp_path: Path) -> Any:
    """File stores: close and open again, so every assertion also covers recovery."""
    if kind == "mem":
        return store
    await store.close()
    return await _open(kind, tmp_path)


def _fill(store: Any, model: Model, n: int, ts0: int = 1000, ttl_every: int = 0) -> None:
    for i in range(n):
        subj = SUBJECTS[i % len(SUBJECTS)]
        hdr = HDR if i % 3 == 0 else b""
        data = bytes([i % 251]) * (i % 37)
        ttl = 10_000 if ttl_every and i % ttl_every == 0 else 0
        assert store.append(subj, hdr, data, ts0 + i, ttl) == model.append(subj, hdr, data, ts0 + i, ttl)


def test_protocol_conformance() -> None:
    # static: both classes are usable where the contract is expected
    def accepts(_: MsgStore) -> None: ...

    accepts(MemStore())
    assert isinstance(FileStore.open, Callable)  # type: ignore[arg-type]


async def test_empty_store(kind_store: tuple[str, Any], tmp_path: Path) -> None:
    kind, store = kind_store
    model = Model(file=kind != "mem")
    check_store(store, model)
    st = store.state()
    assert (st.messages, st.first_seq, st.last_seq, st.first_ts, st.num_deleted) == (0, 1, 0, 0, 0)
    assert store.load(1) is None and store.load(0) is None and store.load_last() is None
    assert store.seq_for_time(0) == 1
    assert store.committed_seq == 0
    store = await _reopen(kind, store, tmp_path)
    check_store(store, model)
    await store.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_first_seq_is_remembered(kind: str, tmp_path: Path) -> None:
    store = await _open(kind, tmp_path, first_seq=100)
    model = Model(first_seq=100, file=kind != "mem")
    check_store(store, model)
    store = await _reopen(kind, store, tmp_path)
    assert (store.first_seq, store.last_seq) == (100, 99)
    assert store.append("a.b", b"", b"x", 5) == 100
    model.append("a.b", b"", b"x", 5)
    check_store(store, model)
    await store.close()


async def test_append_and_load(kind_store: tuple[str, Any], tmp_path: Path) -> None:
    kind, store = kind_store
    model = Model(file=kind != "mem")
    _fill(store, model, 120, ttl_every=7)
    # readable before any commit (the stream layer reads its own appends)
    assert store.load(5) == StoredMsg(5, SUBJECTS[4], b"", bytes([4]) * 4, 1004)
    assert store.load(1) == StoredMsg(1, "a.b", HDR, b"", 1000)
    check_store(store, model)
    await store.flush()
    assert store.committed_seq == 120
    check_store(store, model)
    store = await _reopen(kind, store, tmp_path)
    check_store(store, model)
    await store.close()


async def test_msg_size_formulas(kind_store: tuple[str, Any]) -> None:
    kind, store = kind_store
    s1 = store.append("orders.new", b"", b"0123456789", 1)
    s2 = store.append("orders.new", b"NATS/1.0\r\n\r\n", b"0123456789", 2)
    if kind == "mem":
        assert store.msg_size(s1) == 10 + 0 + 10 + 16
        assert store.msg_size(s2) == 10 + 12 + 10 + 16
    else:
        assert store.msg_size(s1) == 22 + 10 + 10 + 8
        assert store.msg_size(s2) == 22 + 10 + 10 + 8 + 4 + 12
    assert store.bytes == store.msg_size(s1) + store.msg_size(s2)
    assert store.msg_size(99) == 0
    store.remove(s1)
    assert store.msg_size(s1) == 0 and store.bytes == store.msg_size(s2)


async def test_skip(kind_store: tuple[str, Any], tmp_path: Path) -> None:
    kind, store = kind_store
    model = Model(file=kind != "mem")
    assert store.skip(3, ts=50) == model.skip(3, 50) == 3
    check_store(store, model)  # empty: first_seq = last_seq + 1
    assert store.state().first_seq == 4
    _fill(store, model, 5, ts0=100)
    assert store.skip(2, ts=200) == model.skip(2, 200) == 10
    st = store.state()
    assert (st.first_seq, st.last_seq, st.last_ts, st.num_deleted) == (4, 10, 200, 2)
    assert store.deleted_seqs() == [9, 10]
    check_store(store, model)
    store = await _reopen(kind, store, tmp_path)
    check_store(store, model)
    assert store.append("a.b", b"", b"z", 300) == 11
    await store.close()


async def test_skip_defaults_to_wall_clock(kind_store: tuple[str, Any]) -> None:
    _, store = kind_store
    import time

    before = time.time_ns()
    store.skip()
    assert store.last_seq == 1 and store.state().last_ts >= before


async def test_remove(kind_store: tuple[str, Any], tmp_path: Path) -> None:
    kind, store = kind_store
    model = Model(file=kind != "mem")
    _fill(store, model, 30)
    for s in (1, 2, 7, 30, 15, 16):
        assert store.remove(s) is True
        model.remove(s)
    assert store.remove(7) is False
    assert store.remove(0) is False and store.remove(31) is False
    assert store.remove(7, erase=True) is False
    assert store.remove(8, erase=True) is True
    model.remove(8)
    st = store.state()
    assert (st.first_seq, st.messages, st.num_deleted) == (3, 23, 5)
    assert store.deleted_seqs() == [7, 8, 15, 16, 30]
    check_store(store, model)
    store = await _reopen(kind, store, tmp_path)
    check_store(store, model)
    await store.close()


async def test_remove_everything_one_by_one(kind_store: tuple[str, Any], tmp_path: Path) -> None:
    kind, store = kind_store
    model = Model(file=kind != "mem")
    _fill(store, model, 40)
    for s in range(1, 41):
        assert store.remove(s)
        model.remove(s)
    st = store.state()
    assert (st.messages, st.bytes, st.first_seq, st.last_seq, st.first_ts, st.num_deleted) == (
        0,
        0,
        41,
        40,
        0,
        0,
    )
    check_store(store, model)
    store = await _reopen(kind, store, tmp_path)
    check_store(store, model)
    await store.close()


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"seq": 10},
        {"seq": 1},
        {"seq": 500},
        {"keep": 5},
        {"keep": 500},
        {"subject": "a.b"},
        {"subject": "kv.>"},
        {"subject": "kv.*", "keep": 2},
        {"subject": "a.*", "seq": 20},
        {"subject": ">"},
        {"subject": "none"},
        {"subject": "*.*", "keep": 1},
        {"subject": "kv.k1", "keep": 1},
    ],
)
async def test_purge(kind_store: tuple[str, Any], tmp_path: Path, args: dict[str, Any]) -> None:
    kind, store = kind_store
    model = Model(file=kind != "mem")
    _fill(store, model, 60)
    store.remove(3)
    model.remove(3)
    n = store.purge(**args)
    assert n == model.purge(**args)
    assert store.last_seq == 60
    check_store(store, model)
    _fill(store, model, 5, ts0=5000)
    check_store(store, model)
    store = await _reopen(kind, store, tmp_path)
    check_store(store, model)
    await store.close()


async def test_purge_everything_then_append(kind_store: tuple[str, Any], tmp_path: Path) -> None:
    kind, store = kind_store
    model = Model(file=kind != "mem")
    _fill(store, model, 50)
    assert store.purge() == model.purge() == 50
    st = store.state()
    assert (st.messages, st.bytes, st.first_seq, st.last_seq, st.num_subjects) == (0, 0, 51, 50, 0)
    assert store.purge() == 0
    store = await _reopen(kind, store, tmp_path)
    check_store(store, model)
    assert store.append("x.y", b"", b"again", 9999) == 51
    model.append("x.y", b"", b"again", 9999)
    check_store(store, model)
    await store.close()


async def test_reads_with_filters_and_bounds(kind_store: tuple[str, Any]) -> None:
    _, store = kind_store
    for i, subj in enumerate(["a.b", "a.c", "a.b.c", "x.y", "a.b", "kv.k1", "a.c", "x.y"]):
        store.append(subj, b"", str(i).encode(), 100 + 10 * i)
    assert store.load_next(1, "a.*").seq == 1
    assert store.load_next(2, "a.b").seq == 5
    assert store.load_next(2, "a.>").seq == 2
    assert store.load_next(6, "a.b", max_seq=6) is None
    assert store.next_seq(1, "x.y") == 4 and store.next_seq(5, "x.y") == 8 and store.next_seq(9) == 0
    assert store.load_last("a.*").seq == 7
    assert store.load_last("a.*", max_seq=6).seq == 5
    assert store.load_last("a.>", max_seq=3).seq == 3
    assert store.load_last("nope") is None
    assert store.seq_for_time(0) == 1 and store.seq_for_time(135) == 5 and store.seq_for_time(171) == 9
    store.remove(5)
    assert store.seq_for_time(135) == 6
    assert store.subjects_state("a.*") == {"a.b": SubjectState(1, 1, 1), "a.c": SubjectState(2, 2, 7)}
    assert store.num_pending(1, "a.>") == 4
    assert store.num_pending(3, "a.>") == 2
    assert store.num_pending(1, "*.*", last_per_subject=True) == 4
    assert store.num_pending(5, None, last_per_subject=True) == 3  # a.c@7, kv.k1@6, x.y@8
    assert store.num_pending(1) == 7


async def test_kv_pattern_many_subjects(kind_store: tuple[str, Any], tmp_path: Path) -> None:
    """A KV bucket: per-subject limit 1, wildcard reads over hundreds of keys."""
    kind, store = kind_store
    model = Model(file=kind != "mem")
    ts = 1
    for rnd in range(4):
        for k in range(300):
            subj = f"$KV.b.k{k}" if k % 3 else f"$KV.c.k{k}"
            if (k + rnd) % 4 == 0:
                continue
            ts += 1
            store.append(subj, b"", f"{rnd}".encode(), ts)
            model.append(subj, b"", f"{rnd}".encode(), ts)
            ss = store.subjects_state(subj)[subj]
            while ss.msgs > 1:
                assert store.remove(ss.first)
                model.remove(ss.first)
                ss = store.subjects_state(subj)[subj]
    for f in ["$KV.b.>", "$KV.c.>", "$KV.*.k3", "$KV.>", ">", "$KV.b.k7"]:
        for start in (1, 200, 700, store.last_seq):
            assert store.num_pending(start, f) == model.num_pending(start, f)
            assert store.num_pending(start, f, True) == model.num_pending(start, f, True)
            assert store.next_seq(start, f) == model.next_seq(start, f)
        assert (store.load_last(f) or StoredMsg(0, "", b"", b"", 0)).seq == model.last(f)
        assert store.subjects_state(f) == model.subjects_state(f)
    assert store.state()[:8] == model.state()[:8]
    store = await _reopen(kind, store, tmp_path)
    assert store.state()[:8] == model.state()[:8]
    assert store.subjects_state("$KV.b.>") == model.subjects_state("$KV.b.>")
    await store.close()


async def test_ttl_entries(kind_store: tuple[str, Any], tmp_path: Path) -> None:
    kind, store = kind_store
    store.append("a.b", b"", b"1", 1000, ttl=500)
    store.append("a.b", b"", b"2", 1001)
    store.append("a.c", b"", b"3", 1002, ttl=7)
    assert sorted(store.ttl_entries()) == [(1, 1500), (3, 1009)]
    store.remove(1)
    assert list(store.ttl_entries()) == [(3, 1009)]
    store = await _reopen(kind, store, tmp_path)
    assert list(store.ttl_entries()) == [(3, 1009)]
    store.purge()
    assert list(store.ttl_entries()) == []
    await store.close()


async def test_commit_listeners(kind_store: tuple[str, Any]) -> None:
    kind, store = kind_store
    seen: list[int] = []
    done = asyncio.Event()

    def on_commit(seq: int) -> None:
        seen.append(seq)
        if seq >= 3:
            done.set()

    store.add_commit_listener(on_commit)
    for i in range(3):
        store.append("a.b", b"", b"x", i)
    await asyncio.wait_for(done.wait(), 5)
    assert seen[-1] == 3 and seen == sorted(seen)
    assert store.committed_seq == 3
    store.skip(2, ts=10)
    await store.flush()
    if kind == "mem":
        await asyncio.sleep(0)  # memory commits are reported on the next loop iteration
    assert seen[-1] == 5 and store.committed_seq == 5


async def test_closed_store_refuses_writes(kind_store: tuple[str, Any]) -> None:
    _, store = kind_store
    store.append("a.b", b"", b"x", 1)
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StreamUnavailableError):
        store.append("a.b", b"", b"x", 2)
    with pytest.raises(StreamUnavailableError):
        store.remove(1)


async def test_multi_subject_scan_and_fallback_paths(kind_store: tuple[str, Any]) -> None:
    """Wildcard lookups switch between scanning message columns and per-subject bisection;
    both must give the model's answers."""
    kind, store = kind_store
    model = Model(file=kind != "mem")
    ts = 0

    def put(subj: str) -> None:
        nonlocal ts
        ts += 1
        assert store.append(subj, b"", b"v", ts) == model.append(subj, b"", b"v", ts)

    put("a.c")
    for i in range(100):
        put(f"m.{i}")
    for _ in range(900):
        put("z.z")  # long runs without a match: forces the fallback after the scan limit
    put("a.b")
    for i in range(0, 100, 7):
        put(f"m.{i}")
    for _ in range(900):
        put("z.z")
    for f in ["a.*", "m.*", "m.>", "*.*", "z.*", "*.z"]:
        for start in (1, 2, 102, 1000, 1002, 1100, model.last_seq):
            assert store.next_seq(start, f) == model.next_seq(start, f), (f, start)
            assert store.num_pending(start, f) == model.num_pending(start, f), (f, start)
            assert store.num_pending(start, f, True) == model.num_pending(start, f, True), (f, start)
        for mx in (0, 50, 1001, 1500):
            got = store.load_last(f, mx)
            assert (got.seq if got else 0) == model.last(f, mx), (f, mx)
    store.remove(1002)  # a.b
    model.remove(1002)
    assert store.next_seq(2, "a.*") == model.next_seq(2, "a.*") == 0
    assert store.load_last("a.*", 1500).seq == 1
