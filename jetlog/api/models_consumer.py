"""Consumer models (msgspec), field for field like nats-server 2.15.1, and their Go decoding.

* :class:`CreateConsumerRequest` / :class:`ConsumerConfigRequest` — the body of
  ``CONSUMER.CREATE`` / ``CONSUMER.DURABLE.CREATE``. Decode with :func:`decode_create_request`:
  it reproduces Go's decoder (strict unknown members, ``null`` = unset, case-insensitive names,
  enum ``UnmarshalJSON`` texts such as ``unknown consumer action: "upsert"``) and raises
  ``10025 invalid JSON: ...``. Slices stay ``None`` when absent and ``[]`` when sent empty
  (nats-server's ``reflect.DeepEqual`` on ``action: "create"`` tells them apart).
* :class:`ConsumerConfig` — the effective config (build it with
  :func:`jetlog.consumer.config.plan_consumer_create`): nats-server's key order, ``omitempty``
  members default to their zero value. ``opt_start_time``/``pause_until`` are RFC 3339 strings
  exactly as Go re-encodes them (offset kept, ``+00:00`` → ``Z``).
* :class:`ConsumerInfo` and the responses (``type`` first, then ``error``, then the members).
  Encode with :func:`jetlog.api.models.encode_json`; errors with
  :func:`jetlog.api.models.encode_error` (each class's ``error_fields`` are the members Go still
  writes, e.g. ``"consumers":[]``). CREATE/INFO/RESET carry the dynamic ``_nats.ver`` /
  ``_nats.level`` metadata (:func:`with_dynamic_consumer_metadata`); LIST items do not.

Example::

    info = ConsumerInfo(stream_name="S", name="c", created=created, config=cfg, ...)
    encode_json(info_response(ConsumerCreateResponse, info, version="2.15.1"))
    encode_error(ConsumerCreateResponse, E.STREAM_NOT_FOUND())
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Literal, TypeVar

import msgspec
from msgspec import Struct, field

from jetlog.api.models_godecode import GoType, decode_go, struct_type
from jetlog.api.models_gojson import GoJSONError, Node, go_quote
from jetlog.api.models_stream import ApiErrorBody, ClusterInfo
from jetlog.errors import E
from jetlog.wire.timefmt import ZERO_TIME, parse_time

__all__ = [
    "ConsumerConfig",
    "ConsumerConfigRequest",
    "ConsumerCreateResponse",
    "ConsumerDeleteResponse",
    "ConsumerInfo",
    "ConsumerInfoResponse",
    "ConsumerListResponse",
    "ConsumerNamesResponse",
    "ConsumerPauseRequest",
    "ConsumerPauseResponse",
    "ConsumerResetRequest",
    "ConsumerResetResponse",
    "ConsumerUnpinRequest",
    "ConsumerUnpinResponse",
    "ConsumersRequest",
    "CreateConsumerRequest",
    "PriorityGroupState",
    "SequenceInfo",
    "decode_consumer_request",
    "decode_create_request",
    "go_time",
    "info_response",
    "time_ns",
    "with_dynamic_consumer_metadata",
]

DeliverPolicy = Literal["all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"]
AckPolicy = Literal["none", "all", "explicit", "flow_control"]
ReplayPolicy = Literal["instant", "original"]
PriorityPolicy = Literal["none", "overflow", "pinned_client", "prioritized"]
Action = Literal["", "create", "update"]

_P = "io.nats.jetstream.api.v1."
T = TypeVar("T", bound=Struct)


# ---------------------------------------------------------------------------------------------
# Requests


class ConsumerConfigRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """``config`` as sent (Go ``ConsumerConfig``): every member at Go's zero value unless set.
    ``backoff``/``filter_subjects``/``priority_groups``/``metadata`` are ``None`` when absent."""

    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: DeliverPolicy = "all"
    opt_start_seq: int = 0
    opt_start_time: str | None = None
    ack_policy: AckPolicy = "none"
    ack_wait: int = 0
    max_deliver: int = 0
    backoff: list[int] | None = None
    filter_subject: str = ""
    filter_subjects: list[str] | None = None
    replay_policy: ReplayPolicy = "instant"
    rate_limit_bps: int = 0
    sample_freq: str = ""
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int = 0
    mem_storage: bool = False
    direct: bool = False
    sourcing: bool = False
    metadata: dict[str, str] | None = None
    pause_until: str | None = None
    priority_groups: list[str] | None = None
    priority_policy: PriorityPolicy = "none"
    priority_timeout: int = 0


class CreateConsumerRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """Body of ``CONSUMER.CREATE.*`` (Go ``CreateConsumerRequest``)."""

    stream_name: str = ""
    config: ConsumerConfigRequest = field(default_factory=ConsumerConfigRequest)
    action: Action = ""
    pedantic: bool = False


class ConsumersRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """``CONSUMER.NAMES`` / ``CONSUMER.LIST`` optional body (``{"offset":N}``)."""

    offset: int = 0


class ConsumerPauseRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """``CONSUMER.PAUSE`` optional body; ``pause_until`` ``None`` = Go's zero time (resume)."""

    pause_until: str | None = None


