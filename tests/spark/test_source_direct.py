"""The source against a real ``nats-server -js`` (no jetlog): ``fetch=auto`` falls back to
Direct Get batches and STREAM.INFO; ``fetch=bulk`` says clearly that it needs jetlog."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import Backend, batch_sizes, read_batch, read_stream, run_available_now

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_direct_get_fallback(spark: Any, natsjs: Backend, tmp_path: Path) -> None:
    s = natsjs.name("DG")
    subj = f"{s.lower()}.x"
    natsjs.add_stream(s, [f"{s.lower()}.>"], allow_direct=True)
    payloads = [f"m{i:05d}".encode() for i in range(1500)]
    headers: list[dict[str, str] | None] = [
        {"Idx": str(i), "Kind": "even"} if i % 2 == 0 else None for i in range(1500)
    ]
    natsjs.publish(subj, payloads, headers)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    df = read_stream(
        spark,
        natsjs.url,
        s,
        startingOffsets="earliest",
        includeHeaders=True,
        maxOffsetsPerTrigger=1000,
        fetchBatch=300,
        minPartitions=2,
    )
    q = run_available_now(df, out, ck)
    assert batch_sizes(q) == [1000, 500]
    rows = spark.read.parquet(out).orderBy("seq").collect()
    assert [r.seq for r in rows] == list(range(1, 1501))
    assert [bytes(r.data) for r in rows] == payloads
    assert {r.subject for r in rows} == {subj} and {r.stream for r in rows} == {s}
    for i, r in enumerate(rows):
        got = sorted((h.key, h.value) for h in r.headers)
        assert got == ([("Idx", str(i)), ("Kind", "even")] if i % 2 == 0 else []), (i, got)
    stamps = [r.timestamp.timestamp() for r in rows]
    assert stamps == sorted(stamps) and abs(stamps[-1] - time.time()) < 120

    # more data, then a restart from the checkpoint: exactly the new rows
    natsjs.publish(subj, [b"late"] * 100)
    q = run_available_now(read_stream(spark, natsjs.url, s, includeHeaders=True), out, ck)
    assert batch_sizes(q) == [100]
    r = spark.read.parquet(out).selectExpr("count(*) c", "count(distinct seq) d").first()
    assert (r.c, r.d) == (1600, 1600)


def test_direct_batch_read_by_time_and_range(spark: Any, natsjs: Backend) -> None:
    s = natsjs.name("DGT")
    subj = f"{s.lower()}.x"
    natsjs.add_stream(s, [f"{s.lower()}.>"], allow_direct=True)
    natsjs.fill(subj, 300)
    t_ms = time.time_ns() // 1_000_000 + 1
    natsjs.wait_for("the clock to pass the start time", lambda: time.time_ns() // 1_000_000 > t_ms)
    natsjs.fill(subj, 200)
    df = read_batch(spark, natsjs.url, s, startingTimestamp=t_ms)
    r = df.selectExpr("count(*) c", "min(seq) lo", "max(seq) hi").first()
    assert (r.c, r.lo, r.hi) == (200, 301, 500)
    df = read_batch(
        spark, natsjs.url, s, startingOffsets=json.dumps({s: 50}), endingOffsets=json.dumps({s: 60})
    )
    assert sorted(x.seq for x in df.collect()) == list(range(50, 60))


def test_direct_data_loss_and_bulk_needs_jetlog(spark: Any, natsjs: Backend) -> None:
    s = natsjs.name("DGL")
    subj = f"{s.lower()}.x"
    natsjs.add_stream(s, [f"{s.lower()}.>"], allow_direct=True)
    natsjs.fill(subj, 100)
    natsjs.purge(s, keep_from_seq=41)
    with pytest.raises(Exception, match=re.escape(f"stream {s}: sequences 1..40 were removed")):
        read_batch(spark, natsjs.url, s, startingOffsets=json.dumps({s: 1})).count()
    assert (
        read_batch(spark, natsjs.url, s, startingOffsets=json.dumps({s: 1}), failOnDataLoss=False).count()
        == 60
    )
    with pytest.raises(Exception, match="needs jetlog"):
        read_batch(spark, natsjs.url, s, fetch="bulk").count()
