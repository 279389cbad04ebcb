"""The scan of a segment without an index file (a writer after a crash) indexes records in one
pass (``records.walk_records``): the same columns as reading each record's metadata
(``iter_record_meta``, the reference here), compressed or not, with headers, TTLs and ops, and
nothing added when a batch is inconsistent."""

from __future__ import annotations

import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.log.positions import NULL_LAST, is_null
from jetlog.log.segment import COMPRESSED, SegmentData, file_msg_size
from jetlog.wire import records as rc
from jetlog.wire import recordscan as rs
from jetlog.wire.records import Record

CCTX = zstandard.ZstdCompressor(level=3)
DCTX = zstandard.ZstdDecompressor()

record = st.tuples(
    st.integers(1, 3),  # sequence gap
    st.sampled_from(["a", "a.b", "orders.eu.1", "ünï.çødé"]),
    st.sampled_from([b"", b"NATS/1.0\r\nK: v\r\n\r\n"]),
    st.binary(max_size=40),
    st.sampled_from([0, 0, 5_000_000_000]),  # TTL
)
batch = st.tuples(
    st.lists(record, max_size=6),
    st.booleans(),  # compressed
    st.lists(st.integers(0, 3), max_size=2),  # ops, relative to the batch's first sequence
)


def _segment(batches: list[tuple[list[tuple[int, str, bytes, bytes, int]], bool, list[int]]]) -> bytes:
    out = []
    seq = 0
    for recs, compress, ops in batches:
        base = seq
        rs = []
        for gap, subj, hdr, data, ttl in recs:
            seq += gap
            rs.append(Record(seq, 1_000 + seq, subj, hdr, data, ttl))
        op_list = [(max(1, base - k), max(1, base - k)) for k in ops] if base else []
        out.append(
            rc.encode_batch(rs, op_list, epoch=3, base_seq=base, compressor=CCTX if compress else None)
        )
    return b"".join(out)


def _reference(buf: bytes, batches: list[tuple[int, rc.BatchHeader]]) -> dict[str, object]:
    """The columns as the per-record path built them (one ``RecordMeta`` per record)."""
    cols: dict[str, list[object]] = {
        k: [] for k in ("seqs", "ts", "pos", "aux", "size", "subj", "ops", "blast")
    }
    ttl = {}
    for off, h in batches:
        body = bytes(rc.raw_body(h, rc.check_body(buf, off, h), DCTX, off))
        for m in rc.iter_record_meta(body, h, off):
            cols["seqs"].append(m.seq)
            cols["ts"].append(m.ts)
            cols["pos"].append(off if h.compressed else off + rc.HEADER_SIZE + m.off)
            cols["aux"].append(COMPRESSED | m.off if h.compressed else m.length)
            cols["size"].append(file_msg_size(len(m.subject), m.hdr_len, m.data_len))
            cols["subj"].append(m.subject.decode())
            if m.ttl:
                ttl[m.seq] = m.ttl
        for a, b in rc.decode_ops(body, h):
            cols["ops"] += [a, b]
        cols["blast"].append(NULL_LAST if is_null(h) else h.last_seq)
    return {**cols, "ttl": ttl}


def _columns(d: SegmentData) -> dict[str, object]:
    return {
        "seqs": list(d.seqs),
        "ts": list(d.ts),
        "pos": list(d.pos),
        "aux": list(d.aux),
        "size": list(d.size),
        "subj": [d.subjects[k] for k in d.lsid],
        "ops": list(d.ops),
        "blast": list(d.blast),
        "ttl": dict(d.ttl),
    }


@settings(max_examples=200, deadline=None)
@given(st.lists(batch, min_size=1, max_size=6), st.integers(1, 3))
def test_scan_indexes_like_the_per_record_path(batches, parts: int) -> None:  # type: ignore[no-untyped-def]
    buf = _segment(batches)
    res = rs.scan(buf, 0, complete_to=len(buf), verify=True)
    assert res.status == rs.OK
    d = SegmentData(1)
    # In several calls, as recovery does from an index file's end: the columns continue.
    step = max(1, len(res.batches) // parts)
    for i in range(0, len(res.batches), step):
        d.add_batches(buf, res.batches[i : i + step], DCTX)
    assert _columns(d) == _reference(buf, res.batches)
    last_off, last_h = res.batches[-1]
    assert (d.covered, d.last_seq, d.epoch, d.has_batches) == (len(buf), last_h.last_seq, 3, True)
    assert list(d.batches) == [off for off, _ in res.batches] and last_off == d.batches[-1]
    # Subject keys are given in order of first appearance (what index files hold).
    firsts = list(dict.fromkeys(_reference(buf, res.batches)["subj"]))  # type: ignore[call-overload]
    assert [d.subjects[k] for k in sorted(d.subjects)] == firsts


def test_a_batch_out_of_order_adds_nothing() -> None:
    ok = rc.encode_batch([Record(5, 1, "a", b"", b"x", 0), Record(6, 2, "a", b"", b"y", 0)], base_seq=4)
    # CRC-valid, but its records go back to sequence 6 (a batch we never write).
    back = rc.encode_batch([Record(6, 3, "b", b"", b"z", 0)], base_seq=5)
    buf = ok + back
    res = rs.scan(buf, 0, complete_to=len(buf), verify=True)
    d = SegmentData(5)
    try:
        d.add_batches(buf, res.batches, DCTX)
    except rc.BatchError as e:
        assert e.offset == len(ok)
        assert "not increasing" in str(e)
    else:
        raise AssertionError("an out-of-order batch was indexed")
    assert (list(d.seqs), list(d.batches), d.covered, d.has_batches, d.subjects) == ([], [], 0, False, {})


def test_a_record_overrunning_its_body_is_a_batch_error() -> None:
    rec = bytearray(rc.encode_record(1, 1, b"a", b"", b"payload"))
    rec[28:32] = (100).to_bytes(4, "little")  # its data length, past the body's end
    # Sealed with a valid CRC: only the walk over the records can tell.
    hdr, body = rc.seal_batch(bytes(rec), n_records=1, n_ops=0, epoch=0, base_seq=0, last_seq=1, last_ts=1)
    buf = hdr + body
    res = rs.scan(buf, 0, complete_to=len(buf), verify=True)
    assert len(res.batches) == 1
    d = SegmentData(1)
    try:
        d.add_batches(buf, res.batches, DCTX)
    except rc.BatchError as e:
        assert e.offset == 0 and not e.torn
        assert "bad record layout" in str(e)
    else:
        raise AssertionError("an inconsistent batch was indexed")
    assert list(d.seqs) == [] and d.covered == 0
