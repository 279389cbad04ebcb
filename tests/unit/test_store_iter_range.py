"""``iter_range`` (the bulk-read path) returns exactly what per-message ``load`` returns, for
the file store (plain and compressed, committed and not yet committed, across segments and
after deletes/purges/reopen) and the memory store."""

from __future__ import annotations

import os
import random

import pytest

from jetlog.log.filestore import FileStore
from jetlog.log.memstore import MemStore


def _expected(store, start: int, last: int):  # type: ignore[no-untyped-def]
    return [m for s in range(max(start, 1), last + 1) if (m := store.load(s)) is not None]


async def _check(store, rnd: random.Random) -> None:  # type: ignore[no-untyped-def]
    top = store.last_seq + 3
    for _ in range(40):
        a = rnd.randint(1, top)
        b = rnd.randint(a - 2, top)
        assert list(store.iter_range(a, b)) == _expected(store, a, b)
    assert list(store.iter_range(1, top)) == _expected(store, 1, top)


def _fill(store, rnd: random.Random, n: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % i if i % 3 == 0 else b""
        store.append(
            f"s.{i % 5}", hdr, os.urandom(rnd.randint(0, 300)), 1_000 + i, ttl=5 if i % 7 == 0 else 0
        )


async def exercise_file_store(  # type: ignore[no-untyped-def]
    path,
    compression: bool,
    rnd: random.Random,
    check,
    *,
    n: int,
    removed: int,
    purge_seq: int,
    refill: int,
    after_fill=None,
) -> None:
    """The scenario the bulk-read tests share, with ``await check(store, rnd)`` at each step:
    ``n`` messages partly uncommitted (the open batch is read from memory), then flushed, then
    ``removed`` random deletes, a purge below ``purge_seq`` and ``refill`` more, then after a
    reopen (recovery, cold caches). ``after_fill(store)`` adds to the first fill."""
    st = await FileStore.open(str(path), compression=compression, segment_bytes=16 * 1024)
    try:
        _fill(st, rnd, n)
        if after_fill is not None:
            after_fill(st)
        await check(st, rnd)
        await st.flush()
        await check(st, rnd)
        for s in rnd.sample(range(1, n + 1), removed):
            st.remove(s)
        st.purge(seq=purge_seq)
        _fill(st, rnd, refill)
        await st.flush()
        await check(st, rnd)
    finally:
        await st.close()
    st = await FileStore.open(str(path), compression=compression, segment_bytes=16 * 1024)
    try:
        await check(st, rnd)
    finally:
        await st.close()


@pytest.mark.parametrize("compression", [False, True])
async def test_file_store_iter_range_matches_load(tmp_path, compression: bool) -> None:  # type: ignore[no-untyped-def]
    await exercise_file_store(
        tmp_path, compression, random.Random(7), _check, n=600, removed=80, purge_seq=40, refill=50
    )


async def damaged_store(path) -> FileStore:  # type: ignore[no-untyped-def]
    """A store of 20 messages on subject ``x`` whose 14th payload was overwritten on disk,
    opened without the open-time check (the damage is met by reads)."""
    st = await FileStore.open(str(path))
    for i in range(20):
        st.append("x", b"", b"payload-%d" % i, 1_000 + i)
    await st.flush()
    await st.close()
    seg = sorted(f for f in os.listdir(path) if f.endswith(".log"))[0]
    with open(os.path.join(path, seg), "r+b") as f:
        data = f.read()
        f.seek(data.index(b"payload-13"))
        f.write(b"PAYLOAD")
    return await FileStore.open(str(path), verify=False)


async def test_file_store_iter_range_detects_corruption(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from jetlog.errors import CorruptSegmentError

    st = await damaged_store(tmp_path)
    try:
        got = []
        with pytest.raises(CorruptSegmentError):
            for m in st.iter_range(1, 20):
                got.append(m.seq)  # noqa: PERF401 - keep what was read before the error
        assert got == list(range(1, 14))  # everything before the damaged record, nothing after
    finally:
        await st.close()


async def test_memory_store_iter_range_matches_load() -> None:
    rnd = random.Random(3)
    st = await MemStore.open()
    _fill(st, rnd, 300)
    for s in rnd.sample(range(1, 301), 40):
        st.remove(s)
    await _check(st, rnd)
