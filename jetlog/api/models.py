"""JetStream API JSON: decoding requests like nats-server, encoding responses byte-for-byte.

Decoding (see :mod:`jetlog.api.models_gojson` / :mod:`jetlog.api.models_godecode` for the Go
decoder it reproduces)::

    req = decode_request(StreamConfigRequest, body)      # raises ApiError 10025 with Go's text
    req = decode_optional_request(StreamInfoRequest, body)  # None unless body starts with { or [
    check_empty_request(body)                             # STREAM.DELETE etc. (10038)
    req = decode_msg_get(body)                            # STREAM.MSG.GET (10003 / 10025)
    req = decode_direct_get(body)                         # DIRECT.GET: None = "408 Malformed"

Per endpoint (nats-server's body classes, spec §1.4):

* must be empty (``check_empty_request``): STREAM.DELETE, CONSUMER.INFO, CONSUMER.DELETE;
* optional JSON (``decode_optional_request``): STREAM.NAMES/LIST/INFO/PURGE (garbage = no body);
* required JSON: MSG.GET/MSG.DELETE (``is_empty_request`` ⇒ 10003, then ``decode_request``);
  STREAM.CREATE/UPDATE (``decode_request``; an empty body decodes to an empty config);
* ``$JS.API.INFO`` ignores its body.

Encoding::

    encode_json(StreamCreateResponse(config=..., created=..., state=..., ts=..., did_create=True))
    encode_error(StreamInfoResponse, E.STREAM_NOT_FOUND())
    encode_puback("ORDERS", 5) == b'{"stream":"ORDERS","seq":5}'

``encode_json`` writes what Go's ``json.Marshal`` writes: key order of the struct, map keys
sorted, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c`` etc.
"""

from __future__ import annotations

import functools
import re
from typing import Any, TypeVar

import msgspec

from jetlog.api import models_api as _api
from jetlog.api import models_stream as _st
from jetlog.api.models_api import *  # noqa: F403
from jetlog.api.models_api import MsgGetRequest
from jetlog.api.models_godecode import GoType, decode_go, struct_type
from jetlog.api.models_gojson import (
    GoJSONError,
    Node,
    go_quote,
    is_empty_request,
    is_json_object_or_array,
)
from jetlog.api.models_stream import *  # noqa: F403
from jetlog.api.models_stream import ApiErrorBody, StreamConfig
from jetlog.errors import ApiError, E
from jetlog.wire.timefmt import parse_time

__all__ = [
    "API_LEVEL",
    "ApiErrorBody",
    "DEFAULT_SERVER_VERSION",
    "check_empty_request",
    "decode_direct_get",
    "decode_msg_get",
    "decode_optional_request",
    "decode_request",
    "decode_stored_config",
    "decode_stream_config",
    "direct_get_problem",
    "empty_stream_config",
    "encode_error",
    "encode_json",
    "encode_puback",
    "encode_puback_error",
    "encode_stored_config",
    "error_response",
    "go_type_of",
    "is_empty_request",
    "is_json_object_or_array",
    "stream_config_to_builtins",
    "time_ns",
    "with_dynamic_metadata",
    *_api.__all__,
    *_st.__all__,
]

#: JetStream API level nats-server 2.15 reports (``api.level``, ``_nats.level``).
API_LEVEL = 5
#: Version reported in ``_nats.ver`` when the caller does not pass the upstream server's.
DEFAULT_SERVER_VERSION = "2.15.1"

T = TypeVar("T", bound=msgspec.Struct)


# ---------------------------------------------------------------------------------------------
# Encoding

_encoder = msgspec.json.Encoder(order="deterministic")
_ordered_encoder = msgspec.json.Encoder()


def encode_json(obj: Any) -> bytes:
    """Encode like Go's ``json.Marshal`` (struct order, sorted maps, HTML/JS-safe escapes)."""
    return _go_escape(_encoder.encode(obj))


