"""Options of the ``jetlog`` Spark data source and sink: parsing and validation.

Spark hands options over as a case-insensitive mapping of strings; names mirror the Kafka
source's where one exists. Every error names the option and what is accepted, and is raised
when the query is defined (``load()`` / ``start()``), not in a task.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import msgspec

from jetlog.spark.natsio import DEFAULT_URL, ConnectOptions

EARLIEST = -2
LATEST = -1

FetchMode = Literal["auto", "bulk", "direct"]

# Stream names as JetStream accepts them: no whitespace, no subject tokens or path separators.
_STREAM_RE = re.compile(r"^[^\s.*>/\\]+$")
_DURATION_RE = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")
_DURATION_MS = {
    "": 1,
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "secs": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "mins": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}

DEFAULT_MAX_RECORDS_PER_PARTITION = 500_000
DEFAULT_DIRECT_MAX_BYTES = 1 << 20
DEFAULT_FETCH_BATCH = 1000
DEFAULT_FETCH_WINDOW = 3
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000
DEFAULT_MAX_INFLIGHT = 1024


class OptionError(ValueError):
    """An option is missing, unknown in value, or inconsistent with another."""


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of a read (streaming or batch)."""

    conn: ConnectOptions
    streams: tuple[str, ...]
    """Sorted, distinct stream names."""
    starting: dict[str, int]
    """Per stream: a sequence (>= 1), :data:`EARLIEST` or :data:`LATEST`."""
    starting_timestamp_ms: dict[str, int] | None
    """Per stream: epoch ms (from ``startingTimestamp`` or ``startingOffsetsByTimestamp``)."""
    ending: dict[str, int]
    """Per stream: a sequence (exclusive) or :data:`LATEST` (batch reads)."""
    ending_given: bool
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int
    max_records_per_partition: int
    fail_on_data_loss: bool
    include_headers: bool
    fetch: FetchMode
    fetch_max_bytes: int
    """0 = the server's default (bulk) / 1 MiB (Direct Get)."""
    fetch_batch: int
    request_timeout_s: float
    fetch_window: int = DEFAULT_FETCH_WINDOW
    """Bulk requests in flight per task."""
    fetch_format: str = "jlr1"
    """Bulk frames: ``jlr1`` (stored records, decoded in the task) or ``jlc1`` (columns built
    by the node)."""


@dataclass(frozen=True)
class SinkOptions:
    """Validated options of a write."""

    conn: ConnectOptions
    subject: str | None
    stream: str | None
    msg_id_column: str | None
    msg_id_prefix: str | None
    max_inflight: int
    request_timeout_s: float
    commit_log: str | None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _get(o: dict[str, str], name: str) -> str | None:
    v = o.get(name.lower())
    if v is None:
        return None
    v = v.strip()
    return v or None


def _int(o: dict[str, str], name: str, default: int | None, minimum: int) -> int | None:
    v = _get(o, name)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        raise OptionError(f"option {name}: expected an integer, got {v!r}") from None
    if n < minimum:
        raise OptionError(f"option {name}: must be >= {minimum}, got {n}")
    return n


def _bool(o: dict[str, str], name: str, default: bool) -> bool:
    v = _get(o, name)
    if v is None:
        return default
    if v.lower() in ("true", "1", "yes"):
        return True
    if v.lower() in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}: expected true or false, got {v!r}")


def parse_duration_ms(name: str, value: str) -> int:
    """``15m``, ``30s``, ``500ms``, ``2h``, ``1d``, ``10 minutes``; a bare number is ms."""
    m = _DURATION_RE.match(value.lower())
    if not m or m.group(2) not in _DURATION_MS:
        raise OptionError(f"option {name}: expected a duration like 500ms, 30s, 15m or 1h, got {value!r}")
    return int(m.group(1)) * _DURATION_MS[m.group(2)]


def parse_streams(o: dict[str, str]) -> tuple[str, ...]:
    """The ``streams`` option (alias ``stream``): a comma list, returned sorted and distinct."""
    v = _get(o, "streams") or _get(o, "stream")
    if v is None:
        raise OptionError("option streams is required (a comma-separated list of stream names)")
    names = sorted({s.strip() for s in v.split(",") if s.strip()})
    if not names:
        raise OptionError("option streams: no stream name given")
    for s in names:
        if not _STREAM_RE.match(s):
            raise OptionError(f"option streams: invalid stream name {s!r}")
    return tuple(names)


