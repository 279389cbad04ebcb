"""JLR1 frame → Arrow (numpy-vectorized decode in the Spark task): the same batch the JLC1 path
builds for the same records, and every kind of damage refused."""

from __future__ import annotations

from array import array
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.spark.fetch import arrow_schema, frame_to_batch
from jetlog.spark.rawarrow import RawDecodeError, raw_frame_to_batch
from jetlog.wire import columnar as C
from jetlog.wire import rawframe as rf
from jetlog.wire import records as rc
from jetlog.wire.headers import encode as encode_headers

_text = st.text(alphabet="abcXYZ.09_-é€", min_size=1, max_size=16)
_hval = st.text(alphabet="abc xyz09-=", max_size=10).map(str.strip)


def _runs(encoded: list[bytes], cuts: list[int]) -> list[rf.Run]:
    """Split records into runs at ``cuts`` (each run with its own stored base position)."""
    runs = []
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(encoded)}), len(encoded)]
    for r, (a, b) in enumerate(pairwise(bounds)):
        if a == b:
            continue
        base = 4096 * (r + 1) + 64
        pos, p = [], base
        for rec in encoded[a:b]:
            pos.append(p)
            p += len(rec)
        runs.append(rf.Run(b - a, array("I", pos).tobytes(), base, b"".join(encoded[a:b])))
    return runs


@st.composite
def records(draw: st.DrawFn) -> tuple[list[C.Row], list[bytes], list[int]]:
    n = draw(st.integers(0, 30))
    seq = draw(st.integers(1, 2**40))
    rows, enc = [], []
    for _ in range(n):
        seq += draw(st.integers(1, 3))
        pairs = draw(st.lists(st.tuples(st.sampled_from(["A", "Nats-Msg-Id", "k-2"]), _hval), max_size=3))
        ts = draw(st.integers(0, 2**62))
        subj = draw(_text)
        data = draw(st.binary(max_size=40))
        ttl = draw(st.sampled_from([0, 0, 12345]))
        hdr = encode_headers(pairs) if pairs else b""
        rows.append(C.Row(seq, ts, subj, data, pairs))
        enc.append(rc.encode_record(seq, ts, subj.encode(), hdr, data, ttl=ttl))
    cuts = draw(st.lists(st.integers(0, max(n, 1)), max_size=4))
    return rows, enc, cuts


@settings(max_examples=150, deadline=None)
@given(records(), st.booleans())
def test_raw_and_columnar_paths_build_the_same_batch(rec: Any, with_headers: bool) -> None:
    rows, enc, cuts = rec
    schema = arrow_schema(with_headers)
    raw = b"".join(rf.encode(_runs(enc, cuts)))
    got = raw_frame_to_batch(raw, "S", schema)
    col_rows = [r._replace(headers=r.headers if with_headers else None) for r in rows]
    want = frame_to_batch(
        C.encode_rows(col_rows) if with_headers else C.encode_rows([r._replace(headers=None) for r in rows]),
        "S",
        schema,
    )
    assert got.schema == schema
    assert got.to_pylist() == want.to_pylist()


def _frame(n: int = 5) -> tuple[bytes, list[bytes]]:
    enc = [rc.encode_record(i + 1, 1000 + i, b"sub.%d" % i, b"", b"payload-%d" % i) for i in range(n)]
    return b"".join(rf.encode(_runs(enc, [2]))), enc


def test_damaged_payload_fails_the_crc() -> None:
    frame, _enc = _frame()
    i = frame.index(b"payload-3")
    bad = frame[:i] + b"P" + frame[i + 1 :]
    schema = arrow_schema(False)
    with pytest.raises(RawDecodeError, match="crc"):
        raw_frame_to_batch(bad, "S", schema)
    # Without verification the (structurally valid) frame decodes; that is what verify is for.
    assert raw_frame_to_batch(bad, "S", schema, verify=False).num_rows == 5


def test_lengths_overrunning_a_run_are_refused() -> None:
    frame, _enc = _frame()
    # Record 0's data_len field (offset 28 in the record) made huge: it would read into record 1.
    lay = rf.layout(frame)
    at = lay.data_start + 28
    bad = frame[:at] + (10_000).to_bytes(4, "little") + frame[at + 4 :]
    with pytest.raises(RawDecodeError, match=r"overruns|overlap"):
        raw_frame_to_batch(bad, "S", arrow_schema(False), verify=False)


def test_position_outside_its_run_is_refused() -> None:
    frame, _enc = _frame()
    lay = rf.layout(frame)
    bad = frame[: lay.pos_start] + (0).to_bytes(4, "little") + frame[lay.pos_start + 4 :]  # below pos_base
    with pytest.raises(rf.RawFrameError):
        raw_frame_to_batch(bad, "S", arrow_schema(False))


