"""Stream configuration and stream info models (msgspec), field for field like nats-server.

Two families:

* **Requests** (``*Request``): what a client sends. Every field is optional and defaults to
  Go's zero value; unknown members are rejected (``forbid_unknown_fields``). Decode them with
  :func:`jetlog.api.models.decode_request`, never with msgspec directly: it reproduces Go's
  decoder (``null`` handling, case-insensitive names, exact error texts).
* **Stored/response** structs (:class:`StreamConfig`, :class:`StreamInfo`, ...): fields in the
  order nats-server emits them. Go's "always present" members are *required* fields; Go's
  ``omitempty`` members have zero defaults and are omitted when zero/empty (encode with
  :func:`jetlog.api.models.encode_json`).

Each request struct carries ``go_type``/``go_fields`` (the Go type of every member, as
``reflect.Type.String()`` prints it) from which the exact Go decoder is derived.

Times in responses are RFC 3339 strings (:func:`jetlog.wire.timefmt.format_time`); durations are
integer nanoseconds.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from msgspec import Meta, Struct, field

__all__ = [
    "ClusterInfo",
    "ExternalStream",
    "LostStreamData",
    "PeerInfo",
    "Placement",
    "RePublish",
    "RePublishRequest",
    "StreamAlternate",
    "StreamConfig",
    "StreamConfigRequest",
    "StreamConsumerLimits",
    "StreamConsumerSource",
    "StreamInfo",
    "StreamSource",
    "StreamSourceInfo",
    "StreamState",
    "SubjectTransformConfig",
]

Retention = Literal["limits", "interest", "workqueue"]
Discard = Literal["old", "new"]
Storage = Literal["file", "memory"]
Compression = Literal["none", "s2"]
PersistMode = Literal["default", "async"]

# Go integer ranges: a request outside them is a decode error (the exact text comes from the Go
# decoder; these bounds only keep the msgspec fast path from accepting what Go rejects).
Int64 = Annotated[int, Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
Int32 = Annotated[int, Meta(ge=-(1 << 31), le=(1 << 31) - 1)]
Uint64 = Annotated[int, Meta(ge=0)]  # upper bound (2**64-1) checked by the decoder


class _Req(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base of decoded request structs."""

    go_type: ClassVar[str] = ""
    go_fields: ClassVar[dict[str, str]] = {}


class _Out(Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True):
    """Base of encoded structs: required = always present, defaulted = omitempty."""


# ---------------------------------------------------------------------------------------------
# Nested config structs (shared by requests and stored configs where Go's tags allow it)


class Placement(_Req):
    """``placement``: every member omitempty. ``tags=None`` vs ``[]`` is kept so that an
    explicit ``{"tags":[]}`` keeps an (empty) placement like nats-server does."""

    go_type: ClassVar[str] = "server.Placement"
    go_fields: ClassVar[dict[str, str]] = {"cluster": "string", "tags": "[]string", "preferred": "string"}

    cluster: str = ""
    tags: list[str] | None = None
    preferred: str = ""


class SubjectTransformConfig(Struct, forbid_unknown_fields=True):
    """``{src, dest}``; both always present."""

    go_type: ClassVar[str] = "server.SubjectTransformConfig"
    go_fields: ClassVar[dict[str, str]] = {"src": "string", "dest": "string"}

    src: str = ""
    dest: str = ""


class ExternalStream(Struct, forbid_unknown_fields=True):
    """``external``: ``{api, deliver}``; both always present."""

    go_type: ClassVar[str] = "server.ExternalStream"
    go_fields: ClassVar[dict[str, str]] = {"api": "string", "deliver": "string"}

    api: str = ""
    deliver: str = ""


class StreamConsumerSource(_Req):
    """``consumer`` of a stream source (omitempty members)."""

    go_type: ClassVar[str] = "server.StreamConsumerSource"
    go_fields: ClassVar[dict[str, str]] = {"name": "string", "deliver_subject": "string"}

    name: str = ""
    deliver_subject: str = ""


