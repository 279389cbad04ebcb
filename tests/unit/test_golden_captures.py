"""Golden tests driven by the real nats-server 2.15.1 transcript (spec/captures).

* every captured ``STREAM.CREATE`` / ``STREAM.UPDATE`` exchange is replayed through jetlog's
  decode → normalise → validate pipeline on a simulated stream catalog (:class:`Catalog`, one per
  capture session) and must give the same ``config`` JSON byte for byte (dynamic metadata
  included, ``_nats.ver`` being the upstream version) or the same error object;
* every captured response of the stream/account endpoints decodes with jetlog's response
  models and re-encodes to the identical bytes; every PubAck re-encodes identically;
* request bodies of the other stream endpoints get the same body-class / JSON errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from jetlog.api.models import (
    AccountInfoResponse,
    MsgDeleteRequest,
    MsgDeleteResponse,
    MsgGetResponse,
    PubAck,
    StreamConfig,
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
    StreamUpdateResponse,
    check_empty_request,
    decode_msg_get,
    decode_optional_request,
    decode_request,
    encode_error,
    encode_json,
    encode_puback,
    encode_puback_error,
    with_dynamic_metadata,
)
from jetlog.errors import ApiError, E
from jetlog.stream.config import (
    check_stream_update,
    prepare_stream_create,
    prepare_stream_update,
    same_config_for_create,
    subjects_overlap,
)

CAPTURES = Path("/work/shared/spec/captures/jetstream-captures.jsonl")
RECORDS: list[dict[str, Any]] = [json.loads(line) for line in CAPTURES.read_text().splitlines()]
UPSTREAM_VERSION = "2.15.1"


# --------------------------------------------------------------------------------------------
# A minimal stream catalog driving jetlog's config functions in nats-server's order


class Catalog:
    """The config side of STREAM.CREATE/UPDATE/DELETE on a single server (reference flow for the
    stream layer; see the docstring of :mod:`jetlog.stream.config`)."""

    def __init__(self, version: str = UPSTREAM_VERSION) -> None:
        self.streams: dict[str, StreamConfig] = {}
        self.version = version

    def _others(self, name: str) -> list[str]:
        return [s for n, c in self.streams.items() if n != name for s in c.subjects]

    def _reply(self, cls: type[msgspec.Struct], cfg: StreamConfig, **extra: Any) -> bytes:
        return encode_json(cls(config=with_dynamic_metadata(cfg, self.version), **extra))  # type: ignore[call-arg]

    def create(self, name: str, body: bytes) -> bytes:
        """Reply bytes for ``$JS.API.STREAM.CREATE.<name>`` (minus created/state/ts)."""
        try:
            req = decode_request(StreamConfigRequest, body)
            cfg = prepare_stream_create(req, name)
            if name in self.streams:
                if not same_config_for_create(self.streams[name], cfg):
                    raise E.STREAM_NAME_EXIST()
                return self._reply(StreamCreateResponse, self.streams[name], did_create=True)
            if subjects_overlap(cfg.subjects, self._others(name)):
                raise E.STREAM_SUBJECT_OVERLAP()
            self.streams[name] = cfg
            return self._reply(StreamCreateResponse, cfg, did_create=True)
        except ApiError as err:
            return encode_error(StreamCreateResponse, err)

    def update(self, name: str, body: bytes) -> bytes:
        """Reply bytes for ``$JS.API.STREAM.UPDATE.<name>`` (minus created/state/ts)."""
        try:
            req = decode_request(StreamConfigRequest, body)
            cfg = prepare_stream_update(req, name)
            if name not in self.streams:
                raise E.STREAM_NOT_FOUND()
            cfg = check_stream_update(self.streams[name], cfg, pedantic=req.pedantic)
            if subjects_overlap(cfg.subjects, self._others(name)):
                raise E.STREAM_SUBJECT_OVERLAP()
            self.streams[name] = cfg
            return self._reply(StreamUpdateResponse, cfg)
        except ApiError as err:
            return encode_error(StreamUpdateResponse, err)

    def delete(self, name: str) -> None:
        self.streams.pop(name, None)


def strip_info(reply: bytes) -> bytes:
    """A create/update reply without the run-dependent ``created``/``state``/``ts`` members
    (re-encoded through the response model, so member order is preserved)."""
    doc = json.loads(reply)
    cls = StreamCreateResponse if doc["type"].endswith("create_response") else StreamUpdateResponse
    obj = msgspec.json.decode(reply, type=cls)
    return encode_json(msgspec.structs.replace(obj, created=None, state=None, ts=None))


# --------------------------------------------------------------------------------------------
# Capture exchanges


@dataclass
class Exchange:
    index: int
    session: str
    subject: str
    request: bytes
    response: bytes | None

    @property
    def id(self) -> str:
        return f"{self.session}-{self.index}-{self.subject.removeprefix('$JS.API.')}"


def _exchanges() -> list[Exchange]:
    out = []
    for i, rec in enumerate(RECORDS):
        if rec["k"] == "REQ":
            nxt = RECORDS[i + 1] if i + 1 < len(RECORDS) else None
            resp = nxt["data"].encode() if nxt is not None and nxt["k"] == "RESP" else None
            out.append(Exchange(i, rec["file"], rec["subject"], rec["data"].encode(), resp))
        elif rec["k"] == "SNIFF" and rec["subject"].startswith("$JS.API.") and rec["reply"]:
            resp = next(
                (
                    r["data"].encode()
                    for r in RECORDS[i + 1 :]
                    if r["k"] == "SNIFF" and r["subject"] == rec["reply"]
                ),
                None,
            )
            out.append(Exchange(i, rec["file"], rec["subject"], rec["data"].encode(), resp))
    return out


EXCHANGES = _exchanges()
CONFIG_EXCHANGES = [
    x
    for x in EXCHANGES
    if x.response is not None and x.subject.startswith(("$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE."))
]


def _replay() -> dict[int, bytes]:
    """Replay every capture session's create/update/delete through a fresh :class:`Catalog`."""
    results: dict[int, bytes] = {}
    catalogs: dict[str, Catalog] = {}
    for x in EXCHANGES:
        cat = catalogs.setdefault(x.session, Catalog())
        tail = x.subject.split(".", 4)
        if x.subject.startswith("$JS.API.STREAM.CREATE."):
            results[x.index] = cat.create(tail[4], x.request)
        elif x.subject.startswith("$JS.API.STREAM.UPDATE."):
            results[x.index] = cat.update(tail[4], x.request)
        elif (
            x.subject.startswith("$JS.API.STREAM.DELETE.") and x.response and b'"success":true' in x.response
        ):
            cat.delete(tail[4])
    return results