def test_invalid_utf8_subject_is_refused() -> None:
    rec = rc.encode_record(1, 1, b"\xff\xfe", b"", b"x")
    frame = b"".join(rf.encode([rf.single(rec)]))
    with pytest.raises(RawDecodeError, match="UTF-8"):
        raw_frame_to_batch(frame, "S", arrow_schema(False))


def test_empty_frame() -> None:
    frame = b"".join(rf.encode([]))
    b = raw_frame_to_batch(frame, "S", arrow_schema(True))
    assert b.num_rows == 0 and b.schema == arrow_schema(True)
    assert isinstance(b, pa.RecordBatch)


def test_whole_batch_runs_are_checked_against_their_stored_crc() -> None:
    from crc32c import crc32c

    enc = [rc.encode_record(i + 1, 1000 + i, b"s", b"", b"payload-%d" % i) for i in range(6)]
    body = b"".join(enc)
    pos = array("I", [64 + sum(len(e) for e in enc[:i]) for i in range(6)]).tobytes()
    good = b"".join(rf.encode([rf.Run(6, pos, 64, body, rf.RUN_WHOLE_BATCH, crc32c(body))]))
    assert raw_frame_to_batch(good, "S", arrow_schema(False)).column("seq").to_pylist() == [1, 2, 3, 4, 5, 6]
    wrong = b"".join(rf.encode([rf.Run(6, pos, 64, body, rf.RUN_WHOLE_BATCH, crc32c(body) ^ 1)]))
    with pytest.raises(RawDecodeError, match="batch crc"):
        raw_frame_to_batch(wrong, "S", arrow_schema(False))


def test_runs_the_node_checked_take_one_crc_call() -> None:
    """RUN_CHECKED: ``crc`` covers the run's bytes as sent (the node checked the batch they
    were cut from); the reader checks that, not each record's CRC."""
    from crc32c import crc32c

    enc = [rc.encode_record(i + 7, 1000 + i, b"s", b"", b"payload-%d" % i) for i in range(4)]
    body = b"".join(enc)
    pos = array("I", [900 + sum(len(e) for e in enc[:i]) for i in range(4)]).tobytes()
    good = b"".join(rf.encode([rf.Run(4, pos, 900, body, rf.RUN_CHECKED, crc32c(body))]))
    assert raw_frame_to_batch(good, "S", arrow_schema(False)).column("seq").to_pylist() == [7, 8, 9, 10]
    wrong = b"".join(rf.encode([rf.Run(4, pos, 900, body, rf.RUN_CHECKED, crc32c(body) ^ 1)]))
    with pytest.raises(RawDecodeError, match="batch crc"):
        raw_frame_to_batch(wrong, "S", arrow_schema(False))
    # The flag, not the record CRCs, decides: a record CRC zeroed under a matching run CRC
    # decodes, and the same run without the flag is refused.
    zeroed = bytes(4) + body[4:]
    ok = b"".join(rf.encode([rf.Run(4, pos, 900, zeroed, rf.RUN_CHECKED, crc32c(zeroed))]))
    assert raw_frame_to_batch(ok, "S", arrow_schema(False)).num_rows == 4
    plain = b"".join(rf.encode([rf.Run(4, pos, 900, zeroed, 0, 0)]))
    with pytest.raises(RawDecodeError, match="record crc"):
        raw_frame_to_batch(plain, "S", arrow_schema(False))


@settings(max_examples=300, deadline=None)
@given(records(), st.data())
def test_any_damage_is_refused_or_decoded_never_a_crash(rec: Any, data: st.DataObject) -> None:
    """Arrow's ``take`` trusts the offsets it is given: positions, lengths and run tables
    scrambled anywhere in the frame must end in a clean refusal (or, without verification, a
    batch), never a read outside the frame."""
    _rows, enc, cuts = rec
    frame = bytearray(b"".join(rf.encode(_runs(enc, cuts))))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    schema = arrow_schema(data.draw(st.booleans()))
    for verify in (True, False):
        try:
            b = raw_frame_to_batch(bytes(frame), "S", schema, verify=verify)
        except rf.RawFrameError:
            continue
        b.validate(full=True)
        assert b.num_rows == len(enc) or not enc


def test_positions_out_of_order_are_refused() -> None:
    frame, _enc = _frame()
    lay = rf.layout(frame)
    # Swap the stored positions of records 0 and 1 (same run): offsets would go backwards.
    p0 = frame[lay.pos_start : lay.pos_start + 4]
    p1 = frame[lay.pos_start + 4 : lay.pos_start + 8]
    bad = frame[: lay.pos_start] + p1 + p0 + frame[lay.pos_start + 8 :]
    with pytest.raises(RawDecodeError):
        raw_frame_to_batch(bad, "S", arrow_schema(False), verify=False)