def parse_connect(o: dict[str, str]) -> ConnectOptions:
    """Servers, authentication and TLS options."""
    servers = tuple(s.strip() for s in (_get(o, "servers") or DEFAULT_URL).split(",") if s.strip())
    if not servers:
        raise OptionError("option servers: no server URL given")
    for url in servers:
        scheme = url.split("://", 1)[0] if "://" in url else "nats"
        if scheme not in ("nats", "tls"):
            raise OptionError(
                f"option servers: unsupported URL {url!r} (use nats://host:port or tls://host:port)"
            )
    user, password = _get(o, "user"), _get(o, "password")
    if (user is None) != (password is None):
        raise OptionError("options user and password must be given together")
    creds, seed = _get(o, "creds"), _get(o, "nkeySeed")
    if creds and seed:
        raise OptionError("options creds and nkeySeed are exclusive")
    cert, key = _get(o, "tlsCertFile"), _get(o, "tlsKeyFile")
    if (cert is None) != (key is None):
        raise OptionError("options tlsCertFile and tlsKeyFile must be given together")
    ca = _get(o, "tlsCaFile")
    tls = _bool(o, "tls", False) or bool(ca or cert)
    timeout_ms = _int(o, "requestTimeoutMs", DEFAULT_REQUEST_TIMEOUT_MS, 1)
    assert timeout_ms is not None
    return ConnectOptions(
        servers=servers,
        user=user,
        password=password,
        token=_get(o, "token"),
        creds=creds,
        nkey_seed=seed,
        tls=tls,
        tls_ca_file=ca,
        tls_cert_file=cert,
        tls_key_file=key,
        connect_timeout=min(timeout_ms / 1000, 30.0),
    )


def _json_map(name: str, text: str) -> dict[str, int]:
    try:
        return msgspec.json.decode(text, type=dict[str, int])
    except msgspec.ValidationError as e:
        raise OptionError(f"option {name}: {e} (expected a JSON object of stream name to integer)") from None
    except msgspec.DecodeError as e:
        raise OptionError(f"option {name}: not valid JSON ({e})") from None


def _per_stream(name: str, given: dict[str, int], streams: tuple[str, ...]) -> dict[str, int]:
    unknown = sorted(set(given) - set(streams))
    if unknown:
        raise OptionError(f"option {name}: {', '.join(unknown)} not in option streams ({', '.join(streams)})")
    missing = [s for s in streams if s not in given]
    if missing:
        raise OptionError(f"option {name}: no value for stream(s) {', '.join(missing)}")
    return {s: given[s] for s in streams}


def parse_offsets_spec(name: str, value: str, streams: tuple[str, ...], ending: bool) -> dict[str, int]:
    """``earliest`` / ``latest`` / JSON ``{"ORDERS": 23}`` (-2 earliest, -1 latest) per stream."""
    v = value.strip()
    if v.lower() == "earliest":
        if ending:
            raise OptionError(f"option {name}: earliest is not allowed for an ending offset")
        return dict.fromkeys(streams, EARLIEST)
    if v.lower() == "latest":
        return dict.fromkeys(streams, LATEST)
    if not v.startswith("{"):
        raise OptionError(f"option {name}: expected earliest, latest or a JSON object, got {value!r}")
    spec = _per_stream(name, _json_map(name, v), streams)
    for s, n in spec.items():
        if n == EARLIEST and ending:
            raise OptionError(f"option {name}: -2 (earliest) is not allowed for an ending offset ({s})")
        if n < 1 and n not in (EARLIEST, LATEST):
            raise OptionError(
                f"option {name}: {s}: {n} is not a sequence (>= 1), -2 (earliest) or -1 (latest)"
            )
    return spec


