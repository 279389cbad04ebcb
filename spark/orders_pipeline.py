"""Example pipeline: orders published by plain NATS apps → jetlog → Spark → per-minute Parquet.

Plain NATS applications publish JSON orders on ``orders.<region>`` (no JetStream client, no
change to them); jetlog captures them into the ``ORDERS`` stream. This Structured Streaming job
reads the stream with the ``jetlog`` source, aggregates each micro-batch per minute and per
subject (order count, amount), and writes the aggregate of micro-batch N to
``<out>/agg/batch_id=N`` with overwrite — so a micro-batch Spark replays after a crash rewrites
the same directory instead of adding to it: the Parquet output stays exactly-once.

Run it against ``make run`` (``jetlog dev``, which prints ``ready nats://127.0.0.1:4222``)::

    make spark-example                       # = .venv/bin/python spark/orders_pipeline.py
    .venv/bin/python spark/orders_pipeline.py --servers nats://127.0.0.1:4222 --publish 20000

By default it publishes ``--publish`` demo orders first, drains the stream with
``Trigger.AvailableNow`` and prints a per-minute summary; ``--follow`` keeps the query running
(processing-time trigger) until Ctrl-C. Re-running resumes from the checkpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from typing import Any

STREAM = "ORDERS"
REGIONS = ("eu", "us", "apac")


def publish_orders(servers: str, count: int, seed: int) -> None:
    """Publish ``count`` orders the way an unchanged NATS app does: plain ``nc.publish``.

    The stream is created first (idempotent) so the capture is on before the first order.
    """
    import nats

    async def run() -> None:
        nc = await nats.connect(servers.split(",")[0])
        js = nc.jetstream()
        await js.add_stream(name=STREAM, subjects=["orders.>"], duplicate_window=600.0)
        rnd = random.Random(seed)
        for i in range(count):
            region = REGIONS[i % len(REGIONS)]
            order = {"id": f"{seed}-{i}", "region": region, "amount_cents": rnd.randint(100, 50_000)}
            await nc.publish(f"orders.{region}", json.dumps(order).encode())
            if i % 1000 == 999:
                await nc.flush()
        await nc.flush()
        # Plain publishes get no ack: wait until the stream holds them before reading.
        deadline = time.monotonic() + 30
        want = count
        while time.monotonic() < deadline:
            info = await js.stream_info(STREAM)
            if info.state.messages >= want:
                break
            await asyncio.sleep(0.1)
        await nc.close()

    asyncio.run(run())


def build_spark(app: str) -> Any:
    """A local SparkSession bound to loopback (no UI, two shuffle partitions)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must run this interpreter (the venv with jetlog[spark]), not `python3`.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default=os.environ.get("JETLOG_URL", "nats://127.0.0.1:4222"))
    ap.add_argument("--publish", type=int, default=5000, help="demo orders to publish first (0: none)")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--out", default="data/spark-example/out")
    ap.add_argument("--checkpoint", default="data/spark-example/checkpoint")
    ap.add_argument("--max-per-trigger", type=int, default=5000)
    ap.add_argument("--follow", action="store_true", help="keep running (2 s trigger) until Ctrl-C")
    args = ap.parse_args(argv)

    if args.publish:
        t0 = time.monotonic()
        publish_orders(args.servers, args.publish, args.seed)
        print(f"published {args.publish} orders on orders.* in {time.monotonic() - t0:.1f}s", flush=True)

    spark = build_spark("jetlog-orders")
    spark.sparkContext.setLogLevel("WARN")
    from jetlog.spark import register

    register(spark)  # automatic once jetlog[spark] is pip-installed; explicit for editable checkouts
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    order = StructType(
        [
            StructField("id", StringType()),
            StructField("region", StringType()),
            StructField("amount_cents", LongType()),
        ]
    )
    orders = (
        spark.readStream.format("jetlog")
        .option("servers", args.servers)
        .option("streams", STREAM)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_per_trigger))
        .load()
    )
    parsed = orders.select(
        "seq", "subject", "timestamp", F.from_json(F.col("data").cast("string"), order).alias("o")
    )
    agg_dir = os.path.join(args.out, "agg")

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        per_minute = batch.groupBy(F.window("timestamp", "1 minute").start.alias("minute"), "subject").agg(
            F.count("*").alias("orders"),
            F.sum("o.amount_cents").alias("amount_cents"),
            F.min("seq").alias("first_seq"),
            F.max("seq").alias("last_seq"),
        )
        # Overwrite the batch's own directory: a replayed batch replaces, never duplicates.
        per_minute.write.mode("overwrite").parquet(os.path.join(agg_dir, f"batch_id={batch_id}"))

    writer = (
        parsed.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", args.checkpoint)
        .queryName("orders_per_minute")
    )
    writer = writer.trigger(processingTime="2 seconds") if args.follow else writer.trigger(availableNow=True)
    query = writer.start()
    seen = 0
    try:
        while query.isActive:
            query.awaitTermination(1.0)
            for p in query.recentProgress[seen:]:
                seen += 1
                src = p.sources[0] if p.sources else None
                if p.numInputRows or not args.follow:
                    print(
                        f"batch {p.batchId}: {p.numInputRows} rows, "
                        f"offsets {src.startOffset if src else None} -> {src.endOffset if src else None}",
                        flush=True,
                    )
    except KeyboardInterrupt:
        query.stop()
    if query.exception() is not None:
        print(f"query failed: {query.exception()}", file=sys.stderr)
        return 1

    if os.path.isdir(agg_dir):
        total = spark.read.parquet(agg_dir)
        summary = (
            total.groupBy("minute", "subject")
            .agg(F.sum("orders").alias("orders"), F.sum("amount_cents").alias("amount_cents"))
            .orderBy("minute", "subject")
        )
        rows = summary.collect()
        print("minute               subject      orders   amount", flush=True)
        for r in rows:
            print(
                f"{r.minute:%Y-%m-%d %H:%M}     {r.subject:<12} {r.orders:>6} {r.amount_cents / 100:>12.2f}"
            )
        n = sum(r.orders for r in rows)
        print(f"total {n} orders in {len(rows)} minute/subject groups", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
