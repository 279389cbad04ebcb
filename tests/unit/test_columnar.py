"""JLC1 columnar frames: round trips, layout invariants, and rejection of malformed frames."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.wire import columnar as C

_subjects = st.text(alphabet="abcXYZ.09_-é", min_size=1, max_size=20)
_hdrs = st.lists(
    st.tuples(st.text(alphabet="ABCxyz-", min_size=1, max_size=8), st.text(max_size=12)), max_size=4
)


@st.composite
def rows(draw: st.DrawFn) -> list[C.Row]:
    with_headers = draw(st.booleans())
    n = draw(st.integers(0, 30))
    seq = draw(st.integers(1, 2**40))
    out = []
    for _ in range(n):
        seq += draw(st.integers(1, 5))
        out.append(
            C.Row(
                seq,
                draw(st.integers(0, 2**62)),
                draw(_subjects),
                draw(st.binary(max_size=64)),
                draw(_hdrs) if with_headers else None,
            )
        )
    return out


@given(rows())
@settings(max_examples=200)
def test_round_trip(rs: list[C.Row]) -> None:
    buf = C.encode_rows(rs)
    assert len(buf) % 8 == 0
    back = C.decode(buf)
    with_headers = any(r.headers is not None for r in rs)
    expect = [r._replace(headers=(r.headers or []) if with_headers else None) for r in rs]
    assert back == expect


@given(rows())
@settings(max_examples=100)
def test_sections_aligned_and_frame_bound(rs: list[C.Row]) -> None:
    buf = C.encode_rows(rs)
    lay = C.layout(buf)
    assert lay.n == len(rs)
    for sec in (lay.seq, lay.ts, lay.subj_off, lay.subj, lay.data_off, lay.data):
        assert sec.start % 8 == 0
    payload = sum(len(r.subject.encode()) + len(r.data) for r in rs)
    payload += sum(len(k.encode()) + len(v.encode()) for r in rs for k, v in (r.headers or ()))
    entries = sum(len(r.headers or ()) for r in rs)
    bound = (
        C.FRAME_OVERHEAD
        + len(rs) * (C.ROW_OVERHEAD + C.ROW_HEADER_OVERHEAD)
        + entries * C.ENTRY_OVERHEAD
        + payload
    )
    assert len(buf) <= bound


def test_known_bytes() -> None:
    buf = C.encode([7], [1_000], [b"a.b"], [b"hi"], None)
    assert buf[:16] == struct.pack("<4sBBHII", b"JLC1", 1, 0, 0, 1, 0)
    assert struct.unpack_from("<qq", buf, 16) == (7, 1_000)
    assert C.decode(buf) == [C.Row(7, 1_000, "a.b", b"hi", None)]


def test_empty_frame() -> None:
    buf = C.encode([], [], [], [], None)
    assert C.decode(buf) == []
    assert C.layout(buf).n == 0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:10], "shorter than its header"),
        (lambda b: b"XXXX" + b[4:], "bad magic"),
        (lambda b: b[:4] + b"\x02" + b[5:], "unsupported version"),
        (lambda b: b[:-8], "truncated"),
        (lambda b: b + b"\0" * 8, "trailing bytes"),
        (lambda b: b[:8] + struct.pack("<I", 1000) + b[12:], "truncated"),
    ],
)
def test_malformed_frames_rejected(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    buf = C.encode([1, 2], [5, 6], [b"x", b"yy"], [b"a", b"bcd"], [[(b"K", b"V")], []])
    with pytest.raises(C.ColumnarError, match=message):
        C.layout(mutate(buf))


def test_decreasing_offsets_rejected() -> None:
    buf = bytearray(C.encode([1, 2], [5, 6], [b"x", b"yy"], [b"a", b"b"], None))
    lay = C.layout(bytes(buf))
    struct.pack_into("<i", buf, lay.subj_off.start + 4, 5)  # row 0 ends after row 1
    with pytest.raises(C.ColumnarError, match="decrease"):
        C.layout(bytes(buf))


@given(st.binary(max_size=200))
def test_random_bytes_never_crash(blob: bytes) -> None:
    try:
        C.decode(blob)
    except C.ColumnarError:
        pass
