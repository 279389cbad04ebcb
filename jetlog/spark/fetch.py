"""Reading a committed sequence range of a stream as ``pyarrow.RecordBatch``es.

Two paths, selected by the ``fetch`` option:

* **bulk** — ``$JETLOG.API.FETCH.<stream>`` (jetlog only): one reply carries many records as a
  JLC1 columnar frame (:mod:`jetlog.wire.columnar`); the Arrow arrays are views over the reply's
  sections (``pyarrow.Array.from_buffers``), so no Python work happens per record.
* **direct** — JetStream Direct Get batches (ADR-31, ``$JS.API.DIRECT.GET.<stream>``): one NATS
  message per record; works against ``nats-server -js`` streams with ``allow_direct: true`` and
  against jetlog. About 10x slower.

``auto`` tries bulk and falls back to direct when nobody answers the FETCH subject (a 503
no-responders status: a real nats-server).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from functools import lru_cache

import pyarrow as pa

from jetlog.spark.natsio import Connection, Msg, NatsConnectionError, NatsError
from jetlog.spark.natsproto import NatsTimeout
from jetlog.spark.offsets import DataLossError, StreamPosition, data_loss_message
from jetlog.spark.options import DEFAULT_DIRECT_MAX_BYTES, FetchMode
from jetlog.spark.rawarrow import raw_frame_to_batch
from jetlog.wire import columnar
from jetlog.wire.timefmt import parse_time

FETCH_SUBJECT = "$JETLOG.API.FETCH."
DIRECT_GET_SUBJECT = "$JS.API.DIRECT.GET."
STREAM_INFO_SUBJECT = "$JS.API.STREAM.INFO."

# Headers Direct Get adds to every reply; everything else in the block is the stored headers.
INJECTED_HEADERS = frozenset(
    {
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        "Nats-Num-Pending",
        "Nats-Last-Sequence",
    }
)

TS_TYPE = pa.timestamp("us", tz="UTC")
HEADER_ENTRY = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.string())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_ENTRY))

# How long a read waits for a responder whose committed high-water mark is behind the range
# it was asked for (a lagging replica), before giving up.
_BEHIND_BACKOFF = (0.01, 0.05, 0.1, 0.25, 0.5)


class FetchError(NatsError):
    """A read request failed (bad request, record too large, responder stuck behind...)."""


class BulkUnavailable(FetchError):
    """Nobody serves ``$JETLOG.API.FETCH`` on this NATS (a plain nats-server)."""


class StreamNotFound(FetchError):
    """The stream does not exist (any more)."""


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` (``to_arrow_schema`` of the Spark schema)."""
    fields = [
        pa.field("stream", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("subject", pa.string()),
        pa.field("data", pa.binary()),
        pa.field("timestamp", TS_TYPE),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


@dataclass(frozen=True)
class FetchSettings:
    """What a task needs to read a range (shipped inside the pickled reader)."""

    mode: FetchMode
    include_headers: bool
    max_bytes: int
    batch: int
    timeout: float
    fail_on_data_loss: bool
    window: int = 3  # bulk requests in flight per task
    format: str = "jlr1"  # bulk frames: jlr1 (stored records, decoded here) or jlc1 (columns)


# --- JLC1 frame → Arrow -------------------------------------------------------------------------


def _view(buf: pa.Buffer, sec: columnar.Section) -> pa.Buffer:
    return buf.slice(sec.start, sec.length)


def frame_to_batch(frame: bytes | memoryview, stream: str, schema: pa.Schema) -> pa.RecordBatch:
    """Build a RecordBatch over a JLC1 frame without copying its columns.

    :func:`columnar.layout` validates sizes, bounds and monotonic offsets, so the buffers are
    structurally valid Arrow arrays; text columns are additionally checked for UTF-8 because
    Spark trusts Arrow strings blindly. The frame object must not be mutated afterwards (the
    arrays keep a reference to it).
    """
    lay = columnar.layout(frame)
    n = lay.n
    buf = pa.py_buffer(frame)
    seq = pa.Array.from_buffers(pa.int64(), n, [None, _view(buf, lay.seq)])
    ts_ns = pa.Array.from_buffers(pa.timestamp("ns", tz="UTC"), n, [None, _view(buf, lay.ts)])
    # ns → µs (Spark's TIMESTAMP precision): truncation, which is what safe=False permits.
    ts = ts_ns.cast(TS_TYPE, safe=False)
    subject = pa.Array.from_buffers(pa.string(), n, [None, _view(buf, lay.subj_off), _view(buf, lay.subj)])
    subject.validate(full=True)
    data = pa.Array.from_buffers(pa.binary(), n, [None, _view(buf, lay.data_off), _view(buf, lay.data)])
    cols: list[pa.Array] = [pa.repeat(pa.scalar(stream, pa.string()), n), seq, subject, data, ts]
    if "headers" in schema.names:
        htype = schema.field("headers").type
        if lay.has_headers:
            assert lay.hdr_off and lay.key_off and lay.key and lay.val_off and lay.val
            keys = pa.Array.from_buffers(
                pa.string(), lay.m, [None, _view(buf, lay.key_off), _view(buf, lay.key)]
            )
            vals = pa.Array.from_buffers(
                pa.string(), lay.m, [None, _view(buf, lay.val_off), _view(buf, lay.val)]
            )
            keys.validate(full=True)
            vals.validate(full=True)
            entries = pa.StructArray.from_arrays([keys, vals], fields=list(htype.value_type))
            offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, _view(buf, lay.hdr_off)])
            cols.append(pa.ListArray.from_arrays(offsets, entries, type=htype))
        else:
            cols.append(pa.array([[]] * n, type=htype))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