def encode_json_ordered(obj: Any) -> bytes:
    """Like :func:`encode_json` but dicts keep their insertion order: for responses built as
    dicts in nats-server's key order (maps inside them must already be sorted)."""
    return _go_escape(_ordered_encoder.encode(obj))


def _go_escape(out: bytes) -> bytes:
    if b"<" in out:
        out = out.replace(b"<", b"\\u003c")
    if b">" in out:
        out = out.replace(b">", b"\\u003e")
    if b"&" in out:
        out = out.replace(b"&", b"\\u0026")
    if b'"sources":[],"compression"' in out:
        # StreamConfig.sources: an explicit [] is remembered (nats-server's DeepEqual on an
        # idempotent create tells it from absent) but, omitempty in Go, never written.
        out = out.replace(b',"sources":[],"compression"', b',"compression"')
    if b'"tags":[]' in out:
        # Placement.tags is omitempty in Go but jetlog keeps an explicit [] (it keeps the
        # placement itself alive, like nats-server); never write the empty list.
        out = out.replace(b',"tags":[]}', b"}").replace(b'{"tags":[]}', b"{}")
    if b"\xe2\x80" in out:
        out = out.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
    return out


def error_response(cls: type[T], err: ApiError) -> T:
    """The response object nats-server sends for ``err`` on the endpoint of ``cls``: ``type``,
    ``error`` and the endpoint's always-present members at their zero values."""
    body = ApiErrorBody(code=err.code, err_code=err.err_code, description=err.description)
    fields = {k: (list(v) if isinstance(v, list) else v) for k, v in getattr(cls, "error_fields", {}).items()}
    return cls(error=body, **fields)


def encode_error(cls: type[msgspec.Struct], err: ApiError) -> bytes:
    """``encode_json(error_response(cls, err))``."""
    return encode_json(error_response(cls, err))


@functools.lru_cache(maxsize=4096)
def _puback_prefix(stream: str, domain: str | None) -> bytes:
    # nats-server builds the template with fmt's %q (strconv.Quote), not JSON escaping.
    if domain:
        return f'{{"stream":{go_quote(stream)},"domain":{go_quote(domain)},"seq":'.encode()
    return f'{{"stream":{go_quote(stream)},"seq":'.encode()


def encode_puback(stream: str, seq: int, duplicate: bool = False, domain: str | None = None) -> bytes:
    """A successful PubAck exactly as nats-server writes it (``"duplicate": true`` with the
    server's space). Hot path: the per-stream prefix is cached."""
    if duplicate:
        return b'%s%d,"duplicate": true}' % (_puback_prefix(stream, domain), seq)
    return b"%s%d}" % (_puback_prefix(stream, domain), seq)


def encode_puback_error(stream: str, err: ApiError, domain: str | None = None) -> bytes:
    """A failed PubAck: ``{"error":{...},"stream":"X","seq":0}`` (``json.Marshal`` of
    ``JSPubAckResponse``; no ``type``). ``domain`` is accepted for symmetry with
    :func:`encode_puback` but nats-server never puts it in an error ack."""
    del domain
    return b'{"error":%s,"stream":%s,"seq":0}' % (
        encode_json(ApiErrorBody(code=err.code, err_code=err.err_code, description=err.description)),
        encode_json(stream),
    )


def with_dynamic_metadata(
    cfg: StreamConfig, version: str = DEFAULT_SERVER_VERSION, level: int = API_LEVEL
) -> StreamConfig:
    """A copy of ``cfg`` with ``_nats.ver`` and ``_nats.level`` added to its metadata, as in
    CREATE / UPDATE / INFO responses (not LIST). ``version`` should be the upstream server's."""
    md = dict(cfg.metadata)
    md["_nats.ver"] = version
    md["_nats.level"] = str(level)
    return msgspec.structs.replace(cfg, metadata=md)


