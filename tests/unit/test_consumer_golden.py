"""Golden tests for consumers, driven by the real nats-server 2.15.1 transcript (spec/captures).

* every captured ``CONSUMER.CREATE`` / ``DURABLE.CREATE`` exchange is replayed through
  :func:`jetlog.consumer.config.prepare_consumer_create` against the captured stream configs and
  the consumers created so far: same error bytes, or the same reply bytes once the run-dependent
  state (``created``, ``delivered``, ``ts``...) is taken from the captured reply;
* every captured consumer response decodes with jetlog's models and re-encodes identically;
* captured ack reply subjects, ack payloads, pull request bodies and status frames agree with
  :mod:`jetlog.consumer.wire`.

:class:`ConsumerCatalog` is also the reference flow of the live conformance test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import pytest

from jetlog.api.models import (
    StreamConfig,
    StreamCreateResponse,
    StreamUpdateResponse,
    encode_error,
    encode_json,
)
from jetlog.api.models_consumer import (
    ConsumerCreateResponse,
    ConsumerDeleteResponse,
    ConsumerInfo,
    ConsumerInfoResponse,
    ConsumerListResponse,
    ConsumerNamesResponse,
    ConsumerPauseResponse,
    ConsumerResetResponse,
    ConsumerUnpinResponse,
    SequenceInfo,
    info_response,
)
from jetlog.consumer.config import ConsumerCreatePlan, prepare_consumer_create, random_consumer_name
from jetlog.consumer.wire import (
    PullRequest,
    Rejection,
    ack_subject,
    heartbeat,
    parse_ack_payload,
    parse_ack_subject,
    parse_pull_request,
    request_timeout,
    status,
)
from jetlog.errors import ApiError
from jetlog.wire import headers as hdrs
from tests.unit.test_golden_captures import EXCHANGES, RECORDS

VERSION = "2.15.1"


# --------------------------------------------------------------------------------------------
# Reference consumer catalog


class ConsumerCatalog:
    """Streams (name → config) and their consumers, driven through jetlog's create flow."""

    def __init__(self, streams: Mapping[str, StreamConfig] | None = None) -> None:
        self.streams: Mapping[str, StreamConfig] = streams if streams is not None else {}
        self.consumers: dict[str, dict[str, Any]] = {}

    def lookup(self, stream: str) -> tuple[StreamConfig, dict[str, Any]] | None:
        cfg = self.streams.get(stream)
        return None if cfg is None else (cfg, self.consumers.setdefault(stream, {}))

    def create(
        self,
        subject: str,
        body: bytes,
        *,
        api_level: str | None = None,
        name: str | None = None,
        has_interest: Callable[[str], bool] | None = None,
    ) -> ConsumerCreatePlan | ApiError | None:
        """The plan (stored on success), the ApiError, or None (nats-server would not reply).
        ``name`` is used for a generated (legacy ephemeral) name."""
        gen = (lambda taken: name) if name else random_consumer_name
        try:
            plan = prepare_consumer_create(
                subject.split("."),
                body,
                lookup=self.lookup,
                required_api_level=api_level,
                has_interest=has_interest,
                new_name=gen,
            )
        except ApiError as err:
            return err
        if plan is not None:
            self.consumers.setdefault(plan.stream, {})[plan.name] = plan.config
        return plan

    def delete(self, stream: str, name: str) -> None:
        self.consumers.get(stream, {}).pop(name, None)


def render(result: ConsumerCreatePlan | ApiError | None, reference: bytes | None) -> bytes | None:
    """jetlog's create reply; the consumer state members are copied from ``reference`` (the real
    server's reply) since they depend on the stream's messages and the clock."""
    if result is None:
        return None
    if isinstance(result, ConsumerCreatePlan) and result.empty_reply:
        return b""
    if isinstance(result, ApiError):
        return encode_error(ConsumerCreateResponse, result)
    ref: dict[str, Any] = json.loads(reference) if reference else {}
    zero = SequenceInfo(consumer_seq=0, stream_seq=0)
    state = msgspec.json.decode(reference, type=ConsumerCreateResponse) if reference else None
    info = ConsumerInfo(
        stream_name=result.stream,
        name=result.name,
        created=ref.get("created", "0001-01-01T00:00:00Z"),
        config=result.config,
        delivered=state.delivered if state and state.delivered else zero,
        ack_floor=state.ack_floor if state and state.ack_floor else zero,
        num_ack_pending=ref.get("num_ack_pending", 0),
        num_redelivered=ref.get("num_redelivered", 0),
        num_waiting=ref.get("num_waiting", 0),
        num_pending=ref.get("num_pending", 0),
        push_bound=ref.get("push_bound", False),
        paused=ref.get("paused", False),
        pause_remaining=ref.get("pause_remaining", 0),
        ts=ref.get("ts", "0001-01-01T00:00:00Z"),
        priority_groups=state.priority_groups if state else [],
    )
    return encode_json(info_response(ConsumerCreateResponse, info, version=VERSION))