# --- Direct Get rows → Arrow ---------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _day_ns(date: str) -> int:
    return parse_time(date + "T00:00:00Z")


def parse_timestamp_ns(text: str) -> int:
    """RFC 3339 → ns since the epoch; fast path for the UTC form nats-server and jetlog write."""
    if len(text) >= 20 and text[10] == "T" and text[-1] == "Z" and text[13] == ":" and text[16] == ":":
        try:
            base = _day_ns(text[:10])
            secs = int(text[11:13]) * 3600 + int(text[14:16]) * 60 + int(text[17:19])
            frac = text[19:-1]
            ns = 0
            if frac:
                if frac[0] != "." or not frac[1:].isdigit():
                    raise ValueError(text)
                ns = int(frac[1:10].ljust(9, "0"))
            return base + secs * 1_000_000_000 + ns
        except ValueError:
            pass
    return parse_time(text)


class _Rows:
    """Column builders for Direct Get replies."""

    def __init__(self, stream: str, schema: pa.Schema) -> None:
        self.stream = stream
        self.schema = schema
        self.with_headers = "headers" in schema.names
        self.clear()

    def clear(self) -> None:
        self.seqs: list[int] = []
        self.subjects: list[str] = []
        self.datas: list[bytes] = []
        self.tss: list[int] = []
        self.hdrs: list[list[dict[str, str]]] = []

    def add(self, seq: int, subject: str, ts_ns: int, data: bytes, pairs: list[tuple[str, str]]) -> None:
        self.seqs.append(seq)
        self.subjects.append(subject)
        self.datas.append(data)
        self.tss.append(ts_ns // 1000)
        if self.with_headers:
            self.hdrs.append([{"key": k, "value": v} for k, v in pairs if k not in INJECTED_HEADERS])

    def batch(self) -> pa.RecordBatch:
        n = len(self.seqs)
        cols = [
            pa.repeat(pa.scalar(self.stream, pa.string()), n),
            pa.array(self.seqs, pa.int64()),
            pa.array(self.subjects, pa.string()),
            pa.array(self.datas, pa.binary()),
            pa.array(self.tss, pa.int64()).cast(TS_TYPE),
        ]
        if self.with_headers:
            cols.append(pa.array(self.hdrs, type=self.schema.field("headers").type))
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)


# --- reading a range -------------------------------------------------------------------------------


def _int_header(m: Msg, key: str) -> int:
    v = m.header(key)
    if v is None:
        raise FetchError(f"reply lacks the {key} header")
    try:
        return int(v)
    except ValueError:
        raise FetchError(f"reply header {key}: {v!r} is not an integer") from None


def _fetch_error(stream: str, m: Msg) -> FetchError:
    code = m.status
    if code == 503:
        return BulkUnavailable(f"no responder for {FETCH_SUBJECT}{stream} (not a jetlog deployment?)")
    if code == 404:
        return StreamNotFound(f"stream {stream} not found")
    detail = m.header("Jl-Error") or m.description
    if code == 413:
        at = m.header("Jl-Next-Seq")
        return FetchError(
            f"stream {stream}: the record at sequence {at} is larger than the fetch budget; "
            "raise fetchMaxBytes (or leave it 0 for the server's maximum)"
        )
    return FetchError(f"{FETCH_SUBJECT}{stream}: status {code} {detail}".rstrip())


def _fetch_body(start: int, end: int, settings: FetchSettings, max_msgs: int = 0, start_ts: int = 0) -> bytes:
    body: dict[str, object] = {
        "start": start,
        "end": end,
        "max_bytes": settings.max_bytes,
        "max_msgs": max_msgs,
        "headers": settings.include_headers,
        "start_ts": start_ts,
    }
    if settings.format != "jlc1":
        body["format"] = settings.format
    return json.dumps(body, separators=(",", ":")).encode()