class StreamSource(_Req):
    """A mirror or one of ``sources`` (decoded and validated for shape; jetlog rejects them)."""

    go_type: ClassVar[str] = "server.StreamSource"
    go_fields: ClassVar[dict[str, str]] = {
        "name": "string",
        "opt_start_seq": "uint64",
        "opt_start_time": "*time.Time",
        "filter_subject": "string",
        "subject_transforms": "[]server.SubjectTransformConfig",
        "external": "*server.ExternalStream",
        "consumer": "*server.StreamConsumerSource",
    }

    name: str = ""
    opt_start_seq: Uint64 = 0
    opt_start_time: str | None = None
    filter_subject: str = ""
    subject_transforms: list[SubjectTransformConfig] = field(default_factory=list)
    external: ExternalStream | None = None
    consumer: StreamConsumerSource | None = None


class StreamConsumerLimits(_Req):
    """``consumer_limits`` (the struct is always present, its members omitempty)."""

    go_type: ClassVar[str] = "server.StreamConsumerLimits"
    go_fields: ClassVar[dict[str, str]] = {"inactive_threshold": "time.Duration", "max_ack_pending": "int"}

    inactive_threshold: Int64 = 0
    max_ack_pending: Int64 = 0


class RePublishRequest(_Req):
    """``republish`` as sent."""

    go_type: ClassVar[str] = "server.RePublish"
    go_fields: ClassVar[dict[str, str]] = {"src": "string", "dest": "string", "headers_only": "bool"}

    src: str = ""
    dest: str = ""
    headers_only: bool = False


class RePublish(_Out, kw_only=True):
    """``republish`` as stored: ``src`` omitempty (normalised to ``>``), ``dest`` always."""

    src: str = ""
    dest: str
    headers_only: bool = False


# ---------------------------------------------------------------------------------------------
# Stream configuration


class StreamConfigRequest(_Req):
    """``STREAM.CREATE`` / ``STREAM.UPDATE`` body (Go ``StreamConfigRequest``). All members
    default to Go's zero value (enum zero values are their defaults)."""

    go_type: ClassVar[str] = "server.StreamConfigRequest"
    go_fields: ClassVar[dict[str, str]] = {
        "name": "string",
        "description": "string",
        "subjects": "[]string",
        "retention": "server.RetentionPolicy",
        "max_consumers": "int",
        "max_msgs": "int64",
        "max_bytes": "int64",
        "max_age": "time.Duration",
        "max_msgs_per_subject": "int64",
        "max_msg_size": "int32",
        "discard": "server.DiscardPolicy",
        "storage": "server.StorageType",
        "num_replicas": "int",
        "no_ack": "bool",
        "duplicate_window": "time.Duration",
        "placement": "*server.Placement",
        "mirror": "*server.StreamSource",
        "sources": "[]*server.StreamSource",
        "compression": "server.StoreCompression",
        "first_seq": "uint64",
        "subject_transform": "*server.SubjectTransformConfig",
        "republish": "*server.RePublish",
        "allow_direct": "bool",
        "mirror_direct": "bool",
        "discard_new_per_subject": "bool",
        "sealed": "bool",
        "deny_delete": "bool",
        "deny_purge": "bool",
        "allow_rollup_hdrs": "bool",
        "consumer_limits": "server.StreamConsumerLimits",
        "allow_msg_ttl": "bool",
        "subject_delete_marker_ttl": "time.Duration",
        "allow_msg_counter": "bool",
        "allow_atomic": "bool",
        "allow_msg_schedules": "bool",
        "persist_mode": "server.PersistModeType",
        "allow_batched": "bool",
        "metadata": "map[string]string",
        "pedantic": "bool",
    }

    name: str = ""
    description: str = ""
    subjects: list[str] = field(default_factory=list)
    retention: Retention = "limits"
    max_consumers: Int64 = 0
    max_msgs: Int64 = 0
    max_bytes: Int64 = 0
    max_age: Int64 = 0
    max_msgs_per_subject: Int64 = 0
    max_msg_size: Int32 = 0
    discard: Discard = "old"
    storage: Storage = "file"
    num_replicas: Int64 = 0
    no_ack: bool = False
    duplicate_window: Int64 = 0
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: list[StreamSource | None] | None = None
    compression: Compression = "none"
    first_seq: Uint64 = 0
    subject_transform: SubjectTransformConfig | None = None
    republish: RePublishRequest | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: StreamConsumerLimits = field(default_factory=StreamConsumerLimits)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: Int64 = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: PersistMode = "default"
    allow_batched: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    pedantic: bool = False


