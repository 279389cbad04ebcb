"""Record batch codec: round trips, layout, torn vs corrupt classification."""

from __future__ import annotations

import struct

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.wire import records as rc
from jetlog.wire import recordscan as rs
from jetlog.wire.records import Record

CCTX = zstandard.ZstdCompressor(level=3)
DCTX = zstandard.ZstdDecompressor()


def _batch(
    first: int = 1,
    n: int = 3,
    ops: list[tuple[int, int]] | None = None,
    compress: bool = False,
    base: int | None = None,
) -> bytes:
    recs = [
        Record(
            first + i,
            1000 + i,
            f"a.b.{i}",
            b"NATS/1.0\r\nK: v\r\n\r\n" if i % 2 else b"",
            bytes([i]) * (10 + i),
            5000 + i if i == 1 else 0,
        )
        for i in range(n)
    ]
    return rc.encode_batch(
        recs,
        ops or [],
        epoch=7,
        base_seq=first - 1 if base is None else base,
        compressor=CCTX if compress else None,
    )


def test_header_layout_is_fixed() -> None:
    assert rc.HEADER_SIZE == 64
    assert rc.REC_SIZE == 32
    buf = _batch()
    assert buf[:4] == rc.MAGIC
    h = rc.decode_header(buf)
    assert (h.version, h.flags, h.n_records, h.n_ops, h.epoch) == (1, 0, 3, 0, 7)
    assert (h.base_seq, h.last_seq, h.last_ts) == (0, 3, 1002)
    assert h.body_len == h.raw_len == len(buf) - 64


@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_records_and_ops(compress: bool) -> None:
    buf = _batch(first=10, n=4, ops=[(2, 5), (9, 9)], compress=compress)
    batch, nxt = rc.decode_batch(buf, 0, decompressor=DCTX)
    assert nxt == len(buf)
    assert batch.header.compressed is compress
    assert [r.seq for r in batch.records] == [10, 11, 12, 13]
    assert batch.records[1] == Record(11, 1001, "a.b.1", b"NATS/1.0\r\nK: v\r\n\r\n", bytes([1]) * 11, 5001)
    assert batch.records[0].ttl == 0
    assert batch.ops == [(2, 5), (9, 9)]


def test_skips_are_representable() -> None:
    # records 5 and 9, sequences 6-8 and 10-12 skipped: last_seq carries the high-water mark
    recs = [Record(5, 1, "s", b"", b"x"), Record(9, 2, "s", b"", b"y")]
    buf = rc.encode_batch(recs, base_seq=4, last_seq=12, last_ts=3)
    batch, _ = rc.decode_batch(buf)
    assert [r.seq for r in batch.records] == [5, 9]
    assert (batch.header.last_seq, batch.header.last_ts) == (12, 3)


def test_header_only_batch() -> None:
    buf = rc.encode_batch([], base_seq=99, last_seq=99, last_ts=0)
    assert len(buf) == 64
    batch, _ = rc.decode_batch(buf)
    assert batch.records == [] and batch.ops == [] and batch.header.last_seq == 99


def test_encode_rejects_non_increasing_sequences() -> None:
    with pytest.raises(ValueError):
        rc.encode_batch([Record(3, 0, "s", b"", b""), Record(3, 0, "s", b"", b"")], base_seq=0)
    with pytest.raises(ValueError):
        rc.encode_batch([Record(1, 0, "s", b"", b"")], base_seq=1)


def test_single_record_verification() -> None:
    buf = bytearray(_batch(n=2))
    h = rc.decode_header(buf)
    body = memoryview(buf)[64:]
    rec, end = rc.decode_record(body, 0)
    assert rec.seq == 1 and rec.data == bytes([0]) * 10
    # flip a payload byte of record 1: the record's own CRC catches it without the batch
    buf[64 + end - 1] ^= 0x01
    with pytest.raises(rc.BatchError, match="record crc mismatch") as ei:
        rc.decode_record(memoryview(buf)[64:], 0)
    assert not ei.value.torn
    assert h.n_records == 2


def test_record_meta_positions_match_records() -> None:
    buf = _batch(first=3, n=3)
    h = rc.decode_header(buf)
    body = rc.check_body(buf, 0, h)
    metas = rc.iter_record_meta(body, h)
    for m in metas:
        rec, end = rc.decode_record(body, m.off)
        assert rec.seq == m.seq and end - m.off == m.length
        assert len(rec.data) == m.data_len and len(rec.hdr) == m.hdr_len and rec.subject.encode() == m.subject


def test_impossible_headers_are_corrupt() -> None:
    buf = bytearray(_batch())
    bad = bytearray(buf)
    bad[20] = 9  # version, then fix the header CRC so only the semantic check can object
    struct.pack_into("<I", bad, 4, rc.crc32c(bytes(bad[8:64])))
    with pytest.raises(rc.BatchError, match="unknown version") as ei:
        rc.decode_header(bad)
    assert not ei.value.torn
    bad = bytearray(buf)
    struct.pack_into("<Q", bad, 40, 100)  # base_seq above last_seq
    struct.pack_into("<I", bad, 4, rc.crc32c(bytes(bad[8:64])))
    with pytest.raises(rc.BatchError, match="impossible sequence range"):
        rc.decode_header(bad)


