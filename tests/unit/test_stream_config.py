"""Stream config defaults, validation order, pedantic mode, update rules, idempotent create,
overlap and subject transforms — expectations measured on nats-server 2.15.1."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.api.models import StreamConfig, StreamConfigRequest, encode_json, with_dynamic_metadata
from jetlog.errors import ApiError
from jetlog.stream.config import (
    MIRRORS_UNSUPPORTED,
    SOURCES_UNSUPPORTED,
    check_consumer_limits,
    check_create_request,
    check_stream_update,
    normalize_stream_config,
    prepare_stream_create,
    prepare_stream_update,
    required_api_level,
    same_config_for_create,
    subject_transform_error,
    subjects_overlap,
    validate_stream_config,
)
from jetlog.stream.config_transform import validate_mapping


def req(**kw: Any) -> StreamConfigRequest:
    return msgspec.convert(kw, StreamConfigRequest)


def cfg_of(**kw: Any) -> StreamConfig:
    return validate_stream_config(normalize_stream_config(req(**kw)))


def err_of(fn: Any, *a: Any, **kw: Any) -> tuple[int, int, str]:
    with pytest.raises(ApiError) as ei:
        fn(*a, **kw)
    e = ei.value
    return e.code, e.err_code, e.description


ORDERS = (
    b'{"name":"ORDERS","subjects":["orders.\\u003e"],"retention":"limits","max_consumers":-1,"max_msgs":-1,'
    b'"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"discard":"old","storage":"file",'
    b'"num_replicas":1,"duplicate_window":120000000000,"compression":"none","allow_direct":false,'
    b'"mirror_direct":false,"sealed":false,"deny_delete":false,"deny_purge":false,"allow_rollup_hdrs":false,'
    b'"consumer_limits":{},"allow_msg_ttl":false,'
    b'"metadata":{"_nats.level":"5","_nats.req.level":"0","_nats.ver":"2.15.1"}}'
)


def test_minimal_config_bytes() -> None:
    cfg = cfg_of(name="ORDERS", subjects=["orders.>"])
    assert encode_json(with_dynamic_metadata(cfg, "2.15.1")) == ORDERS


@pytest.mark.parametrize(
    ("kw", "expect"),
    [
        ({"name": "N"}, {"subjects": ["N"]}),
        (
            {"name": "N", "max_msgs": -7, "max_consumers": -9, "max_msg_size": -3, "max_bytes": -4},
            {"max_msgs": -1, "max_consumers": -1, "max_msg_size": -1, "max_bytes": -1},
        ),
        (
            {"name": "N", "max_msgs_per_subject": 0, "num_replicas": 0},
            {"max_msgs_per_subject": -1, "num_replicas": 1},
        ),
        ({"name": "N", "max_age": 1_000_000_000}, {"duplicate_window": 1_000_000_000}),
        ({"name": "N", "max_age": 300_000_000_000}, {"duplicate_window": 120_000_000_000}),
        (
            {"name": "N", "max_age": 2_000_000_000, "duplicate_window": 1_000_000_000},
            {"duplicate_window": 1_000_000_000},
        ),
        (
            {"name": "N", "subject_delete_marker_ttl": 2_000_000_000, "deny_purge": True},
            {
                "allow_msg_ttl": True,
                "allow_rollup_hdrs": True,
                "deny_purge": False,
                "metadata": {"_nats.req.level": "1"},
            },
        ),
        (
            {"name": "N", "allow_msg_schedules": True},
            {"allow_rollup_hdrs": True, "metadata": {"_nats.req.level": "2"}},
        ),
        ({"name": "N", "allow_msg_counter": True}, {"metadata": {"_nats.req.level": "2"}}),
        (
            {"name": "N", "persist_mode": "async"},
            {"persist_mode": "async", "metadata": {"_nats.req.level": "2"}},
        ),
        ({"name": "N", "allow_batched": True, "allow_msg_ttl": True}, {"metadata": {"_nats.req.level": "4"}}),
        (
            {
                "name": "N",
                "metadata": {"_nats.ver": "1", "_nats.level": "9", "_nats.req.level": "7", "u": "x"},
            },
            {"metadata": {"_nats.req.level": "0", "u": "x"}},
        ),
        ({"name": "N", "placement": {}}, {"placement": None}),
        ({"name": "N", "republish": {"dest": "out.>"}}, {"republish": {"src": ">", "dest": "out.>"}}),
        (
            {
                "name": "N",
                "subjects": ["t"],
                "subject_transform": {"src": "t", "dest": "u"},
                "republish": {"src": ">", "dest": ">"},
            },
            {"republish": {"src": "u", "dest": "u"}},
        ),
        (
            {"name": "N", "discard": "new", "discard_new_per_subject": True, "max_msgs_per_subject": 1},
            {"discard_new_per_subject": True},
        ),
        ({"name": "N", "first_seq": 100, "sources": []}, {"first_seq": 100}),
    ],
)
def test_normalisation(kw: dict[str, Any], expect: dict[str, Any]) -> None:
    cfg = msgspec.to_builtins(cfg_of(**kw))
    for k, v in expect.items():
        assert cfg.get(k) == v, k


@pytest.mark.parametrize(
    ("kw", "error"),
    [
        (
            {"name": "F*O"},
            (500, 10052, "stream name is required and can not contain '.', '*', '>', '\\', '/'"),
        ),
        ({"name": ""}, (500, 10052, "stream name is required and can not contain '.', '*', '>', '\\', '/'")),
        ({"name": "x" * 256}, (500, 10052, "stream name is too long, maximum allowed is 255")),
        (
            {"name": "N", "description": "d" * 4097},
            (500, 10052, "stream description is too long, maximum allowed is 4096"),
        ),
        (
            {"name": "N", "metadata": {"k": "v" * (131072 - 1 - 15)}},
            (500, 10052, "stream metadata exceeds maximum size of 131072 bytes"),
        ),
        ({"name": "N", "num_replicas": 6}, (500, 10052, "maximum replicas is 5")),
        ({"name": "N", "num_replicas": -1, "max_age": 5}, (400, 10133, "replicas count cannot be negative")),
        ({"name": "N", "num_replicas": 3, "max_age": 5}, (500, 10052, "max age needs to be >= 100ms")),
        ({"name": "N", "num_replicas": 3}, (500, 10074, "replicas > 1 not supported in non-clustered mode")),
        ({"name": "N", "max_age": -1}, (500, 10052, "max age can not be negative")),
        ({"name": "N", "max_age": 99_999_999}, (500, 10052, "max age needs to be >= 100ms")),
        ({"name": "N", "duplicate_window": -1}, (500, 10052, "duplicates window can not be negative")),
        (
            {"name": "N", "duplicate_window": 50_000_000},
            (500, 10052, "duplicates window needs to be >= 100ms"),
        ),
        (
            {"name": "N", "duplicate_window": 200_000_000_000, "max_age": 100_000_000_000},
            (500, 10052, "duplicates window can not be larger then max age"),
        ),
        (
            {"name": "N", "deny_purge": True, "allow_rollup_hdrs": True},
            (500, 10052, "roll-ups require the purge permission"),
        ),
        (
            {"name": "N", "allow_msg_counter": True, "discard": "new"},
            (500, 10052, "counter stream cannot use discard new"),
        ),
        (
            {"name": "N", "allow_msg_counter": True, "allow_msg_ttl": True},
            (500, 10052, "counter stream cannot use message TTLs"),
        ),
        (
            {"name": "N", "allow_msg_counter": True, "retention": "interest"},
            (500, 10052, "counter stream can only use limits retention"),
        ),
        (
            {"name": "N", "discard_new_per_subject": True, "max_msgs_per_subject": 1},
            (500, 10052, "discard new per subject requires discard new policy to be set"),
        ),
        (
            {"name": "N", "discard": "new", "discard_new_per_subject": True},
            (500, 10052, "discard new per subject requires max msgs per subject > 0"),
        ),
        (
            {"name": "N", "subject_delete_marker_ttl": -1},
            (500, 10052, "subject delete marker TTL must not be negative"),
        ),
        (
            {"name": "N", "subject_delete_marker_ttl": 500_000_000},
            (500, 10052, "subject delete marker TTL must be at least 1 second"),
        ),
        (
            {"name": "N", "allow_msg_schedules": True, "discard": "new"},
            (500, 10052, "message scheduling cannot use discard new"),
        ),
        (
            {"name": "N", "persist_mode": "async", "storage": "memory"},
            (500, 10052, "async persist mode is only supported on file storage"),
        ),
        (
            {"name": "N", "persist_mode": "async", "allow_atomic": True},
            (500, 10052, "async persist mode is not supported with atomic batch publish"),
        ),
        ({"name": "N", "mirror": {"name": "X"}}, (500, 10052, MIRRORS_UNSUPPORTED)),
        # nats-server's first mirror checks come before jetlog's refusal (fuzz finding).
        (
            {"name": "N", "mirror": {"name": "X"}, "subjects": ["m"]},
            (400, 10034, "stream mirrors can not contain subjects"),
        ),
        (
            {"name": "N", "mirror": {"name": "X"}, "first_seq": 5},
            (400, 10143, "stream mirrors can not have first sequence configured"),
        ),
        (
            {"name": "N", "mirror": {"name": "X"}, "sources": [{"name": "Y"}]},
            (400, 10031, "stream mirrors can not also contain other sources"),
        ),
        (
            {"name": "N", "mirror": {"name": "X"}, "allow_msg_schedules": True},
            (400, 10186, "stream mirrors can not also schedule messages"),
        ),
        ({"name": "N", "sources": [{"name": "X"}]}, (500, 10052, SOURCES_UNSUPPORTED)),
        ({"name": "N", "subjects": ["a.*", "a.b"]}, (500, 10052, 'subject "a.*" overlaps with "a.b"')),
        ({"name": "N", "subjects": ["a", "a"]}, (500, 10052, 'subject "a" overlaps with "a"')),
        ({"name": "N", "subjects": ["foo..bar"]}, (500, 10052, "invalid subject")),
        ({"name": "N", "subjects": [""]}, (500, 10052, "invalid subject")),
        ({"name": "N", "subjects": [">"]}, (500, 10052, "capturing all subjects requires no-ack to be true")),
        (
            {"name": "N", "subjects": ["$JS.API.FOO"]},
            (500, 10052, "subjects that overlap with jetstream api require no-ack to be true"),
        ),
        (
            {"name": "N", "subjects": ["*.>"]},
            (500, 10052, "subjects that overlap with jetstream api require no-ack to be true"),
        ),
        (
            {"name": "N", "subjects": ["$SYS.>"]},
            (500, 10052, "subjects that overlap with system api require no-ack to be true"),
        ),
        (
            {"name": "N", "subjects": ["s.*"], "subject_transform": {"src": "s..*", "dest": "t"}},
            (400, 10155, "stream transform source: invalid subject s..*"),
        ),
        (
            {
                "name": "N",
                "subjects": ["s.*"],
                "subject_transform": {"src": "s.*", "dest": "t.{{wildcard(2)}}"},
            },
            (
                400,
                10156,
                "stream transform: invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]",
            ),
        ),
        (
            {"name": "N", "subjects": ["s"], "republish": {"dest": "s"}},
            (500, 10052, "stream configuration for republish destination forms a cycle"),
        ),
        (
            {"name": "N", "subjects": ["s.*"], "republish": {"src": "s.*", "dest": "o.>"}},
            (500, 10052, "stream configuration for republish with transform from 's.*' to 'o.>' not valid"),
        ),
        (
            {"name": "N", "placement": {"preferred": "x"}},
            (500, 10052, "preferred server not permitted in placement"),
        ),
        # pedantic
        (
            {"name": "N", "max_msgs": -5, "pedantic": True},
            (400, 10157, "pedantic mode: max_msgs must be set to -1"),
        ),
        (
            {"name": "N", "max_consumers": -2, "pedantic": True},
            (400, 10157, "pedantic mode: max_consumers must be set to -1"),
        ),
        (
            {"name": "N", "num_replicas": 7, "max_msgs": -5, "pedantic": True},
            (500, 10052, "maximum replicas is 5"),
        ),
        (
            {"name": "N", "max_age": 60_000_000_000, "pedantic": True},
            (400, 10157, "pedantic mode: duplicate window cannot be bigger than max age"),
        ),
        (
            {"name": "N", "subject_delete_marker_ttl": 2_000_000_000, "pedantic": True},
            (500, 10052, "subject delete marker cannot be set if message TTLs are disabled"),
        ),
        (
            {
                "name": "N",
                "subject_delete_marker_ttl": 2_000_000_000,
                "allow_msg_ttl": True,
                "pedantic": True,
            },
            (500, 10052, "subject delete marker cannot be set if roll-ups are disabled"),
        ),
        (
            {"name": "N", "allow_msg_schedules": True, "pedantic": True},
            (500, 10052, "message scheduling cannot be set if roll-ups are disabled"),
        ),
        (
            {"name": "N", "republish": {"dest": "o"}, "pedantic": True},
            (400, 10157, "pedantic mode: republish source can not be empty"),
        ),
        (
            {
                "name": "N",
                "subject_transform": {"src": "N", "dest": "u"},
                "republish": {"src": ">", "dest": ">"},
                "pedantic": True,
            },
            (400, 10157, "pedantic mode: implicit republish based on subject transform"),
        ),
        ({"name": "N", "max_bytes": 0, "pedantic": True}, None),
    ],
)
def test_errors_in_server_order(kw: dict[str, Any], error: tuple[int, int, str] | None) -> None:
    if error is None:
        cfg_of(**kw)
    else:
        assert err_of(cfg_of, **kw) == error


def test_account_byte_limits() -> None:
    assert err_of(normalize_stream_config, req(name="N"), max_bytes_required=True)[1] == 10113
    assert err_of(normalize_stream_config, req(name="N", max_bytes=100), max_stream_bytes=10)[1] == 10122
    normalize_stream_config(req(name="N", max_bytes=10), max_bytes_required=True, max_stream_bytes=10)


def test_create_preconditions() -> None:
    assert err_of(check_create_request, "FOO", req(name="BAR")) == (
        400,
        10056,
        "stream name in subject does not match request",
    )
    assert err_of(check_create_request, "a/b", req(name="a/b"))[1] == 10128
    assert err_of(check_create_request, "c\\d", req(name="c\\d", sealed=True))[1] == 10128
    assert err_of(check_create_request, "S", req(name="S", sealed=True, mirror_direct=True))[2] == (
        "stream configuration for create can not be sealed"
    )
    assert err_of(check_create_request, "S", req(name="S", mirror_direct=True))[2] == (
        "stream has no mirror but does have mirror direct"
    )
    assert err_of(prepare_stream_create, req(), "X")[1] == 10056  # empty body
    assert prepare_stream_create(req(name="R", num_replicas=3), "R", clustered=True).num_replicas == 3


def test_update_preconditions() -> None:
    assert err_of(prepare_stream_update, req(), "X")[2].startswith("stream name is required")
    assert err_of(prepare_stream_update, req(name="Y", max_age=5), "X")[2] == "max age needs to be >= 100ms"
    assert err_of(prepare_stream_update, req(name="Y"), "X")[1] == 10056


# --------------------------------------------------------------------------------------------
# Update rules


def upd(old: StreamConfig, **kw: Any) -> StreamConfig:
    new = normalize_stream_config(req(**kw), api_level_metadata=False)
    return check_stream_update(old, new)


@pytest.mark.parametrize(
    ("old_kw", "new_kw", "error"),
    [
        (
            {},
            {"storage": "memory", "retention": "workqueue"},
            "stream configuration update can not change storage type",
        ),
        (
            {},
            {"retention": "workqueue"},
            "stream configuration update can not change retention policy to/from workqueue",
        ),
        (
            {"retention": "workqueue"},
            {},
            "stream configuration update can not change retention policy to/from workqueue",
        ),
        ({}, {"retention": "interest"}, None),
        ({}, {"num_replicas": 3, "storage": "memory"}, "replicas > 1 not supported in non-clustered mode"),
        ({"deny_delete": True}, {}, "stream configuration update can not cancel deny message deletes"),
        ({"deny_purge": True}, {}, "stream configuration update can not cancel deny purge"),
        ({"allow_msg_ttl": True}, {}, "message TTL status can not be disabled"),
        ({"subject_delete_marker_ttl": 2_000_000_000}, {}, "message TTL status can not be disabled"),
        (
            {},
            {"allow_msg_counter": True},
            "stream configuration update can not change message counter setting",
        ),
        (
            {"allow_msg_counter": True},
            {},
            "stream configuration update can not change message counter setting",
        ),
        ({"allow_msg_schedules": True}, {}, "message schedules can not be disabled"),
        ({}, {"persist_mode": "async"}, "stream configuration update can not change persist mode"),
        ({}, {"allow_msg_ttl": True, "first_seq": 50, "max_msgs": 6}, None),
        (
            {"allow_rollup_hdrs": True},
            {"allow_rollup_hdrs": True, "deny_purge": True},
            "roll-ups require the purge permission",
        ),
        ({}, {"mirror": {"name": "X"}}, "stream mirrors can not contain subjects"),
    ],
)
def test_update_rules(old_kw: dict[str, Any], new_kw: dict[str, Any], error: str | None) -> None:
    old = cfg_of(name="U", subjects=["u"], **old_kw)
    if error is None:
        upd(old, name="U", subjects=["u"], **new_kw)
    else:
        assert err_of(upd, old, name="U", subjects=["u"], **new_kw)[2] == error


def test_update_sealing_and_unsealing() -> None:
    old = cfg_of(name="S", allow_msg_ttl=True)
    sealed = upd(
        old, name="S", allow_msg_ttl=True, sealed=True, max_age=5_000_000_000, allow_rollup_hdrs=True
    )
    assert (
        sealed.max_age,
        sealed.discard,
        sealed.deny_delete,
        sealed.deny_purge,
        sealed.allow_rollup_hdrs,
    ) == (
        0,
        "new",
        True,
        True,
        False,
    )
    assert sealed.duplicate_window == 5_000_000_000  # computed before sealing, like the server
    assert sealed.metadata == {"_nats.req.level": "1"}
    assert err_of(upd, sealed, name="S", allow_msg_ttl=True, deny_delete=True, deny_purge=True)[2] == (
        "stream configuration update can not unseal a sealed stream"
    )


def test_update_strips_dynamic_metadata_and_checks_name() -> None:
    old = cfg_of(name="M")
    new = upd(
        old, name="M", metadata={"_nats.ver": "2.15.1", "_nats.level": "5", "_nats.req.level": "0", "a": "b"}
    )
    assert new.metadata == {"_nats.req.level": "0", "a": "b"}
    other = normalize_stream_config(req(name="Other"), api_level_metadata=False)
    assert err_of(check_stream_update, old, other)[2] == "stream configuration name must match original"


def test_consumer_limits_on_update() -> None:
    old = cfg_of(name="C")
    new = cfg_of(name="C", consumer_limits={"inactive_threshold": 5_000_000_000, "max_ack_pending": 10})
    check_consumer_limits(old, new, [("a", 1_000_000_000, 10)])
    assert err_of(check_consumer_limits, old, new, [("a", 9_000_000_000, 1), ("b", 0, 11), ("c", 0, 0)]) == (
        500,
        10069,
        "change to limits violates consumers: a, b",
    )
    check_consumer_limits(new, new, [("a", 9_000_000_000, 100)])  # unchanged limits: no check


# --------------------------------------------------------------------------------------------
# Idempotent create, overlap


def test_same_config_for_create() -> None:
    base = cfg_of(name="I", subjects=["i.>", "j.>"], max_msgs=1000)
    assert same_config_for_create(
        base, cfg_of(name="I", subjects=["i.>", "j.>"], max_msgs=1000, duplicate_window=120_000_000_000)
    )
    assert same_config_for_create(
        base, cfg_of(name="I", subjects=["i.>", "j.>"], max_msgs=1000, metadata={"_nats.ver": "x"})
    )
    assert not same_config_for_create(base, cfg_of(name="I", subjects=["j.>", "i.>"], max_msgs=1000))
    assert not same_config_for_create(
        base, cfg_of(name="I", subjects=["i.>", "j.>"], max_msgs=1000, metadata={"a": "b"})
    )
    assert not same_config_for_create(base, cfg_of(name="I", subjects=["i.>", "j.>"], max_msgs=999))
    # _nats.req.level is taken from the stored config (or dropped if it has none)
    legacy = msgspec.structs.replace(base, metadata={})
    assert same_config_for_create(legacy, base)
    assert same_config_for_create(msgspec.structs.replace(base, metadata={"_nats.req.level": "9"}), base)
    # nil vs empty sources / placement tags, like reflect.DeepEqual
    assert not same_config_for_create(cfg_of(name="I", sources=[]), cfg_of(name="I"))
    assert same_config_for_create(cfg_of(name="I", sources=[]), cfg_of(name="I", sources=[]))
    assert not same_config_for_create(cfg_of(name="I", placement={"tags": []}), cfg_of(name="I"))


def test_subjects_overlap() -> None:
    others = ["orders.>", "kv.a", "x.*.z"]
    assert subjects_overlap(["orders.new"], others)
    assert subjects_overlap([">"], others)
    assert subjects_overlap(["x.y.*"], others)
    assert not subjects_overlap(["kv.b", "x.y"], others)
    assert not subjects_overlap(["a"], [])


def test_required_api_level() -> None:
    assert required_api_level(req()) == 0
    assert required_api_level(req(subject_delete_marker_ttl=1)) == 1
    assert required_api_level(req(allow_atomic=True, allow_msg_ttl=True)) == 2
    assert required_api_level(req(allow_batched=True, allow_msg_counter=True)) == 4


# --------------------------------------------------------------------------------------------
# Subject transforms


@pytest.mark.parametrize(
    ("src", "dest", "error"),
    [
        ("q.*", "u.{{left(1,2)}}", None),
        ("q.*", "u.{{right(1,2)}}", None),
        (
            "q.*",
            "u.{{Left(1)}}",
            "invalid mapping destination: not enough arguments passed to the function in {{Left(1)}}",
        ),
        (
            "q.*",
            "u.{{right(1,2,3)}}",
            "invalid mapping destination: too many arguments passed to the function in {{right(1,2,3)}}",
        ),
        ("q.*", "u.{{splitfromleft(1,1)}}", None),
        ("q.*", "u.{{random(3)}}", None),
        (
            "q.*",
            "u.{{random()}}",
            "invalid mapping destination: function argument is invalid or in the wrong format in {{random()}}",
        ),
        (
            "q.*",
            "u.{{partition(a)}}",
            "invalid mapping destination: function argument is invalid or in the wrong format in {{partition(a)}}",
        ),
        (
            "q.*",
            "u.{{split(1)}}",
            "invalid mapping destination: not enough arguments passed to the function in {{split(1)}}",
        ),
        ("q.*", "u.{{ wildcard ( 1 ) }}", None),
        ("q.*", "u.{{wildcard(1)}}x", None),
        ("q.*", "u.{{wildcard(0)}}", None),
        (
            "q.*",
            "u.{{partition(3,2)}}",
            "invalid mapping destination: wildcard index out of range in {{partition(3,2)}}: [2]",
        ),
        ("q.*", "u.$2", "invalid mapping destination: wildcard index out of range in $2: [2]"),
        ("q.*", "u.$x", None),
        ("q.*", "u.{{bogus(1)}}", "invalid mapping destination: unknown function in {{bogus(1)}}"),
        ("q.*", "u. x", "invalid mapping destination: invalid transform"),
        ("q.*", "u..x", "invalid mapping destination: invalid transform"),
        ("q.*", "u.*", "invalid subject"),
        ("q.>", "u.x", "invalid subject"),
        ("q.>", "u.>", None),
        (
            "q",
            "u.{{wildcard(1)}}",
            "invalid mapping destination: wildcard index out of range in {{wildcard(1)}}",
        ),
        ("q", "u.{{partition(3)}}", None),
        ("", "", None),
        (
            "q.*",
            "u.{{wildcard()}}",
            "invalid mapping destination: not enough arguments passed to the function in {{wildcard()}}",
        ),
    ],
)
def test_validate_mapping(src: str, dest: str, error: str | None) -> None:
    assert validate_mapping(src, dest) == error


def test_subject_transform_error() -> None:
    assert subject_transform_error("s.*", "o.{{wildcard(1)}}") is None
    assert subject_transform_error("s.*", "") is None
    assert subject_transform_error("", "o.>") is None
    assert subject_transform_error("s.*", "o.{{wildcard(2)}}") is not None


# --------------------------------------------------------------------------------------------
# Properties


_kw = st.fixed_dictionaries(
    {"name": st.sampled_from(["A", "B_1", "KV_x"])},
    optional={
        "subjects": st.lists(st.sampled_from(["a", "b.*", "c.>", "d.e"]), unique=True, max_size=3),
        "max_msgs": st.integers(-3, 5),
        "max_bytes": st.integers(-3, 5),
        "max_age": st.sampled_from([0, 100_000_000, 1_000_000_000, 300_000_000_000]),
        "duplicate_window": st.sampled_from([0, 100_000_000, 500_000_000]),
        "max_msgs_per_subject": st.integers(-2, 3),
        "discard": st.sampled_from(["old", "new"]),
        "storage": st.sampled_from(["file", "memory"]),
        "allow_rollup_hdrs": st.booleans(),
        "deny_purge": st.booleans(),
        "subject_delete_marker_ttl": st.sampled_from([0, 1_000_000_000]),
        "allow_msg_ttl": st.booleans(),
        "placement": st.sampled_from([{}, {"cluster": "c"}, {"tags": []}]),
        "metadata": st.dictionaries(st.sampled_from(["a", "_nats.ver"]), st.text(max_size=2), max_size=2),
    },
)


@settings(max_examples=300, deadline=None)
@given(_kw)
def test_normalisation_is_idempotent(kw: dict[str, Any]) -> None:
    """A stored config passes the checks again unchanged (what update and restore rely on),
    survives JSON persistence, and is "the same" for an identical re-create."""
    try:
        cfg = cfg_of(**kw)
    except ApiError:
        return
    assert validate_stream_config(cfg) == cfg
    assert check_stream_update(cfg, normalize_stream_config(req(**kw), api_level_metadata=False)) == cfg
    assert same_config_for_create(cfg, cfg_of(**kw))
    back = msgspec.json.decode(encode_json(cfg), type=StreamConfig)
    assert json.loads(encode_json(back)) == json.loads(encode_json(cfg))
