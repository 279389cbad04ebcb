"""``load_ahead`` (a consumer's read-ahead) returns exactly what repeated ``load_next`` calls
return, for every filter kind, bound and limit, in the file store (plain and compressed,
committed and not, after removals and reopen) and the memory store; ``subject_state`` (the
per-publish limit checks) equals ``subjects_state`` for one literal subject."""

from __future__ import annotations

import random

import pytest

from jetlog.log.filestore import FileStore
from jetlog.log.memstore import MemStore
from jetlog.log.store import StoredMsg
from tests.unit.test_store_iter_range import _fill, damaged_store, exercise_file_store

FILTERS = [None, "s.1", "s.*", "s.>", "nothing", "s.9"]


def _by_load_next(store, start: int, f, max_seq: int, limit: int):  # type: ignore[no-untyped-def]
    out = []
    while len(out) < limit:
        m = store.load_next(start, f, max_seq)
        if m is None:
            break
        out.append(m)
        start = m.seq + 1
    return out


async def _check(store, rnd: random.Random) -> None:  # type: ignore[no-untyped-def]
    top = store.last_seq + 2
    for _ in range(150):
        start = rnd.randint(0, top)
        f = rnd.choice(FILTERS)
        max_seq = rnd.choice([0, rnd.randint(1, top)])
        limit = rnd.randint(1, 80)
        max_bytes = rnd.choice([1, 500, 10_000, 1 << 30])
        got = store.load_ahead(start, f, max_seq, limit, max_bytes)
        want = _by_load_next(store, start, f, max_seq, limit)
        # A prefix of what load_next gives, at least one message when there is any; whole
        # unless the byte budget ran out (or the filter spans several subjects: one only).
        assert got == want[: len(got)]
        assert bool(got) == bool(want)
        if len(got) < len(want) and f in (None, "s.1", "nothing", "s.9"):
            assert sum(len(m.data) + len(m.hdr) for m in got) >= max_bytes
        for m in got:
            assert store.is_live(m.seq)
    for subj in ("s.0", "s.1", "s.4", "s.9", "other"):
        assert store.subject_state(subj) == store.subjects_state(subj).get(subj)


@pytest.mark.parametrize("compression", [False, True])
async def test_file_store_load_ahead_matches_load_next(tmp_path, compression: bool) -> None:  # type: ignore[no-untyped-def]
    await exercise_file_store(
        tmp_path, compression, random.Random(5), _check, n=500, removed=80, purge_seq=20, refill=0
    )
    st = await FileStore.open(str(tmp_path), compression=compression, segment_bytes=16 * 1024)
    try:
        assert not st.is_live(5)
    finally:
        await st.close()


async def test_memory_store_load_ahead_matches_load_next() -> None:
    rnd = random.Random(6)
    st = MemStore()
    _fill(st, rnd, 400)
    for s in rnd.sample(range(1, 401), 50):
        st.remove(s)
    await _check(st, rnd)


async def test_one_subject_stream_read_in_runs_matches_load_next(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A filter naming a stream's only subject takes the run path (every live message
    qualifies): the same messages as ``load_next``, with payloads large enough for records to
    straddle the 256 KiB read chunks (those take the per-record path), removals, a part not yet
    committed, and cold caches after a reopen."""
    rnd = random.Random(11)
    st = await FileStore.open(str(tmp_path), segment_bytes=4 * 1024 * 1024)

    def fill(n: int) -> None:
        for i in range(n):
            hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % i if i % 4 == 0 else b""
            size = rnd.choice([0, 40, 300, 9_000, 70_000])
            st.append("only.x", hdr, rnd.randbytes(size), 1_000 + i)

    async def check() -> None:
        top = st.last_seq + 2
        for _ in range(120):
            start = rnd.randint(0, top)
            f = rnd.choice(["only.x", "only.*", None])
            max_seq = rnd.choice([0, rnd.randint(1, top)])
            limit = rnd.randint(1, 80)
            max_bytes = rnd.choice([1, 100_000, 1 << 30])
            got = st.load_ahead(start, f, max_seq, limit, max_bytes)
            want = _by_load_next(st, start, f, max_seq, limit)
            assert got == want[: len(got)]
            assert bool(got) == bool(want)
            if len(got) < len(want):
                assert sum(len(m.data) + len(m.hdr) for m in got) >= max_bytes
            assert all(type(m) is StoredMsg for m in got)

    try:
        fill(150)
        await check()  # partly in the open batch
        await st.flush()
        await check()
        for s in rnd.sample(range(1, 151), 30):
            st.remove(s)
        fill(20)
        await st.flush()
        await check()
    finally:
        await st.close()
    st = await FileStore.open(str(tmp_path), segment_bytes=4 * 1024 * 1024)
    try:
        await check()
    finally:
        await st.close()


async def test_load_ahead_in_runs_detects_corruption(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A damaged record met by the run path raises (its CRC sends it to the per-record read,
    which names the segment), after the records before it were read and never past it."""
    from jetlog.errors import CorruptSegmentError

    st = await damaged_store(tmp_path)
    try:
        got = st.load_ahead(1, "x", 0, 13, 1 << 30)  # up to the damaged record: served
        assert [m.seq for m in got] == list(range(1, 14))
        with pytest.raises(CorruptSegmentError):
            st.load_ahead(1, "x", 0, 64, 1 << 30)
        with pytest.raises(CorruptSegmentError):
            st.load_ahead(14, None, 0, 64, 1 << 30)
        assert [m.seq for m in st.load_ahead(15, None, 0, 64, 1 << 30)] == list(range(15, 21))
    finally:
        await st.close()
