"""The stream reader's callbacks called directly (as Spark's source runner does, without a JVM)
against a real jetlog node: memoized initial offsets, min/max trigger rules, the AvailableNow
target, pickling, and read() of planned partitions."""

from __future__ import annotations

import pickle
import time
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from jetlog.spark.fetch import FetchError
from jetlog.spark.options import parse_source_options
from jetlog.spark.schema import source_schema
from jetlog.spark.source import JetlogBatchReader, JetlogPartition, JetlogStreamReader
from tests.spark.conftest import Backend

pytestmark = [pytest.mark.spark]


READ_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("seq", pa.int64()),
        ("subject", pa.string()),
        ("data", pa.binary()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)
"""The columns ``read_range`` is asked for in these tests."""


def _reader(be: Backend, stream: str, **opts: str) -> JetlogStreamReader:
    o = parse_source_options({"servers": be.url, "streams": stream, **opts}, batch=False)
    return JetlogStreamReader(o, source_schema(o.include_headers))


def _read_all(reader: Any, parts: Any) -> pa.Table:
    return pa.Table.from_batches([b for p in parts for b in reader.read(p)])


def test_initial_latest_memoized_and_available_now_target(jetlog: Backend) -> None:
    s = jetlog.name("RC")
    subj = f"{s.lower()}.x"
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.fill(subj, 10)
    r = _reader(jetlog, s)
    try:
        assert r.initialOffset() == {s: 11}
        jetlog.fill(subj, 5)
        assert r.initialOffset() == {s: 11}  # resolved once: the 5 new records are not skipped
        assert r.latestOffset({s: 11}, ReadAllAvailable()) == {s: 16}
        assert r.reportLatestOffset() == {s: 16}
        r.prepareForTriggerAvailableNow()
        jetlog.fill(subj, 5)
        assert r.latestOffset({s: 11}, ReadMaxRows(3)) == {s: 14}
        assert r.latestOffset({s: 14}, ReadAllAvailable()) == {s: 16}  # the frozen target
        assert r.latestOffset({s: 16}, ReadAllAvailable()) == {s: 16}
        assert r.reportLatestOffset() == {s: 21}
    finally:
        r.stop()


def test_min_offsets_and_max_trigger_delay(jetlog: Backend) -> None:
    s = jetlog.name("RMIN")
    subj = f"{s.lower()}.x"
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.fill(subj, 10)
    r = _reader(jetlog, s, startingOffsets="earliest", minOffsetsPerTrigger="20", maxTriggerDelay="1s")
    try:
        start = r.initialOffset()
        assert start == {s: 1}
        # the first trigger fires (as Kafka's: no previous trigger), later ones wait for 20 records
        assert r.latestOffset(start, ReadAllAvailable()) == {s: 11}
        jetlog.fill(subj, 5)
        t0 = time.monotonic()
        assert r.latestOffset({s: 11}, ReadAllAvailable()) == {s: 11}
        jetlog.fill(subj, 15)
        assert r.latestOffset({s: 11}, ReadAllAvailable()) == {s: 31}  # 20 available: go
        jetlog.fill(subj, 3)
        assert r.latestOffset({s: 31}, ReadAllAvailable()) == {s: 31}
        jetlog.wait_for(
            "maxTriggerDelay", lambda: r.latestOffset({s: 31}, ReadAllAvailable()) == {s: 34}, timeout=10
        )
        assert time.monotonic() - t0 >= 0.9
    finally:
        r.stop()


def test_partitions_pickled_reader_reads(jetlog: Backend) -> None:
    s = jetlog.name("RP")
    subj = f"{s.lower()}.x"
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.fill(subj, 1000, size=200)
    r = _reader(jetlog, s, startingOffsets="earliest", maxRecordsPerPartition="300", fetchMaxBytes="20000")
    try:
        start = r.initialOffset()
        end = r.latestOffset(start, ReadAllAvailable())
        parts = r.partitions(start, end)
        assert parts == [
            JetlogPartition(s, 1, 251),
            JetlogPartition(s, 251, 501),
            JetlogPartition(s, 501, 751),
            JetlogPartition(s, 751, 1001),
        ]
        assert r.partitions(end, end) == []
        copy = pickle.loads(pickle.dumps(r))  # what the planner ships to tasks
        parts = pickle.loads(pickle.dumps(parts))
        table = _read_all(copy, parts)
        assert table.column("seq").to_pylist() == list(range(1, 1001))
        assert table.num_rows == 1000 and len(table.to_batches()) > 4  # 20 kB per FETCH reply
    finally:
        r.stop()


def test_batch_reader_direct_and_bulk_agree(jetlog: Backend) -> None:
    s = jetlog.name("RB")
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.publish(f"{s.lower()}.x", [b"a", b"b", b"c"], [{"H": "1"}, None, {"H": "3", "J": "x"}])
    tables = []
    for mode, fmt in (("bulk", "jlr1"), ("bulk", "jlc1"), ("direct", "jlr1")):
        o = parse_source_options(
            {
                "servers": jetlog.url,
                "streams": s,
                "fetch": mode,
                "includeHeaders": "true",
                "fetchFormat": fmt,
            },
            batch=True,
        )
        br = JetlogBatchReader(o, source_schema(True))
        tables.append(_read_all(br, br.partitions()))
    assert tables[0].equals(tables[1]) and tables[0].equals(tables[2])
    assert tables[0].column("headers").to_pylist() == [
        [{"key": "H", "value": "1"}],
        [],
        [{"key": "H", "value": "3"}, {"key": "J", "value": "x"}],
    ]


