"""The duplicate window read back from the log after a restart: in background steps, completed
at once by the first lookup or insert, so a duplicate is caught whenever it arrives and the
node serves before the read-back ends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from jetlog.api.models import StreamConfigRequest
from jetlog.errors import StorageError
from jetlog.log import FileStore
from jetlog.stream import dedup as dedup_mod
from jetlog.stream.config import normalize_stream_config, validate_stream_config
from jetlog.stream.dedup import DedupWindow
from jetlog.stream.stream import Stream
from jetlog.wire import headers as H

WINDOW = 120 * 10**9


def _scan_of(stored: dict[int, tuple[int, str]], calls: list[tuple[int, int]]) -> dedup_mod.Scan:
    def scan(first: int, last: int) -> list[tuple[int, int, str]]:
        calls.append((first, last))
        return [(s, stored[s][0], stored[s][1]) for s in range(first, last + 1) if s in stored]

    return scan


def test_steps_read_the_range_once_in_order() -> None:
    stored = {s: (1000 + s, f"id{s}") for s in range(1, 101) if s % 3}
    calls: list[tuple[int, int]] = []
    w = DedupWindow(WINDOW)
    w.begin_rebuild(1, 100, _scan_of(stored, calls))
    assert w.rebuilding
    assert not w.rebuild_step(40)
    assert not w.rebuild_step(40)
    assert w.rebuild_step(40)
    assert not w.rebuilding
    assert calls == [(1, 40), (41, 80), (81, 100)]
    assert len(w) == len(stored)
    assert w.seq_of("id5", 2000) == 5 and w.seq_of("id3", 2000) == 0


def test_unreadable_records_end_the_read_back_instead_of_failing_lookups(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Damage in the window (a lazy open has not read it yet): the ids read so far stay, the
    rest cannot be known, and a lookup answers instead of raising for every publish."""
    stored = {s: (1000 + s, f"id{s}") for s in range(1, 51)}

    def scan(first: int, last: int) -> list[tuple[int, int, str]]:
        if last > 20:
            raise StorageError("record 21: crc mismatch while scanning headers")
        return [(s, stored[s][0], stored[s][1]) for s in range(first, last + 1)]

    w = DedupWindow(WINDOW)
    w.begin_rebuild(1, 50, scan)
    assert not w.rebuild_step(20)
    assert w.rebuild_step(20) and not w.rebuilding
    assert "read back only up to seq 20" in caplog.text
    assert w.seq_of("id7", 2000) == 7 and w.seq_of("id40", 2000) == 0


def test_first_lookup_reads_the_rest_at_once() -> None:
    stored = {s: (1000 + s, f"id{s}") for s in range(1, 51)}
    calls: list[tuple[int, int]] = []
    w = DedupWindow(WINDOW)
    w.begin_rebuild(1, 50, _scan_of(stored, calls))
    w.rebuild_step(10)
    assert w.seq_of("id50", 2000) == 50
    assert calls == [(1, 10), (11, 50)] and not w.rebuilding


def test_insert_before_the_end_keeps_time_order() -> None:
    # Ids expire oldest first: a new id inserted before the read-back ends must land after the
    # stored ones, or expiry would stop at it and keep expired ids for ever.
    stored = {s: (1000 + s, f"id{s}") for s in range(1, 11)}
    w = DedupWindow(100)
    w.begin_rebuild(1, 10, _scan_of(stored, []))
    w.add("new", 11, 1050)
    assert w.seq_of("id1", 1105) == 0  # 1001 is out of the window at 1105
    assert w.seq_of("id10", 1105) == 10
    assert w.seq_of("new", 1105) == 11
    assert w.seq_of("new", 1150) == 0


def test_clear_and_no_window_drop_the_read_back() -> None:
    calls: list[tuple[int, int]] = []
    w = DedupWindow(WINDOW)
    w.begin_rebuild(1, 10, _scan_of({1: (1, "a")}, calls))
    w.clear()
    assert not w.rebuilding and w.seq_of("a", 2) == 0 and calls == []
    off = DedupWindow(0)
    off.begin_rebuild(1, 10, _scan_of({1: (1, "a")}, calls))
    assert not off.rebuilding and calls == []


class Out:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def send(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        self.sent.append((subject, payload))


def _stream(store: FileStore, out: Out) -> Stream:
    cfg = validate_stream_config(normalize_stream_config(StreamConfigRequest(name="S", subjects=["s.>"])))
    return Stream(cfg, store, 0, out)


async def _acks(out: Out, n: int) -> list[dict[str, object]]:
    for _ in range(400):
        if len(out.sent) >= n:
            return [json.loads(p) for _, p in out.sent]
        await asyncio.sleep(0.005)
    raise AssertionError(f"{len(out.sent)} of {n} PubAcks")


def _hdr(mid: str) -> bytes:
    return H.append(b"", [(H.MSG_ID, mid)])


@pytest.mark.parametrize("wait_for_warmup", [False, True])
async def test_duplicate_caught_after_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait_for_warmup: bool
) -> None:
    monkeypatch.setattr(dedup_mod, "REBUILD_STEP", 7)
    store = await FileStore.open(str(tmp_path))
    out = Out()
    s = _stream(store, out)
    await s.start()
    n = 60
    for i in range(n):
        # Every other message carries an id; the rest have none or other headers.
        hdr = _hdr(f"m{i}") if i % 2 == 0 else (H.append(b"", [("X", "y")]) if i % 4 == 1 else b"")
        s.process("s.x", f"r{i}", hdr, b"p")
    assert [a["seq"] for a in await _acks(out, n)] == list(range(1, n + 1))
    await s.close()

    store = await FileStore.open(str(tmp_path))
    out = Out()
    s = _stream(store, out)
    await s.start()
    try:
        assert s.dedup.rebuilding  # serving before the read-back ends
        if wait_for_warmup:
            for _ in range(400):
                if not s.dedup.rebuilding:
                    break
                await asyncio.sleep(0.005)
            assert not s.dedup.rebuilding
        s.process("s.x", "dup-first", _hdr("m0"), b"again")
        s.process("s.x", "dup-last", _hdr(f"m{n - 2}"), b"again")
        s.process("s.x", "new", _hdr("fresh"), b"new")
        acks = await _acks(out, 3)
        assert acks[0] == {"stream": "S", "seq": 1, "duplicate": True}
        assert acks[1] == {"stream": "S", "seq": n - 1, "duplicate": True}
        assert acks[2] == {"stream": "S", "seq": n + 1}
        assert s.store.last_seq == n + 1
    finally:
        await s.close()
