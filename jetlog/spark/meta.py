"""Stream positions (first stored / last committed sequence) and time → sequence lookups.

On jetlog, ``$JETLOG.API.OFFSETS`` answers for many streams in one round trip and reports the
*committed* high-water mark. On a plain nats-server (no responder → 503) the JetStream API's
``STREAM.INFO`` is used instead (``last_seq`` there is what the server has stored and will serve).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from jetlog.spark.fetch import (
    DIRECT_GET_SUBJECT,
    BulkUnavailable,
    FetchSettings,
    StreamNotFound,
    bulk_request,
    stream_info_position,
)
from jetlog.spark.natsio import Connection, NatsError, NatsTimeout
from jetlog.spark.offsets import DataLossError, StreamPosition, canonical, resolve_spec
from jetlog.spark.options import LATEST, SourceOptions
from jetlog.wire import columnar
from jetlog.wire.timefmt import format_time

OFFSETS_SUBJECT = "$JETLOG.API.OFFSETS"
OFFSETS_ATTEMPT_S = 5.0
"""One OFFSETS attempt's wait; retried until the source's request timeout."""


class Unavailable(NatsError):
    """jetlog answered that a stream's replicas are unavailable right now (retriable)."""


class _NotJetlog(Exception):
    """No responder: a plain nats-server."""


class Meta:
    """Metadata queries over one connection; remembers whether the jetlog endpoints answer."""

    def __init__(self, conn: Connection, opts: SourceOptions) -> None:
        self.conn = conn
        self.opts = opts
        # None: not probed yet; False: a plain nats-server (no responder) or fetch=direct.
        self.jetlog_api: bool | None = False if opts.fetch == "direct" else None

    def positions(self, streams: Iterable[str]) -> dict[str, StreamPosition | None]:
        """Per stream: its position, or None if it does not exist."""
        names = list(streams)
        if not names:
            return {}
        timeout = self.opts.request_timeout_s
        if self.jetlog_api is not False:
            # Retried within the request timeout: during a cluster failover the node that took
            # the request may die, or no replica of a stream may answer it yet (503 body).
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                try:
                    return self._offsets(names, max(0.1, min(left, OFFSETS_ATTEMPT_S)))
                except (NatsTimeout, Unavailable):
                    if deadline - time.monotonic() <= 0:
                        raise
                    time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
                except _NotJetlog:
                    break
        return {s: stream_info_position(self.conn, s, timeout) for s in names}

    def _offsets(self, names: list[str], timeout: float) -> dict[str, StreamPosition | None]:
        m = self.conn.request_json(OFFSETS_SUBJECT, {"streams": names}, timeout)
        if m.status == 503:
            if self.opts.fetch == "bulk":
                raise BulkUnavailable(f"no responder for {OFFSETS_SUBJECT} (fetch=bulk needs jetlog)")
            self.jetlog_api = False
            raise _NotJetlog
        if m.status:
            raise NatsError(f"{OFFSETS_SUBJECT}: status {m.status} {m.description}")
        self.jetlog_api = True
        return self._parse_offsets(m.data, names)

    @staticmethod
    def _parse_offsets(data: bytes, names: list[str]) -> dict[str, StreamPosition | None]:
        r = json.loads(data)
        if "error" in r:
            if r["error"].get("code") == 503:
                raise Unavailable(f"{OFFSETS_SUBJECT}: {r['error']}")
            raise NatsError(f"{OFFSETS_SUBJECT}: {r['error']}")
        found = r.get("streams") or {}
        out: dict[str, StreamPosition | None] = {}
        for s in names:
            v = found.get(s)
            out[s] = None if v is None else StreamPosition(int(v["first_seq"]), int(v["hwm"]))
        return out

    def seq_at_time(self, stream: str, ts_ms: int, position: StreamPosition | None) -> int:
        """The first sequence whose timestamp is >= ``ts_ms``; the latest offset if none is."""
        ts_ns = ts_ms * 1_000_000
        if self.jetlog_api is not False:
            settings = FetchSettings("bulk", False, 0, 1, self.opts.request_timeout_s, False, 1, "jlc1")
            try:
                m = bulk_request(self.conn, stream, 1, 0, settings, max_msgs=1, start_ts=ts_ns)
            except BulkUnavailable:
                if self.opts.fetch == "bulk":
                    raise
                self.jetlog_api = False
            except StreamNotFound:
                raise DataLossError(f"stream {stream} not found (option startingTimestamp)") from None
            else:
                self.jetlog_api = True
                if (m.header("Jl-Count") or "0") != "0":
                    lay = columnar.layout(m.data)
                    return int.from_bytes(m.data[lay.seq.start : lay.seq.start + 8], "little", signed=True)
                nxt = m.header("Jl-Next-Seq")
                if nxt is None:
                    raise NatsError(f"FETCH {stream}: reply lacks Jl-Next-Seq")
                return int(nxt)
        body = json.dumps({"start_time": format_time(ts_ns)}).encode()
        m = self.conn.request(DIRECT_GET_SUBJECT + stream, body, self.opts.request_timeout_s)
        if m.status == 404:
            if position is None:
                position = self.positions([stream])[stream]
            if position is None:
                raise DataLossError(f"stream {stream} not found (option startingTimestamp)")
            return position.latest
        if m.status == 503:
            raise NatsError(
                f"no Direct Get responder for stream {stream} (startingTimestamp needs allow_direct: true or jetlog)"
            )
        if m.status:
            raise NatsError(f"Direct Get {stream} by start_time: status {m.status} {m.description}")
        seq = m.header("Nats-Sequence")
        if seq is None:
            raise NatsError(f"Direct Get {stream} by start_time: reply lacks Nats-Sequence")
        return int(seq)

    def resolve_start(self) -> dict[str, int]:
        """Initial offsets from startingTimestamp / startingOffsetsByTimestamp / startingOffsets."""
        o = self.opts
        if o.starting_timestamp_ms is not None:
            positions = self.positions(o.streams) if self.jetlog_api is False else {}
            return canonical(
                {s: self.seq_at_time(s, o.starting_timestamp_ms[s], positions.get(s)) for s in o.streams}
            )
        needs = [s for s, v in o.starting.items() if v < 0]
        positions = self.positions(needs)
        return resolve_spec(o.starting, positions, "startingOffsets")

    def resolve_end(self, positions: dict[str, StreamPosition | None]) -> dict[str, int]:
        """Batch end offsets from endingOffsets (``latest`` = the committed high-water mark + 1)."""
        spec = self.opts.ending
        needs = {s: positions[s] for s, v in spec.items() if v == LATEST}
        return resolve_spec(spec, needs, "endingOffsets")
