"""``load_ahead`` (a consumer's read-ahead) returns exactly what repeated ``load_next`` calls
return, for every filter kind, bound and limit, in the file store (plain and compressed,
committed and not, after removals and reopen) and the memory store; ``subject_state`` (the
per-publish limit checks) equals ``subjects_state`` for one literal subject."""

from __future__ import annotations

import random

import pytest

from jetlog.log.filestore import FileStore
from jetlog.log.memstore import MemStore
from tests.unit.test_store_iter_range import _fill, exercise_file_store

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