class ConsumerUnpinRequest(Struct, kw_only=True):
    """``CONSUMER.UNPIN`` body (decoded with ``json.Unmarshal``: unknown members ignored)."""

    group: str = ""


class ConsumerResetRequest(Struct, kw_only=True):
    """``CONSUMER.RESET`` body (``json.Unmarshal``; empty body = back to the ack floor)."""

    seq: int = 0


# ---------------------------------------------------------------------------------------------
# Go types for the exact decoder

_STR = GoType("string", "string")
_BOOL = GoType("bool", "bool")
_INT = GoType("int", "int", 64)
_INT64 = GoType("int", "int64", 64)
_DUR = GoType("int", "time.Duration", 64)
_U64 = GoType("uint", "uint64", 64)
_TIME = GoType("time", "time.Time")
_TIMEP = GoType("ptr", "*time.Time", elem=_TIME)


def _enum(name: str, values: tuple[str, ...], err: str) -> GoType:
    table = {f'"{v}"'.encode(): v for v in values}
    if name == "server.DeliverPolicy":
        table[b'"undefined"'] = "all"

    def decode(raw: bytes, node: Node) -> str:
        got = table.get(raw)
        if got is None:
            if err:  # fmt.Errorf("... %v", string(data))
                raise GoJSONError(err + raw.decode("utf-8", "replace"))
            raise GoJSONError(f"can not unmarshal {go_quote(raw)}")
        return got

    return GoType("method", name, method=decode)


_CONFIG_FIELDS: dict[str, GoType] = {
    "durable_name": _STR,
    "name": _STR,
    "description": _STR,
    "deliver_policy": _enum(
        "server.DeliverPolicy",
        ("all", "last", "new", "by_start_sequence", "by_start_time", "last_per_subject"),
        "",
    ),
    "opt_start_seq": _U64,
    "opt_start_time": _TIMEP,
    "ack_policy": _enum("server.AckPolicy", ("none", "all", "explicit", "flow_control"), ""),
    "ack_wait": _DUR,
    "max_deliver": _INT,
    "backoff": GoType("slice", "[]time.Duration", elem=_DUR),
    "filter_subject": _STR,
    "filter_subjects": GoType("slice", "[]string", elem=_STR),
    "replay_policy": _enum("server.ReplayPolicy", ("instant", "original"), ""),
    "rate_limit_bps": _U64,
    "sample_freq": _STR,
    "max_waiting": _INT,
    "max_ack_pending": _INT,
    "flow_control": _BOOL,
    "headers_only": _BOOL,
    "max_batch": _INT,
    "max_expires": _DUR,
    "max_bytes": _INT,
    "deliver_subject": _STR,
    "deliver_group": _STR,
    "idle_heartbeat": _DUR,
    "inactive_threshold": _DUR,
    "num_replicas": _INT,
    "mem_storage": _BOOL,
    "direct": _BOOL,
    "sourcing": _BOOL,
    "metadata": GoType("map", "map[string]string", elem=_STR),
    "pause_until": _TIMEP,
    "priority_groups": GoType("slice", "[]string", elem=_STR),
    "priority_policy": _enum(
        "server.PriorityPolicy",
        ("none", "overflow", "pinned_client", "prioritized"),
        "unknown priority policy: ",
    ),
    "priority_timeout": _DUR,
}

