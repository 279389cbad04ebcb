"""The ``jetlog`` sink: publishes rows through the JetStream publish path, waiting for PubAcks.

Exactly-once across replays: every message carries a deterministic ``Nats-Msg-Id`` (the
``msgIdColumn``, a ``Nats-Msg-Id`` header of the row, or ``<prefix>-b<batchId>-p<partition>-r<row>``
where the prefix is the ``msgIdPrefix`` option or the streaming query's id, which survives
restarts). When Spark replays a micro-batch after a failure it republishes the same ids and the
stream drops them as duplicates — **as long as the replay happens within the stream's
``duplicate_window``** (2 minutes by default). The generated ids also assume the replayed batch
produces the same rows in the same order per partition (true for a replayable source such as
jetlog's and deterministic transformations); otherwise use ``msgIdColumn``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from jetlog.spark.natsio import Connection, NatsConnectionError, NatsTimeout, encode_headers
from jetlog.spark.options import SinkOptions
from jetlog.spark.schema import SinkColumns, sink_columns

log = logging.getLogger("jetlog.spark.sink")

MSG_ID = "Nats-Msg-Id"
_FLUSH_BYTES = 256 * 1024
# Unacknowledged messages are kept for a resend; bound their bytes, not only their count.
_MAX_INFLIGHT_BYTES = 16 * 1024 * 1024


class PublishError(RuntimeError):
    """A publish was rejected or not acknowledged."""


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _PubAck(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None


_decode_ack = msgspec.json.Decoder(_PubAck).decode


class Publisher:
    """Pipelined publishes with a window of unacknowledged messages on one connection.

    A lost connection or a missing PubAck leads to one resend of every unacknowledged message
    (safe: they carry ``Nats-Msg-Id``s, so the stream stores each once).
    """

    def __init__(self, conn: Connection, window: int, timeout: float) -> None:
        self.conn = conn
        self.window = window
        self.timeout = timeout
        self.published = 0
        self.duplicates = 0
        self._pending: dict[str, tuple[str, bytes]] = {}
        self._pending_bytes = 0
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._recovered = False

    def add(self, subject: str, hdr: bytes, data: bytes) -> None:
        """Queue one message; blocks for acks when the window is full."""
        reply = self.conn.new_reply()
        frame = Connection.encode_pub(subject, data, reply, hdr)
        self._pending[reply] = (subject, frame)
        self._pending_bytes += len(frame)
        self._out.append(frame)
        self._out_bytes += len(frame)
        if len(self._pending) >= self.window or self._pending_bytes >= _MAX_INFLIGHT_BYTES:
            self._flush()
            self._drain(self.window // 2, _MAX_INFLIGHT_BYTES // 2)
        elif self._out_bytes >= _FLUSH_BYTES:
            self._flush()

    def finish(self) -> None:
        """Send what is queued and wait for every ack."""
        self._flush()
        self._drain(0, 0)

    def _flush(self) -> None:
        if not self._out:
            return
        data = b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        try:
            self.conn.send_raw(data)
        except NatsConnectionError:
            self._recover("connection lost")

    def _recover(self, why: str) -> None:
        if self._recovered:
            raise PublishError(f"{why} again while {len(self._pending)} publishes awaited PubAcks")
        self._recovered = True
        log.warning("jetlog sink: %s; resending %d unacknowledged messages", why, len(self._pending))
        self._out.clear()
        self._out_bytes = 0
        try:
            self.conn.reconnect()
            self.conn.send_raw(b"".join(frame for _, frame in self._pending.values()))
        except NatsConnectionError as e:
            raise PublishError(f"cannot resend after {why}: {e}") from None

    def _drain(self, upto: int, upto_bytes: int) -> None:
        deadline = time.monotonic() + self.timeout
        while len(self._pending) > upto or (self._pending and self._pending_bytes > upto_bytes):
            try:
                m = self.conn.next_msg(deadline)
            except NatsTimeout:
                self._recover(f"no PubAck within {self.timeout:g}s")
                deadline = time.monotonic() + self.timeout
                continue
            except NatsConnectionError:
                self._recover("connection lost")
                deadline = time.monotonic() + self.timeout
                continue
            entry = self._pending.pop(m.subject, None)
            if entry is None:
                continue  # the second ack of a resent message
            subject = entry[0]
            self._pending_bytes -= len(entry[1])
            if m.status == 503:
                raise PublishError(f"no stream captures subject {subject!r} (no responders)")
            if m.status:
                raise PublishError(f"publish to {subject!r}: status {m.status} {m.description}")
            try:
                ack = _decode_ack(m.data)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                raise PublishError(
                    f"publish to {subject!r}: unexpected reply {m.data[:200]!r} ({e})"
                ) from None
            if ack.error is not None:
                err = ack.error
                raise PublishError(
                    f"publish to {subject!r} rejected: {err.description} (err_code {err.err_code})"
                )
            if ack.duplicate:
                self.duplicates += 1
            else:
                self.published += 1
            deadline = time.monotonic() + self.timeout


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task published: new messages and ones the stream already had (duplicates)."""

    partition: int
    attempt: int
    published: int
    duplicates: int