def test_record_larger_than_fetch_budget_is_reported(jetlog: Backend) -> None:
    s = jetlog.name("RBIG")
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.fill(f"{s.lower()}.x", 3, size=5000)
    o = parse_source_options({"servers": jetlog.url, "streams": s, "fetchMaxBytes": "1000"}, batch=True)
    br = JetlogBatchReader(o, source_schema(False))
    with pytest.raises(FetchError, match="larger than the fetch budget"):
        _read_all(br, br.partitions())


@pytest.mark.parametrize("fmt", ["jlr1", "jlc1"])
def test_pipelined_bulk_reads_stay_ordered_and_complete(jetlog: Backend, fmt: str) -> None:
    """Several FETCH requests in flight per task: with record sizes that vary (so replies stop
    short of their sub-range), interior deletions and an early stop, every window size yields
    exactly the stored records in sequence order and leaves no request behind."""
    from jetlog.spark.fetch import FetchSettings, read_range
    from jetlog.spark.natsio import Connection, ConnectOptions

    s = jetlog.name("RPIPE")
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    payloads = [f"m{i:05d}".encode() * (1 + (i * 7919) % 40) for i in range(3000)]
    seqs = jetlog.publish(f"{s.lower()}.x", payloads)
    deleted = set(range(500, 520)) | {1001, 2999}
    for q in sorted(deleted):
        jetlog.bg.run(jetlog.js.delete_msg(s, q))
    want = [q for q in seqs if q not in deleted]
    schema = READ_SCHEMA
    conn = Connection.connect(ConnectOptions(servers=(jetlog.url,)))
    try:
        for window in (1, 2, 5):
            settings = FetchSettings("bulk", False, 8000, 1000, 10.0, True, window, fmt)
            batches = list(read_range(conn, s, 1, seqs[-1] + 1, settings, schema))
            table = pa.Table.from_batches(batches, schema)
            assert table.column("seq").to_pylist() == want, window
            assert table.column("data").to_pylist() == [payloads[q - 1] for q in want]
            assert len(batches) > 20  # 8 kB per reply: many requests, several in flight
            assert not conn._waiting and not conn._stash
        # A reader that stops early (Spark closing the iterator) abandons its requests cleanly.
        settings = FetchSettings("bulk", False, 8000, 1000, 10.0, True, 4, fmt)
        it = read_range(conn, s, 1, seqs[-1] + 1, settings, schema)
        first = next(it)
        it.close()
        assert first.column("seq")[0].as_py() == 1
        assert not conn._waiting and not conn._stash
        # ...and the connection serves the next read as usual (late replies are dropped).
        again = pa.Table.from_batches(list(read_range(conn, s, 2990, 3001, settings, schema)), schema)
        assert again.column("seq").to_pylist() == [q for q in want if q >= 2990]
    finally:
        conn.close()


def test_a_request_lost_with_its_responder_is_asked_again(jetlog: Backend) -> None:
    """A FETCH request the upstream hands to a replica that dies with it gets no reply: the
    read asks again from the first record not yet yielded, and yields every record once. The
    dying replica is a member of the node's queue group that takes one request and answers
    nothing (an ``UNSUB`` with a limit of 1: the server drops it after that one)."""
    from jetlog.spark.fetch import FetchSettings, read_range
    from jetlog.spark.natsio import Connection, ConnectOptions

    s = jetlog.name("RLOST")
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    seqs = jetlog.publish(f"{s.lower()}.x", [b"r%05d" % i for i in range(2000)])
    schema = READ_SCHEMA
    swallowed: list[str] = []

    async def hole(msg: Any) -> None:
        swallowed.append(msg.subject)

    async def dying_member() -> None:
        sub = await jetlog.nc.subscribe(f"$JETLOG.API.FETCH.{s}", queue="jetlog", cb=hole)
        await sub.unsubscribe(limit=1)  # the server drops it after one message
        await jetlog.nc.flush()

    jetlog.bg.run(dying_member())
    conn = Connection.connect(ConnectOptions(servers=(jetlog.url,)))
    try:
        # 1 KB per reply, one request at a time: dozens of requests, each handed to the dying
        # member or to the node by the server's choice.
        settings = FetchSettings("bulk", False, 1000, 1000, 1.0, True, 1, "jlr1")
        batches = list(read_range(conn, s, 1, seqs[-1] + 1, settings, schema))
        table = pa.Table.from_batches(batches, schema)
        assert table.column("seq").to_pylist() == seqs
        assert table.column("data").to_pylist() == [b"r%05d" % i for i in range(2000)]
        assert swallowed == [f"$JETLOG.API.FETCH.{s}"]  # one request was lost, and recovered
        assert not conn._waiting and not conn._stash
    finally:
        conn.close()