def bulk_request(
    conn: Connection,
    stream: str,
    start: int,
    end: int,
    settings: FetchSettings,
    max_msgs: int = 0,
    start_ts: int = 0,
) -> Msg:
    """One FETCH request; returns the reply (raises :class:`FetchError` on a status reply)."""
    m = conn.request(
        FETCH_SUBJECT + stream, _fetch_body(start, end, settings, max_msgs, start_ts), settings.timeout
    )
    if m.status:
        raise _fetch_error(stream, m)
    return m


def fetch_bulk(
    conn: Connection, stream: str, start: int, end: int, settings: FetchSettings, schema: pa.Schema
) -> Generator[pa.RecordBatch, None, None]:
    """Yield the committed records ``start <= seq < end`` through ``$JETLOG.API.FETCH``, in
    sequence order.

    Requests are pipelined: up to ``settings.window`` sub-ranges are in flight, so the responder
    builds the next frame while this worker decodes the last one (a strict request/reply loop
    leaves both sides idle half the time). Sub-ranges are sized from what one reply covered
    (sequences per frame), slightly under so most replies cover theirs whole; a reply that
    stops short (bigger records, the byte budget) has its remainder requested at the head of
    the queue, so rows still come out in order.
    """
    subject = FETCH_SUBJECT + stream
    window = max(1, settings.window)
    pending: deque[tuple[int, int, str]] = deque()  # (start, end, reply subject), in order
    frontier = start  # first sequence not yet requested
    span = 0  # sequences per sub-range; 0 until a reply tells how many fit in a frame
    waits = 0

    def send(s: int, e: int, *, front: bool = False) -> None:
        item = (s, e, conn.send_request(subject, _fetch_body(s, e, settings)))
        if front:
            pending.appendleft(item)
        else:
            pending.append(item)

    def top_up() -> None:
        nonlocal frontier
        while frontier < end and len(pending) < (window if span else 1):
            e = min(end, frontier + span) if span else end
            send(frontier, e)
            frontier = e

    try:
        top_up()
        while pending:
            s, e, reply = pending.popleft()
            m = conn.wait_reply(reply, settings.timeout)
            if m.status:
                raise _fetch_error(stream, m)
            nxt = _int_header(m, "Jl-Next-Seq")
            hwm = _int_header(m, "Jl-Hwm")
            first = _int_header(m, "Jl-First-Seq")
            if s < first and settings.fail_on_data_loss:
                # Retention or a purge removed sequences of this task's range after it was planned.
                raise DataLossError(data_loss_message(stream, s, min(first, end) - 1, first))
            if _int_header(m, "Jl-Count"):
                if m.header("Jl-Format") == "jlr1":
                    yield raw_frame_to_batch(m.data, stream, schema)
                else:
                    yield frame_to_batch(m.data, stream, schema)
            if nxt > s:
                waits = 0
                if nxt < e:
                    # Cut short by the byte budget: that many sequences make one frame.
                    fit = max(1, (nxt - s) * 15 // 16)
                    span = min(span, fit) if span else fit
                    if not pending and e == frontier:
                        frontier = nxt  # nothing asked beyond this reply: go on from where it stopped
                    else:
                        send(nxt, e, front=True)  # the rest of this sub-range, before the others
                top_up()
                continue
            if hwm >= e - 1:
                raise FetchError(f"{subject} made no progress at sequence {s}")
            # The responder's committed high-water mark is below the range: it is behind (a
            # replica catching up). Its silence about those sequences is NOT a deletion: wait
            # and ask again.
            if waits >= len(_BEHIND_BACKOFF) * 4:
                raise FetchError(
                    f"stream {stream}: the responder stayed behind (committed up to {hwm}, range ends at {end - 1})"
                )
            time.sleep(_BEHIND_BACKOFF[min(waits, len(_BEHIND_BACKOFF) - 1)])
            waits += 1
            send(s, e, front=True)
    finally:
        conn.forget(*(r for _s, _e, r in pending))


def stream_info_position(conn: Connection, stream: str, timeout: float) -> StreamPosition | None:
    """``$JS.API.STREAM.INFO`` → (first_seq, last_seq), or None if the stream does not exist."""
    m = conn.request(STREAM_INFO_SUBJECT + stream, b"", timeout)
    if m.status == 503:
        raise NatsError(f"no JetStream API responder for stream {stream} (is jetlog or JetStream running?)")
    if m.status:
        raise NatsError(f"STREAM.INFO {stream}: status {m.status} {m.description}")
    r = json.loads(m.data)
    err = r.get("error")
    if err:
        if err.get("err_code") == 10059 or err.get("code") == 404:
            return None
        raise NatsError(f"STREAM.INFO {stream}: {err.get('description', err)}")
    state = r.get("state") or {}
    return StreamPosition(int(state.get("first_seq", 0)), int(state.get("last_seq", 0)))


def fetch_direct(
    conn: Connection, stream: str, start: int, end: int, settings: FetchSettings, schema: pa.Schema
) -> Generator[pa.RecordBatch, None, None]:
    """Yield the records ``start <= seq < end`` through Direct Get batch requests."""
    rows = _Rows(stream, schema)
    max_bytes = settings.max_bytes or DEFAULT_DIRECT_MAX_BYTES
    subject = DIRECT_GET_SUBJECT + stream
    seq = start
    while seq < end:
        body = {"seq": seq, "batch": min(settings.batch, end - seq), "max_bytes": max_bytes}
        payload = json.dumps(body, separators=(",", ":")).encode()
        first_seen: int | None = None
        last = seq - 1
        status = 0
        for m in conn.request_many(subject, payload, settings.timeout):
            status = m.status
            if status:
                if status not in (204, 404):
                    raise _direct_error(stream, m)
                break
            pairs = m.headers()
            meta = {k: v for k, v in pairs if k in INJECTED_HEADERS}
            try:
                s = int(meta["Nats-Sequence"])
                subj = meta["Nats-Subject"]
                ts = parse_timestamp_ns(meta["Nats-Time-Stamp"])
            except (KeyError, ValueError) as e:
                raise FetchError(f"Direct Get reply for {stream} without valid metadata: {e}") from None
            if first_seen is None:
                first_seen = s
            last = s
            if s < end:
                rows.add(s, subj, ts, m.data, pairs)
        if (first_seen is None or first_seen > seq) and settings.fail_on_data_loss:
            # A gap before the first returned record: interior deletes are fine, but sequences
            # below the stream's first_seq were removed by retention/purge after planning.
            pos = stream_info_position(conn, stream, settings.timeout)
            if pos is None:
                raise DataLossError(
                    f"stream {stream} no longer exists but sequences {seq}..{end - 1} were not read"
                )
            if seq < pos.first_seq:
                raise DataLossError(
                    data_loss_message(stream, seq, min(pos.first_seq, end) - 1, pos.first_seq)
                )
        if rows.seqs:
            yield rows.batch()
            rows.clear()
        if status == 404 or first_seen is None or last >= end - 1:
            return  # nothing at/after seq: the rest of the range was deleted
        seq = last + 1


def _direct_error(stream: str, m: Msg) -> FetchError:
    if m.status == 503:
        return FetchError(
            f"no Direct Get responder for stream {stream}: create it with allow_direct: true, "
            "or read from jetlog (fetch=bulk)"
        )
    return FetchError(f"Direct Get {stream}: status {m.status} {m.description}".rstrip())


TIMEOUT_RETRIES = 2
"""Requests of one ``read_range`` that may go unanswered (each after the request timeout)."""


def read_range(
    conn: Connection, stream: str, start: int, end: int, settings: FetchSettings, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Yield ``start <= seq < end`` of ``stream`` with the configured fetch path.

    A connection lost mid-range is re-established once and the read resumes after the last
    record yielded (records already yielded are never repeated). A request left without a
    reply is asked again from there, up to ``TIMEOUT_RETRIES`` times: the replica the
    upstream's queue group handed it to can die with it (a ``kill -9`` between the server
    routing the request and noticing the closed connection), and reads are idempotent.
    """
    mode = settings.mode
    seq = start
    reconnected = False
    timeouts = 0
    while seq < end:
        try:
            it: Generator[pa.RecordBatch, None, None]
            if mode == "direct":
                it = fetch_direct(conn, stream, seq, end, settings, schema)
            else:
                it = fetch_bulk(conn, stream, seq, end, settings, schema)
            try:
                for b in it:
                    yield b
                    seq = int(b.column(1)[-1].as_py()) + 1
            finally:
                it.close()  # abandon requests still in flight when the caller stops early
            return
        except BulkUnavailable:
            if mode != "auto":
                raise
            mode = "direct"
        except StreamNotFound:
            if settings.fail_on_data_loss:
                raise DataLossError(
                    f"stream {stream} no longer exists but sequences {seq}..{end - 1} were not read. "
                    "Set failOnDataLoss=false to skip lost data."
                ) from None
            return
        except NatsConnectionError:
            if reconnected:
                raise
            reconnected = True
            conn.reconnect()
        except NatsTimeout:
            if timeouts >= TIMEOUT_RETRIES:
                raise
            timeouts += 1
