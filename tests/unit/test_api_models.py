"""API models: Go-exact request decoding, byte-exact response encoding, body classes, PubAcks.

The expected error texts below were measured on nats-server 2.15.1 (Go 1.27 ``encoding/json``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.api import models as M
from jetlog.api.models import (
    AccountInfoResponse,
    AccountLimits,
    ApiStats,
    MsgDeleteRequest,
    MsgGetRequest,
    MsgGetResponse,
    StoredMsg,
    StreamConfigRequest,
    StreamCreateResponse,
    StreamDeleteResponse,
    StreamInfoRequest,
    StreamInfoResponse,
    StreamListRequest,
    StreamListResponse,
    StreamNamesRequest,
    StreamNamesResponse,
    StreamPurgeRequest,
    StreamPurgeResponse,
    StreamState,
    check_empty_request,
    decode_direct_get,
    decode_msg_get,
    decode_optional_request,
    decode_request,
    direct_get_problem,
    encode_error,
    encode_json,
    encode_puback,
    encode_puback_error,
    is_empty_request,
    is_json_object_or_array,
)
from jetlog.api.models_godecode import decode_go
from jetlog.api.models_gojson import GoJSONError, go_quote
from jetlog.errors import ApiError, E

SCR = StreamConfigRequest

# (request type, body, exact description of the 10025 error)
GO_ERRORS: list[tuple[type[msgspec.Struct], bytes, str]] = [
    (SCR, b"{not json", "invalid character 'n' looking for beginning of object key string at offset 2"),
    (SCR, b'{"name":"A",}', "invalid character '}' looking for beginning of object key string at offset 13"),
    (SCR, b'{"name":"A" "x":1}', "invalid character '\"' after object key:value pair at offset 13"),
    (SCR, b'{"name"}', "invalid character '}' after object key at offset 8"),
    (SCR, b'{"name":}', "invalid character '}' looking for beginning of value at offset 9"),
    (SCR, b'{"name":"A"', "unexpected EOF"),
    (SCR, b"{", "unexpected EOF"),
    (
        SCR,
        b'{"name":"A","max_msgs":tru}',
        "invalid character '}' in literal true (expecting 'e') at offset 27",
    ),
    (SCR, b'{"name":"A","max_msgs":01}', "invalid character '1' after object key:value pair at offset 25"),
    (SCR, b'{"name":"A","max_msgs":-}', "invalid character '}' in numeric literal at offset 25"),
    (SCR, b'{"name":"A\\x"}', "invalid escape sequence `\\x` in string at offset 12"),
    (SCR, b'{"name":"B","description":"\\u12"}', 'invalid escape sequence `\\u12"}` in string at offset 33'),
    (SCR, b'{"name":"B","description":"a\nb"}', "invalid character '\\n' in string at offset 29"),
    (SCR, b'{"name":"B","description":"a\x01b"}', "invalid character '\\x01' in string at offset 29"),
    (SCR, b",{}", "invalid character ',' looking for beginning of value at offset 1"),
    (SCR, b"{} ,", "invalid character ',' looking for beginning of value at offset 4"),
    (SCR, b'{"name":"B"}]', "invalid character ']' looking for beginning of value at offset 13"),
    (SCR, b'{"name":"A"} x', "invalid character 'x' looking for beginning of value at offset 14"),
    (SCR, b'{"name":"B","subjects":["a" "b"]}', "invalid character '\"' after array element at offset 29"),
    (SCR, b'{"name":"A","bogus":1}', 'json: unknown field "bogus"'),
    (SCR, b'{"name":"B","x\\"y":1}', 'json: unknown field "x\\"y"'),
    (SCR, b'{"name":"B","a/b~c":1}', 'json: unknown field "a/b~c"'),
    (SCR, b'{"name":"A","template_owner":"x"}', 'json: unknown field "template_owner"'),
    (
        SCR,
        b'{"name":"A","max_msgs":"x"}',
        "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_msgs of type int64",
    ),
    (
        SCR,
        b'{"name":"A","max_msgs":1.5}',
        "json: cannot unmarshal number 1.5 into Go struct field StreamConfigRequest.max_msgs of type int64",
    ),
    (
        SCR,
        b'{"name":"A","max_msg_size":3000000000}',
        "json: cannot unmarshal number 3000000000 into Go struct field StreamConfigRequest.max_msg_size of type int32",
    ),
    (
        SCR,
        b'{"name":"A","first_seq":-1}',
        "json: cannot unmarshal number -1 into Go struct field StreamConfigRequest.first_seq of type uint64",
    ),
    (
        SCR,
        b'{"name":"A","max_age":"1s"}',
        "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_age of type time.Duration",
    ),
    (SCR, b'{"name":"A","retention":null}', 'can not unmarshal "null"'),
    (SCR, b'{"name":"A","retention":"bogus"}', 'can not unmarshal "\\"bogus\\""'),
    (SCR, b'{"name":"A","retention":5}', 'can not unmarshal "5"'),
    (SCR, b'{"name":"B","discard":{"a":1}}', 'can not unmarshal "{\\"a\\":1}"'),
    (SCR, b'{"name":"A","compression":null}', "unknown compression algorithm"),
    (SCR, b'{"name":"A","compression":""}', "unknown compression algorithm"),
    (SCR, b'{"name":"A","compression":5}', "json: cannot unmarshal number into Go value of type string"),
    (
        SCR,
        b'{"name":"A","placement":{"cluster":5}}',
        "json: cannot unmarshal number into Go struct field StreamConfigRequest.placement.cluster of type string",
    ),
    (
        SCR,
        b'{"name":"A","placement":"x"}',
        "json: cannot unmarshal string into Go struct field StreamConfigRequest.placement of type server.Placement",
    ),
    (
        SCR,
        b'{"name":"A","subjects":[1]}',
        "json: cannot unmarshal number into StreamConfigRequest.subjects.0 of type string",
    ),
    (
        SCR,
        b'{"name":"B","metadata":{"a/b":1}}',
        "json: cannot unmarshal number into Go struct field StreamConfigRequest.metadata.a~1b of type string",
    ),
    (
        SCR,
        b'{"name":"B","metadata":{"7":1}}',
        "json: cannot unmarshal number into StreamConfigRequest.metadata.7 of type string",
    ),
    (
        SCR,
        b'{"name":"B","sources":["x"]}',
        "json: cannot unmarshal string into StreamConfigRequest.sources.0 of type server.StreamSource",
    ),
    (
        SCR,
        b'{"name":"A","sources":[{"name":"X","external":{"api":1}}]}',
        "json: cannot unmarshal number into Go struct field StreamConfigRequest.sources.0.external.api of type string",
    ),
    (
        SCR,
        b'{"name":"A","mirror":{"opt_start_time":"bogus"}}',
        'parsing time "bogus" as "2006-01-02T15:04:05Z07:00": cannot parse "bogus" as "2006"',
    ),
    (
        SCR,
        b'{"name":"A","mirror":{"opt_start_time":5}}',
        "json: cannot unmarshal number into Go struct field StreamConfigRequest.mirror.opt_start_time of type time.Time",
    ),
    (SCR, b"[]", "json: cannot unmarshal array into Go value of type server.StreamConfigRequest"),
    (SCR, b"5", "json: cannot unmarshal number into Go value of type server.StreamConfigRequest"),
    (
        SCR,
        b'{"name":"A","max_msgs":"x","retention":"x"}',
        "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_msgs of type int64",
    ),
    (SCR, b'{"name":"A","bogus":1,"max_msgs":"x"}', 'json: unknown field "bogus"'),
    (
        MsgGetRequest,
        b'{"seq":"1"}',
        "json: cannot unmarshal string into Go struct field JSApiMsgGetRequest.seq of type uint64",
    ),
    (
        MsgGetRequest,
        b'{"seq":-0}',
        "json: cannot unmarshal number -0 into Go struct field JSApiMsgGetRequest.seq of type uint64",
    ),
    (
        MsgGetRequest,
        b'{"batch":1.5}',
        "json: cannot unmarshal number 1.5 into Go struct field JSApiMsgGetRequest.batch of type int",
    ),
    (
        MsgGetRequest,
        b'{"multi_last":[1]}',
        "json: cannot unmarshal number into JSApiMsgGetRequest.multi_last.0 of type string",
    ),
    (
        MsgGetRequest,
        b'{"start_time":"x"}',
        'parsing time "x" as "2006-01-02T15:04:05Z07:00": cannot parse "x" as "2006"',
    ),
    (MsgGetRequest, b"5", "json: cannot unmarshal number into Go value of type server.JSApiMsgGetRequest"),
    (
        MsgDeleteRequest,
        b'{"seq":"x"}',
        "json: cannot unmarshal string into Go struct field JSApiMsgDeleteRequest.seq of type uint64",
    ),
    (
        StreamPurgeRequest,
        b'{"keep":-1}',
        "json: cannot unmarshal number -1 into Go struct field JSApiStreamPurgeRequest.keep of type uint64",
    ),
    (
        StreamInfoRequest,
        b'{"offset":"x"}',
        "json: cannot unmarshal string into Go struct field JSApiStreamInfoRequest.offset of type int",
    ),
    (
        StreamNamesRequest,
        b'{"subject":5}',
        "json: cannot unmarshal number into Go struct field JSApiStreamNamesRequest.subject of type string",
    ),
    (
        StreamListRequest,
        b'{"offset":1e1}',
        "json: cannot unmarshal number 1e1 into Go struct field JSApiStreamListRequest.offset of type int",
    ),
]


@pytest.mark.parametrize(("cls", "body", "text"), GO_ERRORS, ids=[repr(b)[:48] for _, b, _ in GO_ERRORS])
def test_go_error_texts(cls: type[msgspec.Struct], body: bytes, text: str) -> None:
    with pytest.raises(ApiError) as ei:
        decode_request(cls, body)
    assert ei.value.to_dict() == {"code": 400, "err_code": 10025, "description": "invalid JSON: " + text}


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        (b"", {}),
        (b"  \r\n\t", {}),
        (b"null", {}),
        (b'{"NAME":"X","Subjects":["a"]}', {"name": "X", "subjects": ["a"]}),
        (b'{"name":"X"} {"subjects":["a"]} {"max_msgs":3}', {"name": "X", "subjects": ["a"], "max_msgs": 3}),
        (b'{"name":"X","max_msgs":5,"max_msgs":null}', {"name": "X", "max_msgs": 5}),
        (
            b'{"placement":{"cluster":"c"},"placement":{"tags":["t"]}}',
            {"placement": {"cluster": "c", "tags": ["t"]}},
        ),
        (b'{"discard":"NeW","compression":"s\\u0032"}', {"discard": "new", "compression": "s2"}),
        (b'{"subjects":[null,"a"]}', {"subjects": ["", "a"]}),
        (b'{"description":"\\ud800 \xff \\ud83d\\ude00"}', {"description": "\ufffd \ufffd \U0001f600"}),
        (b'{"metadata":{"a":null,"b":"c"}}', {"metadata": {"a": "", "b": "c"}}),
        (b'{"sources":[null],"consumer_limits":null,"persist_mode":""}', {"sources": [None]}),
        (b'{"subjects":["x"],"subjects":null}', {}),
    ],
)
def test_go_decoding_semantics(body: bytes, expect: dict[str, Any]) -> None:
    """null handling, case-insensitive names, merging values, escapes, invalid UTF-8."""
    got = decode_request(StreamConfigRequest, body)
    assert got == msgspec.convert(expect, StreamConfigRequest)


def test_go_quote() -> None:
    assert go_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert go_quote("é\n\x01\x7f\u200b") == '"é\\n\\x01\\x7f\\u200b"'
    assert go_quote(b"\xff") == '"\\xff"'


# --------------------------------------------------------------------------------------------
# msgspec fast path == exact Go path

_field_values = {
    "seq": st.one_of(st.none(), st.integers(-3, 2**64 + 5)),
    "last_by_subj": st.one_of(st.none(), st.sampled_from(["a", "a.*", "$KV.b.>", ""]), st.integers(0, 3)),
    "next_by_subj": st.one_of(st.none(), st.sampled_from(["x.y", ""])),
    "batch": st.one_of(st.none(), st.integers(-(2**63) - 2, 2**63 + 2), st.floats(allow_nan=False, width=32)),
    "max_bytes": st.one_of(st.none(), st.integers(-5, 5)),
    "start_time": st.one_of(st.none(), st.sampled_from(["2000-01-01T00:00:00Z", "x", "2020-01-01T0:00:00Z"])),
    "multi_last": st.one_of(st.none(), st.lists(st.one_of(st.text(max_size=3), st.none()), max_size=3)),
    "up_to_seq": st.one_of(st.none(), st.integers(-1, 10)),
    "up_to_time": st.one_of(st.none(), st.just("1970-01-01T00:00:00Z")),
    "no_hdr": st.one_of(st.none(), st.booleans(), st.just("yes")),
    "bogus": st.integers(),
}


def _slow(cls: type[msgspec.Struct], body: bytes, strict: bool = True, stream: bool = True) -> Any:
    try:
        return msgspec.convert(decode_go(body, M.go_type_of(cls), strict=strict, stream=stream), cls)
    except GoJSONError as e:
        return str(e)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(sorted(_field_values)), max_size=6).flatmap(
        lambda keys: st.tuples(*[st.tuples(st.just(k), _field_values[k]) for k in keys])
    ),
    st.sampled_from(["", " ", "\n"]),
)
def test_msg_get_fast_path_matches_go(pairs: tuple[tuple[str, Any], ...], ws: str) -> None:
    """Whatever the msgspec fast path accepts, the Go path accepts identically (and vice versa)."""
    body = ("{" + ws + ",".join(f"{json.dumps(k)}:{ws}{json.dumps(v)}" for k, v in pairs) + "}").encode()
    try:
        fast: Any = decode_request(MsgGetRequest, body)
    except ApiError as e:
        fast = e.description.removeprefix("invalid JSON: ")
    assert fast == _slow(MsgGetRequest, body)
    direct = decode_direct_get(body)
    slow_direct = _slow(MsgGetRequest, body, strict=False, stream=False)
    assert direct == (None if isinstance(slow_direct, str) else slow_direct)


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (StreamPurgeRequest, b'{"filter":"a","seq":5}'),
        (StreamPurgeRequest, b'{"keep":1,"filter":null}'),
        (StreamInfoRequest, b'{"deleted_details":false,"subjects_filter":null,"offset":null}'),
        (StreamNamesRequest, b'{"offset":0,"subject":null}'),
        (StreamListRequest, b'{"offset":-5}'),
        (MsgDeleteRequest, b'{"seq":3,"no_erase":true}'),
        (MsgGetRequest, b'{"seq":2,"seq":null}'),
        (MsgGetRequest, b'{"seq":18446744073709551616}'),
        (MsgGetRequest, b'{"SEQ":1}'),
    ],
)
def test_small_requests_fast_and_slow_agree(cls: type[msgspec.Struct], body: bytes) -> None:
    try:
        fast: Any = decode_request(cls, body)
    except ApiError as e:
        fast = e.description.removeprefix("invalid JSON: ")
    assert fast == _slow(cls, body)


# --------------------------------------------------------------------------------------------
# Body classes


@pytest.mark.parametrize(
    ("body", "empty"),
    [
        (b"", True),
        (b"{}", True),
        (b" {} ", True),
        (b"{\n}", True),
        (b"  ", False),
        (b"null", False),
        (b"[]", False),
        (b"{} {}", False),
        (b'{"a":1}', False),
        (b"{", False),
    ],
)
def test_is_empty_request(body: bytes, empty: bool) -> None:
    assert is_empty_request(body) is empty
    if empty:
        check_empty_request(body)
    else:
        with pytest.raises(ApiError) as ei:
            check_empty_request(body)
        assert ei.value.err_code == 10038


@pytest.mark.parametrize(
    ("body", "wants"),
    [(b"", False), (b"  ", False), (b"junk", False), (b" \t{x", True), (b"[1]", True), (b"\f{}", False)],
)
def test_optional_json(body: bytes, wants: bool) -> None:
    assert is_json_object_or_array(body) is wants
    if not wants:
        assert decode_optional_request(StreamPurgeRequest, body) is None


def test_optional_json_garbage_object_is_an_error() -> None:
    with pytest.raises(ApiError) as ei:
        decode_optional_request(StreamNamesRequest, b"{garbage")
    assert ei.value.description == (
        "invalid JSON: invalid character 'g' looking for beginning of object key string at offset 2"
    )


@pytest.mark.parametrize(
    ("body", "err"),
    [
        (b"", 10003),
        (b"{}", 10003),
        (b"  ", 10003),
        (b'{"seq":1,"batch":2}', 10003),
        (b'{"seq":1,"last_by_subj":"x"}', 10003),
        (b'{"seq":1,"start_time":"2000-01-01T00:00:00Z"}', 10003),
        (b'{"last_by_subj":"x","next_by_subj":"y"}', 10003),
        (b'{"seq":"x"}', 10025),
        (b'{"seq":1}', None),
        (b'{"seq":null,"last_by_subj":"x"}', None),
        (b'{"next_by_subj":"x","seq":null}', None),
        (b'{"start_time":"2000-01-01T00:00:00Z","next_by_subj":"a"}', None),
    ],
)
def test_decode_msg_get(body: bytes, err: int | None) -> None:
    if err is None:
        decode_msg_get(body)
    else:
        with pytest.raises(ApiError) as ei:
            decode_msg_get(body)
        assert ei.value.err_code == err


@pytest.mark.parametrize(
    ("body", "key", "status"),
    [
        (b'{"seq":1,"bogus":1}', None, None),
        (b'{"SEQ":2}', None, None),
        (b'{"seq":1} x', None, "Malformed Request"),
        (b'{"seq":1}{"seq":2}', None, "Malformed Request"),
        (b'{"seq":-1}', None, "Malformed Request"),
        (b'{"seq":"1"}', None, "Malformed Request"),
        (b"  ", None, "Malformed Request"),
        (b"[1]", None, "Malformed Request"),
        (b'{"start_time":"x"}', None, "Malformed Request"),
        (b"null", None, "Empty Request"),
        (b"{}", None, "Empty Request"),
        (b'{"seq":1,"last_by_subj":"x"}', None, "Bad Request"),
        (b'{"last_by_subj":"x","batch":2}', None, "Bad Request"),
        (b'{"up_to_seq":1,"up_to_time":"2000-01-01T00:00:00Z","seq":1}', None, "Bad Request"),
        (b'{"multi_last":["a"],"next_by_subj":"b"}', None, "Bad Request"),
        (b'{"multi_last":["a"],"batch":5}', None, None),
        (b'{"seq":2,"seq":null}', None, None),
        (b'{"no_hdr":true}', "a.b", None),
        (b'{"seq":1}', "a.b", "Bad Request"),
        (b'{"batch":-1}', "a.b", "Bad Request"),
    ],
)
def test_direct_get(body: bytes, key: str | None, status: str | None) -> None:
    req = decode_direct_get(body)
    got = "Malformed Request" if req is None else direct_get_problem(req, key)
    assert got == status


def test_direct_get_values() -> None:
    req = decode_direct_get(b'{"seq":2,"seq":null,"no_hdr":true}')
    assert req is not None and req.seq == 2 and req.no_hdr is True
    req = decode_direct_get(b'{"start_time":"2000-01-01T00:00:01.5Z"}')
    assert req is not None and req.start_ns() == 946_684_801_500_000_000 and req.up_to_ns() is None


# --------------------------------------------------------------------------------------------
# Encoding


def test_encode_json_go_escapes_and_sorted_maps() -> None:
    state = StreamState(
        messages=1,
        bytes=2,
        first_seq=1,
        first_ts="t",
        last_seq=1,
        last_ts="t",
        subjects={"b.<x>": 1, "a&": 2},
        consumer_count=0,
    )
    out = encode_json(state)
    assert out == (
        b'{"messages":1,"bytes":2,"first_seq":1,"first_ts":"t","last_seq":1,"last_ts":"t",'
        b'"subjects":{"a\\u0026":2,"b.\\u003cx\\u003e":1},"consumer_count":0}'
    )
    assert encode_json("\u2028\u2029\x7f\x1f") == b'"\\u2028\\u2029\x7f\\u001f"'


def test_stream_state_omitempty() -> None:
    st_ = StreamState(
        messages=0, bytes=0, first_seq=0, first_ts="z", last_seq=0, last_ts="z", consumer_count=0
    )
    assert encode_json(st_) == (
        b'{"messages":0,"bytes":0,"first_seq":0,"first_ts":"z","last_seq":0,"last_ts":"z","consumer_count":0}'
    )


def test_stored_msg_base64_and_omissions() -> None:
    msg = StoredMsg(subject="a", seq=5, hdrs=b"NATS/1.0\r\n\r\n", data=b"", time="t")
    assert encode_json(MsgGetResponse(message=msg)) == (
        b'{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":'
        b'{"subject":"a","seq":5,"hdrs":"TkFUUy8xLjANCg0K","time":"t"}}'
    )


@pytest.mark.parametrize(
    ("cls", "expect"),
    [
        (StreamCreateResponse, b'"error":{"code":404,"err_code":10059,"description":"stream not found"}}'),
        (
            StreamInfoResponse,
            b'"error":{"code":404,"err_code":10059,"description":"stream not found"},"total":0,"offset":0,"limit":0}',
        ),
        (
            StreamPurgeResponse,
            b'"error":{"code":404,"err_code":10059,"description":"stream not found"},"purged":0}',
        ),
        (
            StreamNamesResponse,
            b'"error":{"code":404,"err_code":10059,"description":"stream not found"},'
            b'"total":0,"offset":0,"limit":0,"streams":null}',
        ),
        (
            StreamListResponse,
            b'"error":{"code":404,"err_code":10059,"description":"stream not found"},'
            b'"total":0,"offset":0,"limit":0,"streams":[]}',
        ),
        (StreamDeleteResponse, b'"error":{"code":404,"err_code":10059,"description":"stream not found"}}'),
        (AccountInfoResponse, b'"error":{"code":404,"err_code":10059,"description":"stream not found"}}'),
    ],
)
def test_error_envelopes(cls: type[msgspec.Struct], expect: bytes) -> None:
    out = encode_error(cls, E.STREAM_NOT_FOUND())
    tag = cls.__struct_config__.tag  # type: ignore[misc]
    assert out == b'{"type":"' + tag.encode() + b'",' + expect
    # error_fields are copied, never shared
    M.error_response(cls, E.STREAM_NOT_FOUND())


def test_account_info_success() -> None:
    resp = AccountInfoResponse(
        memory=150,
        storage=800,
        reserved_memory=100,
        reserved_storage=0,
        streams=16,
        consumers=3,
        limits=AccountLimits(),
        api=ApiStats(level=5, total=108, errors=44),
    )
    assert encode_json(resp) == (
        b'{"type":"io.nats.jetstream.api.v1.account_info_response","memory":150,"storage":800,'
        b'"reserved_memory":100,"reserved_storage":0,"streams":16,"consumers":3,'
        b'"limits":{"max_memory":-1,"max_storage":-1,"max_streams":-1,"max_consumers":-1,'
        b'"max_ack_pending":-1,"memory_max_stream_bytes":-1,"storage_max_stream_bytes":-1,'
        b'"max_bytes_required":false},"api":{"level":5,"total":108,"errors":44}}'
    )


def test_puback_bytes() -> None:
    assert encode_puback("ORDERS", 3) == b'{"stream":"ORDERS","seq":3}'
    assert encode_puback("ORDERS", 4, duplicate=True) == b'{"stream":"ORDERS","seq":4,"duplicate": true}'
    assert encode_puback("ORDERS", 3, domain="hub") == b'{"stream":"ORDERS","domain":"hub","seq":3}'
    assert encode_puback('a"<b', 1) == b'{"stream":"a\\"<b","seq":1}'  # %q, not JSON escaping
    err = E.STREAM_WRONG_LAST_SEQUENCE(seq=5)
    assert encode_puback_error("ORDERS", err) == (
        b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"ORDERS","seq":0}'
    )
    assert encode_puback_error("O", E.STREAM_INVALID_CONFIG(err="x > y"), "hub") == (
        b'{"error":{"code":500,"err_code":10052,"description":"x \\u003e y"},"stream":"O","seq":0}'
    )


def test_stream_config_helpers() -> None:
    from jetlog.stream.config import normalize_stream_config

    req = decode_request(
        StreamConfigRequest, b'{"name":"X","placement":{"tags":[]},"sources":[],"metadata":{"z":"1"}}'
    )
    cfg = normalize_stream_config(req)
    assert b'"placement":{},' in encode_json(cfg) and b'"sources"' not in encode_json(cfg)
    data = M.stream_config_to_builtins(cfg, "2.15.1")
    assert data["placement"] == {} and "sources" not in data
    assert list(data["metadata"]) == ["_nats.level", "_nats.req.level", "_nats.ver", "z"]
    assert json.dumps(data, separators=(",", ":")).encode() == encode_json(M.with_dynamic_metadata(cfg))
    assert "_nats.ver" not in M.stream_config_to_builtins(cfg)["metadata"]
    # Persisting drops the explicit empty lists (nats-server forgets them over a restart too).
    assert encode_json(M.decode_stored_config(M.encode_stored_config(cfg))) == encode_json(cfg)
    assert M.decode_stream_config(b"") == M.empty_stream_config()
    assert M.time_ns("1970-01-01T00:00:01Z") == 10**9


# --------------------------------------------------------------------------------------------
# Hot paths (loose bounds: catch an accidental slow path, not a benchmark)


def _per_call(fn: Any, n: int = 20000) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def test_hot_paths_are_fast() -> None:
    assert _per_call(lambda: encode_puback("KV_bucket", 123456)) < 5e-6
    assert _per_call(lambda: decode_direct_get(b'{"seq": 12345}')) < 2e-5
    assert _per_call(lambda: decode_msg_get(b'{"seq": null, "last_by_subj": "$KV.b.key"}')) < 3e-5