# --------------------------------------------------------------------------------------------
# Capture replay


def _is_create(subject: str) -> bool:
    return subject.startswith(("$JS.API.CONSUMER.CREATE.", "$JS.API.CONSUMER.DURABLE.CREATE."))


CREATE_EXCHANGES = [x for x in EXCHANGES if _is_create(x.subject) and x.response and x.response[:1] == b"{"]


def _replay() -> dict[int, bytes | None]:
    """All sessions share one view (cap3/cap4/cap8 ran against the same server): stream configs
    come from the captured stream replies, consumers from jetlog's own successful creates."""
    streams: dict[str, StreamConfig] = {}
    cat = ConsumerCatalog(streams)
    out: dict[int, bytes | None] = {}
    for x in EXCHANGES:
        resp = x.response or b""
        if x.subject.startswith(("$JS.API.STREAM.CREATE.", "$JS.API.STREAM.UPDATE.")) and b'"config"' in resp:
            cls: type[StreamCreateResponse | StreamUpdateResponse] = (
                StreamCreateResponse if "CREATE" in x.subject else StreamUpdateResponse
            )
            cfg = msgspec.json.decode(resp, type=cls).config
            assert cfg is not None
            md = {k: v for k, v in cfg.metadata.items() if k not in ("_nats.ver", "_nats.level")}
            streams[cfg.name] = msgspec.structs.replace(cfg, metadata=md)
        elif x.subject.startswith("$JS.API.STREAM.DELETE.") and b'"success":true' in resp:
            name = x.subject.split(".", 4)[4]
            streams.pop(name, None)
            cat.consumers.pop(name, None)
        elif x.subject.startswith("$JS.API.CONSUMER.DELETE.") and b'"success":true' in resp:
            _, _, _, _, stream, name = x.subject.split(".", 5)
            cat.delete(stream, name)
        elif x in CREATE_EXCHANGES:
            ref = json.loads(resp)
            result = cat.create(x.subject, x.request, name=ref.get("name"))
            out[x.index] = render(result, None if "error" in ref else resp)
    return out


REPLAY = _replay()


def test_captures_cover_consumer_creates() -> None:
    assert len(CREATE_EXCHANGES) >= 15
    assert sum(1 for x in CREATE_EXCHANGES if x.response and b'"error"' in x.response) >= 6


@pytest.mark.parametrize("x", CREATE_EXCHANGES, ids=lambda x: x.id)
def test_create_exchange(x: Any) -> None:
    """Same error object, or the same reply byte for byte (config in the server's key order)."""
    assert REPLAY[x.index] == x.response


# --------------------------------------------------------------------------------------------
# Response models: decode + re-encode byte-exact

RESPONSE_TYPES: dict[str, type[msgspec.Struct]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in (
        ConsumerCreateResponse,
        ConsumerInfoResponse,
        ConsumerDeleteResponse,
        ConsumerNamesResponse,
        ConsumerListResponse,
        ConsumerPauseResponse,
        ConsumerUnpinResponse,
        ConsumerResetResponse,
    )
}


def _responses() -> list[tuple[str, bytes]]:
    out = []
    for i, rec in enumerate(RECORDS):
        data = rec["data"]
        if rec["k"] not in ("RESP", "SNIFF") or not data.startswith("{"):
            continue
        try:
            doc = json.loads(data)
        except ValueError:
            continue
        if doc.get("type") in RESPONSE_TYPES:
            out.append((f"{i}-{doc['type'].rsplit('.', 1)[1]}", data.encode()))
    return out


