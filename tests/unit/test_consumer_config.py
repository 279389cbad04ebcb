"""Unit tests of consumer config handling (jetlog.consumer.config, jetlog.api.models_consumer).

Expected values were measured on nats-server 2.15.1 (the live differential test in
tests/integration/test_consumer_config_conformance.py re-checks them against the server).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from jetlog.api.models import encode_error, encode_json
from jetlog.api.models_consumer import (
    ConsumerConfig,
    ConsumerConfigRequest,
    ConsumerCreateResponse,
    ConsumerInfo,
    ConsumerListResponse,
    ConsumerNamesResponse,
    ConsumerPauseRequest,
    ConsumerPauseResponse,
    ConsumerResetRequest,
    ConsumerResetResponse,
    ConsumersRequest,
    ConsumerUnpinRequest,
    PriorityGroupState,
    SequenceInfo,
    decode_consumer_request,
    decode_create_request,
    go_time,
    info_response,
    time_ns,
)
from jetlog.api.models_stream import StreamConfigRequest, StreamConsumerLimits
from jetlog.consumer.config import (
    ServerLimits,
    check_consumer_update,
    check_create_subject,
    check_workqueue,
    create_subject_kind,
    normalize_consumer_config,
    partition_unique,
    prepare_consumer_create,
    random_consumer_name,
    same_consumer_config,
    validate_consumer_config,
)
from jetlog.errors import ApiError
from jetlog.stream.config import prepare_stream_create

STREAM = prepare_stream_create(StreamConfigRequest(name="S", subjects=["s.>"]), "S")
WQ = prepare_stream_create(StreamConfigRequest(name="W", subjects=["w.>"], retention="workqueue"), "W")


def err(fn: Any, *a: Any, **kw: Any) -> tuple[int, int, str]:
    with pytest.raises(ApiError) as ei:
        fn(*a, **kw)
    e = ei.value
    return e.code, e.err_code, e.description


def norm(**cfg: Any) -> ConsumerConfig:
    return normalize_consumer_config(ConsumerConfigRequest(**cfg), stream_config=STREAM)


def create(
    subject: str, body: dict[str, Any] | bytes, consumers: dict[str, Any] | None = None, **kw: Any
) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    store = {} if consumers is None else consumers
    streams = {"S": STREAM, "W": WQ}

    def lookup(name: str) -> Any:
        return (streams[name], store) if name in streams else None

    plan = prepare_consumer_create(subject.split("."), raw, lookup=lookup, **kw)
    if plan is not None:
        store[plan.name] = plan.config
    return plan


# --------------------------------------------------------------------------------------------
# Times


@pytest.mark.parametrize(
    ("given", "want", "utc"),
    [
        ("2020-01-01T00:00:00Z", "2020-01-01T00:00:00Z", "2020-01-01T00:00:00Z"),
        ("2020-01-01T01:00:00.500+01:00", "2020-01-01T01:00:00.5+01:00", "2020-01-01T00:00:00.5Z"),
        ("2020-01-01T01:00:00+00:00", "2020-01-01T01:00:00Z", "2020-01-01T01:00:00Z"),
        ("2020-01-01T00:00:00,123456789123-05:30", "2020-01-01T00:00:00.123456789-05:30", None),
        ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"),
        ("0001-01-01T01:00:00+01:00", "0001-01-01T01:00:00+01:00", "0001-01-01T00:00:00Z"),
        ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z"),
        ("1969-12-31T23:00:00-01:00", "1969-12-31T23:00:00-01:00", "1970-01-01T00:00:00Z"),
        ("2099-01-01T05:30:00+05:30", "2099-01-01T05:30:00+05:30", "2099-01-01T00:00:00Z"),
    ],
)
def test_go_time(given: str, want: str, utc: str | None) -> None:
    assert go_time(given) == want
    if utc is not None:
        assert go_time(given, utc=True) == utc


def test_time_ns_tells_zero_time_from_epoch() -> None:
    assert time_ns("1970-01-01T00:00:00Z") == 0
    assert time_ns("0001-01-01T00:00:00Z") == -62_135_596_800 * 10**9
    assert time_ns("2020-01-01T01:00:00+01:00") == time_ns("2020-01-01T00:00:00Z")


# --------------------------------------------------------------------------------------------
# Subject forms


@pytest.mark.parametrize(
    ("subject", "kind"),
    [
        ("$JS.API.CONSUMER.CREATE.S", "legacy_ephemeral"),
        ("$JS.API.CONSUMER.CREATE.S.c", "new"),
        ("$JS.API.CONSUMER.CREATE.S.c.a.b.>", "new"),
        ("$JS.API.CONSUMER.DURABLE.CREATE.S.d", "legacy_durable"),
        ("$JS.API.CONSUMER.DURABLE.CREATE.S", None),
        ("$JS.API.CONSUMER.DURABLE.CREATE.S.d.x", None),
        ("$JS.API.CONSUMER.INFO.S.c", None),
        ("$JS.API.STREAM.CREATE.S", None),
        ("$JS.API.CONSUMER", None),
    ],
)
def test_create_subject_kind(subject: str, kind: str | None) -> None:
    assert create_subject_kind(subject.split(".")) == kind
    if kind is None:
        assert prepare_consumer_create(subject.split("."), b"{bad", lookup=lambda s: None) is None


def _subject(subject: str, body: dict[str, Any]) -> Any:
    req = decode_create_request(json.dumps(body).encode())
    return check_create_subject(subject.split("."), req)


@pytest.mark.parametrize(
    ("subject", "body", "code"),
    [
        ("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {"durable_name": "d"}}, 10020),
        ("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {"name": "a/b"}}, 10127),
        ("$JS.API.CONSUMER.CREATE.S.c", {"stream_name": "X"}, 10056),
        ("$JS.API.CONSUMER.CREATE.S.a/b", {"stream_name": "X"}, 10056),  # stream first
        ("$JS.API.CONSUMER.CREATE.S.a\\b", {"stream_name": "S"}, 10127),
        ("$JS.API.CONSUMER.CREATE.S.c", {"stream_name": "S", "config": {"durable_name": "d"}}, 10017),
        ("$JS.API.CONSUMER.CREATE.S.c.f", {"stream_name": "S", "config": {"filter_subjects": ["f"]}}, 10137),
        ("$JS.API.CONSUMER.CREATE.S.c.f", {"stream_name": "S", "config": {"filter_subject": "g"}}, 10131),
        ("$JS.API.CONSUMER.DURABLE.CREATE.S.d", {"stream_name": "S"}, 10018),
        ("$JS.API.CONSUMER.DURABLE.CREATE.S.d", {"stream_name": "S", "config": {"durable_name": "e"}}, 10017),
    ],
)
def test_subject_rules(subject: str, body: dict[str, Any], code: int) -> None:
    assert err(_subject, subject, body)[1] == code


def test_subject_forces_name() -> None:
    target, req = _subject(
        "$JS.API.CONSUMER.CREATE.S.c.a.*", {"stream_name": "S", "config": {"filter_subject": "a.*"}}
    )
    assert (target.kind, target.stream, target.name, target.filter, req.config.name) == (
        "new",
        "S",
        "c",
        "a.*",
        "c",
    )
    target, req = _subject(
        "$JS.API.CONSUMER.DURABLE.CREATE.S.d", {"stream_name": "S", "config": {"durable_name": "d"}}
    )
    assert (target.kind, req.config.name) == ("legacy_durable", "d")
    target, req = _subject("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S", "config": {"name": "n"}})
    assert (target.kind, target.name) == ("legacy_ephemeral", "n")


def test_prepare_order() -> None:
    c = "$JS.API.CONSUMER.CREATE."
    assert err(create, c + "S.x", b"{bad", required_api_level="9")[1] == 10025
    assert err(create, c + "S.x", {"stream_name": "X"}, required_api_level="9")[:2] == (412, 10185)
    assert err(create, c + "S.x", {"stream_name": "S"}, required_api_level="x")[1] == 10185
    assert create(c + "S.x", {"stream_name": "S"}, required_api_level="5") is not None
    assert err(create, c + "NOPE.x", {"stream_name": "NOPE", "config": {"num_replicas": 2}})[:2] == (
        500,
        10074,
    )
    assert err(create, c + "NOPE.x", {"stream_name": "NOPE"})[:2] == (404, 10059)
    assert err(create, c + "S.x", b"")[1] == 10056


# --------------------------------------------------------------------------------------------
# Defaults


def _json(cfg: ConsumerConfig) -> dict[str, Any]:
    return json.loads(encode_json(cfg))


def test_minimal_named_ephemeral() -> None:
    plan = create("$JS.API.CONSUMER.CREATE.S.x", {"stream_name": "S", "config": {"name": "x"}})
    assert encode_json(plan.config) == (
        b'{"name":"x","deliver_policy":"all","ack_policy":"none","max_deliver":-1,"replay_policy":"instant",'
        b'"max_waiting":512,"inactive_threshold":5000000000,"num_replicas":0,'
        b'"metadata":{"_nats.req.level":"0"}}'
    )
    assert not plan.durable and not plan.is_update


def test_pull_explicit_durable() -> None:
    plan = create(
        "$JS.API.CONSUMER.CREATE.S.d",
        {"stream_name": "S", "config": {"durable_name": "d", "ack_policy": "explicit", "ack_wait": 0}},
    )
    assert plan.durable and plan.name == "d"
    assert encode_json(plan.config) == (
        b'{"durable_name":"d","name":"d","deliver_policy":"all","ack_policy":"explicit",'
        b'"ack_wait":30000000000,"max_deliver":-1,"replay_policy":"instant","max_waiting":512,'
        b'"max_ack_pending":1000,"num_replicas":0,"metadata":{"_nats.req.level":"0"}}'
    )


def test_legacy_ephemeral_name() -> None:
    store: dict[str, Any] = {}
    plan = create("$JS.API.CONSUMER.CREATE.S", {"stream_name": "S"}, store, new_name=lambda taken: "GENxxxx1")
    assert plan.name == "GENxxxx1" and plan.config.name == "" and "GENxxxx1" in store
    name = random_consumer_name({"a": 1})
    assert len(name) == 8 and name.isalnum() and name.isascii()


def test_backoff_sets_ack_wait_and_push_has_no_max_waiting() -> None:
    cfg = norm(ack_policy="explicit", backoff=[5, 7], deliver_subject="d.x")
    assert (cfg.ack_wait, cfg.max_waiting, cfg.max_ack_pending) == (5, 0, 1000)


def test_negative_values_are_zeroed() -> None:
    cfg = norm(max_deliver=-5, max_waiting=-1, max_ack_pending=-9, max_batch=-1, idle_heartbeat=-1)
    assert (cfg.max_deliver, cfg.max_waiting, cfg.max_ack_pending, cfg.max_batch) == (-1, 512, -1, 0)


def test_stream_and_server_limits() -> None:
    lim = prepare_stream_create(
        StreamConfigRequest(
            name="L", consumer_limits=StreamConsumerLimits(max_ack_pending=50, inactive_threshold=10**10)
        ),
        "L",
    )
    cfg = normalize_consumer_config(ConsumerConfigRequest(), stream_config=lim)
    assert (cfg.max_ack_pending, cfg.inactive_threshold) == (50, 10**10)
    validate_consumer_config(cfg, stream_config=lim)
    push = normalize_consumer_config(ConsumerConfigRequest(deliver_subject="d.x"), stream_config=lim)
    assert err(validate_consumer_config, push, stream_config=lim)[1] == 10082
    limits = ServerLimits(max_ack_pending=100, account_max_ack_pending=70, max_request_batch=20)
    cfg = normalize_consumer_config(
        ConsumerConfigRequest(ack_policy="all"), stream_config=STREAM, limits=limits
    )
    assert (cfg.max_ack_pending, cfg.max_batch) == (70, 20)
    over = normalize_consumer_config(
        ConsumerConfigRequest(ack_policy="all", max_ack_pending=80, max_batch=30), stream_config=STREAM
    )
    assert err(validate_consumer_config, over, stream_config=STREAM, limits=limits)[2] == (
        "consumer max request batch exceeds server limit of 20"
    )
    assert err(
        normalize_consumer_config, ConsumerConfigRequest(), stream_config=STREAM, limits=limits, pedantic=True
    )[2] == ("pedantic mode: max_request_batch must be set if it's JetStream limits are set")


def test_api_level_metadata() -> None:
    assert norm(pause_until="2099-01-01T00:00:00Z").metadata == {"_nats.req.level": "1"}
    assert norm(pause_until="0001-01-01T00:00:00Z").metadata == {"_nats.req.level": "0"}
    assert norm(priority_timeout=5).metadata == {"_nats.req.level": "1"}
    assert norm(ack_policy="flow_control").metadata == {"_nats.req.level": "4"}
    assert norm(
        metadata={"_nats.ver": "x", "_nats.level": "1", "_nats.req.level": "9", "a": "b"}
    ).metadata == {
        "_nats.req.level": "0",
        "a": "b",
    }


def test_flow_control_ack_policy_defaults() -> None:
    cfg = norm(ack_policy="flow_control", deliver_subject="d.x")
    assert (cfg.flow_control, cfg.idle_heartbeat, cfg.max_ack_pending, cfg.ack_wait) == (True, 10**9, 1000, 0)
    validate_consumer_config(cfg, stream_config=STREAM)


# --------------------------------------------------------------------------------------------
# Validation texts


@pytest.mark.parametrize(
    ("cfg", "want"),
    [
        ({"name": "a.b"}, (500, 10052, "consumer name can not contain '.', '*', '>', '\\', '/'")),
        (
            {"durable_name": "a b"},
            (500, 10052, "consumer durable name can not contain '.', '*', '>', '\\', '/'"),
        ),
        ({"num_replicas": -1}, (400, 10133, "replicas count cannot be negative")),
        ({"sample_freq": "-5"}, (400, 10095, "failed to parse consumer sampling configuration: <nil>")),
        (
            {"sample_freq": "%"},
            (
                400,
                10095,
                'failed to parse consumer sampling configuration: strconv.Atoi: parsing "": invalid syntax',
            ),
        ),
        (
            {"sample_freq": "99999999999999999999"},
            (
                400,
                10095,
                'failed to parse consumer sampling configuration: strconv.Atoi: parsing "99999999999999999999": value out of range',
            ),
        ),
        (
            {"metadata": {"k": "v" * (131072 - 16)}},
            (400, 10135, "consumer metadata exceeds maximum size of 128KB"),
        ),
        (
            {"deliver_policy": "by_start_time", "opt_start_seq": 3, "opt_start_time": "2020-01-01T00:00:00Z"},
            (
                400,
                10094,
                "consumer delivery policy is deliver by start time, but optional start start sequence is also set",
            ),
        ),
        ({"filter_subjects": ["a.*.c", "a.b.*"], "deliver_policy": "last_per_subject"}, None),
        ({"filter_subjects": ["a.b", "a.*"]}, (400, 10138, "consumer subject filters cannot overlap")),
        ({"priority_policy": "pinned_client", "priority_groups": ["x" * 17]}, (400, 10162, None)),
        ({"max_expires": 999_999}, (400, 10115, "consumer max request expires needs to be >= 1ms")),
        ({"deliver_subject": "s.x"}, (400, 10081, "consumer deliver subject forms a cycle")),
        ({"deliver_subject": "x.>"}, (400, 10079, "consumer deliver subject has wildcards")),
    ],
)
def test_validation(cfg: dict[str, Any], want: tuple[int, int, str | None] | None) -> None:
    c = norm(**cfg)
    if want is None:
        validate_consumer_config(c, stream_config=STREAM)
        return
    got = err(validate_consumer_config, c, stream_config=STREAM)
    assert got[:2] == want[:2]
    if want[2] is not None:
        assert got[2] == want[2]


def test_inactive_threshold_limit_text() -> None:
    lim = prepare_stream_create(
        StreamConfigRequest(name="L", consumer_limits=StreamConsumerLimits(inactive_threshold=90 * 10**9)),
        "L",
    )
    cfg = normalize_consumer_config(ConsumerConfigRequest(inactive_threshold=91 * 10**9), stream_config=lim)
    assert err(validate_consumer_config, cfg, stream_config=lim)[2] == (
        "consumer inactive threshold exceeds system limit of 1m30s"
    )


# --------------------------------------------------------------------------------------------
# Existing consumers


def test_action_create_idempotency() -> None:
    store: dict[str, Any] = {}
    body = {"stream_name": "S", "config": {"durable_name": "a", "ack_policy": "explicit"}, "action": "create"}
    first = create("$JS.API.CONSUMER.CREATE.S.a", body, store)
    again = create("$JS.API.CONSUMER.CREATE.S.a", body, store)
    assert again.existing == first.config and again.config == first.config
    with_ver = json.loads(json.dumps(body))
    with_ver["config"]["metadata"] = {"_nats.ver": "x", "_nats.req.level": "3"}
    assert create("$JS.API.CONSUMER.CREATE.S.a", with_ver, store).config.metadata == {"_nats.req.level": "0"}
    empty = json.loads(json.dumps(body))
    empty["config"]["filter_subjects"] = []
    assert err(create, "$JS.API.CONSUMER.CREATE.S.a", empty, store)[1] == 10148
    # The named ephemeral's stored config carries the 5 s threshold: a re-create without it differs.
    eph = {"stream_name": "S", "config": {"name": "e"}, "action": "create"}
    create("$JS.API.CONSUMER.CREATE.S.e", eph, store)
    assert err(create, "$JS.API.CONSUMER.CREATE.S.e", eph, store)[1] == 10148
    upd = {"stream_name": "S", "config": {"name": "zz"}, "action": "update"}
    assert err(create, "$JS.API.CONSUMER.CREATE.S.zz", upd, store)[:2] == (400, 10149)


def test_same_consumer_config_slices() -> None:
    a = norm(name="x", filter_subjects=[])
    b = norm(name="x")
    assert a == b  # msgspec equality ignores the marks ...
    assert not same_consumer_config(a, b)  # ... Go's DeepEqual does not
    assert same_consumer_config(a, norm(name="x", filter_subjects=[]))


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"deliver_policy": "new"}, "deliver policy can not be updated"),
        ({"mem_storage": True}, "storage type can not be updated"),
        ({"direct": True}, "direct can not be updated"),
        ({"sourcing": True}, "sourcing can not be updated"),
        ({"ack_policy": "all"}, "ack policy can not be updated"),
        ({"replay_policy": "original"}, "replay policy can not be updated"),
        ({"max_waiting": 3}, "max waiting can not be updated"),
        ({"deliver_subject": "d.x"}, "can not update pull consumer to push based"),
        ({"opt_start_time": "2020-01-01T00:00:00Z"}, "start time can not be updated"),
    ],
)
def test_update_immutables(change: dict[str, Any], text: str) -> None:
    old = norm(durable_name="u", ack_policy="explicit")
    new = norm(**{"durable_name": "u", "ack_policy": "explicit", **change})
    assert err(check_consumer_update, old, new) == (500, 10012, text)


def test_update_deliver_subject_interest() -> None:
    old = norm(durable_name="u", deliver_subject="d.a")
    new = norm(durable_name="u", deliver_subject="d.b")
    check_consumer_update(old, new, has_interest=lambda s: False)
    assert err(check_consumer_update, old, new, has_interest=lambda s: s == "d.a")[:2] == (400, 10013)
    assert (
        err(check_consumer_update, old, norm(durable_name="u"))[2]
        == "can not update push consumer to pull based"
    )
    t1 = norm(durable_name="u", deliver_policy="by_start_time", opt_start_time="2020-01-01T01:00:00+01:00")
    t2 = norm(durable_name="u", deliver_policy="by_start_time", opt_start_time="2020-01-01T00:00:00Z")
    check_consumer_update(t1, t2)  # same instant


def test_update_keeps_pause_in_utc() -> None:
    store: dict[str, Any] = {}
    body: dict[str, Any] = {
        "stream_name": "S",
        "config": {"durable_name": "p", "pause_until": "2099-01-01T05:30:00+05:30"},
    }
    assert (
        create("$JS.API.CONSUMER.CREATE.S.p", body, store).config.pause_until == "2099-01-01T05:30:00+05:30"
    )
    body["config"]["pause_until"] = "2000-01-01T00:00:00Z"
    plan = create("$JS.API.CONSUMER.CREATE.S.p", body, store)
    assert plan.is_update and plan.config.pause_until == "2099-01-01T00:00:00Z"


def test_workqueue_rules() -> None:
    store: dict[str, Any] = {}
    c = "$JS.API.CONSUMER.CREATE.W."

    def w(name: str, **cfg: Any) -> dict[str, Any]:
        return {"stream_name": "W", "config": {"durable_name": name, "ack_policy": "explicit", **cfg}}

    assert err(create, c + "x", {"stream_name": "W", "config": {"durable_name": "x"}}, store)[1] == 10084
    assert err(create, c + "x", w("x", ack_policy="all"), store)[1] == 10098
    assert err(create, c + "x", w("x", deliver_policy="new"), store)[1] == 10101
    create(c + "a", w("a"), store)
    assert err(create, c + "b", w("b"), store)[1] == 10099
    assert err(create, c + "b", w("b", filter_subject="w.b"), store)[1] == 10100
    create(c + "a", w("a", filter_subject="w.a"), store)
    create(c + "b", w("b", filter_subject="w.b"), store)
    assert err(create, c + "c", w("c", filter_subject="w.*"), store)[1] == 10100
    assert err(create, c + "b", w("b", filter_subject="w.a"), store)[1] == 10100
    assert partition_unique("c", ["w.c"], store)
    check_workqueue(norm(durable_name="d", ack_policy="explicit", filter_subject="w.d"), "d", store)


def test_max_consumers() -> None:
    store: dict[str, Any] = {}
    limits = ServerLimits(account_max_consumers=1)
    create(
        "$JS.API.CONSUMER.CREATE.S.a",
        {"stream_name": "S", "config": {"durable_name": "a"}},
        store,
        limits=limits,
    )
    assert err(
        create,
        "$JS.API.CONSUMER.CREATE.S.b",
        {"stream_name": "S", "config": {"durable_name": "b"}},
        store,
        limits=limits,
    )[:2] == (400, 10026)


def test_long_names() -> None:
    n = "n" * 256
    assert (
        err(create, f"$JS.API.CONSUMER.CREATE.S.{n}", {"stream_name": "S", "config": {"durable_name": n}})[1]
        == 10102
    )
    assert err(create, f"$JS.API.CONSUMER.CREATE.S.{n}", {"stream_name": "S"}) == (
        500,
        10012,
        "error creating store for consumer",
    )
    assert create(f"$JS.API.CONSUMER.CREATE.S.{n}", {"stream_name": "S", "config": {"mem_storage": True}})


# --------------------------------------------------------------------------------------------
# Models


def test_decode_errors() -> None:
    def dec(body: bytes) -> str:
        return err(decode_create_request, body)[2]

    assert dec(b'{"action":"upsert"}') == 'invalid JSON: unknown consumer action: "upsert"'
    assert dec(b'{"action":null}') == "invalid JSON: unknown consumer action: null"
    assert dec(b'{"config":{"deliver_policy":null}}') == 'invalid JSON: can not unmarshal "null"'
    assert dec(b'{"config":{"priority_policy":"x"}}') == 'invalid JSON: unknown priority policy: "x"'
    assert dec(b'{"config":{"max_deliver":"x"}}') == (
        "invalid JSON: json: cannot unmarshal string into Go struct field "
        "CreateConsumerRequest.config.max_deliver of type int"
    )
    assert dec(b'{"config":{"bogus":1}}') == 'invalid JSON: json: unknown field "bogus"'
    req = decode_create_request(b'{"CONFIG":{"Deliver_Policy":"undefined","backoff":[],"metadata":null}}')
    assert (req.config.deliver_policy, req.config.backoff, req.config.metadata) == ("all", [], None)


def test_other_requests() -> None:
    assert decode_consumer_request(ConsumersRequest, b'{"offset":5}').offset == 5
    assert err(decode_consumer_request, ConsumersRequest, b'{"bogus":1}')[1] == 10025
    assert decode_consumer_request(ConsumerPauseRequest, b"{}").pause_until is None
    got = decode_consumer_request(ConsumerPauseRequest, b'{"pause_until":"2099-01-01T00:00:00Z"}')
    assert got.pause_until == "2099-01-01T00:00:00Z"
    unpin = decode_consumer_request(ConsumerUnpinRequest, b'{"group":"g","x":1}', strict=False, stream=False)
    assert unpin.group == "g"
    reset = decode_consumer_request(ConsumerResetRequest, b'{"seq":7}', strict=False, stream=False)
    assert reset.seq == 7


def test_error_envelopes() -> None:
    from jetlog.errors import E

    nf = E.STREAM_NOT_FOUND()
    head = b'{"type":"io.nats.jetstream.api.v1.'
    tail = b'"error":{"code":404,"err_code":10059,"description":"stream not found"}'
    assert encode_error(ConsumerCreateResponse, nf) == head + b'consumer_create_response",' + tail + b"}"
    assert encode_error(ConsumerNamesResponse, nf).endswith(
        b',"total":0,"offset":0,"limit":0,"consumers":[]}'
    )
    assert encode_error(ConsumerListResponse, nf).endswith(b',"total":0,"offset":0,"limit":0,"consumers":[]}')
    assert encode_error(ConsumerPauseResponse, nf).endswith(
        b',"paused":false,"pause_until":"0001-01-01T00:00:00Z"}'
    )
    assert encode_error(ConsumerResetResponse, nf).endswith(b',"reset_seq":0}')


def test_info_encoding() -> None:
    cfg = norm(name="x", priority_policy="overflow", priority_groups=["g"])
    info = ConsumerInfo(
        stream_name="S",
        name="x",
        created="2026-01-01T00:00:00Z",
        config=cfg,
        delivered=SequenceInfo(consumer_seq=1, stream_seq=2, last_active="2026-01-01T00:00:01Z"),
        ack_floor=SequenceInfo(consumer_seq=0, stream_seq=0),
        num_ack_pending=1,
        num_redelivered=0,
        num_waiting=0,
        num_pending=3,
        push_bound=False,
        ts="2026-01-01T00:00:02Z",
        priority_groups=[PriorityGroupState(group="g", pinned_ts="0001-01-01T00:00:00Z")],
    )
    out = json.loads(encode_json(info_response(ConsumerCreateResponse, info, version="2.15.1")))
    assert list(out)[:4] == ["type", "stream_name", "name", "created"]
    assert out["config"]["metadata"] == {"_nats.level": "5", "_nats.req.level": "1", "_nats.ver": "2.15.1"}
    assert out["priority_groups"] == [{"group": "g", "pinned_ts": "0001-01-01T00:00:00Z"}]
    assert "push_bound" not in out and out["delivered"]["last_active"] == "2026-01-01T00:00:01Z"
    back = msgspec.json.decode(encode_json(info), type=ConsumerInfo)
    assert back == info
