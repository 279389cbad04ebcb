"""Stream management API conformance: each test runs against jetlog and nats-server -js."""

from __future__ import annotations

import nats
import pytest
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

from .conftest import Target
from .jsutil import api, error_of, scrub

T = "io.nats.jetstream.api.v1."


async def test_create_minimal_fills_defaults(nc: nats.NATS) -> None:
    r = await api(nc, "$JS.API.STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders.>"]})
    assert r["type"] == T + "stream_create_response"
    assert r["did_create"] is True
    cfg = r["config"]
    assert scrub(cfg) == {
        "name": "ORDERS",
        "subjects": ["orders.>"],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msgs_per_subject": -1,
        "max_msg_size": -1,
        "discard": "old",
        "storage": "file",
        "num_replicas": 1,
        "duplicate_window": 120000000000,
        "compression": "none",
        "allow_direct": False,
        "mirror_direct": False,
        "sealed": False,
        "deny_delete": False,
        "deny_purge": False,
        "allow_rollup_hdrs": False,
        "consumer_limits": {},
        "allow_msg_ttl": False,
        "metadata": {"_nats.level": "5", "_nats.req.level": "0"},
    }
    assert list(cfg)[:5] == ["name", "subjects", "retention", "max_consumers", "max_msgs"]
    assert r["state"] == {
        "messages": 0,
        "bytes": 0,
        "first_seq": 0,
        "first_ts": "0001-01-01T00:00:00Z",
        "last_seq": 0,
        "last_ts": "0001-01-01T00:00:00Z",
        "consumer_count": 0,
    }
    assert "cluster" not in r


async def test_create_is_idempotent_and_rejects_different_config(nc: nats.NATS) -> None:
    body = {"name": "S", "subjects": ["s.*"], "max_msgs": 10}
    a = await api(nc, "$JS.API.STREAM.CREATE.S", body)
    b = await api(nc, "$JS.API.STREAM.CREATE.S", body)
    assert a["did_create"] is True and b["did_create"] is True
    assert scrub(a["config"]) == scrub(b["config"])
    c = await api(nc, "$JS.API.STREAM.CREATE.S", {**body, "max_msgs": 11})
    assert error_of(c) == (400, 10058, "stream name already in use with a different configuration")


@pytest.mark.parametrize(
    ("subject", "body", "expected"),
    [
        (
            "FOO",
            {"name": "FOO", "subjects": ["foo"], "bogus": 1},
            (400, 10025, 'invalid JSON: json: unknown field "bogus"'),
        ),
        ("FOO", {"name": "BAR"}, (400, 10056, "stream name in subject does not match request")),
        ("FOO", b"", (400, 10056, "stream name in subject does not match request")),
        ("SMALLAGE", {"name": "SMALLAGE", "max_age": 1000}, (500, 10052, "max age needs to be >= 100ms")),
        ("NEG", {"name": "NEG", "max_age": -1}, (500, 10052, "max age can not be negative")),
        (
            "SEALED",
            {"name": "SEALED", "sealed": True},
            (500, 10052, "stream configuration for create can not be sealed"),
        ),
        (
            "R3",
            {"name": "R3", "num_replicas": 3},
            (500, 10074, "replicas > 1 not supported in non-clustered mode"),
        ),
        ("OV", {"name": "OV", "subjects": ["a.*", "a.b"]}, (500, 10052, 'subject "a.*" overlaps with "a.b"')),
        (
            "DNP",
            {"name": "DNP", "discard_new_per_subject": True},
            (500, 10052, "discard new per subject requires discard new policy to be set"),
        ),
    ],
)
async def test_create_errors(
    nc: nats.NATS, subject: str, body: object, expected: tuple[int, int, str]
) -> None:
    r = await api(nc, f"$JS.API.STREAM.CREATE.{subject}", body)
    assert r["type"] == T + "stream_create_response"
    assert error_of(r) == expected


