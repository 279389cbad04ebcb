"""Once a store has been quiet (everything committed and synced) for ``WRITER_INDEX_QUIET``
seconds, its writer segment's index file is written as a clean close would write it: a crash
after that scans only what came after it, an idle store keeps no timer, and a stream that
trickles does not rewrite the writer's index for every message."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from jetlog.log import FileStore
from jetlog.log import maintenance as mnt
from tests.unit.test_store_file import _fill, _logs, _open, _read
from tests.unit.test_store_idx_crc import _idx_of
from tests.unit.test_store_model import Model, check_store

QUIET = 0.05


@pytest.fixture(autouse=True)
def _short_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mnt, "WRITER_INDEX_QUIET", QUIET)
    monkeypatch.setattr(mnt, "WRITER_INDEX_MIN_GROWTH", 4096)


async def _until(cond, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def _writer_idx(path: Path) -> str:
    return _logs(path)[-1][:-4] + ".idx"


async def _filled(path: Path, model: Model, n: int, batches: int = 4) -> FileStore:
    store = await _open(path, segment_bytes=1 << 22)
    for _ in range(batches):
        await _fill(store, model, n // batches)
        await store.flush()
    return store


async def test_a_quiet_store_writes_its_writer_index_and_a_crash_scans_only_the_rest(tmp_path: Path) -> None:
    model = Model()
    store = await _filled(tmp_path, model, 200)
    assert len(_logs(tmp_path)) == 1  # one segment: the writer
    idx = _writer_idx(tmp_path)
    await _until(lambda: os.path.exists(idx))
    d = _idx_of(_logs(tmp_path)[0])
    assert d is not None and len(d.seqs) == 200 and d.covered == store._wseg.size
    assert store._maint._quiet is None  # idle: no timer left armed
    await _fill(store, model, 30)  # more after it, then a crash
    await store.flush()
    await store._abandon()
    assert _idx_of(_logs(tmp_path)[0]).covered == d.covered  # type: ignore[union-attr]

    store = await _open(tmp_path, segment_bytes=1 << 22)
    try:
        # The index file was used (not rebuilt) and the 30 after it were found by the scan.
        assert store.recovery.rebuilt_indexes == 0
        assert store.recovery.truncated_bytes > 0  # the preallocated zeros after the data
        check_store(store, model)
        assert store.append("a.b", b"", b"next", 1_000) == 231
    finally:
        await store.close()


async def test_nothing_is_written_while_commits_keep_coming(tmp_path: Path) -> None:
    model = Model()
    store = await _open(tmp_path, segment_bytes=1 << 22)
    try:
        t_end = time.monotonic() + 6 * QUIET
        while time.monotonic() < t_end:
            await _fill(store, model, 5)
            await store.flush()
            await asyncio.sleep(QUIET / 5)
        assert not os.path.exists(_writer_idx(tmp_path))
        await _until(lambda: os.path.exists(_writer_idx(tmp_path)))  # quiet at last
    finally:
        await store.close()
    check = await _open(tmp_path, segment_bytes=1 << 22)
    try:
        check_store(check, model)
    finally:
        await check.close()


async def test_a_trickle_does_not_rewrite_the_writer_index_each_time(tmp_path: Path) -> None:
    model = Model()
    store = await _filled(tmp_path, model, 400)
    idx = _writer_idx(tmp_path)
    try:
        await _until(lambda: os.path.exists(idx))
        await _until(lambda: store._maint._quiet is None and not store._maint._idx_tasks)
        first = _read(idx)
        covered = _idx_of(_logs(tmp_path)[0]).covered  # type: ignore[union-attr]
        # One small message, then quiet: below a quarter of the writer's size, no rewrite.
        await _fill(store, model, 1)
        await store.flush()
        await asyncio.sleep(4 * QUIET)
        assert _read(idx) == first
        # Enough growth (a quarter of the writer) and it is written again.
        await _fill(store, model, 200)
        await store.flush()
        await _until(lambda: _idx_of(_logs(tmp_path)[0]).covered > covered)  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_a_close_after_it_finds_the_index_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = Model()
    store = await _filled(tmp_path, model, 100)
    idx = _writer_idx(tmp_path)
    await _until(lambda: os.path.exists(idx))
    await _until(lambda: not store._maint._idx_tasks)
    written: list[str] = []
    real = mnt.write_idx_file
    monkeypatch.setattr("jetlog.log.fileclose.write_idx_file", lambda seg, *a, **k: written.append(seg.path))
    await store.close()
    assert written == []  # nothing changed since: the close leaves the file alone
    monkeypatch.setattr("jetlog.log.fileclose.write_idx_file", real)
    store = await _open(tmp_path, segment_bytes=1 << 22)
    try:
        assert store.recovery.rebuilt_indexes == 0 and store.recovery.truncated_bytes == 0
        check_store(store, model)
    finally:
        await store.close()


async def test_a_writer_rebuilt_by_a_crash_scan_gets_its_index_file_without_new_commits(
    tmp_path: Path,
) -> None:
    model = Model()
    store = await _filled(tmp_path, model, 200)
    await store._abandon()  # a crash before any index file
    assert not os.path.exists(_writer_idx(tmp_path))
    store = await _open(tmp_path, segment_bytes=1 << 22)
    try:
        assert store.recovery.rebuilt_indexes == 1
        await _until(lambda: os.path.exists(_writer_idx(tmp_path)))  # no commit needed
        await _until(lambda: not store._maint._idx_tasks)
    finally:
        await store._abandon()  # crashes again
    store = await _open(tmp_path, segment_bytes=1 << 22)
    try:
        assert store.recovery.rebuilt_indexes == 0
        check_store(store, model)
    finally:
        await store.close()
