"""Unit tests of jetlog.consumer.wire: pull requests, ack subjects/payloads, status frames.

Texts and behaviours were measured on nats-server 2.15.1 (see also the live pull-request
comparison in tests/integration/test_consumer_config_conformance.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetlog.api.models_consumer import ConsumerConfig
from jetlog.consumer.wire import (
    API_LEVEL_REQUIRED,
    CONSUMER_DELETED,
    FLOW_CONTROL,
    MAX_WAITING,
    NO_MESSAGES,
    PIN_ID_MISMATCH,
    PUSH_BASED,
    REQUESTS_PENDING,
    AckMeta,
    PullRequest,
    Rejection,
    ack_subject,
    bad_request,
    batch_completed,
    fc_subject,
    go_atoi,
    go_trim_space,
    heartbeat,
    interest_expired,
    max_bytes_exceeded,
    no_responders,
    parse_ack_payload,
    parse_ack_subject,
    parse_pull_request,
    request_timeout,
    required_api_level_rejected,
    status,
    wrong_pin_id,
)


def cfg(**kw: Any) -> ConsumerConfig:
    base: dict[str, Any] = {
        "durable_name": "d",
        "name": "d",
        "deliver_policy": "all",
        "ack_policy": "none",
        "replay_policy": "instant",
        "num_replicas": 0,
        "max_waiting": 512,
    }
    base.update(kw)
    return ConsumerConfig(**base)


# --------------------------------------------------------------------------------------------
# Pull request bodies


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (b"", PullRequest()),
        (b"  \r\n", PullRequest()),
        (b"5", PullRequest(batch=5)),
        (b" +12\x0b", PullRequest(batch=12)),
        (b"-3", PullRequest(batch=-3)),
        (b"hello", PullRequest()),
        (b"[1]", PullRequest()),
        (b"1.5", PullRequest()),
        (b"99999999999999999999", PullRequest()),
        (b"{}", PullRequest(batch=0, is_json=True)),
        (b'{"batch": 1, "expires": 999900000}', PullRequest(batch=1, expires=999900000, is_json=True)),
        (
            b'{"batch":2,"max_bytes":0,"idle_heartbeat":500000000,"expires":1000000000}',
            PullRequest(batch=2, expires=10**9, idle_heartbeat=5 * 10**8, is_json=True),
        ),
        (b'{"BATCH":3,"No_Wait":true,"bogus":[1,{"a":2}]}', PullRequest(batch=3, no_wait=True, is_json=True)),
        (b'{"batch":3,"batch":null}', PullRequest(batch=3, is_json=True)),
        (b'{"batch":3,"batch":4}', PullRequest(batch=4, is_json=True)),
        (
            b'\xc2\xa0{"group":"g","min_pending":2,"id":"p","priority":4}\xe3\x80\x80',
            PullRequest(batch=0, group="g", min_pending=2, id="p", priority=4, is_json=True),
        ),
        (b'{"expires":-5,"no_wait":true}', PullRequest(batch=0, expires=-5, no_wait=True, is_json=True)),
        # hb*2 overflows int64 in Go: accepted.
        (
            b'{"idle_heartbeat":4611686018427387904}',
            PullRequest(batch=0, idle_heartbeat=1 << 62, is_json=True),
        ),
    ],
)
def test_pull_bodies(body: bytes, want: PullRequest) -> None:
    assert parse_pull_request(body) == want


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b'{"batch":"x"}', "json: cannot unmarshal string into Go struct field .batch of type int"),
        (b'{"priority":"x"}', "json: cannot unmarshal string into Go struct field .priority of type int"),
        (b'{"batch":1.5}', "json: cannot unmarshal number 1.5 into Go struct field .batch of type int"),
        (b'{"group":5}', "json: cannot unmarshal number into Go struct field .group of type string"),
        (
            b'{"min_pending":1.5}',
            "json: cannot unmarshal number 1.5 into Go struct field .min_pending of type int64",
        ),
        (
            b'{"expires":"1s"}',
            "json: cannot unmarshal string into Go struct field .expires of type time.Duration",
        ),
        (b'{"no_wait":1}', "json: cannot unmarshal number into Go struct field .no_wait of type bool"),
        (b'{"batch":1', "unexpected end of JSON input"),
        (b'{"batch":1,}', "invalid character '}' looking for beginning of object key string"),
        (b'{"batch":1} x', "invalid character 'x' after top-level value"),
        (b'{"batch":1}{"batch":2}', "invalid character '{' after top-level value"),
        (b'{"batch":"x" "y"}', "invalid character '\"' after object key:value pair"),
        (b'{"batch":1,"idle_heartbeat":5}', "heartbeat value too large"),
        (b'{"idle_heartbeat":500,"expires":999}', "heartbeat value too large"),
    ],
)
def test_pull_bad_requests(body: bytes, text: str) -> None:
    got = parse_pull_request(body)
    assert got == Rejection(400, f"Bad Request - {text}")
    assert isinstance(got, Rejection) and got.header == f"NATS/1.0 400 Bad Request - {text}\r\n\r\n".encode()


def test_heartbeat_at_half_expiry_is_fine() -> None:
    assert isinstance(parse_pull_request(b'{"idle_heartbeat":500,"expires":1000}'), PullRequest)


LIMITED = cfg(max_batch=10, max_expires=5_000_000_000, max_bytes=2000)


@pytest.mark.parametrize(
    ("body", "config", "want"),
    [
        (b'{"batch":11}', LIMITED, (409, "Exceeded MaxRequestBatch of 10")),
        (b"11", LIMITED, (409, "Exceeded MaxRequestBatch of 10")),
        (b'{"batch":10,"expires":6000000000}', LIMITED, (409, "Exceeded MaxRequestExpires of 5s")),
        (
            b'{"expires":100000000000}',
            cfg(max_expires=90_000_000_000),
            (409, "Exceeded MaxRequestExpires of 1m30s"),
        ),
        (
            b'{"expires":2000000000}',
            cfg(max_expires=1_500_000_000),
            (409, "Exceeded MaxRequestExpires of 1.5s"),
        ),
        (b'{"expires":5000000000}', LIMITED, None),
        (b'{"expires":-1000000000000}', LIMITED, None),
        (b'{"max_bytes":2001}', LIMITED, (409, "Exceeded MaxRequestMaxBytes of 2000")),
        (b'{"max_bytes":2000}', LIMITED, None),
        (
            b'{"batch":"x"}',
            LIMITED,
            (400, "Bad Request - json: cannot unmarshal string into Go struct field .batch of type int"),
        ),
        (b"{bad", cfg(deliver_subject="d.x"), (409, "Consumer is push based")),
        (
            b'{"min_pending":5,"id":"x","priority":11}',
            LIMITED,
            (400, "Bad Request - Not a Overflow Priority consumer"),
        ),
        (b'{"id":"x","priority":11}', LIMITED, (400, "Bad Request - Not a Pinned Client Priority consumer")),
        (b'{"priority":10}', LIMITED, (400, "Bad Request - Priority must be between 0 and 9")),
        (b'{"group":"zz"}', LIMITED, None),
        (b"5", cfg(priority_policy="overflow", priority_groups=["g"]), None),
        (
            b"{}",
            cfg(priority_policy="overflow", priority_groups=["g"]),
            (400, "Bad Request - Priority Group missing"),
        ),
        (
            b'{"group":"h"}',
            cfg(priority_policy="overflow", priority_groups=["g"]),
            (400, "Bad Request - Invalid Priority Group"),
        ),
        (b'{"group":"g","min_ack_pending":3}', cfg(priority_policy="overflow", priority_groups=["g"]), None),
        (
            b'{"group":"g","id":"x"}',
            cfg(priority_policy="overflow", priority_groups=["g"]),
            (400, "Bad Request - Not a Pinned Client Priority consumer"),
        ),
        (b'{"group":"g","id":"x"}', cfg(priority_policy="pinned_client", priority_groups=["g"]), None),
        (
            b'{"group":"g","priority":-1}',
            cfg(priority_policy="prioritized", priority_groups=["g"]),
            (400, "Bad Request - Priority must be between 0 and 9"),
        ),
    ],
)
def test_pull_rejections(body: bytes, config: ConsumerConfig, want: tuple[int, str] | None) -> None:
    got = parse_pull_request(body, config)
    if want is None:
        assert isinstance(got, PullRequest)
    else:
        assert got == Rejection(*want)


def test_pin_mismatch_and_api_level() -> None:
    pinned = cfg(priority_policy="pinned_client", priority_groups=["g"])
    assert parse_pull_request(b'{"group":"g","id":"old"}', pinned, pin_id="cur") == Rejection(
        423, "Nats-Pin-Id mismatch"
    )
    assert isinstance(parse_pull_request(b'{"group":"g","id":"cur"}', pinned, pin_id="cur"), PullRequest)
    assert isinstance(parse_pull_request(b'{"group":"g"}', pinned, pin_id="cur"), PullRequest)
    assert parse_pull_request(b"", LIMITED, required_api_level="6") == Rejection(412, "Required Api Level")
    assert parse_pull_request(b"", LIMITED, required_api_level="x").header == API_LEVEL_REQUIRED  # type: ignore[union-attr]
    assert isinstance(parse_pull_request(b"", LIMITED, required_api_level="5"), PullRequest)
    assert required_api_level_rejected(b"-1") is False and required_api_level_rejected(None) is False


def test_go_helpers() -> None:
    assert go_trim_space(b"\x85\t x \xc2\x85\xc2\xa0") == b"\x85\t x"  # a lone 0x85 byte is not a rune
    assert go_trim_space(b"\x1c x \x1f") == b"\x1c x \x1f"  # not Go white space
    assert go_trim_space(b"\xe2\x80\x83x\xe2\x80\xa8") == b"x"
    assert go_atoi(b"+7") == 7 and go_atoi("-0") == 0 and go_atoi("1_0") is None and go_atoi("") is None
    assert go_atoi("9223372036854775807") == (1 << 63) - 1 and go_atoi("9223372036854775808") is None


# --------------------------------------------------------------------------------------------
# Ack subjects


def test_ack_subject_v1() -> None:
    s = ack_subject("ORDERS", "dur1", 2, 3, 4, 1795287874125404276, 0)
    assert s == "$JS.ACK.ORDERS.dur1.2.3.4.1795287874125404276.0"
    assert parse_ack_subject(s) == AckMeta("ORDERS", "dur1", 2, 3, 4, 1795287874125404276, 0)


def test_ack_subject_v2_and_shapes() -> None:
    v2 = "$JS.ACK._.HASH.ORDERS.c.1.5.6.1700.2"
    assert parse_ack_subject(v2) == AckMeta("ORDERS", "c", 1, 5, 6, 1700, 2, "", "HASH")
    assert parse_ack_subject("$JS.ACK.hub.H.S.c.1.5.6.1700.2.extra.more") == AckMeta(
        "S", "c", 1, 5, 6, 1700, 2, "hub", "H"
    )
    assert parse_ack_subject("$JS.ACK.S.c.1.5.6.1700.2.x") is None  # 10 tokens
    assert parse_ack_subject("$JS.ACK.S.c.1.5.6.1700") is None
    assert parse_ack_subject("$JS.ACX.S.c.1.5.6.1700.2") is None


def test_ack_subject_go_numbers() -> None:
    u64max = (1 << 64) - 1
    assert parse_ack_subject("$JS.ACK.S.c.x.1..+4.٣") == AckMeta("S", "c", u64max, 1, u64max, -1, u64max)
    big = parse_ack_subject("$JS.ACK.S.c.1.99999999999999999999.4.99999999999999999999.0")
    assert big is not None and big.stream_seq == 7766279631452241919 and big.timestamp == 7766279631452241919
    wrap = parse_ack_subject("$JS.ACK.S.c.1.9223372036854775808.1.1.0")
    assert wrap is not None and wrap.stream_seq == 1 << 63  # int64 wrap, then uint64


names = st.text(
    alphabet=st.characters(blacklist_characters=". \t\r\n*>", blacklist_categories=["Cs"]), min_size=1
)
u64 = st.integers(min_value=0, max_value=(1 << 63) - 1)


@given(names, names, u64, u64, u64, u64, u64)
def test_ack_subject_roundtrip(stream: str, consumer: str, dc: int, s: int, c: int, ts: int, p: int) -> None:
    assert parse_ack_subject(ack_subject(stream, consumer, dc, s, c, ts, p)) == AckMeta(
        stream, consumer, dc, s, c, ts, p
    )


def test_hot_paths_are_fast() -> None:
    subj = ack_subject("ORDERS", "dur1", 1, 123456, 654321, 1795287874125404276, 7)
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        ack_subject("ORDERS", "dur1", 1, 123456, 654321, 1795287874125404276, 7)
        parse_ack_subject(subj)
        parse_ack_payload(b"")
        parse_ack_payload(b"+ACK")
    per = (time.perf_counter() - t0) / n
    assert per < 20e-6  # ~2-3 µs for all four on an idle machine; generous for CI noise


# --------------------------------------------------------------------------------------------
# Ack payloads


@pytest.mark.parametrize(
    ("payload", "want"),
    [
        (b"", ("ack", None)),
        (b"+ACK", ("ack", None)),
        (b"+OK", ("ack", None)),
        (b"+ACK ", ("other", None)),
        (b"+OKx", ("other", None)),
        (b"-NAK", ("nak", None)),
        (b"-NAK ", ("nak", None)),
        (b'-NAK {"delay": 1500000000}', ("nak", 1_500_000_000)),
        (b'-NAK {"delay":-5}', ("nak", -5)),
        (b"-NAK {}", ("nak", 0)),
        (b'-NAK {"Delay":7,"x":1}', ("nak", 7)),
        (b'-NAK {"delay":"1s"}', ("nak", None)),
        (b'-NAK {"delay":5} x', ("nak", None)),
        (b'-NAK {"delay":99999999999999999999}', ("nak", None)),
        (b"-NAK 1s", ("nak", 1_000_000_000)),
        (b"-NAK\t1m30s \r\n", ("nak", 90_000_000_000)),
        (b"-NAK1.5ms", ("nak", 1_500_000)),
        (b"-NAK bogus", ("nak", None)),
        (b"-NAKED", ("nak", None)),
        (b"+WPI", ("wpi", None)),
        (b"+WPI ", ("other", None)),
        (b"+TERM", ("term", "")),
        (b"+TERM  no longer needed \xc2\xa0", ("term", "no longer needed")),
        (b"+TERMINATE", ("term", "INATE")),
        (b"+NXT", ("next", b"")),
        (b"+NXT 5", ("next", b" 5")),
        (b'+NXT {"batch":2}', ("next", b' {"batch":2}')),
        (b"hello", ("other", None)),
        (b"ACK", ("other", None)),
    ],
)
def test_ack_payloads(payload: bytes, want: tuple[str, Any]) -> None:
    assert parse_ack_payload(payload) == want


def test_next_body_is_a_pull_request() -> None:
    kind, body = parse_ack_payload(b"+NXT 3")
    assert kind == "next" and parse_pull_request(body) == PullRequest(batch=3)


# --------------------------------------------------------------------------------------------
# Status frames (§6.6)


def test_status_frames() -> None:
    assert (
        heartbeat(10, 19)
        == b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 10\r\nNats-Last-Stream: 19\r\n\r\n"
    )
    assert heartbeat(10, 37, "$JS.FC.ORDERS.push1.pDHy") == (
        b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 10\r\nNats-Last-Stream: 37\r\n"
        b"Nats-Consumer-Stalled: $JS.FC.ORDERS.push1.pDHy\r\n\r\n"
    )
    assert len(heartbeat(4, 31)) == 76
    assert FLOW_CONTROL == b"NATS/1.0 100 FlowControl Request\r\n\r\n" and len(FLOW_CONTROL) == 36
    assert NO_MESSAGES == b"NATS/1.0 404 No Messages\r\n\r\n" and len(NO_MESSAGES) == 28
    assert (
        request_timeout(5, 0)
        == b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\nNats-Pending-Bytes: 0\r\n\r\n"
    )
    assert len(request_timeout(5, 0)) == 81
    assert REQUESTS_PENDING == b"NATS/1.0 408 Requests Pending\r\n\r\n"
    assert interest_expired(1, 2).startswith(b"NATS/1.0 408 Interest Expired\r\nNats-Pending-Messages: 1\r\n")
    assert max_bytes_exceeded(10, 60) == (
        b"NATS/1.0 409 Message Size Exceeds MaxBytes\r\nNats-Pending-Messages: 10\r\nNats-Pending-Bytes: 60\r\n\r\n"
    )
    assert batch_completed(872) == (
        b"NATS/1.0 409 Batch Completed\r\nNats-Pending-Messages: 0\r\nNats-Pending-Bytes: 872\r\n\r\n"
    )
    assert CONSUMER_DELETED == b"NATS/1.0 409 Consumer Deleted\r\n\r\n"
    assert PUSH_BASED == b"NATS/1.0 409 Consumer is push based\r\n\r\n"
    assert MAX_WAITING == b"NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n"
    assert (
        status(409, "Exceeded MaxRequestBatch of 10")
        == b"NATS/1.0 409 Exceeded MaxRequestBatch of 10\r\n\r\n"
    )
    assert (
        wrong_pin_id(1, 0)
        == b"NATS/1.0 423 Nats-Wrong-Pin-Id\r\nNats-Pending-Messages: 1\r\nNats-Pending-Bytes: 0\r\n\r\n"
    )
    assert PIN_ID_MISMATCH == b"NATS/1.0 423 Nats-Pin-Id mismatch\r\n\r\n"
    assert (
        bad_request("heartbeat value too large")
        == b"NATS/1.0 400 Bad Request - heartbeat value too large\r\n\r\n"
    )
    assert no_responders("$JS.API.CONSUMER.MSG.NEXT.ORDERS.nope") == (
        b"NATS/1.0 503\r\nNats-Subject: $JS.API.CONSUMER.MSG.NEXT.ORDERS.nope\r\n\r\n"
    )


def test_fc_subject() -> None:
    assert fc_subject("ORDERS", "push1", "pDHy") == "$JS.FC.ORDERS.push1.pDHy"
    tok = fc_subject("S", "c").rsplit(".", 1)[1]
    assert len(tok) == 4 and tok.isalnum() and tok.isascii()