_GO_TYPES: dict[type[Struct], GoType] = {
    CreateConsumerRequest: struct_type(
        "server.CreateConsumerRequest",
        {
            "stream_name": _STR,
            "config": struct_type("server.ConsumerConfig", _CONFIG_FIELDS),
            "action": _enum("server.ConsumerAction", ("create", "update", ""), "unknown consumer action: "),
            "pedantic": _BOOL,
        },
    ),
    ConsumerConfigRequest: struct_type("server.ConsumerConfig", _CONFIG_FIELDS),
    ConsumersRequest: struct_type("server.JSApiConsumersRequest", {"offset": _INT}),
    ConsumerPauseRequest: struct_type("server.JSApiConsumerPauseRequest", {"pause_until": _TIME}),
    ConsumerUnpinRequest: struct_type("server.JSApiConsumerUnpinRequest", {"group": _STR}),
    ConsumerResetRequest: struct_type("server.JSApiConsumerResetRequest", {"seq": _U64}),
}

#: Go type of ``JSApiConsumerGetNextRequest`` (the pull request; its embedded ``PriorityGroup``
#: members are promoted, and Go names the root struct "" in its errors).
PULL_REQUEST_TYPE = struct_type(
    "",
    {
        "expires": _DUR,
        "batch": _INT,
        "max_bytes": _INT,
        "no_wait": _BOOL,
        "idle_heartbeat": _DUR,
        "group": _STR,
        "min_pending": _INT64,
        "min_ack_pending": _INT64,
        "id": _STR,
        "priority": _INT,
    },
)


def decode_consumer_request(cls: type[T], body: bytes, *, strict: bool = True, stream: bool = True) -> T:
    """Decode ``body`` into one of this module's request classes exactly like nats-server.

    ``strict``/``stream`` = ``unmarshalRequest`` (strict, a stream of merged values, empty
    body = zero struct). ``strict=False, stream=False`` = ``json.Unmarshal`` (UNPIN, RESET).
    Raises ``ApiError`` ``10025 invalid JSON: <Go's text>``.
    """
    try:
        data = decode_go(bytes(body), _GO_TYPES[cls], strict=strict, stream=stream)
    except GoJSONError as e:
        raise E.INVALID_JSON(err=str(e)) from None
    return msgspec.convert(data, cls)


def decode_create_request(body: bytes) -> CreateConsumerRequest:
    """The body of a consumer create (``unmarshalRequest``); raises ``10025``."""
    return decode_consumer_request(CreateConsumerRequest, body)


# ---------------------------------------------------------------------------------------------
# Go time values (opt_start_time, pause_until): kept as the RFC 3339 text Go re-encodes them


def _offset(s: str) -> int:
    if s[-1] == "Z":
        return 0
    off = int(s[-5:-3]) * 3600 + int(s[-2:]) * 60
    return -off if s[-6] == "-" else off


def time_ns(s: str) -> int:
    """Unix ns of a (decoder-validated) RFC 3339 time; Go's zero time is ``-62135596800e9``."""
    ns = parse_time(s)
    if ns == 0 and int(s[:4]) < 2:  # parse_time maps Go's zero time to 0 (the epoch is 1969/70)
        return -62_135_596_800 * 1_000_000_000
    return ns


def _civil(days: int) -> tuple[int, int, int]:
    days += 719468
    era = days // 146097
    doe = days - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (m <= 2), m, d


