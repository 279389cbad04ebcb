"""A lazy open (``storage.verify_on_open = "lazy"``, the node's default) reads no segment whose
index file vouches for it; the background scrub then checks each one. Damage at rest is found by
the scrub, and the next open quarantines it exactly as a full open does."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from jetlog.log import recovery, scrub
from tests.unit.test_store_file import _fill, _logs, _open, _read
from tests.unit.test_store_idx_crc import _filled, _flip_a_byte, _idx_of, check_quarantined
from tests.unit.test_store_model import check_store


@pytest.fixture(autouse=True)
def _no_start_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scrub, "START_DELAY", 0.0)


async def test_a_lazy_open_reads_no_segment_and_the_scrub_checks_them_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = await _filled(tmp_path)
    logs = _logs(tmp_path)
    assert len(logs) >= 3
    read: list[str] = []
    real_read, real_map = recovery.read_file, recovery.mapped_crc
    monkeypatch.setattr(recovery, "read_file", lambda io, p: read.append(p) or real_read(io, p))
    monkeypatch.setattr(recovery, "mapped_crc", lambda io, p, n: read.append(p) or real_map(io, p, n))
    store = await _open(tmp_path, lazy_verify=True)
    try:
        assert read == [], "a lazy open read a segment"
        assert store.recovery.rebuilt_indexes == 0
        check_store(store, model)  # reads check each record's own CRC
        await store.scrub.wait()
        assert (store.scrub.checked, store.scrub.damaged) == (len(logs), 0)
        assert all(s.trusted is None for s in store._segs)
    finally:
        await store.close()
    # A full open of the same store checks every segment's CRC before it returns.
    store = await _open(tmp_path)
    try:
        assert sorted(set(read)) == logs and store.scrub.done
        check_store(store, model)
    finally:
        await store.close()


def _flip_inside(log: str) -> None:
    """Flip a byte in a batch that is neither the segment's first nor its last (a lazy open
    reads those two, so damage there is found at open, as in a full one)."""
    d = _idx_of(log)
    assert d is not None and len(d.batches) >= 3
    k = len(d.batches) // 2
    at = (d.batches[k] + d.batches[k + 1]) // 2
    raw = bytearray(_read(log))
    raw[at] ^= 0x04
    with open(log, "wb") as f:
        f.write(raw)


async def test_damage_at_a_segments_edges_is_quarantined_at_a_lazy_open(tmp_path: Path) -> None:
    model = await _filled(tmp_path)
    _flip_a_byte(_logs(tmp_path)[-1])  # the writer's middle: its last batch (few batches)
    store = await _open(tmp_path, lazy_verify=True)
    try:
        check_quarantined(store, model)
    finally:
        await store.close()


@pytest.mark.parametrize("which", ["sealed", "writer"])
async def test_damage_found_by_the_scrub_is_quarantined_at_the_next_open(
    tmp_path: Path, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    model = await _filled(tmp_path)
    if which == "writer":
        # A writer of several batches (a small message per flush stays below the roll).
        store = await _open(tmp_path)
        for _ in range(3):
            await _fill(store, model, 1, size=10)
            await store.flush()
        await store.close()
    logs = _logs(tmp_path)
    victim = logs[1] if which == "sealed" else logs[-1]
    _flip_inside(victim)
    store = await _open(tmp_path, lazy_verify=True)
    try:
        assert store.recovery.lost_seqs == (), "a lazy open does not read the damage"
        with caplog.at_level(logging.ERROR, logger="jetlog.log.scrub"):
            await store.scrub.wait()
        assert store.scrub.damaged == 1
        assert any(victim in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
        if which == "sealed":
            assert not os.path.exists(victim[:-4] + ".idx"), "the index still vouches for it"
    finally:
        await store.close()
    if which == "writer":
        # Written again at close, without a content CRC: it no longer vouches for the bytes.
        d = _idx_of(victim)
        assert d is None or d.content_crc is None
    store = await _open(tmp_path, lazy_verify=True)
    try:
        check_quarantined(store, model)
        await store.scrub.wait()
        assert store.scrub.damaged == 0
    finally:
        await store.close()


async def test_a_crashed_writer_is_read_at_open_even_when_lazy(tmp_path: Path) -> None:
    """Only a file exactly as long as its index says is trusted: a writer left by a crash (its
    index older than its data, or preallocated zeros after it) is scanned as always."""
    model = await _filled(tmp_path)
    store = await _open(tmp_path, lazy_verify=True)
    await _fill(store, model, 7)
    await store.flush()
    await store._abandon()  # a crash: no index written at close
    store = await _open(tmp_path, lazy_verify=True)
    try:
        assert store._segs[-1].trusted is None
        check_store(store, model)
    finally:
        await store.close()


def test_file_crc_of_a_file_cut_short_is_unknown(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"x" * (scrub.CHUNK + 10))
    from crc32c import crc32c

    assert scrub.file_crc(str(p), scrub.CHUNK + 10) == crc32c(_read(str(p)))
    assert scrub.file_crc(str(p), scrub.CHUNK + 11) is None
    assert scrub.file_crc(str(tmp_path / "gone"), 5) is None


async def test_abandon_writes_nothing_after_it_is_called(tmp_path: Path) -> None:
    """``_abandon`` is a crash at the moment of the call: appends the flusher has not taken yet
    must not reach the disk afterwards, even while a scrub is running (stopping it yields to
    the loop, where the flusher would otherwise take them, roll a segment and write it)."""
    await _filled(tmp_path)
    store = await _open(tmp_path, lazy_verify=True)
    assert store.scrub._task is not None and not store.scrub._task.done()
    on_disk = {p: os.path.getsize(p) for p in _logs(tmp_path)}
    for i in range(40):  # enough to roll the writer segment: the job would create a file
        store.append(f"s.{i}", b"", b"x" * 100, 10_000 + i, 0)
    await store._abandon()
    assert {p: os.path.getsize(p) for p in _logs(tmp_path)} == on_disk