def parse_source_options(options: Mapping[str, str], batch: bool) -> SourceOptions:
    """Validate a read's options; ``batch`` selects the defaults of ``spark.read``."""
    o = _lower(options)
    streams = parse_streams(o)
    conn = parse_connect(o)
    starting_text = _get(o, "startingOffsets") or ("earliest" if batch else "latest")
    starting = parse_offsets_spec("startingOffsets", starting_text, streams, ending=False)

    # Precedence as in Kafka: startingTimestamp > startingOffsetsByTimestamp > startingOffsets.
    ts_all = _int(o, "startingTimestamp", None, 0)
    by_ts_text = _get(o, "startingOffsetsByTimestamp")
    starting_ts: dict[str, int] | None = None
    if ts_all is not None:
        starting_ts = dict.fromkeys(streams, ts_all)
    elif by_ts_text is not None:
        starting_ts = _per_stream(
            "startingOffsetsByTimestamp", _json_map("startingOffsetsByTimestamp", by_ts_text), streams
        )
        bad = [s for s, t in starting_ts.items() if t < 0]
        if bad:
            raise OptionError(f"option startingOffsetsByTimestamp: negative timestamp for {', '.join(bad)}")

    ending_text = _get(o, "endingOffsets")
    if ending_text is not None and not batch:
        raise OptionError("option endingOffsets is only for batch reads (spark.read), not for readStream")
    ending = parse_offsets_spec("endingOffsets", ending_text or "latest", streams, ending=True)

    max_per_trigger = _int(o, "maxOffsetsPerTrigger", None, 1)
    min_per_trigger = _int(o, "minOffsetsPerTrigger", None, 1)
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise OptionError(
            f"option minOffsetsPerTrigger ({min_per_trigger}) exceeds maxOffsetsPerTrigger ({max_per_trigger})"
        )
    delay_text = _get(o, "maxTriggerDelay")
    delay_ms = (
        parse_duration_ms("maxTriggerDelay", delay_text) if delay_text else DEFAULT_MAX_TRIGGER_DELAY_MS
    )

    fetch = (_get(o, "fetch") or "auto").lower()
    if fetch not in ("auto", "bulk", "direct"):
        raise OptionError(f"option fetch: expected auto, bulk or direct, got {fetch!r}")
    timeout_ms = _int(o, "requestTimeoutMs", DEFAULT_REQUEST_TIMEOUT_MS, 1)
    assert timeout_ms is not None
    min_partitions = _int(o, "minPartitions", 1, 1)
    max_records = _int(o, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION, 1)
    fetch_max_bytes = _int(o, "fetchMaxBytes", 0, 0)
    fetch_batch = _int(o, "fetchBatch", DEFAULT_FETCH_BATCH, 1)
    fetch_window = _int(o, "fetchWindow", DEFAULT_FETCH_WINDOW, 1)
    assert fetch_window is not None
    fetch_format = (_get(o, "fetchFormat") or "jlr1").lower()
    if fetch_format not in ("jlr1", "jlc1"):
        raise OptionError(f"option fetchFormat: expected jlr1 or jlc1, got {fetch_format!r}")
    assert min_partitions is not None and max_records is not None
    assert fetch_max_bytes is not None and fetch_batch is not None
    return SourceOptions(
        conn=conn,
        streams=streams,
        starting=starting,
        starting_timestamp_ms=starting_ts,
        ending=ending,
        ending_given=ending_text is not None,
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=delay_ms,
        min_partitions=min_partitions,
        max_records_per_partition=max_records,
        fail_on_data_loss=_bool(o, "failOnDataLoss", True),
        include_headers=_bool(o, "includeHeaders", False),
        fetch=fetch,  # type: ignore[arg-type]
        fetch_max_bytes=fetch_max_bytes,
        fetch_batch=fetch_batch,
        request_timeout_s=timeout_ms / 1000,
        fetch_window=fetch_window,
        fetch_format=fetch_format,
    )


def include_headers(options: Mapping[str, str]) -> bool:
    """Just the ``includeHeaders`` flag (what the schema depends on)."""
    return _bool(_lower(options), "includeHeaders", False)


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate a write's options."""
    o = _lower(options)
    stream = _get(o, "stream")
    if stream is not None and not _STREAM_RE.match(stream):
        raise OptionError(f"option stream: invalid stream name {stream!r}")
    subject = _get(o, "subject")
    if subject is not None and (any(c.isspace() for c in subject) or "*" in subject or ">" in subject):
        raise OptionError(f"option subject: {subject!r} is not a literal subject")
    prefix = _get(o, "msgIdPrefix")
    if prefix is not None and any(c.isspace() for c in prefix):
        raise OptionError("option msgIdPrefix: must not contain whitespace")
    timeout_ms = _int(o, "requestTimeoutMs", DEFAULT_REQUEST_TIMEOUT_MS, 1)
    window = _int(o, "maxInflight", DEFAULT_MAX_INFLIGHT, 1)
    assert timeout_ms is not None and window is not None
    return SinkOptions(
        conn=parse_connect(o),
        subject=subject,
        stream=stream,
        msg_id_column=_get(o, "msgIdColumn"),
        msg_id_prefix=prefix,
        max_inflight=window,
        request_timeout_s=timeout_ms / 1000,
        commit_log=_get(o, "commitLog"),
    )