def _task() -> tuple[int, int, str | None, str | None]:
    """(partition id, attempt, streaming batch id, streaming query id) of the running task."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        return 0, 0, None, None
    return (
        tc.partitionId(),
        tc.attemptNumber(),
        tc.getLocalProperty("streaming.sql.batchId"),
        tc.getLocalProperty("sql.streaming.queryId"),
    )


class _Writer:
    def __init__(self, opts: SinkOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError("the jetlog sink only appends (use mode append / output mode append or update)")
        self._opts = opts
        self._cols: SinkColumns = sink_columns(schema, opts.subject, opts.msg_id_column)

    def _publish(
        self, batches: Iterator[pa.RecordBatch], prefix: str, partition: int, attempt: int
    ) -> SinkCommitMessage:
        o = self._opts
        c = self._cols
        conn = Connection.connect(o.conn)
        pub = Publisher(conn, o.max_inflight, o.request_timeout_s)
        fixed: list[tuple[str, str]] = [("Nats-Expected-Stream", o.stream)] if o.stream else []
        row = 0
        try:
            for batch in batches:
                n = batch.num_rows
                subjects = batch.column(c.subject).to_pylist() if c.subject else None
                datas = batch.column(c.data).to_pylist()
                headers = batch.column(c.headers).to_pylist() if c.headers else None
                ids = batch.column(c.msg_id).to_pylist() if c.msg_id else None
                for i in range(n):
                    subject = (subjects[i] if subjects is not None else None) or o.subject
                    if not subject:
                        raise ValueError(
                            f"row {row} of partition {partition}: null subject and no 'subject' option"
                        )
                    data = datas[i]
                    payload = b"" if data is None else data if isinstance(data, bytes) else str(data).encode()
                    user = (
                        [(h["key"], h["value"] or "") for h in (headers[i] or ()) if h and h["key"]]
                        if headers
                        else []
                    )
                    if ids is not None and ids[i] is not None:
                        msg_id = str(ids[i])
                        user = [(k, v) for k, v in user if k != MSG_ID]
                    elif any(k == MSG_ID for k, _ in user):
                        msg_id = ""
                    else:
                        msg_id = f"{prefix}-p{partition}-r{row}"
                    pairs = ([(MSG_ID, msg_id)] if msg_id else []) + fixed + user
                    pub.add(subject, encode_headers(pairs), payload)
                    row += 1
            pub.finish()
        finally:
            conn.close()
        return SinkCommitMessage(partition, attempt, pub.published, pub.duplicates)

    def _record(
        self, batch_id: int | None, messages: list[WriterCommitMessage | None], aborted: bool
    ) -> None:
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        published = sum(m.published for m in done)
        duplicates = sum(m.duplicates for m in done)
        what = "aborted" if aborted else "committed"
        log.info(
            "jetlog sink batch %s %s: %d published, %d duplicates", batch_id, what, published, duplicates
        )
        if self._opts.commit_log:
            entry = {
                "batch": batch_id,
                "aborted": aborted,
                "published": published,
                "duplicates": duplicates,
                "tasks": len(messages),
                "failed_tasks": len(messages) - len(done),
            }
            with open(self._opts.commit_log, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")


class JetlogStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """``writeStream.format("jetlog")``."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """Publish one task's rows of a micro-batch (runs in an executor's Python worker)."""
        partition, attempt, batch_id, query_id = _task()
        base = self._opts.msg_id_prefix or query_id or "jetlog-spark"
        return self._publish(iterator, f"{base}-b{batch_id}", partition, attempt)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Record the batch's counts (published / duplicates)."""
        self._record(batchId, messages, aborted=False)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Published messages cannot be taken back; the replay will be deduplicated."""
        self._record(batchId, messages, aborted=True)


class JetlogBatchWriter(_Writer, DataSourceArrowWriter):
    """``df.write.format("jetlog").mode("append").save()``."""

    def __init__(self, opts: SinkOptions, schema: StructType, overwrite: bool) -> None:
        super().__init__(opts, schema, overwrite)
        # Made once on the driver and pickled into the tasks: a retried task reuses its ids.
        self._job = opts.msg_id_prefix or "jetlog-write-" + os.urandom(8).hex()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """Publish one task's rows."""
        partition, attempt, _, _ = _task()
        return self._publish(iterator, self._job, partition, attempt)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Record the job's counts."""
        self._record(None, messages, aborted=False)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Published messages cannot be taken back."""
        self._record(None, messages, aborted=True)
