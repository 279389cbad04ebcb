"""Request and response models of the stream endpoints, the account info and the PubAck.

Responses are tagged msgspec structs: ``type`` (``io.nats.jetstream.api.v1.<x>``) is always
emitted first, then ``error`` (omitempty) and the members in nats-server's order. Members that
Go always emits are required fields; ``omitempty`` members default to their zero value. The
StreamInfo members that a create/update/info response carries inline are optional here because
Go omits them (nil ``*StreamInfo``) in error responses; success responses must set them.

Error responses are built with :func:`jetlog.api.models.error_response`, which fills each
class's ``error_fields`` (the non-omitempty members Go still writes, e.g. ``"purged":0``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from msgspec import Struct, field

from jetlog.api.models_stream import (
    ApiErrorBody,
    ClusterInfo,
    Int64,
    StreamAlternate,
    StreamConfig,
    StreamInfo,
    StreamSourceInfo,
    StreamState,
    Uint64,
    _Req,
)

__all__ = [
    "AccountInfoResponse",
    "AccountLimits",
    "ApiStats",
    "JetStreamTier",
    "MsgDeleteRequest",
    "MsgDeleteResponse",
    "MsgGetRequest",
    "MsgGetResponse",
    "PubAck",
    "StoredMsg",
    "StreamCreateResponse",
    "StreamDeleteResponse",
    "StreamInfoRequest",
    "StreamInfoResponse",
    "StreamListRequest",
    "StreamListResponse",
    "StreamNamesRequest",
    "StreamNamesResponse",
    "StreamPurgeRequest",
    "StreamPurgeResponse",
    "StreamUpdateResponse",
]

_P = "io.nats.jetstream.api.v1."


# ---------------------------------------------------------------------------------------------
# Requests


class StreamInfoRequest(_Req):
    """``STREAM.INFO`` optional body."""

    go_type: ClassVar[str] = "server.JSApiStreamInfoRequest"
    go_fields: ClassVar[dict[str, str]] = {
        "offset": "int",
        "deleted_details": "bool",
        "subjects_filter": "string",
    }

    offset: Int64 = 0
    deleted_details: bool = False
    subjects_filter: str = ""


class StreamNamesRequest(_Req):
    """``STREAM.NAMES`` optional body."""

    go_type: ClassVar[str] = "server.JSApiStreamNamesRequest"
    go_fields: ClassVar[dict[str, str]] = {"offset": "int", "subject": "string"}

    offset: Int64 = 0
    subject: str = ""


class StreamListRequest(_Req):
    """``STREAM.LIST`` optional body (same members as names; Go names the type differently)."""

    go_type: ClassVar[str] = "server.JSApiStreamListRequest"
    go_fields: ClassVar[dict[str, str]] = {"offset": "int", "subject": "string"}

    offset: Int64 = 0
    subject: str = ""


class StreamPurgeRequest(_Req):
    """``STREAM.PURGE`` optional body: ``seq`` (purge below), ``filter``, ``keep``."""

    go_type: ClassVar[str] = "server.JSApiStreamPurgeRequest"
    go_fields: ClassVar[dict[str, str]] = {"seq": "uint64", "filter": "string", "keep": "uint64"}

    seq: Uint64 = 0
    filter: str = ""
    keep: Uint64 = 0


class MsgGetRequest(_Req):
    """``STREAM.MSG.GET`` / ``DIRECT.GET`` body. Hot path: members are ``None`` when unset
    (JSON ``null`` is common from clients and means unset), so read them as ``req.seq or 0``.
    Times stay RFC 3339 strings (already validated); :meth:`start_ns` / :meth:`up_to_ns`."""

    go_type: ClassVar[str] = "server.JSApiMsgGetRequest"
    go_fields: ClassVar[dict[str, str]] = {
        "seq": "uint64",
        "last_by_subj": "string",
        "next_by_subj": "string",
        "batch": "int",
        "max_bytes": "int",
        "start_time": "*time.Time",
        "multi_last": "[]string",
        "up_to_seq": "uint64",
        "up_to_time": "*time.Time",
        "no_hdr": "bool",
    }

    seq: Uint64 | None = None
    last_by_subj: str | None = None
    next_by_subj: str | None = None
    batch: Int64 | None = None
    max_bytes: Int64 | None = None
    start_time: str | None = None
    multi_last: list[str] | None = None
    up_to_seq: Uint64 | None = None
    up_to_time: str | None = None
    no_hdr: bool | None = None

    def start_ns(self) -> int | None:
        """``start_time`` as Unix ns (``None`` if unset)."""
        from jetlog.wire.timefmt import parse_time

        return None if self.start_time is None else parse_time(self.start_time)

    def up_to_ns(self) -> int | None:
        """``up_to_time`` as Unix ns (``None`` if unset)."""
        from jetlog.wire.timefmt import parse_time

        return None if self.up_to_time is None else parse_time(self.up_to_time)


class MsgDeleteRequest(_Req):
    """``STREAM.MSG.DELETE`` body."""

    go_type: ClassVar[str] = "server.JSApiMsgDeleteRequest"
    go_fields: ClassVar[dict[str, str]] = {"seq": "uint64", "no_erase": "bool"}

    seq: Uint64 = 0
    no_erase: bool = False


# ---------------------------------------------------------------------------------------------
# Responses


class _Resp(Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True, tag_field="type"):
    """Base of API responses (``type`` first, then ``error``)."""

    error_fields: ClassVar[dict[str, Any]] = {}

    error: ApiErrorBody | None = None


class _StreamInfoResp(_Resp, kw_only=True):
    """StreamInfo members inline, after ``type``/``error`` (create and update replies)."""

    config: StreamConfig | None = None
    created: str | None = None
    state: StreamState | None = None
    domain: str = ""
    cluster: ClusterInfo | None = None
    mirror: StreamSourceInfo | None = None
    sources: list[StreamSourceInfo] = field(default_factory=list)
    alternates: list[StreamAlternate] = field(default_factory=list)
    ts: str | None = None


class StreamCreateResponse(_StreamInfoResp, kw_only=True, tag=_P + "stream_create_response"):
    """``STREAM.CREATE`` reply: StreamInfo members inline, then ``did_create``."""

    did_create: bool = False


class StreamUpdateResponse(_StreamInfoResp, kw_only=True, tag=_P + "stream_update_response"):
    """``STREAM.UPDATE`` reply: StreamInfo members inline."""


class StreamInfoResponse(_Resp, kw_only=True, tag=_P + "stream_info_response"):
    """``STREAM.INFO`` reply: paging members (always), then StreamInfo members inline."""

    error_fields: ClassVar[dict[str, Any]] = {"total": 0, "offset": 0, "limit": 0}

    total: int
    offset: int
    limit: int
    config: StreamConfig | None = None
    created: str | None = None
    state: StreamState | None = None
    domain: str = ""
    cluster: ClusterInfo | None = None
    mirror: StreamSourceInfo | None = None
    sources: list[StreamSourceInfo] = field(default_factory=list)
    alternates: list[StreamAlternate] = field(default_factory=list)
    ts: str | None = None


class StreamDeleteResponse(_Resp, kw_only=True, tag=_P + "stream_delete_response"):
    """``STREAM.DELETE`` reply."""

    success: bool = False


class StreamPurgeResponse(_Resp, kw_only=True, tag=_P + "stream_purge_response"):
    """``STREAM.PURGE`` reply; ``purged`` is always present."""

    error_fields: ClassVar[dict[str, Any]] = {"purged": 0}

    success: bool = False
    purged: int


class StreamNamesResponse(_Resp, kw_only=True, tag=_P + "stream_names_response"):
    """``STREAM.NAMES`` reply; ``streams`` is ``null`` when there is no match."""

    error_fields: ClassVar[dict[str, Any]] = {"total": 0, "offset": 0, "limit": 0, "streams": None}

    total: int
    offset: int
    limit: int
    streams: list[str] | None


class StreamListResponse(_Resp, kw_only=True, tag=_P + "stream_list_response"):
    """``STREAM.LIST`` reply; ``streams`` is ``[]`` when empty (also in errors)."""

    error_fields: ClassVar[dict[str, Any]] = {"total": 0, "offset": 0, "limit": 0, "streams": []}

    total: int
    offset: int
    limit: int
    streams: list[StreamInfo]
    missing: list[str] = field(default_factory=list)
    offline: dict[str, str] = field(default_factory=dict)


class StoredMsg(Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True):
    """``message`` of a MSG.GET reply: ``hdrs``/``data`` base64, omitted when empty."""

    subject: str
    seq: int
    hdrs: bytes = b""
    data: bytes = b""
    time: str


class MsgGetResponse(_Resp, kw_only=True, tag=_P + "stream_msg_get_response"):
    """``STREAM.MSG.GET`` reply."""

    message: StoredMsg | None = None


class MsgDeleteResponse(_Resp, kw_only=True, tag=_P + "stream_msg_delete_response"):
    """``STREAM.MSG.DELETE`` reply."""

    success: bool = False


class AccountLimits(Struct, kw_only=True, forbid_unknown_fields=True):
    """``limits``: all eight members always present (``-1`` = unlimited)."""

    max_memory: int = -1
    max_storage: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    memory_max_stream_bytes: int = -1
    storage_max_stream_bytes: int = -1
    max_bytes_required: bool = False


class ApiStats(Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True):
    """``api``: ``level``, ``total``, ``errors`` always; ``inflight`` omitempty."""

    level: int
    total: int
    errors: int
    inflight: int = 0


class JetStreamTier(Struct, kw_only=True, forbid_unknown_fields=True):
    """One entry of ``tiers`` (all members always present)."""

    memory: int
    storage: int
    reserved_memory: int
    reserved_storage: int
    streams: int
    consumers: int
    limits: AccountLimits


class AccountInfoResponse(_Resp, kw_only=True, tag=_P + "account_info_response"):
    """``$JS.API.INFO`` reply. The usage members are absent in error replies, so they are
    optional here; a success reply sets all of them."""

    memory: int | None = None
    storage: int | None = None
    reserved_memory: int | None = None
    reserved_storage: int | None = None
    streams: int | None = None
    consumers: int | None = None
    limits: AccountLimits | None = None
    domain: str = ""
    api: ApiStats | None = None
    tiers: dict[str, JetStreamTier] = field(default_factory=dict)


class PubAck(Struct, omit_defaults=True, kw_only=True, forbid_unknown_fields=True):
    """A PubAck as decoded (encode with :func:`jetlog.api.models.encode_puback`, which writes the
    server's exact bytes). ``error`` is set for failures (then ``seq`` is 0)."""

    error: ApiErrorBody | None = None
    stream: str = ""
    seq: int = 0
    domain: str = ""
    duplicate: bool = False
    val: str = ""
    batch: str = ""
    count: int = 0