async def test_subjects_overlap_with_other_stream(nc: nats.NATS) -> None:
    await api(nc, "$JS.API.STREAM.CREATE.A", {"name": "A", "subjects": ["x.*"]})
    r = await api(nc, "$JS.API.STREAM.CREATE.B", {"name": "B", "subjects": ["x.y"]})
    assert error_of(r) == (400, 10065, "subjects overlap with an existing stream")


async def test_info_unknown_stream_shape(nc: nats.NATS) -> None:
    r = await api(nc, "$JS.API.STREAM.INFO.NOPE")
    assert r == {
        "type": T + "stream_info_response",
        "error": {"code": 404, "err_code": 10059, "description": "stream not found"},
        "total": 0,
        "offset": 0,
        "limit": 0,
    }


async def test_info_with_subjects_filter_and_deleted_details(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ORD", subjects=["ord.>"])
    for i in range(7):
        await js.publish("ord.new", f"o{i}".encode())
    await js.publish("ord.other", b"x")
    await js.delete_msg("ORD", 2)
    await js.delete_msg("ORD", 3)
    r = await api(nc, "$JS.API.STREAM.INFO.ORD", {"subjects_filter": ">", "deleted_details": True})
    st = r["state"]
    assert (r["total"], r["offset"], r["limit"]) == (2, 0, 100000)
    assert st["messages"] == 6
    assert st["first_seq"] == 1 and st["last_seq"] == 8
    assert st["num_subjects"] == 2
    assert st["subjects"] == {"ord.new": 5, "ord.other": 1}
    assert st["num_deleted"] == 2 and st["deleted"] == [2, 3]
    assert "leader" in r["cluster"]
    # bytes: file store formula 22+len(subj)+len(data)+8 per message
    assert st["bytes"] == sum(22 + len("ord.new") + 2 + 8 for _ in range(5)) + (22 + len("ord.other") + 1 + 8)


async def test_update_and_immutables(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="U", subjects=["u.>"], storage="file")
    info = await js.update_stream(StreamConfig(name="U", subjects=["u.>", "v.>"], max_msgs=5))
    assert info.config.subjects == ["u.>", "v.>"]
    assert info.config.max_msgs == 5
    r = await api(nc, "$JS.API.STREAM.UPDATE.U", {"name": "U", "subjects": ["u.>"], "storage": "memory"})
    assert error_of(r) == (500, 10052, "stream configuration update can not change storage type")
    r = await api(nc, "$JS.API.STREAM.UPDATE.NOPE", {"name": "NOPE"})
    assert error_of(r) == (404, 10059, "stream not found")
    r = await api(nc, "$JS.API.STREAM.UPDATE.U", {"name": "X"})
    assert error_of(r) == (400, 10056, "stream name in subject does not match request")


async def test_update_lowering_limits_applies_at_once(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="L", subjects=["l"])
    for i in range(10):
        await js.publish("l", str(i).encode())
    info = await js.update_stream(StreamConfig(name="L", subjects=["l"], max_msgs=3))
    assert info.state.messages == 3
    assert info.state.first_seq == 8
    assert info.state.last_seq == 10


async def test_delete_requires_empty_body_and_deletes(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="D", subjects=["d"])
    r = await api(nc, "$JS.API.STREAM.DELETE.D", {"x": 1})
    assert error_of(r) == (400, 10038, "expected an empty request payload")
    assert await js.delete_stream("D") is True
    with pytest.raises(NotFoundError):
        await js.stream_info("D")
    r = await api(nc, "$JS.API.STREAM.DELETE.D")
    assert error_of(r) == (404, 10059, "stream not found")


async def test_names_and_list_paging_and_filter(nc: nats.NATS) -> None:
    r = await api(nc, "$JS.API.STREAM.NAMES")
    assert r == {"type": T + "stream_names_response", "total": 0, "offset": 0, "limit": 1024, "streams": None}
    r = await api(nc, "$JS.API.STREAM.LIST")
    assert r == {"type": T + "stream_list_response", "total": 0, "offset": 0, "limit": 256, "streams": []}
    js = nc.jetstream()
    for name in ["KV_cfg", "KVL", "B", "A"]:
        await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    r = await api(nc, "$JS.API.STREAM.NAMES")
    assert r["streams"] == ["A", "B", "KVL", "KV_cfg"]
    r = await api(nc, "$JS.API.STREAM.NAMES", {"offset": 2})
    assert (r["total"], r["offset"], r["streams"]) == (4, 2, ["KVL", "KV_cfg"])
    r = await api(nc, "$JS.API.STREAM.NAMES", {"offset": 10})
    assert (r["total"], r["offset"]) == (4, 4)
    r = await api(nc, "$JS.API.STREAM.NAMES", {"subject": "a.x"})
    assert r["streams"] == ["A"]
    r = await api(nc, "$JS.API.STREAM.NAMES", {"subject": "nomatch"})
    assert r["streams"] is None and r["total"] == 0
    r = await api(nc, "$JS.API.STREAM.LIST", {"subject": "*.y"})
    assert [s["config"]["name"] for s in r["streams"]] == ["A", "B", "KVL", "KV_cfg"]
    assert "cluster" not in r["streams"][0]
    names = await js.streams_info()
    assert sorted(s.config.name for s in names) == ["A", "B", "KVL", "KV_cfg"]


async def test_unknown_api_subject_gets_no_reply(nc: nats.NATS) -> None:
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("$JS.API.BOGUS", b"", timeout=0.5)
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("$JS.API.STREAM.BOGUS.X", b"", timeout=0.5)


async def test_clustered_only_apis_on_single_server(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="C", subjects=["c"])
    r = await api(nc, "$JS.API.STREAM.LEADER.STEPDOWN.C")
    assert error_of(r) == (503, 10010, "JetStream clustering support required")


async def test_account_info(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="F", subjects=["f"], max_bytes=1000)
    await js.add_stream(name="M", subjects=["m"], storage="memory")
    await js.publish("f", b"12345")
    await js.publish("m", b"12345")
    r = await api(nc, "$JS.API.INFO")
    assert r["type"] == T + "account_info_response"
    assert r["streams"] == 2 and r["consumers"] == 0
    assert r["storage"] == 22 + 1 + 5 + 8
    assert r["memory"] == 1 + 5 + 16
    assert r["reserved_storage"] == 1000 and r["reserved_memory"] == 0
    assert r["limits"] == {
        "max_memory": -1,
        "max_storage": -1,
        "max_streams": -1,
        "max_consumers": -1,
        "max_ack_pending": -1,
        "memory_max_stream_bytes": -1,
        "storage_max_stream_bytes": -1,
        "max_bytes_required": False,
    }
    assert r["api"]["level"] == 5
    assert r["api"]["total"] == 2 and r["api"]["errors"] == 0  # the two creates; INFO counts after replying


async def test_required_api_level(nc: nats.NATS) -> None:
    msg = await nc.request("$JS.API.INFO", b"", headers={"Nats-Required-Api-Level": "99"}, timeout=3)
    import json

    r = json.loads(msg.data)
    assert error_of(r) == (412, 10185, "JetStream minimum api level required")


async def test_nats_py_stream_lifecycle(nc: nats.NATS, target: Target) -> None:
    js = nc.jetstream()
    info = await js.add_stream(name="LIFE", subjects=["life.*"], description="d")
    assert info.config.description == "d"
    with pytest.raises(BadRequestError):
        await js.add_stream(name="LIFE", subjects=["other"])
    assert (await js.stream_info("LIFE")).config.subjects == ["life.*"]
    assert await js.find_stream_name_by_subject("life.x") == "LIFE"
    await js.delete_stream("LIFE")
    assert await js.streams_info() == []


async def test_concurrent_creates_of_one_name(nc: nats.NATS) -> None:
    import asyncio

    body = {"name": "RACE", "subjects": ["race.>"]}
    rs = await asyncio.gather(*[api(nc, "$JS.API.STREAM.CREATE.RACE", body) for _ in range(8)])
    assert all(r.get("did_create") is True for r in rs)
    names = await api(nc, "$JS.API.STREAM.NAMES")
    assert names["streams"] == ["RACE"]
    js = nc.jetstream()
    assert (await js.publish("race.x", b"1")).seq == 1
