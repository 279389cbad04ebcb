"""JLC1 frame → Arrow RecordBatch (zero-copy views), Direct Get timestamps, schema agreement."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.spark.fetch import _Rows, arrow_schema, frame_to_batch, parse_timestamp_ns
from jetlog.wire import columnar as C
from jetlog.wire.timefmt import format_time, parse_time

_text = st.text(alphabet="abcXYZ.09_-é€", min_size=1, max_size=16)


@st.composite
def frames(draw: st.DrawFn) -> tuple[list[C.Row], bool]:
    with_headers = draw(st.booleans())
    n = draw(st.integers(0, 40))
    seq = draw(st.integers(1, 2**40))
    rows = []
    for _ in range(n):
        seq += draw(st.integers(1, 3))
        hdrs = draw(st.lists(st.tuples(_text, st.text(max_size=10)), max_size=3)) if with_headers else None
        rows.append(C.Row(seq, draw(st.integers(0, 2**62)), draw(_text), draw(st.binary(max_size=40)), hdrs))
    return rows, with_headers


@given(frames())
@settings(max_examples=200, deadline=None)
def test_frame_to_batch_matches_decode(fr: tuple[list[C.Row], bool]) -> None:
    rows, with_headers = fr
    buf = C.encode_rows(rows)
    schema = arrow_schema(with_headers)
    batch = frame_to_batch(buf, "ORDERS", schema)
    batch.validate(full=True)
    assert batch.schema.equals(schema)
    assert batch.num_rows == len(rows)
    d = batch.to_pydict()
    assert d["stream"] == ["ORDERS"] * len(rows)
    assert d["seq"] == [r.seq for r in rows]
    assert d["subject"] == [r.subject for r in rows]
    assert d["data"] == [r.data for r in rows]
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert ts == [r.ts // 1000 for r in rows]
    if with_headers:
        assert d["headers"] == [[{"key": k, "value": v} for k, v in (r.headers or [])] for r in rows]


def test_frame_to_batch_is_zero_copy() -> None:
    rows = [C.Row(i, i * 1_000_000_123, f"orders.{i}", b"x" * 100, None) for i in range(1, 1001)]
    buf = C.encode_rows(rows)
    batch = frame_to_batch(buf, "ORDERS", arrow_schema(False))
    base = pa.py_buffer(buf).address
    lay = C.layout(buf)
    # seq, subject and data arrays point into the frame itself
    assert batch.column("seq").buffers()[1].address == base + lay.seq.start
    assert batch.column("data").buffers()[2].address == base + lay.data.start
    assert batch.column("subject").buffers()[1].address == base + lay.subj_off.start


def test_frame_without_header_columns_gives_empty_lists() -> None:
    buf = C.encode_rows([C.Row(1, 5, "a", b"", None)])
    batch = frame_to_batch(buf, "S", arrow_schema(True))
    assert batch.column("headers").to_pylist() == [[]]


def test_invalid_utf8_subject_is_rejected() -> None:
    buf = C.encode([1], [1], [b"\xff\xfe"], [b""])
    with pytest.raises(pa.ArrowInvalid):
        frame_to_batch(buf, "S", arrow_schema(False))


def test_malformed_frame_is_rejected() -> None:
    buf = bytearray(C.encode_rows([C.Row(1, 5, "a", b"xyz", None)]))
    with pytest.raises(C.ColumnarError):
        frame_to_batch(bytes(buf[:-8]), "S", arrow_schema(False))


def test_arrow_schema_matches_spark() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    from jetlog.spark.schema import source_schema

    for h in (False, True):
        assert to_arrow_schema(source_schema(h), timezone="UTC").equals(arrow_schema(h))


@pytest.mark.parametrize(
    "ns",
    [
        1,
        999,
        1_700_000_000_123_456_789,
        1_700_000_000_000_000_000,
        951_782_400_500_000_000,
        4_102_444_800_000_000_001,
    ],
)
def test_timestamp_fast_path_agrees_with_go_parser(ns: int) -> None:
    text = format_time(ns)
    assert parse_timestamp_ns(text) == parse_time(text) == ns


def test_timestamp_other_forms() -> None:
    assert parse_timestamp_ns("2024-01-02T03:04:05+01:00") == parse_time("2024-01-02T03:04:05+01:00")
    assert parse_timestamp_ns("2024-01-02T03:04:05.1234567891Z") == parse_time(
        "2024-01-02T03:04:05.123456789Z"
    )


def test_direct_rows_to_batch_strips_injected_headers() -> None:
    schema = arrow_schema(True)
    rows = _Rows("S", schema)
    rows.add(
        7,
        "a.b",
        1_700_000_000_123_456_789,
        b"d",
        [("X", "1"), ("Nats-Sequence", "7"), ("X", "2"), ("Nats-Time-Stamp", "t"), ("Nats-Msg-Id", "m")],
    )
    b = rows.batch()
    assert b.schema.equals(schema)
    assert b.column("headers").to_pylist() == [
        [{"key": "X", "value": "1"}, {"key": "X", "value": "2"}, {"key": "Nats-Msg-Id", "value": "m"}]
    ]
    assert b.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123_456]
