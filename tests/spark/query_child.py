"""Child process of the kill test: runs a processing-time jetlog → parquet query until killed.

python -m tests.spark.query_child URL STREAM OUT CHECKPOINT MAX_OFFSETS_PER_TRIGGER
"""

from __future__ import annotations

import sys

from tests.spark import sparkutil


def main() -> None:
    url, stream, out, checkpoint, max_offsets = sys.argv[1:6]
    spark = sparkutil.make_spark("jetlog-kill-child")
    df = (
        spark.readStream.format("jetlog")
        .option("servers", url)
        .option("streams", stream)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .option("minPartitions", "2")
        .load()
    )
    q = (
        df.writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="50 milliseconds")
        .start()
    )
    print("started", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main()
