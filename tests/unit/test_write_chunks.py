"""``write_chunks``: how a job's buffers are cut into ``pwritev`` calls (bounded bytes, so the
page cache never gets a 2 MiB buffered write; bounded buffers, IOV_MAX) and ``OsIO.write``
putting them in a real file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.log.segment import IOV_MAX, WRITE_CHUNK, OsIO, write_chunks


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), max_size=30),
    limit=st.integers(1, 50),
    max_iov=st.integers(1, 6),
)
def test_chunks_are_the_buffers_in_order_and_bounded(sizes: list[int], limit: int, max_iov: int) -> None:
    bufs = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    chunks = list(write_chunks(bufs, limit, max_iov))
    assert b"".join(bytes(b) for c in chunks for b in c) == b"".join(bufs)
    for k, c in enumerate(chunks):
        size = sum(map(len, c))
        assert c and 0 < size <= limit and len(c) <= max_iov
        assert all(len(b) for b in c)
        if k < len(chunks) - 1:
            # Passed on only when full: as few calls as the bounds allow.
            assert size == limit or len(c) == max_iov


def test_small_buffers_go_whole_in_one_call() -> None:
    bufs = [b"h" * 40, b"b" * 1000, b"h" * 40, b"b" * 2000]
    (only,) = write_chunks(bufs)
    assert only == bufs and all(type(b) is bytes for b in only)  # no slicing, no copy


def test_a_big_batch_is_cut_at_the_byte_bound() -> None:
    body = os.urandom(3 * WRITE_CHUNK + 100)
    chunks = list(write_chunks([b"H" * 40, body]))
    assert [sum(map(len, c)) for c in chunks] == [WRITE_CHUNK] * 3 + [140]
    assert chunks[0][0] == b"H" * 40 and isinstance(chunks[0][1], memoryview)


def test_many_buffers_respect_iov_max() -> None:
    bufs = [b"x"] * (2 * IOV_MAX + 3)
    assert [len(c) for c in write_chunks(bufs)] == [IOV_MAX, IOV_MAX, 3]


def test_os_write_puts_a_job_of_megabytes_at_its_offset(tmp_path: Path) -> None:
    io = OsIO()
    fd = io.open(str(tmp_path / "seg"), os.O_RDWR | os.O_CREAT)
    try:
        head = os.urandom(100)
        bufs = [os.urandom(n) for n in (40, 3 << 20, 7, 0, WRITE_CHUNK, 40, 1 << 20)]
        io.write(fd, [head], 0)
        io.write(fd, bufs, len(head))
        want = head + b"".join(bufs)
        assert os.fstat(fd).st_size == len(want)
        assert io.pread(fd, len(want) + 10, 0) == want
    finally:
        io.close(fd)


@pytest.mark.parametrize("sizes", [[30, 0, 200, 5], [WRITE_CHUNK - 10, 10], [3 << 20, 40]])
def test_os_write_finishes_a_short_pwritev_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: list[int]
) -> None:
    """A ``pwritev`` that writes less than asked (a signal, a nearly full disk) is finished
    from where it stopped, for a small job (one call, no chunking) and a chunked one alike."""
    io = OsIO()
    fd = io.open(str(tmp_path / "seg"), os.O_RDWR | os.O_CREAT)
    real = os.pwritev
    calls: list[int] = []

    def short(fd: int, bufs: list[bytes], at: int) -> int:
        # Writes only the first half of what it is given, once per call.
        data = b"".join(bytes(b) for b in bufs)
        calls.append(len(data))
        return real(fd, [data[: len(data) // 2]], at)

    try:
        io.write(fd, [b"h" * 64], 0)
        bufs = [os.urandom(n) for n in sizes]
        monkeypatch.setattr(os, "pwritev", short)
        io.write(fd, bufs, 64)
        monkeypatch.setattr(os, "pwritev", real)
        want = b"h" * 64 + b"".join(bufs)
        assert calls and io.pread(fd, len(want) + 10, 0) == want
    finally:
        io.close(fd)