def go_time(s: str, *, utc: bool = False) -> str:
    """``s`` as Go writes the parsed time back (RFC3339Nano, offset kept, ``+00:00`` → ``Z``);
    ``utc`` converts to UTC first (``.UTC()``)."""
    ns = time_ns(s)
    off = 0 if utc else _offset(s)
    sec, frac = divmod(ns + off * 1_000_000_000, 1_000_000_000)
    days, rem = divmod(sec, 86400)
    y, mo, d = _civil(days)
    out = f"{y:04d}-{mo:02d}-{d:02d}T{rem // 3600:02d}:{rem % 3600 // 60:02d}:{rem % 60:02d}"
    if frac:
        out += "." + f"{frac:09d}".rstrip("0")
    if off == 0:
        return out + "Z"
    a = abs(off)
    return f"{out}{'-' if off < 0 else '+'}{a // 3600:02d}:{a % 3600 // 60:02d}"


# ---------------------------------------------------------------------------------------------
# Effective config and info


class _Out(Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True):
    """Base of encoded structs: required = always present, defaulted = omitempty."""


class ConsumerConfig(_Out, kw_only=True, dict=True):
    """The effective consumer configuration, in nats-server's key order.

    ``deliver_policy``, ``ack_policy``, ``replay_policy`` and ``num_replicas`` are always
    written; everything else is ``omitempty`` (``priority_policy`` ``"none"`` included).
    Instances may carry ``_explicit_empty`` (a frozenset of slice member names that were sent
    as ``[]``; not encoded, see :func:`jetlog.consumer.config.same_consumer_config`).
    """

    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: DeliverPolicy
    opt_start_seq: int = 0
    opt_start_time: str | None = None
    ack_policy: AckPolicy
    ack_wait: int = 0
    max_deliver: int = 0
    backoff: list[int] = field(default_factory=list)
    filter_subject: str = ""
    filter_subjects: list[str] = field(default_factory=list)
    replay_policy: ReplayPolicy
    rate_limit_bps: int = 0
    sample_freq: str = ""
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int
    mem_storage: bool = False
    direct: bool = False
    sourcing: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    pause_until: str | None = None
    priority_groups: list[str] = field(default_factory=list)
    priority_policy: PriorityPolicy = "none"
    priority_timeout: int = 0

    @property
    def durable(self) -> bool:
        """Durable ⇔ ``durable_name`` set."""
        return bool(self.durable_name)

    @property
    def is_push(self) -> bool:
        """Push ⇔ ``deliver_subject`` set."""
        return bool(self.deliver_subject)

    @property
    def filters(self) -> list[str]:
        """Go's ``gatherSubjectFilters``: ``filter_subjects`` plus ``filter_subject``."""
        return [*self.filter_subjects, self.filter_subject] if self.filter_subject else self.filter_subjects


class SequenceInfo(_Out, kw_only=True):
    """``delivered`` / ``ack_floor``; ``last_active`` only once something happened."""

    consumer_seq: int
    stream_seq: int
    last_active: str | None = None


class PriorityGroupState(_Out, kw_only=True):
    """One ``priority_groups`` entry of ConsumerInfo (``pinned_ts`` always written)."""

    group: str
    pinned_client_id: str = ""
    pinned_ts: str


class ConsumerInfo(_Out, kw_only=True):
    """A consumer's info (``CONSUMER.LIST`` items; inline in the create/info/reset replies)."""

    stream_name: str
    name: str
    created: str
    config: ConsumerConfig | None = None
    delivered: SequenceInfo
    ack_floor: SequenceInfo
    num_ack_pending: int
    num_redelivered: int
    num_waiting: int
    num_pending: int
    cluster: ClusterInfo | None = None
    push_bound: bool = False
    paused: bool = False
    pause_remaining: int = 0
    ts: str
    priority_groups: list[PriorityGroupState] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Responses


class _Resp(Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True, tag_field="type"):
    """Base of API responses (``type`` first, then ``error``)."""

    error_fields: ClassVar[dict[str, Any]] = {}

    error: ApiErrorBody | None = None


class _InfoResp(_Resp, kw_only=True):
    """ConsumerInfo members inline (absent in error replies: Go's nil ``*ConsumerInfo``)."""

    stream_name: str | None = None
    name: str | None = None
    created: str | None = None
    config: ConsumerConfig | None = None
    delivered: SequenceInfo | None = None
    ack_floor: SequenceInfo | None = None
    num_ack_pending: int | None = None
    num_redelivered: int | None = None
    num_waiting: int | None = None
    num_pending: int | None = None
    cluster: ClusterInfo | None = None
    push_bound: bool = False
    paused: bool = False
    pause_remaining: int = 0
    ts: str | None = None
    priority_groups: list[PriorityGroupState] = field(default_factory=list)


