"""Large payloads are appended without being copied into their record (``SPLIT_AT``): what
reaches the file must still be exactly ``encode_record`` of each message, whatever mix of
sizes, headers and TTLs a batch holds, compressed or not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jetlog.log.fileappend import SPLIT_AT
from jetlog.log.filestore import FileStore
from jetlog.wire import records as rc

HDR = b"NATS/1.0\r\nNats-Msg-Id: m\r\n\r\n"


def _messages() -> list[tuple[str, bytes, bytes, int]]:
    """(subject, hdr, data, ttl) around the split size, with and without headers and TTLs."""
    out = []
    sizes = [0, 10, SPLIT_AT - 1, SPLIT_AT, SPLIT_AT + 1, 16 * 1024, 70_000, 3]
    for i, size in enumerate(sizes):
        data = os.urandom(size)
        out.append((f"big.{i % 3}", b"", data, 0))
        out.append((f"big.{i % 3}", HDR, data, 0))
        out.append(("big.ttl", b"", data, 60_000_000_000))
    return out


def _batches(path: str) -> list[rc.Batch]:
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    out = []
    for name in sorted(os.listdir(path)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(path, name), "rb") as f:
            buf = f.read()
        off = 0
        while off < len(buf):
            batch, off = rc.decode_batch(buf, off, decompressor=dctx)
            out.append(batch)
    return out


@pytest.mark.parametrize("compression", [False, True])
async def test_large_payloads_are_stored_as_encode_record_writes_them(
    tmp_path: Path, compression: bool
) -> None:
    msgs = _messages()
    st = await FileStore.open(str(tmp_path), compression=compression, syncer="thread", auto_compact=False)
    ts = 1_700_000_000_000_000_000
    try:
        for subject, hdr, data, ttl in msgs:
            st.append(subject, hdr, data, ts, ttl)
        # and as one run (no headers), the capture path
        run = [m for m in msgs if not m[1] and not m[3]]
        last = st.append_run([m[0] for m in run], [m[2] for m in run], ts)
        await st.flush()
    finally:
        await st.close()
    expected = msgs + run
    assert last == len(expected)
    stored = [r for b in _batches(str(tmp_path)) for r in b.records]  # decode_record checks each CRC
    assert [r.seq for r in stored] == list(range(1, len(expected) + 1))
    for r, (subject, hdr, data, ttl) in zip(stored, expected, strict=True):
        assert (r.subject, r.hdr, r.data, r.ts, r.ttl) == (subject, hdr, data, ts, ts + ttl if ttl else 0)
    if not compression:
        # byte for byte: every record is in the file exactly as encode_record writes it
        blob = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("*.log")))
        for r, (subject, hdr, data, ttl) in zip(stored, expected, strict=True):
            assert rc.encode_record(r.seq, ts, subject.encode(), hdr, data, ts + ttl if ttl else 0) in blob
    # a full-verify reopen checks every batch and record and serves the same bytes
    st = await FileStore.open(str(tmp_path), compression=compression, syncer="thread", auto_compact=False)
    try:
        assert st.state().messages == len(expected)
        for seq, (subject, hdr, data, _) in enumerate(expected, start=1):
            m = st.load(seq)
            assert m is not None and (m.subject, m.hdr, m.data) == (subject, hdr, data)
    finally:
        await st.close()