REPLAY = _replay()


def test_captures_cover_config_endpoints() -> None:
    assert len(CONFIG_EXCHANGES) >= 60
    errors = sum(1 for x in CONFIG_EXCHANGES if x.response and b'"error"' in x.response)
    assert errors >= 25


@pytest.mark.parametrize("x", CONFIG_EXCHANGES, ids=lambda x: x.id)
def test_config_exchange(x: Exchange) -> None:
    """Same error object, or the same config (byte for byte, in the server's key order)."""
    assert x.response is not None
    mine = REPLAY[x.index]
    if b'"error"' in x.response:
        assert mine == x.response
    else:
        assert strip_info(mine) == strip_info(x.response)


# --------------------------------------------------------------------------------------------
# Response models: decode + re-encode byte-exact

RESPONSE_TYPES: dict[str, type[msgspec.Struct]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in (
        AccountInfoResponse,
        StreamCreateResponse,
        StreamUpdateResponse,
        StreamInfoResponse,
        StreamDeleteResponse,
        StreamPurgeResponse,
        StreamNamesResponse,
        StreamListResponse,
        MsgGetResponse,
        MsgDeleteResponse,
    )
}


def _responses() -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    api, acks = [], []
    for i, rec in enumerate(RECORDS):
        data = rec["data"]
        if rec["k"] not in ("RESP", "SNIFF") or not data.startswith("{"):
            continue
        try:
            doc = json.loads(data)
        except ValueError:
            continue
        if doc.get("type") in RESPONSE_TYPES:
            api.append((f"{i}-{doc['type'].rsplit('.', 1)[1]}", data.encode()))
        elif "type" not in doc and "stream" in doc and "seq" in doc:
            acks.append((f"{i}-puback", data.encode()))
    return api, acks


API_RESPONSES, PUBACKS = _responses()


def test_response_coverage() -> None:
    kinds = {rid.split("-", 1)[1] for rid, _ in API_RESPONSES}
    assert kinds == {c.rsplit(".", 1)[1] for c in RESPONSE_TYPES}
    assert len(API_RESPONSES) >= 150 and len(PUBACKS) >= 80