class ConsumerCreateResponse(_InfoResp, kw_only=True, tag=_P + "consumer_create_response"):
    """``CONSUMER.CREATE`` / ``DURABLE.CREATE`` reply."""


class ConsumerInfoResponse(_InfoResp, kw_only=True, tag=_P + "consumer_info_response"):
    """``CONSUMER.INFO`` reply."""


class ConsumerResetResponse(_InfoResp, kw_only=True, tag=_P + "consumer_reset_response"):
    """``CONSUMER.RESET`` reply: ConsumerInfo inline, then ``reset_seq`` (always written)."""

    error_fields: ClassVar[dict[str, Any]] = {"reset_seq": 0}

    reset_seq: int


class ConsumerDeleteResponse(_Resp, kw_only=True, tag=_P + "consumer_delete_response"):
    """``CONSUMER.DELETE`` reply."""

    success: bool = False


class ConsumerNamesResponse(_Resp, kw_only=True, tag=_P + "consumer_names_response"):
    """``CONSUMER.NAMES`` reply; ``consumers`` is ``[]`` when empty (errors too)."""

    error_fields: ClassVar[dict[str, Any]] = {"total": 0, "offset": 0, "limit": 0, "consumers": []}

    total: int
    offset: int
    limit: int
    consumers: list[str]


class ConsumerListResponse(_Resp, kw_only=True, tag=_P + "consumer_list_response"):
    """``CONSUMER.LIST`` reply; items carry no dynamic metadata."""

    error_fields: ClassVar[dict[str, Any]] = {"total": 0, "offset": 0, "limit": 0, "consumers": []}

    total: int
    offset: int
    limit: int
    consumers: list[ConsumerInfo]
    missing: list[str] = field(default_factory=list)
    offline: dict[str, str] = field(default_factory=dict)


class ConsumerPauseResponse(_Resp, kw_only=True, tag=_P + "consumer_pause_response"):
    """``CONSUMER.PAUSE`` reply: ``paused`` and ``pause_until`` (UTC) always written."""

    error_fields: ClassVar[dict[str, Any]] = {"paused": False, "pause_until": ZERO_TIME}

    paused: bool
    pause_until: str
    pause_remaining: int = 0


class ConsumerUnpinResponse(_Resp, kw_only=True, tag=_P + "consumer_unpin_response"):
    """``CONSUMER.UNPIN`` reply (just ``type``, or ``type`` + ``error``)."""


_VER_KEY, _SRV_LEVEL_KEY = "_nats.ver", "_nats.level"
_INFO_FIELDS = ConsumerInfo.__struct_fields__


def with_dynamic_consumer_metadata(
    cfg: ConsumerConfig, version: str = "2.15.1", level: int = 5
) -> ConsumerConfig:
    """A copy of ``cfg`` with ``_nats.ver``/``_nats.level`` added (CREATE/INFO/RESET replies)."""
    md = dict(cfg.metadata)
    md[_VER_KEY] = version
    md[_SRV_LEVEL_KEY] = str(level)
    return msgspec.structs.replace(cfg, metadata=md)


@functools.cache
def _info_resp_fields(cls: type[Struct]) -> tuple[str, ...]:
    return tuple(f for f in _INFO_FIELDS if f in cls.__struct_fields__)


def info_response(cls: type[T], info: ConsumerInfo, *, version: str | None = None, **extra: Any) -> T:
    """``cls`` (create/info/reset response) with ``info``'s members inline. With ``version``,
    the config gets the dynamic metadata (what nats-server does for these three replies)."""
    values = {f: getattr(info, f) for f in _info_resp_fields(cls)}
    if version is not None and info.config is not None:
        values["config"] = with_dynamic_consumer_metadata(info.config, version)
    return cls(**values, **extra)
