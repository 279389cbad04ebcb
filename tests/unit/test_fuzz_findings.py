"""Unit-level regressions for what ``jetlog fuzz`` found: subjects that are not UTF-8 through the
store (append, recovery with and without indexes, compaction, bulk reads), the decoders that
raised UnicodeDecodeError, the expected-sequence header reading, and the generator's
determinism (the comparison with nats-server relies on it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jetlog.api import models as M
from jetlog.api.fetch import FetchRequest, decode_fetch, decode_offsets, fetch
from jetlog.chaos.fuzzgen import requests
from jetlog.chaos.fuzzreq import KIND_JETLOG, SETUP
from jetlog.consumer.wire import Rejection, parse_pull_request
from jetlog.errors import ApiError
from jetlog.log import FileStore
from jetlog.stream.stream import _expected_seq
from jetlog.wire import columnar
from jetlog.wire import records as rc
from jetlog.wire.subjects import printable_subject, subject_bytes, subject_from_bytes

ODD = [b"b.\xff", b"b.\xe2\x82", b"b.\xc3\xa9", b"\xfe.\xff\x00x"]


@pytest.mark.parametrize("raw", ODD)
def test_subject_bytes_round_trip(raw: bytes) -> None:
    s = subject_from_bytes(raw)
    assert subject_bytes(s) == raw


def test_printable_subject_replaces_each_invalid_byte_like_go() -> None:
    assert printable_subject(subject_from_bytes(b"b.\xff")) == "b.\ufffd"
    assert printable_subject(subject_from_bytes(b"b.\xe2\x82")) == "b.\ufffd\ufffd"
    assert printable_subject("b.é") == "b.é"


def test_records_keep_subjects_that_are_not_utf8() -> None:
    recs = [rc.Record(i + 1, 1000 + i, subject_from_bytes(raw), b"", b"d") for i, raw in enumerate(ODD)]
    batch = rc.encode_batch(recs, base_seq=0)
    got = rc.decode_batch(batch, 0)[0].records
    assert [subject_bytes(r.subject) for r in got] == ODD


@pytest.mark.parametrize("drop_indexes", [False, True])
async def test_store_recovers_subjects_that_are_not_utf8(tmp_path: Path, drop_indexes: bool) -> None:
    store = await FileStore.open(str(tmp_path), segment_bytes=4096, auto_compact=False)
    subjects = [subject_from_bytes(raw) for raw in ODD]
    for i, s in enumerate(subjects):
        store.append(s, b"", b"%d" % i, 1_000 + i)
    await store.flush()
    store.remove(2)
    await store.close()
    if drop_indexes:  # recovery rebuilds them from the segments
        for name in os.listdir(tmp_path):
            if name.endswith(".idx"):
                os.unlink(tmp_path / name)
    store = await FileStore.open(str(tmp_path), segment_bytes=4096, auto_compact=False)
    try:
        assert store.recovery.lost_seqs == () and store.recovery.quarantined == ()
        assert store.recovery.rebuilt_indexes == (1 if drop_indexes else 0)
        assert [subject_bytes(m.subject) for m in store.iter_range(1, 4)] == [ODD[0], ODD[2], ODD[3]]
        assert store.load_last(subjects[3]) is not None
        await store.compact()
        assert subject_bytes(store.load(4).subject) == ODD[3]  # type: ignore[union-attr]
        # Bulk reads ship the subject bytes as they are.
        frame = fetch("S", store, store.committed_seq, FetchRequest(), 1 << 20)
        rows = columnar.decode(frame[1])
        assert [r.seq for r in rows] == [1, 3, 4]
        assert rows[0].subject == "b.\ufffd"  # the reader decodes the shipped bytes
    finally:
        await store.close()


def test_fast_decoders_survive_invalid_utf8_member_names() -> None:
    with pytest.raises(ApiError) as e:
        M.decode_request(M.MsgDeleteRequest, b'{"\xc0eq":1}')
    assert e.value.err_code == 10025
    assert parse_pull_request(b'{"\xc0":1,"no_wait":true}').no_wait is True  # type: ignore[union-attr]
    assert not isinstance(parse_pull_request(b'{"group":"\xed\xb3\xbf"}'), Rejection)


def test_jetlog_bulk_read_requests_with_invalid_utf8_are_refused() -> None:
    assert isinstance(decode_offsets(b'{"streams":["\xed\xb3\xbf"]}'), str)
    assert isinstance(decode_fetch(b'{"format":"\xed\xb3\xbf"}'), str)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, None),
        ("", None),  # an empty header is no expectation (Go: len(value) == 0)
        ("7", 7),
        ("007", 7),
        ("\u00b2", (1 << 64) - 1),  # not ASCII digits: parseInt64 gives -1
        ("1 ", (1 << 64) - 1),
        ("-1", (1 << 64) - 1),
        ("18446744073709551616", 0),  # wraps like Go's int64 arithmetic
    ],
)
def test_expected_sequence_headers_read_like_go(value: str | None, want: int | None) -> None:
    assert _expected_seq(value) == want


def test_generator_is_deterministic_and_covers_every_endpoint() -> None:
    a = list(requests(7, 600, 1 << 20))
    b = list(requests(7, 600, 1 << 20))
    assert a == b
    assert list(requests(8, 50, 1 << 20)) != a[:50]
    ops = {r.op for r in a}
    assert {
        "INFO",
        "STREAM.CREATE",
        "STREAM.UPDATE",
        "STREAM.INFO",
        "STREAM.DELETE",
        "STREAM.PURGE",
        "STREAM.NAMES",
        "STREAM.LIST",
        "STREAM.MSG.GET",
        "STREAM.MSG.DELETE",
        "DIRECT.GET",
        "CONSUMER.CREATE",
        "CONSUMER.INFO",
        "CONSUMER.DELETE",
        "CONSUMER.NAMES/LIST",
        "CONSUMER.PAUSE",
        "CONSUMER.MSG.NEXT",
        "FETCH",
        "OFFSETS",
        "PUBLISH",
        "UNKNOWN",
    } <= ops
    muts = {r.mutation for r in a}
    assert {
        "bytes",
        "wrong_type",
        "huge_number",
        "unknown_field",
        "bad_name",
        "deep",
        "oversize",
        "special",
    } <= muts
    assert any(r.hdr and b"Nats-Required-Api-Level" in r.hdr for r in a)
    assert all(len(r.payload) + len(r.hdr) <= 1 << 20 for r in a)
    assert max(len(r.payload) for r in a) > 900_000  # bodies up to max_payload
    assert all(r.kind == KIND_JETLOG for r in a if r.op in ("FETCH", "OFFSETS"))
    assert SETUP[0][0] == "$JS.API.STREAM.CREATE.FZ"


@pytest.mark.parametrize(
    ("filt", "subject", "want"),
    [
        (">.a", "fz.a", False),  # jetlog: True (">" anywhere was the full wildcard)
        (">.a", ">.a", True),  # a ">" that is not last is a literal token
        ("fz.>.a", "fz.b.a", False),
        ("fz.>", "fz.b.a", True),
        ("*.>", "fz.a", True),
        (">", "fz", True),
    ],
)
def test_only_a_last_gt_is_the_full_wildcard(filt: str, subject: str, want: bool) -> None:
    from jetlog.wire.subjects import Sublist, matches

    assert matches(filt, subject) is want
    sl: Sublist[int] = Sublist()
    sl.insert(filt, 1)
    assert bool(sl.match(subject)) is want  # the sublist always agreed with nats-server