def stream_config_to_builtins(cfg: StreamConfig, version: str | None = None) -> dict[str, Any]:
    """``cfg`` as plain data in nats-server's key order (metadata sorted), for responses built
    as dicts. With ``version``, ``_nats.ver``/``_nats.level`` are added (CREATE/UPDATE/INFO)."""
    if version is not None:
        cfg = with_dynamic_metadata(cfg, version)
    out: dict[str, Any] = msgspec.to_builtins(cfg)
    if out.get("sources") == []:
        del out["sources"]
    placement = out.get("placement")
    if placement is not None and placement.get("tags") == []:
        del placement["tags"]
    if "metadata" in out:
        out["metadata"] = dict(sorted(out["metadata"].items()))
    return out


def encode_stored_config(cfg: StreamConfig) -> bytes:
    """The config as persisted (same JSON as in responses, without the dynamic metadata)."""
    return encode_json(cfg)


# Built at import, in the importing thread: msgspec 0.22 builds a Struct type's decoding info on
# its first decode, and two threads doing that first decode at once can crash the process
# (SIGSEGV; the stream directories are read by several threads at start). A ``Decoder`` built
# up front builds that info once, here.
_STORED_CONFIG = msgspec.json.Decoder(StreamConfig)


def decode_stored_config(data: bytes) -> StreamConfig:
    """Load a config written by :func:`encode_stored_config` (thread-safe)."""
    return _STORED_CONFIG.decode(data)


def time_ns(value: str) -> int:
    """An RFC 3339 request time (already validated by the decoder) as Unix ns."""
    return parse_time(value)


# ---------------------------------------------------------------------------------------------
# Go types of the request structs (derived from their ``go_fields``)


def _method_enum(name: str, values: dict[bytes, str], *, lower: bool = False) -> GoType:
    def decode(raw: bytes, node: Node) -> str:
        key = (
            raw.decode("utf-8", "surrogateescape").lower().encode("utf-8", "surrogateescape")
            if lower
            else raw
        )
        got = values.get(key)
        if got is None:
            raise GoJSONError(f"can not unmarshal {go_quote(raw)}")
        return got

    return GoType("method", name, method=decode)


def _compression(raw: bytes, node: Node) -> str:
    # StoreCompression.UnmarshalJSON: json.Unmarshal into a string, then compare.
    if node.kind == '"':
        s = node.value
    elif node.kind == "n":
        s = ""
    else:
        word = {"0": "number", "t": "bool", "f": "bool", "[": "array", "{": "object"}[node.kind]
        raise GoJSONError(f"json: cannot unmarshal {word} into Go value of type string")
    if s in ("none", "s2"):
        return str(s)
    raise GoJSONError("unknown compression algorithm")


_NAMED: dict[str, GoType] = {
    "server.RetentionPolicy": _method_enum(
        "server.RetentionPolicy",
        {b'"limits"': "limits", b'"interest"': "interest", b'"workqueue"': "workqueue"},
    ),
    "server.DiscardPolicy": _method_enum(
        "server.DiscardPolicy", {b'"old"': "old", b'"new"': "new"}, lower=True
    ),
    "server.StorageType": _method_enum("server.StorageType", {b'"memory"': "memory", b'"file"': "file"}),
    "server.PersistModeType": _method_enum(
        "server.PersistModeType", {b'"default"': "default", b'""': "default", b'"async"': "async"}
    ),
    "server.StoreCompression": GoType("method", "server.StoreCompression", method=_compression),
    "string": GoType("string", "string"),
    "bool": GoType("bool", "bool"),
    "int": GoType("int", "int", 64),
    "int64": GoType("int", "int64", 64),
    "int32": GoType("int", "int32", 32),
    "time.Duration": GoType("int", "time.Duration", 64),
    "uint64": GoType("uint", "uint64", 64),
    "time.Time": GoType("time", "time.Time"),
}

