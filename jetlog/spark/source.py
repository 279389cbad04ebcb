"""The ``jetlog`` Python data source: streaming reader, batch reader, and the DataSource class.

Process model (PySpark 4.x): the streaming reader lives in a long-lived *source runner* Python
process (``initialOffset``, ``latestOffset``, ``partitions``, ``commit``); a second instance is
built by the planner and **pickled** into every task, where ``read()`` runs in an executor's
Python worker. Hence: no I/O in ``__init__``, connections opened lazily and dropped when
pickled, and everything ``read()`` needs travels in the options or the partition.

Exactly-once: offsets are per-stream sequences and a range ``[start, end)`` of committed
sequences always reads the same records (or fails on data loss), so Spark can replay any
micro-batch it logged in ``offsets/N`` and get identical rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from jetlog.spark.meta import Meta
from jetlog.spark.natsio import Connection
from jetlog.spark.offsets import (
    DataLossError,
    apply_data_loss_rule,
    canonical,
    parse_offset,
    plan_ranges,
    split_budget,
)
from jetlog.spark.options import SourceOptions, include_headers, parse_sink_options, parse_source_options
from jetlog.spark.schema import check_read_schema, source_schema

if TYPE_CHECKING:
    import pyarrow as pa

try:  # pyspark >= 4.3
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError:  # pragma: no cover - pyspark 4.2: Trigger.AvailableNow falls back to one batch

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in for pyspark < 4.3."""

        def prepareForTriggerAvailableNow(self) -> None:
            """Freeze the target offset."""


@dataclass
class JetlogPartition(InputPartition):
    """One task: sequences ``start <= seq < end`` of ``stream``."""

    stream: str
    start: int
    end: int


class _RangeReader:
    """What the streaming and the batch reader share: options, schema and ``read()``."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        check_read_schema(schema, opts.include_headers)
        self._opts = opts
        self._schema = schema
        self._conn: Connection | None = None
        self._meta: Meta | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into tasks: live connections stay behind (each task opens its own).
        state = self.__dict__.copy()
        state["_conn"] = None
        state["_meta"] = None
        return state

    def _metadata(self) -> Meta:
        if self._meta is None:
            self._conn = Connection.connect(self._opts.conn)
            self._meta = Meta(self._conn, self._opts)
        return self._meta

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._meta = None

    def _plan(
        self, start: dict[str, int], end: dict[str, int], new_streams: frozenset[str]
    ) -> list[JetlogPartition]:
        o = self._opts
        busy = [s for s in end if end[s] > start.get(s, 1)]
        if not busy:
            return []
        positions = self._metadata().positions(busy)
        start = apply_data_loss_rule(start, end, positions, o.fail_on_data_loss, new_streams)
        ranges = plan_ranges(start, end, o.min_partitions, o.max_records_per_partition)
        return [JetlogPartition(r.stream, r.start, r.end) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Runs in an executor's Python worker: yields Arrow batches of the partition's range."""
        from pyspark.sql.pandas.types import to_arrow_schema

        from jetlog.spark.fetch import FetchSettings, read_range

        if not isinstance(partition, JetlogPartition):
            return  # Spark plans an empty batch read as one InputPartition(None)
        o = self._opts
        settings = FetchSettings(
            o.fetch,
            o.include_headers,
            o.fetch_max_bytes,
            o.fetch_batch,
            o.request_timeout_s,
            o.fail_on_data_loss,
            o.fetch_window,
            o.fetch_format,
        )
        schema = to_arrow_schema(self._schema, timezone="UTC")
        conn = Connection.connect(o.conn)
        try:
            yield from read_range(conn, partition.stream, partition.start, partition.end, settings, schema)
        finally:
            conn.close()


