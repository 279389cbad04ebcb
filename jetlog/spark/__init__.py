"""PySpark Structured Streaming connector for jetlog (``pip install jetlog[spark]``).

Reading::

    df = (spark.readStream.format("jetlog")
          .option("servers", "nats://127.0.0.1:4222")
          .option("streams", "ORDERS")
          .load())
    # stream STRING, seq LONG, subject STRING, data BINARY, timestamp TIMESTAMP
    # [, headers ARRAY<STRUCT<key: STRING, value: STRING>>]   with includeHeaders=true

``spark.read.format("jetlog")`` reads a bounded range. Writing::

    df.writeStream.format("jetlog").option("servers", url).option("checkpointLocation", ck).start()
    df.write.format("jetlog").option("servers", url).mode("append").save()

with columns ``subject`` (or the ``subject`` option), ``data`` (binary or string), optional
``headers`` (the source's type) and an optional id column (``msgIdColumn``).

The format is registered automatically (PySpark imports the ``pyspark_jetlog`` module and finds
its ``DefaultSource``); :func:`register` does it explicitly. No JVM jars are involved and nothing
is downloaded at run time. PySpark >= 4.2 (admission control; Trigger.AvailableNow needs 4.3).

Semantics
---------
* Only committed records are read (PubAcked, fsynced on jetlog). An offset is
  ``{"ORDERS": 1001}``: per stream, the next sequence to read. Each micro-batch is a range of
  sequences per stream, split into contiguous ranges (tasks); a restart from the checkpoint
  replays the last logged range exactly: no duplicates, no gaps (with an idempotent sink such
  as files, or this connector's sink).
* ``startingOffsets=latest`` (the streaming default) is resolved once per query start; if the
  query dies before its first batch is committed, ``latest`` is resolved again on restart. Use
  ``earliest``, explicit sequences or a timestamp when the very first records matter.
* ``failOnDataLoss=true``: when retention limits, a purge or a stream deletion removed sequences
  the query had not read yet, the query fails naming the stream and the sequence range;
  ``false`` skips to the first stored sequence. Interior deletes are simply holes.
* Fetch paths: ``bulk`` reads a whole range per request from jetlog's ``$JETLOG.API.FETCH``
  (columnar frames turned into Arrow without per-record Python work); ``direct`` uses
  JetStream Direct Get batches (works against ``nats-server -js`` with ``allow_direct: true``;
  about 10x slower); ``auto`` (default) uses bulk and falls back to direct when no jetlog
  answers.
* Sink: publishes with PubAcks, a window of ``maxInflight`` unacknowledged messages, and a
  deterministic ``Nats-Msg-Id`` per row: the ``msgIdColumn`` value, a ``Nats-Msg-Id`` in the
  row's headers, or ``<msgIdPrefix or queryId>-b<batchId>-p<partition>-r<row>``. A replayed
  micro-batch republishes the same ids and the stream drops them — **only within the target
  stream's ``duplicate_window``** (default 2 minutes): a replay later than that duplicates.
  Size the window to cover your restart time. Generated ids assume the replayed batch yields
  the same rows in the same order per task (true for this source with deterministic
  transformations); use ``msgIdColumn`` otherwise. ``commitLog`` appends one JSON line per
  committed batch (published and duplicate counts).

Source options (case-insensitive; names follow the Kafka source)
-----------------------------------------------------------------
==============================  ===========================  ==========================================
option                          default                      meaning
==============================  ===========================  ==========================================
servers                         nats://127.0.0.1:4222        comma list of nats:// or tls:// URLs
streams (alias stream)          required                     comma list of stream names
startingOffsets                 latest (stream), earliest    earliest / latest / ``{"ORDERS": 23}``
                                (batch)                      (-2 earliest, -1 latest); new queries only
startingTimestamp               —                            epoch ms, all streams (wins over the others)
startingOffsetsByTimestamp      —                            ``{"ORDERS": <epoch ms>}``
endingOffsets                   latest                       batch reads only; latest / JSON (-1 latest)
maxOffsetsPerTrigger            —                            sequences per micro-batch, shared in
                                                             proportion to each stream's backlog
minOffsetsPerTrigger            —                            wait for this many sequences ...
maxTriggerDelay                 15m                          ... unless this long passed since the last
                                                             batch (not under Trigger.AvailableNow)
minPartitions                   1                            at least this many tasks per batch
maxRecordsPerPartition          500000                       at most this many sequences per task
failOnDataLoss                  true                         see above
includeHeaders                  false                        add the ``headers`` column
fetch                           auto                         auto / bulk / direct
fetchMaxBytes                   0 (server maximum; 1 MiB     bytes per fetch reply
                                for direct)
fetchBatch                      1000                         messages per Direct Get request
fetchWindow                     3                            bulk requests in flight per task
fetchFormat                     jlr1                         jlr1: stored records, checked (CRC) and
                                                             columnized in the task; jlc1: columns
                                                             built by the node
requestTimeoutMs                30000                        per request (and connect)
user / password, token          —                            NATS authentication
creds                           —                            path of a ``.creds`` file (JWT + nkey seed)
nkeySeed                        —                            an nkey user seed or the path of one
tls, tlsCaFile,                 false                        TLS (implied by tls:// or a CA/cert file);
tlsCertFile / tlsKeyFile                                     client certificate for mutual TLS
==============================  ===========================  ==========================================

Sink options: ``servers`` and the auth/TLS options, ``subject``, ``stream`` (sets
``Nats-Expected-Stream``), ``msgIdColumn``, ``msgIdPrefix``, ``maxInflight`` (1024 messages;
at most 16 MiB unacknowledged), ``requestTimeoutMs``, ``commitLog``.

Operational notes: with a ``processingTime`` trigger of 0 an idle query asks for offsets every
10 ms (one small request each); prefer a trigger interval >= 0.5 s. TLS-first servers
(``handshake_first``), JetStream domains/API prefixes and subject filters are not supported.
Only this subpackage imports pyspark/pyarrow; the jetlog core does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register the ``jetlog`` data source with ``spark`` (auto-registration makes this optional)."""
    from jetlog.spark.source import JetlogDataSource

    spark.dataSource.register(JetlogDataSource)
