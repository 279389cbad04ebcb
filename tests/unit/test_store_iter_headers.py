"""``iter_headers`` (what rebuilds the duplicate window after a restart) returns exactly the
messages with a header block that per-message ``load`` returns, for the file store (plain and
compressed; committed and not; after deletes, purges and reopen; records larger than one scan
read) and the memory store; a damaged record with headers raises."""

from __future__ import annotations

import os
import random

import pytest

from jetlog.errors import StorageError
from jetlog.log import rawread
from jetlog.log.filestore import FileStore
from jetlog.log.memstore import MemStore
from tests.unit.test_store_iter_range import _fill, exercise_file_store


def _expected(store, start: int, last: int):  # type: ignore[no-untyped-def]
    msgs = [m for s in range(max(start, 1), last + 1) if (m := store.load(s)) is not None]
    return [(m.seq, m.ts, m.hdr) for m in msgs if m.hdr]


async def _check(store, rnd: random.Random) -> None:  # type: ignore[no-untyped-def]
    top = store.last_seq + 3
    for _ in range(30):
        a = rnd.randint(1, top)
        b = rnd.randint(a - 2, top)
        assert list(store.iter_headers(a, b)) == _expected(store, a, b)
    everything = list(store.iter_headers(1, top))
    assert everything == _expected(store, 1, top)
    assert everything  # the fill puts headers on every third message


@pytest.mark.parametrize("compression", [False, True])
async def test_file_store_iter_headers_matches_load(tmp_path, monkeypatch, compression: bool) -> None:  # type: ignore[no-untyped-def]
    # A scan read of 1,000 bytes: many reads per segment, and the 2,000-byte records below
    # are each too large for one (read on their own).
    monkeypatch.setattr(rawread, "HEADER_SCAN_BUDGET", 1000)

    def big_records(st: FileStore) -> None:
        for i in range(4):
            st.append("big", b"NATS/1.0\r\nNats-Msg-Id: big-%d\r\n\r\n" % i, os.urandom(2000), 5_000 + i)

    await exercise_file_store(
        tmp_path,
        compression,
        random.Random(11),
        _check,
        n=400,
        removed=60,
        purge_seq=30,
        refill=40,
        after_fill=big_records,
    )


async def test_file_store_iter_headers_detects_a_damaged_header(tmp_path) -> None:  # type: ignore[no-untyped-def]
    st = await FileStore.open(str(tmp_path))
    for i in range(20):
        st.append("x", b"NATS/1.0\r\nNats-Msg-Id: id-%02d\r\n\r\n" % i, b"payload", 1_000 + i)
    await st.flush()
    await st.close()
    seg = sorted(f for f in os.listdir(tmp_path) if f.endswith(".log"))[0]
    path = os.path.join(tmp_path, seg)
    with open(path, "r+b") as f:
        data = f.read()
        f.seek(data.index(b"id-13"))
        f.write(b"ID-13")
    st = await FileStore.open(str(tmp_path), verify=False)
    try:
        with pytest.raises(StorageError):
            list(st.iter_headers(1, 20))
    finally:
        await st.close()


async def test_memory_store_iter_headers_matches_load() -> None:
    rnd = random.Random(5)
    st = await MemStore.open()
    _fill(st, rnd, 300)
    for s in rnd.sample(range(1, 301), 40):
        st.remove(s)
    await _check(st, rnd)


async def test_file_store_header_scan_skips_stretches_without_headers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The index tells which records have headers (size - aux, see rawread._may_have_headers):
    # thousands of plain records are not read at all, only the stretch around the one record
    # that has headers (plain, with TTL, with both).
    st = await FileStore.open(str(tmp_path), segment_bytes=256 * 1024)
    try:
        for i in range(3000):
            hdr = b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % i if i == 2500 else b""
            st.append("s.x", hdr, b"p" * 100, 1_000 + i, ttl=5 if i % 2 else 0)
        await st.flush()
    finally:
        await st.close()
    st = await FileStore.open(str(tmp_path), segment_bytes=256 * 1024)
    read: list[int] = []
    real = st._io.pread

    def counting(fd: int, n: int, off: int) -> bytes:
        read.append(n)
        return real(fd, n, off)

    st._io.pread = counting  # type: ignore[method-assign]
    try:
        assert list(st.iter_headers(1, 3000)) == [(2501, 3_500, b"NATS/1.0\r\nNats-Msg-Id: m2500\r\n\r\n")]
        assert 0 < sum(read) < 1000, read
        read.clear()
        assert list(st.iter_headers(1, 2500)) == []
        assert read == []
    finally:
        await st.close()