@pytest.mark.parametrize(("rid", "data"), API_RESPONSES, ids=[r for r, _ in API_RESPONSES])
def test_response_roundtrip(rid: str, data: bytes) -> None:
    cls = RESPONSE_TYPES[json.loads(data)["type"]]
    obj = msgspec.json.decode(data, type=cls)
    assert encode_json(obj) == data


@pytest.mark.parametrize(("rid", "data"), PUBACKS, ids=[r for r, _ in PUBACKS])
def test_puback_bytes(rid: str, data: bytes) -> None:
    ack = msgspec.json.decode(data, type=PubAck)
    if ack.error is not None:
        err = ApiError(E.STREAM_GENERAL_ERROR, err="x")
        err.code, err.err_code, err.description = ack.error.code, ack.error.err_code, ack.error.description
        assert encode_puback_error(ack.stream, err) == data
    else:
        assert encode_puback(ack.stream, ack.seq, ack.duplicate, ack.domain or None) == data


# --------------------------------------------------------------------------------------------
# Request bodies of the other stream endpoints


def _request_error(subject: str, body: bytes) -> dict[str, Any] | None:
    """The body-class / decode error jetlog raises for a request (None = accepted)."""
    parts = subject.split(".")
    try:
        if parts[2] == "STREAM" and parts[3] == "MSG" and parts[4] == "GET":
            decode_msg_get(body)
        elif parts[2] == "STREAM" and parts[3] == "MSG" and parts[4] == "DELETE":
            from jetlog.api.models import is_empty_request

            if is_empty_request(body):
                raise E.BAD_REQUEST()
            decode_request(MsgDeleteRequest, body)
        elif parts[3] == "DELETE":
            check_empty_request(body)
        elif parts[3] == "PURGE":
            preq = decode_optional_request(StreamPurgeRequest, body)
            if preq is not None and preq.seq and preq.keep:
                raise E.BAD_REQUEST()
        elif parts[3] == "INFO":
            decode_optional_request(StreamInfoRequest, body)
        elif parts[3] == "NAMES":
            decode_optional_request(StreamNamesRequest, body)
        elif parts[3] == "LIST":
            decode_optional_request(StreamListRequest, body)
    except ApiError as err:
        return err.to_dict()
    return None


REQUEST_EXCHANGES = [
    x
    for x in EXCHANGES
    if x.response is not None
    and x.subject.startswith("$JS.API.STREAM.")
    and x.subject.split(".")[3] in ("MSG", "DELETE", "PURGE", "INFO", "NAMES", "LIST")
    and x.response.startswith(b"{")
]
_DECODE_CODES = {10003, 10025, 10038}


@pytest.mark.parametrize("x", REQUEST_EXCHANGES, ids=lambda x: x.id)
def test_request_body_exchange(x: Exchange) -> None:
    """Requests nats-server rejected for their body get the same error; the others are accepted."""
    assert x.response is not None
    err = json.loads(x.response).get("error")
    expect = err if err is not None and err["err_code"] in _DECODE_CODES else None
    assert _request_error(x.subject, x.request) == expect


DIRECT_GETS = [
    (i, rec, RECORDS[i + 1])
    for i, rec in enumerate(RECORDS)
    if rec["k"] == "REQ"
    and rec["subject"].startswith("$JS.API.DIRECT.GET.DG")
    and RECORDS[i + 1]["k"] == "RESP"
]


@pytest.mark.parametrize(("i", "req", "resp"), DIRECT_GETS, ids=[f"{i}" for i, _, _ in DIRECT_GETS])
def test_direct_get_request(i: int, req: dict[str, Any], resp: dict[str, Any]) -> None:
    """The 408 statuses of captured direct gets come out of decode_direct_get/direct_get_problem."""
    from jetlog.api.models import decode_direct_get, direct_get_problem

    body = req["data"].encode()
    key = req["subject"].split(".", 5)[5] if req["subject"].count(".") >= 5 else None
    status = (resp.get("headers") or {}).get("Description")
    if key is None and not body:
        problem: str | None = "Empty Request"
    else:
        parsed = decode_direct_get(body) if body else None
        if body and parsed is None:
            problem = "Malformed Request"
        else:
            problem = direct_get_problem(parsed if parsed is not None else _empty_get(), key)
    if status is not None and status != "Message Not Found":
        assert problem == status
    else:
        assert problem is None


def _empty_get() -> Any:
    from jetlog.api.models import MsgGetRequest

    return MsgGetRequest()
