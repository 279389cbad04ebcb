"""The Spark source on a 3-node cluster: a streaming query over an R3 stream keeps going across
a kill -9 of the stream leader, exactly once, and its read tasks are served by every replica
(follower fetching), never above the replicated high-water mark."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
import pytest

from tests.spark.conftest import BgLoop, read_stream
from tests.support.clusters import BackgroundCluster

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def r3cluster() -> Iterator[BackgroundCluster]:
    c = BackgroundCluster(default_replicas=3)
    try:
        yield c
    finally:
        c.close()


def _fetches(c: BackgroundCluster) -> dict[str, int]:
    assert c.cluster is not None
    out = {}
    for m in c.cluster.members.values():
        if not m.running:
            continue
        text = urllib.request.urlopen(f"http://{m.http}/metrics", timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith('jetlog_read_requests_total{kind="fetch"}'):
                out[m.name] = int(float(line.split()[-1]))
    return out


async def _publish(url: str, subject: str, start: int, n: int) -> None:
    """Publish with message ids, retrying each until acknowledged (failover in between)."""
    nc = await nats.connect(url, max_reconnect_attempts=-1)
    js = nc.jetstream(timeout=1)
    try:
        for i in range(start, start + n, 200):
            pending = list(range(i, min(i + 200, start + n)))
            deadline = time.monotonic() + 60
            while pending:
                assert time.monotonic() < deadline, "publishes not acknowledged for 60 s"
                res = await asyncio.gather(
                    *(
                        js.publish(subject, f"m{k:08d}".encode(), headers={"Nats-Msg-Id": f"id-{k}"})
                        for k in pending
                    ),
                    return_exceptions=True,
                )
                pending = [k for k, r in zip(pending, res, strict=True) if isinstance(r, BaseException)]
    finally:
        await nc.close()


async def _leader(url: str, stream: str) -> str:
    nc = await nats.connect(url)
    try:
        import msgspec

        msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
        return str(msgspec.json.decode(msg.data)["cluster"]["leader"])
    finally:
        await nc.close()


def test_query_survives_leader_kill_exactly_once(
    spark: Any, r3cluster: BackgroundCluster, tmp_path: Path
) -> None:
    bg = BgLoop()
    try:
        url = r3cluster.url
        bg.run(_create(url))
        bg.run(_publish(url, "sk.x", 0, 6000))
        before = _fetches(r3cluster)
        out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
        df = read_stream(
            spark, url, "SK", startingOffsets="earliest", maxOffsetsPerTrigger=1500, minPartitions=3
        )
        q = (
            df.writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ck)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            deadline = time.monotonic() + 120
            while sum(p["numInputRows"] for p in q.recentProgress) < 3000:
                assert time.monotonic() < deadline, "query made no progress"
                assert q.exception() is None, q.exception()
                time.sleep(0.2)
            leader = bg.run(_leader(url, "SK"))
            r3cluster.kill(leader)
            bg.run(_publish(url, "sk.x", 6000, 4000))
            while True:
                done = sum(p["numInputRows"] for p in q.recentProgress)
                if done >= 10000:
                    break
                assert time.monotonic() < deadline + 60, f"query stuck at {done} rows"
                assert q.exception() is None, q.exception()
                time.sleep(0.2)
            q.processAllAvailable()
        finally:
            q.stop()
        r = (
            spark.read.parquet(out)
            .selectExpr("count(*) c", "count(distinct seq) d", "min(seq) lo", "max(seq) hi")
            .first()
        )
        assert (r.c, r.d, r.lo, r.hi) == (10000, 10000, 1, 10000)
        # Exactly once: every message of the 10,000, each at one sequence.
        v = (
            spark.read.parquet(out)
            .selectExpr(
                "count(distinct data) d",
                "min(cast(data as string)) lo",
                "max(cast(data as string)) hi",
                "sum(cast(cast(data as string) not rlike '^m[0-9]{8}$' as int)) odd",
            )
            .first()
        )
        assert (v.d, v.lo, v.hi, v.odd) == (10000, "m00000000", "m00009999", 0)
        # In publish order up to the kill. Not after it: the first batch of 200 concurrent
        # publishes can reach the new leader partly before its promotion (dropped, no PubAck)
        # and partly after (stored); the retry then stores the dropped part behind the rest
        # (seen once: sequences 6001-6013 held m6187-m6199, then m6000-m6186). Concurrent
        # publishes promise no order among themselves, only each message once.
        bad = spark.read.parquet(out).where(
            "seq <= 6000 and cast(data as string) != concat('m', lpad(cast(seq - 1 as string), 8, '0'))"
        )
        assert bad.count() == 0
        after = _fetches(r3cluster)
        served = {n for n, v in after.items() if v > before.get(n, 0)}
        assert len(served) >= 2, f"FETCH served by {served} only: {before} -> {after}"
    finally:
        bg.close()


async def _create(url: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream(timeout=5).add_stream(name="SK", subjects=["sk.>"], allow_direct=True)
    finally:
        await nc.close()