class StreamConfig(_Out, kw_only=True):
    """The effective (normalised) configuration: what is stored and returned, in nats-server's
    key order. Build it with :func:`jetlog.stream.config.normalize_stream_config`."""

    name: str
    description: str = ""
    subjects: list[str] = field(default_factory=list)
    retention: Retention
    max_consumers: int
    max_msgs: int
    max_bytes: int
    max_age: int
    max_msgs_per_subject: int
    max_msg_size: int = 0
    discard: Discard
    storage: Storage
    num_replicas: int
    no_ack: bool = False
    duplicate_window: int = 0
    placement: Placement | None = None
    mirror: StreamSource | None = None
    sources: list[StreamSource] | None = None  # [] kept apart from absent, never encoded
    compression: Compression
    first_seq: int = 0
    subject_transform: SubjectTransformConfig | None = None
    republish: RePublish | None = None
    allow_direct: bool
    mirror_direct: bool
    discard_new_per_subject: bool = False
    sealed: bool
    deny_delete: bool
    deny_purge: bool
    allow_rollup_hdrs: bool
    consumer_limits: StreamConsumerLimits
    allow_msg_ttl: bool
    subject_delete_marker_ttl: int = 0
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: PersistMode = "default"
    allow_batched: bool = False
    metadata: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Stream info / state


class LostStreamData(_Out, kw_only=True):
    """``state.lost``: sequences lost to corruption and their size."""

    msgs: list[int] | None
    bytes: int


class StreamState(_Out, kw_only=True):
    """``state``: the five counters and two times clients index directly, then omitempty
    details (``subjects`` only for a ``subjects_filter``, ``deleted`` for ``deleted_details``)."""

    messages: int
    bytes: int
    first_seq: int
    first_ts: str
    last_seq: int
    last_ts: str
    num_subjects: int = 0
    subjects: dict[str, int] = field(default_factory=dict)
    num_deleted: int = 0
    deleted: list[int] = field(default_factory=list)
    lost: LostStreamData | None = None
    consumer_count: int


class PeerInfo(_Out, kw_only=True):
    """One replica in ``cluster.replicas``."""

    name: str
    current: bool
    offline: bool = False
    active: int
    lag: int = 0
    peer: str
    pending: bool = False


class ClusterInfo(_Out, kw_only=True):
    """``cluster`` (single server: just ``{"leader": <server name>}``)."""

    name: str = ""
    raft_group: str = ""
    leader: str = ""
    leader_since: str | None = None
    system_account: bool = False
    traffic_account: str = ""
    replicas: list[PeerInfo] = field(default_factory=list)


class ApiErrorBody(_Out, kw_only=True):
    """The ``error`` object: ``{code, err_code, description}`` (the last two omitempty)."""

    code: int
    err_code: int = 0
    description: str = ""


class StreamSourceInfo(_Out, kw_only=True):
    """``mirror`` / ``sources[i]`` in stream info."""

    name: str
    external: ExternalStream | None = None
    lag: int
    active: int
    error: ApiErrorBody | None = None
    filter_subject: str = ""
    subject_transforms: list[SubjectTransformConfig] = field(default_factory=list)


class StreamAlternate(_Out, kw_only=True):
    """One entry of ``alternates``."""

    name: str
    domain: str = ""
    cluster: str


class StreamInfo(_Out, kw_only=True):
    """A stream's info (``STREAM.LIST`` items; the same members appear inline in the create /
    update / info responses)."""

    config: StreamConfig
    created: str
    state: StreamState
    domain: str = ""
    cluster: ClusterInfo | None = None
    mirror: StreamSourceInfo | None = None
    sources: list[StreamSourceInfo] = field(default_factory=list)
    alternates: list[StreamAlternate] = field(default_factory=list)
    ts: str