def test_scan_clean() -> None:
    buf = _batch(1, 3) + _batch(4, 2, ops=[(1, 1)]) + _batch(6, 1, compress=True)
    res = rs.scan(buf)
    assert res.status == rs.OK and res.end == len(buf)
    assert [h.n_records for _, h in res.batches] == [3, 2, 1]


@pytest.mark.parametrize("cut", [1, 10, 63, 64, 65, 100])
def test_scan_torn_tail(cut: int) -> None:
    a = _batch(1, 3)
    b = _batch(4, 3)
    buf = a + b[: min(cut, len(b) - 1)]
    res = rs.scan(buf)
    assert res.status == rs.TORN
    assert res.end == len(a)
    assert len(res.batches) == 1


def test_scan_zero_filled_tail_is_torn() -> None:
    a = _batch(1, 3)
    res = rs.scan(a + bytes(500))
    assert res.status == rs.TORN and res.end == len(a)


def test_scan_corruption_followed_by_valid_data_is_corrupt() -> None:
    a, b, c = _batch(1, 3), _batch(4, 3), _batch(7, 3)
    buf = bytearray(a + b + c)
    buf[len(a) + 70] ^= 0x40  # inside b's body
    res = rs.scan(bytes(buf))
    assert res.status == rs.CORRUPT
    assert res.end == len(a)
    assert res.resume == len(a) + len(b)
    assert "body crc" in res.reason


def test_scan_header_damage_with_data_after_is_corrupt() -> None:
    a, b, c = _batch(1, 3), _batch(4, 3), _batch(7, 3)
    buf = bytearray(a + b + c)
    buf[len(a) + 2] ^= 0xFF  # b's magic
    res = rs.scan(bytes(buf))
    assert res.status == rs.CORRUPT and res.resume == len(a) + len(b)


def test_scan_damaged_last_batch_with_intact_magic_is_corrupt() -> None:
    # a whole batch was written and later damaged: not something a crash leaves behind
    a, b = _batch(1, 3), _batch(4, 3)
    buf = bytearray(a + b)
    buf[-1] ^= 0x01
    res = rs.scan(bytes(buf))
    assert res.status == rs.CORRUPT and res.resume == -1 and res.end == len(a)


def test_scan_garbage_tail_is_torn_unless_known_complete() -> None:
    a = _batch(1, 3)
    buf = a + b"\xde\xad\xbe\xef" * 30
    assert rs.scan(buf).status == rs.TORN
    res = rs.scan(buf, complete_to=len(buf))
    assert res.status == rs.CORRUPT and res.end == len(a)


def test_scan_damaged_last_batch_before_preallocated_zeros_is_corrupt() -> None:
    # The zeros after it do not explain the damage: only a missing write inside it would.
    a, b = _batch(1, 3), _batch(4, 3)
    buf = bytearray(a + b + bytes(8192))
    buf[len(a) + len(b) - 1] ^= 0x01
    res = rs.scan(bytes(buf))
    assert res.status == rs.CORRUPT and res.end == len(a)


def test_scan_missing_sector_before_valid_data_is_torn_beyond_complete_to() -> None:
    # Pages of an unsynced tail written out of order: a sector of zeros, then valid batches.
    parts = [_batch(1 + 3 * i, 3) for i in range(60)]
    buf = bytearray(b"".join(parts))
    assert len(buf) > 4 * rs.SECTOR
    hole = 2 * rs.SECTOR
    buf[hole : hole + rs.SECTOR] = bytes(rs.SECTOR)
    bounds = [0]
    for p in parts:
        bounds.append(bounds[-1] + len(p))
    before = max(b for b in bounds if b <= hole)
    res = rs.scan(bytes(buf))
    assert res.status == rs.TORN and res.end == before and res.resume == -1
    # ... but inside a region known to be complete it is corruption, resumed after the hole
    res = rs.scan(bytes(buf), complete_to=len(buf))
    assert res.status == rs.CORRUPT and res.end == before
    assert res.resume == min(b for b in bounds if b >= hole + rs.SECTOR)


def test_lost_write_needs_a_zero_sector_overlapping_the_batch() -> None:
    data = b"\x01" * 600 + bytes(424) + b"\x01" * 2000
    assert rs.lost_write(data, 600, 700)  # zeros from 600 to its sector's end (1024)
    assert not rs.lost_write(data, 599, 700)
    data = b"\x01" * 1100 + bytes(600) + b"\x01" * 2000  # 1100..1700: no whole sector
    assert not rs.lost_write(data, 0, len(data))
    data = b"\x01" * 1000 + bytes(600) + b"\x01" * 2000  # 1000..1600 covers 1024..1536
    assert rs.lost_write(data, 0, len(data))
    assert rs.lost_write(data, 0, 1025)  # the sector overlaps the batch by one byte
    assert not rs.lost_write(data, 0, 1024)  # ... or not at all
    assert rs.lost_write(b"\x01" * 10 + bytes(10), 10, 30)  # zeros to the end of the file
    assert not rs.lost_write(b"\x01" * 10 + bytes(10), 9, 30)