API_RESPONSES = _responses()


def test_response_coverage() -> None:
    kinds = {rid.split("-", 1)[1] for rid, _ in API_RESPONSES}
    assert kinds == {c.rsplit(".", 1)[1] for c in RESPONSE_TYPES}


@pytest.mark.parametrize(("rid", "data"), API_RESPONSES, ids=[r for r, _ in API_RESPONSES])
def test_response_roundtrip(rid: str, data: bytes) -> None:
    cls = RESPONSE_TYPES[json.loads(data)["type"]]
    assert encode_json(msgspec.json.decode(data, type=cls)) == data


def test_info_response_rebuilds_captured_reply() -> None:
    """A LIST item (no dynamic metadata) becomes the INFO reply with _nats.ver/_nats.level."""
    listing = next(d for r, d in API_RESPONSES if r.endswith("consumer_list_response"))
    info_reply = next(d for r, d in API_RESPONSES if r.endswith("consumer_info_response") and b"pull1" in d)
    items = msgspec.json.decode(listing, type=ConsumerListResponse).consumers
    pull1 = next(i for i in items if i.name == "pull1")
    want = msgspec.json.decode(info_reply, type=ConsumerInfoResponse)
    got = info_response(ConsumerInfoResponse, msgspec.structs.replace(pull1, ts=want.ts), version=VERSION)
    assert encode_json(got) == info_reply


# --------------------------------------------------------------------------------------------
# Wire formats seen in the captures

ACK_REPLIES = sorted(
    {r["reply"] for r in RECORDS if (r["reply"] or "").startswith("$JS.ACK.")}
    | {r["subject"] for r in RECORDS if r["subject"].startswith("$JS.ACK.")}
)


def test_ack_replies_seen() -> None:
    assert len(ACK_REPLIES) >= 15


@pytest.mark.parametrize("subject", ACK_REPLIES)
def test_captured_ack_subject(subject: str) -> None:
    meta = parse_ack_subject(subject)
    assert meta is not None
    rebuilt = ack_subject(
        meta.stream,
        meta.consumer,
        meta.delivered,
        meta.stream_seq,
        meta.consumer_seq,
        meta.timestamp,
        meta.pending,
    )
    assert rebuilt == subject


def test_captured_acks_are_acks() -> None:
    acks = [r for r in RECORDS if r["subject"].startswith("$JS.ACK.")]
    assert acks
    for r in acks:
        assert parse_ack_payload(r["data"].encode()) == ("ack", None)


def test_captured_pull_bodies() -> None:
    bodies = [r["data"].encode() for r in RECORDS if ".CONSUMER.MSG.NEXT." in r["subject"]]
    assert len(bodies) >= 3
    for body in bodies:
        got = parse_pull_request(body)
        assert isinstance(got, PullRequest), (body, got)
    assert parse_pull_request(b'{"batch": 1, "expires": 999900000}') == PullRequest(
        batch=1, expires=999900000, is_json=True
    )


def _status_dicts() -> list[dict[str, str]]:
    out = []
    for r in RECORDS:
        h = r.get("headers") or {}
        if (
            "Status" in h
            and h["Status"] in ("100", "404", "408", "409")
            and r["file"] in ("cap3", "cap4", "cap5")
        ):
            out.append(h)
    return out


@pytest.mark.parametrize("h", _status_dicts(), ids=lambda h: f"{h['Status']}-{h['Description']}")
def test_captured_status_frames(h: dict[str, str]) -> None:
    """Our builders produce the header blocks the clients parsed into these dicts."""
    code = int(h["Status"])
    if h["Description"] == "Idle Heartbeat":
        block = heartbeat(int(h["Nats-Last-Consumer"]), int(h["Nats-Last-Stream"]))
    elif h["Description"] == "Request Timeout":
        block = request_timeout(int(h["Nats-Pending-Messages"]), int(h["Nats-Pending-Bytes"]))
    else:
        block = status(code, h["Description"])
    got_code, got_desc, pairs = hdrs.parse(block)
    want = {k: v for k, v in h.items() if k not in ("Status", "Description")}
    assert (got_code, got_desc, dict(pairs)) == (code, h["Description"], want)


def test_rejection_header() -> None:
    assert Rejection(409, "Exceeded MaxWaiting").header == b"NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n"