_STRUCTS: dict[str, type[msgspec.Struct]] = {
    cls.go_type: cls
    for cls in (
        _st.Placement,
        _st.SubjectTransformConfig,
        _st.ExternalStream,
        _st.StreamConsumerSource,
        _st.StreamSource,
        _st.StreamConsumerLimits,
        _st.RePublishRequest,
    )
}


def _go_type(spec: str) -> GoType:
    if spec.startswith("*"):
        elem = _go_type(spec[1:])
        return GoType("ptr", spec, elem=elem)
    if spec.startswith("[]"):
        return GoType("slice", spec, elem=_go_type(spec[2:]))
    if spec.startswith("map[string]"):
        return GoType("map", spec, elem=_go_type(spec[len("map[string]") :]))
    if spec in _NAMED:
        return _NAMED[spec]
    return go_type_of(_STRUCTS[spec])


@functools.cache
def go_type_of(cls: type[msgspec.Struct]) -> GoType:
    """The Go struct type a request class mirrors (from its ``go_type``/``go_fields``)."""
    fields = {name: _go_type(spec) for name, spec in cls.go_fields.items()}  # type: ignore[attr-defined]
    return struct_type(cls.go_type, fields)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# Decoding


@functools.cache
def _fast_decoder(cls: type[T]) -> msgspec.json.Decoder[T]:
    return msgspec.json.Decoder(cls)


# Request types small and hot enough for the msgspec fast path. Others (StreamConfigRequest)
# always take the exact Go path.
_FAST: set[type[_st._Req]] = {
    _api.MsgGetRequest,
    _api.MsgDeleteRequest,
    _api.StreamPurgeRequest,
    _api.StreamInfoRequest,
    _api.StreamNamesRequest,
    _api.StreamListRequest,
}
_MAX_UINT64 = (1 << 64) - 1
_UINT_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(k for k, v in cls.go_fields.items() if v == "uint64") for cls in _FAST
}
_TIME_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(k for k, v in cls.go_fields.items() if v == "*time.Time") for cls in _FAST
}


_KEYS = re.compile(rb'"([^"]*)"[ \t\r\n]*:')


def _fast_ok(obj: Any, body: bytes) -> bool:
    """Reject fast-path results Go would not produce: ``-0`` or > 2**64-1 in a uint field, bad
    times, repeated members (msgspec keeps the last; Go merges, ignores a later ``null`` and
    reports an error in an earlier one). Bodies here have no backslash, so every ``"…":`` is
    a member name."""
    names = _KEYS.findall(body)
    if len(names) != len(set(names)):
        return False
    cls = type(obj)
    for k in _UINT_FIELDS[cls]:
        v = getattr(obj, k)
        if v is not None and (v > _MAX_UINT64 or (v == 0 and b"-" in body)):
            return False
    for k in _TIME_FIELDS[cls]:
        v = getattr(obj, k)
        if v is not None:
            try:
                parse_time(v)
            except ValueError:
                return False
    return True


def _decode(cls: type[T], body: bytes, strict: bool, stream: bool) -> T:
    if not isinstance(body, bytes):
        body = bytes(body)
    if cls in _FAST and b"\\" not in body:
        # Escapes go to the exact path: Go compares enum bytes raw and replaces bad surrogates.
        try:
            obj = _fast_decoder(cls).decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError):
            # msgspec raises UnicodeDecodeError for invalid UTF-8 in an unknown member's name;
            # the exact path reports what Go reports for it.
            pass
        else:
            if _fast_ok(obj, body):
                return obj
    data = decode_go(body, go_type_of(cls), strict=strict, stream=stream)
    return msgspec.convert(data, cls)


