"""The jetlog source against a real jetlog node (bulk FETCH path): exactly-once across restarts,
admission control, data-loss detection, batch reads, headers and start-by-time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from jetlog.spark.natsio import Connection, ConnectOptions, encode_headers
from tests.spark.conftest import Backend, batch_sizes, read_batch, read_stream, run_available_now

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def _counts(spark: Any, out: str) -> Any:
    return (
        spark.read.parquet(out)
        .selectExpr("count(*) c", "count(distinct stream, seq) d", "min(seq) lo", "max(seq) hi")
        .first()
    )


def _offset(v: Any) -> dict[str, int]:
    return json.loads(v) if isinstance(v, str) else dict(v)


def test_exactly_once_across_restart(spark: Any, jetlog: Backend, tmp_path: Path) -> None:
    s = jetlog.name("EO")
    subj = f"{s.lower()}.new"
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.fill(subj, 3000)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def query() -> Any:
        df = read_stream(spark, jetlog.url, s, startingOffsets="earliest", fetch="bulk", minPartitions=2)
        return run_available_now(df, out, ck)

    t0 = time.monotonic()
    q = query()
    assert sum(batch_sizes(q)) == 3000
    first_run = time.monotonic() - t0
    jetlog.fill(subj, 2000)
    q = query()
    assert batch_sizes(q) == [2000]
    r = _counts(spark, out)
    assert (r.c, r.d, r.lo, r.hi) == (5000, 5000, 1, 5000)
    # rows are the stored records: payload i belongs to sequence i+1 of each fill
    bad = spark.read.parquet(out).where(
        "cast(data as string) not like 'm%' or subject != '" + subj + "' or stream != '" + s + "'"
    )
    assert bad.count() == 0
    print(f"[exactly-once] first run {first_run:.1f}s")


def test_admission_control_batch_sizes(spark: Any, jetlog: Backend, tmp_path: Path) -> None:
    a, b = jetlog.name("ACA"), jetlog.name("ACB")
    jetlog.add_stream(a, [f"{a.lower()}.>"])
    jetlog.add_stream(b, [f"{b.lower()}.>"])
    jetlog.fill(f"{a.lower()}.x", 3000)
    jetlog.fill(f"{b.lower()}.x", 1000)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    df = read_stream(spark, jetlog.url, f"{a},{b}", startingOffsets="earliest", maxOffsetsPerTrigger=1000)
    q = run_available_now(df, out, ck)
    assert batch_sizes(q) == [1000, 1000, 1000, 1000]
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    src = progress[0]["sources"][0]
    # the budget is split in proportion to each stream's backlog (3000:1000)
    assert _offset(src["endOffset"]) == {a: 751, b: 251}
    assert _offset(src["latestOffset"]) == {a: 3001, b: 1001}
    assert _offset(progress[-1]["sources"][0]["endOffset"]) == {a: 3001, b: 1001}
    r = _counts(spark, out)
    assert (r.c, r.d) == (4000, 4000)


def test_data_loss_detection(spark: Any, jetlog: Backend, tmp_path: Path) -> None:
    s = jetlog.name("LOSS")
    subj = f"{s.lower()}.x"
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.fill(subj, 2000)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    q = run_available_now(read_stream(spark, jetlog.url, s, startingOffsets="earliest"), out, ck)
    assert sum(batch_sizes(q)) == 2000
    jetlog.fill(subj, 1000)  # 2001..3000
    jetlog.purge(s, keep_from_seq=2501)  # retention removes 2001..2500 before the query read them
    with pytest.raises(Exception) as ei:
        run_available_now(read_stream(spark, jetlog.url, s), out, ck)
    text = str(ei.value)
    assert f"stream {s}: sequences 2001..2500 were removed" in text, text[-2000:]
    assert "failOnDataLoss=false" in text
    q = run_available_now(read_stream(spark, jetlog.url, s, failOnDataLoss=False), out, ck)
    assert batch_sizes(q) == [500]
    r = _counts(spark, out)
    assert (r.c, r.d, r.lo, r.hi) == (2500, 2500, 1, 3000)
    assert spark.read.parquet(out).where("seq between 2001 and 2500").count() == 0


def test_batch_read_with_ending_offsets(spark: Any, jetlog: Backend) -> None:
    s = jetlog.name("BATCH")
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.fill(f"{s.lower()}.x", 500)
    df = read_batch(
        spark, jetlog.url, s, startingOffsets=json.dumps({s: 10}), endingOffsets=json.dumps({s: 110})
    )
    r = df.selectExpr("count(*) c", "min(seq) lo", "max(seq) hi").first()
    assert (r.c, r.lo, r.hi) == (100, 10, 109)
    rows = df.orderBy("seq").limit(3).collect()
    assert [bytes(x.data).rstrip(b".") for x in rows] == [b"m00000009", b"m00000010", b"m00000011"]
    assert read_batch(spark, jetlog.url, s, minPartitions=3).count() == 500
    assert read_batch(spark, jetlog.url, s, endingOffsets=json.dumps({s: -1})).count() == 500
    # an ending offset beyond what is committed reads what there is
    assert read_batch(spark, jetlog.url, s, endingOffsets=json.dumps({s: 10_000})).count() == 500


def test_include_headers(spark: Any, jetlog: Backend) -> None:
    s = jetlog.name("HDR")
    subj = f"{s.lower()}.h"
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    with Connection.connect(ConnectOptions(servers=(jetlog.url,))) as conn:
        sets = [[("K", "1"), ("K", "2"), ("Other", "x y")], [], [("Nats-Msg-Id", "id-3"), ("é", "ü")]]
        for i, pairs in enumerate(sets):
            ack = conn.request(subj, f"p{i}".encode(), 10, hdr=encode_headers(pairs) if pairs else b"")
            assert json.loads(ack.data)["seq"] == i + 1
    before = time.time()
    rows = read_batch(spark, jetlog.url, s, includeHeaders=True).orderBy("seq").collect()
    assert [r.seq for r in rows] == [1, 2, 3]
    assert [[(h.key, h.value) for h in r.headers] for r in rows] == [
        [("K", "1"), ("K", "2"), ("Other", "x y")],
        [],
        [("Nats-Msg-Id", "id-3"), ("é", "ü")],
    ]
    assert [bytes(r.data) for r in rows] == [b"p0", b"p1", b"p2"]
    assert all(abs(r.timestamp.timestamp() - before) < 120 for r in rows)
    plain = read_batch(spark, jetlog.url, s)
    assert plain.columns == ["stream", "seq", "subject", "data", "timestamp"]


def test_starting_timestamp(spark: Any, jetlog: Backend, tmp_path: Path) -> None:
    s = jetlog.name("TS")
    subj = f"{s.lower()}.x"
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.fill(subj, 100)
    t_ms = time.time_ns() // 1_000_000 + 1
    jetlog.wait_for("the clock to pass the start time", lambda: time.time_ns() // 1_000_000 > t_ms)
    jetlog.fill(subj, 50)  # 101..150, all stamped after t_ms
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    q = run_available_now(read_stream(spark, jetlog.url, s, startingTimestamp=t_ms), out, ck)
    assert batch_sizes(q) == [50]
    r = _counts(spark, out)
    assert (r.c, r.lo, r.hi) == (50, 101, 150)
    by_ts = read_batch(spark, jetlog.url, s, startingOffsetsByTimestamp=json.dumps({s: t_ms}))
    assert by_ts.selectExpr("min(seq)").first()[0] == 101
    future = read_batch(spark, jetlog.url, s, startingTimestamp=t_ms + 3_600_000)
    assert future.count() == 0


def test_starting_latest_is_memoized(spark: Any, jetlog: Backend, tmp_path: Path) -> None:
    """startingOffsets=latest (the streaming default) resolves once: nothing is skipped between
    the initial offset and batch 0, and the records published after the start are read."""
    s = jetlog.name("LATEST")
    subj = f"{s.lower()}.x"
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    jetlog.fill(subj, 100)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    q = (
        read_stream(spark, jetlog.url, s)
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", ck)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        jetlog.wait_for("the query to start", lambda: bool(q.lastProgress), timeout=90)
        jetlog.fill(subj, 40)  # 101..140
        jetlog.wait_for("40 rows", lambda: sum(p["numInputRows"] for p in q.recentProgress) >= 40, timeout=60)
    finally:
        q.stop()
    r = _counts(spark, out)
    assert (r.c, r.d, r.lo, r.hi) == (40, 40, 101, 140)