def test_find_next_batch_skips_false_magic() -> None:
    a = _batch(1, 2)
    junk = rc.MAGIC + b"\x00" * 70  # magic without a valid header
    buf = junk + a
    assert rs.find_next_batch(buf, 0) == len(junk)


# ---- properties -----------------------------------------------------------------------------

subjects = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FFF, exclude_characters="."),
    min_size=1,
    max_size=12,
).map(lambda s: "x." + s)
records = st.lists(
    st.tuples(
        st.integers(1, 5),
        st.integers(-(2**62), 2**62),
        subjects,
        st.binary(max_size=40),
        st.binary(max_size=300),
        st.integers(0, 2**62),
    ),
    max_size=20,
)
op_lists = st.lists(
    st.tuples(st.integers(1, 2**40), st.integers(0, 2**20)).map(lambda t: (t[0], t[0] + t[1])), max_size=8
)


@settings(max_examples=150, deadline=None)
@given(
    records=records,
    ops=op_lists,
    compress=st.booleans(),
    base=st.integers(0, 2**40),
    extra=st.integers(0, 100),
    epoch=st.integers(0, 2**63),
)
def test_property_round_trip(
    records: list[tuple[int, int, str, bytes, bytes, int]],
    ops: list[tuple[int, int]],
    compress: bool,
    base: int,
    extra: int,
    epoch: int,
) -> None:
    seq = base
    recs = []
    for gap, ts, subj, hdr, data, ttl in records:
        seq += gap
        recs.append(Record(seq, ts, subj, hdr, data, ttl))
    last = seq + extra
    buf = rc.encode_batch(
        recs,
        ops,
        epoch=epoch,
        base_seq=base,
        last_seq=last,
        last_ts=77,
        compressor=CCTX if compress else None,
    )
    batch, nxt = rc.decode_batch(buf + b"trailing", 0, decompressor=DCTX)
    assert nxt == len(buf)
    assert batch.records == recs
    assert batch.ops == ops
    h = batch.header
    assert (h.epoch, h.base_seq, h.last_seq, h.last_ts, h.n_records, h.n_ops) == (
        epoch,
        base,
        last,
        77,
        len(recs),
        len(ops),
    )
    assert h.compressed == (compress and bool(recs or ops))


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 4),
    cut_frac=st.floats(0, 1, exclude_max=True),
    flip=st.integers(0, 10**9),
    compress=st.booleans(),
)
def test_property_truncation_is_torn_and_flips_are_detected(
    n: int, cut_frac: float, flip: int, compress: bool
) -> None:
    parts = [_batch(1 + 3 * i, 3, ops=[(1, 1 + i)], compress=compress) for i in range(n)]
    buf = b"".join(parts)
    bounds = [0]
    for p in parts:
        bounds.append(bounds[-1] + len(p))
    # truncation anywhere: the scan keeps exactly the complete batches and calls the rest torn
    cut = int(cut_frac * len(buf))
    res = rs.scan(buf[:cut])
    complete = [b for b in bounds if b <= cut]
    assert res.end == complete[-1]
    assert res.status == (rs.OK if cut in bounds else rs.TORN)
    # a bit flip anywhere is never accepted as valid data
    bad = bytearray(buf)
    pos = flip % (len(buf) * 8)
    bad[pos // 8] ^= 1 << (pos % 8)
    res = rs.scan(bytes(bad), complete_to=len(bad))
    assert res.status == rs.CORRUPT
    hit = max(b for b in bounds if b <= pos // 8)
    assert res.end == hit
    for off, _ in res.batches:
        assert off < hit


@settings(max_examples=200, deadline=None)
@given(n=st.integers(8, 80), durable_frac=st.floats(0, 1), pages=st.integers(0, 2**40 - 1))
def test_property_unsynced_pages_in_any_order_are_a_torn_tail(
    n: int, durable_frac: float, pages: int
) -> None:
    """A preallocated segment after a power loss: everything up to the last sync, then the
    unsynced tail's pages each either written or still zeros. The scan keeps exactly a prefix
    of whole batches that includes everything synced, and never calls it corruption."""
    parts = [_batch(1 + 3 * i, 3, compress=i % 3 == 0) for i in range(n)]
    full = b"".join(parts)
    bounds = [0]
    for p in parts:
        bounds.append(bounds[-1] + len(p))
    durable = bounds[int(durable_frac * n)]
    img = bytearray(full[:durable] + bytes(len(full) - durable + 8192))
    page = 4096
    for k, lo in enumerate(range(durable // page * page, len(full), page)):
        if pages >> (k % 40) & 1:
            lo = max(lo, durable)
            hi = min(lo // page * page + page, len(full))
            img[lo:hi] = full[lo:hi]
    res = rs.scan(bytes(img))
    assert res.status == rs.TORN
    assert res.end in bounds and res.end >= durable
    assert [off for off, _ in res.batches] == bounds[: bounds.index(res.end)]