def decode_request(cls: type[T], body: bytes) -> T:
    """Decode a request body exactly as nats-server's ``unmarshalRequest`` (strict, a stream of
    values merged into one struct; empty/whitespace body = zero struct).

    Raises ``ApiError`` ``10025 invalid JSON: <Go's text>``. Small bodies of the hot endpoints
    are decoded by msgspec first, with fallbacks wherever msgspec and Go could differ.
    """
    try:
        return _decode(cls, body, True, True)
    except GoJSONError as e:
        raise E.INVALID_JSON(err=str(e)) from None


def decode_stream_config(body: bytes) -> _st.StreamConfigRequest:
    """``decode_request(StreamConfigRequest, body)``."""
    return decode_request(_st.StreamConfigRequest, body)


def empty_stream_config() -> _st.StreamConfigRequest:
    """The request an empty body decodes to (every member at its zero value)."""
    return _st.StreamConfigRequest()


def decode_optional_request(cls: type[T], body: bytes) -> T | None:
    """Optional-JSON endpoints: ``None`` (no request) unless the first non-whitespace byte is
    ``{`` or ``[``; otherwise :func:`decode_request`."""
    if not is_json_object_or_array(body):
        return None
    return decode_request(cls, body)


def check_empty_request(body: bytes) -> None:
    """Must-be-empty endpoints: raise ``10038`` unless the body is empty, ``{}`` or an object
    with no members (whitespace-only is *not* empty, like nats-server)."""
    if not is_empty_request(body):
        raise E.NOT_EMPTY_REQUEST()


def decode_msg_get(body: bytes) -> MsgGetRequest:
    """``STREAM.MSG.GET`` body: empty ⇒ ``10003``, bad JSON ⇒ ``10025``, ``batch``/``max_bytes``
    or a conflicting combination (spec §6.1) ⇒ ``10003``."""
    if is_empty_request(body):
        raise E.BAD_REQUEST()
    req = decode_request(MsgGetRequest, body)
    seq, last, nxt, start = req.seq or 0, req.last_by_subj or "", req.next_by_subj or "", req.start_time
    if (
        (req.batch or 0) > 0
        or (req.max_bytes or 0) > 0
        or (seq > 0 and last)
        or (seq == 0 and not last and not nxt and start is None)
        or (seq > 0 and start is not None)
        or (start is not None and last)
        or (last and nxt)
    ):
        raise E.BAD_REQUEST()
    return req


def decode_direct_get(body: bytes) -> MsgGetRequest | None:
    """``DIRECT.GET`` JSON body as nats-server reads it (plain ``json.Unmarshal``: unknown
    members ignored, exactly one value). ``None`` means "408 Malformed Request"; the caller
    handles the empty body (408 Empty Request) first, then :func:`direct_get_problem`."""
    try:
        return _decode(MsgGetRequest, body, False, False)
    except GoJSONError:
        return None


def direct_get_problem(req: MsgGetRequest, key: str | None = None) -> str | None:
    """The 408 status description a valid-JSON direct get still earns, or ``None``.

    ``key`` is the subject of ``DIRECT.GET.<stream>.<subject>`` (then only ``no_hdr`` and
    ``max_bytes`` may be set). Otherwise ``"Empty Request"`` when nothing selects a message and
    ``"Bad Request"`` for conflicting members (spec §6.4).
    """
    seq, last, nxt, start = req.seq or 0, req.last_by_subj or "", req.next_by_subj or "", req.start_time
    multi, batch, up_seq, up_time = req.multi_last or [], req.batch or 0, req.up_to_seq or 0, req.up_to_time
    if key is not None:
        if last or nxt or multi or seq or batch or start is not None or up_seq or up_time is not None:
            return "Bad Request"
        return None
    if seq == 0 and not last and not nxt and not multi and start is None:
        return "Empty Request"
    if (
        (seq > 0 and last)
        or (seq > 0 and start is not None)
        or (start is not None and last)
        or (last and nxt)
        or (last and batch > 0)
        or (last and multi)
        or (nxt and multi)
        or (up_seq > 0 and up_time is not None)
    ):
        return "Bad Request"
    return None