class JetlogStreamReader(_RangeReader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control and Trigger.AvailableNow."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        super().__init__(opts, schema)
        self._initial: dict[str, int] | None = None
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None
        self._last_trigger = 0.0

    def initialOffset(self) -> dict[str, int]:
        """Where a query without a checkpoint starts.

        Spark calls this more than once (before the first ``latestOffset`` and again to plan
        batch 0); ``latest`` and timestamps must resolve ONCE, or records published in between
        are silently skipped. Memoized for the life of the runner process. (A crash before
        batch 0 is committed re-resolves them: use earliest, explicit sequences or a timestamp
        where the very first records matter.)
        """
        if self._initial is None:
            self._initial = self._metadata().resolve_start()
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` → ReadMaxRows; else everything available."""
        if self._opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the target: no batch of this run reads past what is committed now."""
        positions = self._metadata().positions(self._opts.streams)
        self._target = {s: p.latest for s, p in positions.items() if p is not None}

    def _start(self, start: dict[str, Any]) -> tuple[dict[str, int], frozenset[str]]:
        """Spark's start offset restricted to the configured streams; streams added to the
        option since the checkpoint was written start from sequence 1 (i.e. the oldest stored)."""
        parsed = parse_offset(start, "start offset")
        out = {s: parsed.get(s, 1) for s in self._opts.streams}
        return out, frozenset(s for s in self._opts.streams if s not in parsed)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        """The end of the next micro-batch (``start`` itself when there is nothing to do)."""
        o = self._opts
        begin, new = self._start(start)
        positions = self._metadata().positions(o.streams)
        missing = [s for s, p in positions.items() if p is None]
        if missing and o.fail_on_data_loss:
            raise DataLossError(
                f"stream(s) {', '.join(missing)} not found (deleted?). Set failOnDataLoss=false to skip them."
            )
        # Never move backwards: a stream behind the offset (recreated, or a lagging responder)
        # just has nothing new.
        latest = {s: max(begin[s], p.latest) if p is not None else begin[s] for s, p in positions.items()}
        self._latest = canonical(latest)
        if self._target is not None:
            latest = {s: max(begin[s], min(v, self._target.get(s, begin[s]))) for s, v in latest.items()}
        # Count the backlog from what is still stored when lost data will be skipped anyway.
        eff = dict(begin)
        for s, p in positions.items():
            if p is not None and (s in new or not o.fail_on_data_loss):
                eff[s] = min(max(begin[s], p.earliest), latest[s])
        backlog = sum(latest[s] - eff[s] for s in latest)
        now = time.time()
        if self._target is None and o.min_offsets_per_trigger is not None:
            # minOffsetsPerTrigger / maxTriggerDelay, as Kafka: wait for enough records unless
            # the delay since the last batch has passed (the runner process is long-lived).
            if (now - self._last_trigger) * 1000 >= o.max_trigger_delay_ms:
                self._last_trigger = now
            elif backlog < o.min_offsets_per_trigger:
                return canonical(begin)
            else:
                self._last_trigger = now
        if isinstance(limit, ReadMaxRows) and backlog > limit.max_rows:
            end = split_budget(eff, latest, limit.max_rows)
            # A stream whose budget share is 0 stays where it was (not at its effective start).
            end = {s: end[s] if end[s] > eff[s] else begin[s] for s in end}
        else:
            end = latest
        return canonical(end)

    def reportLatestOffset(self) -> dict[str, int] | None:
        """The latest offsets seen by the last ``latestOffset`` (progress ``latestOffset``)."""
        return dict(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Tasks for ``[start, end)``; checks the data-loss rule against the streams' first_seq."""
        begin, new = self._start(start)
        stop = {s: v for s, v in parse_offset(end, "end offset").items() if s in self._opts.streams}
        return self._plan(begin, stop, new)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: jetlog keeps no per-query state; the checkpoint is the only truth."""

    def stop(self) -> None:
        """Close the runner's connection."""
        self._close()


class JetlogBatchReader(_RangeReader, DataSourceReader):
    """Bounded read of ``[startingOffsets, endingOffsets)``."""

    def partitions(self) -> Sequence[InputPartition]:
        """Resolve both ends once, in the planner, and split the ranges."""
        try:
            meta = self._metadata()
            start = meta.resolve_start()
            positions = meta.positions(self._opts.streams)
            end = meta.resolve_end(positions)
            # Explicit ending offsets beyond what is committed read what there is (no waiting).
            latest = {s: p.latest for s, p in positions.items() if p is not None}
            end = {s: max(min(end[s], latest.get(s, end[s])), start[s]) for s in end}
            return self._plan(start, end, frozenset())
        finally:
            self._close()


class JetlogDataSource(DataSource):
    """``spark.readStream.format("jetlog")`` / ``spark.read`` / ``writeStream`` / ``write``."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "jetlog"

    def schema(self) -> StructType:
        """Fixed schema; ``includeHeaders=true`` adds the headers column."""
        return source_schema(include_headers(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Reader of ``readStream``."""
        return JetlogStreamReader(parse_source_options(self.options, batch=False), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        """Reader of ``read``."""
        return JetlogBatchReader(parse_source_options(self.options, batch=True), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Writer of ``writeStream`` (append/update output modes)."""
        from jetlog.spark.sink import JetlogStreamWriter

        return JetlogStreamWriter(parse_sink_options(self.options), schema, overwrite)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Writer of ``write`` (mode append)."""
        from jetlog.spark.sink import JetlogBatchWriter

        return JetlogBatchWriter(parse_sink_options(self.options), schema, overwrite)
