"""Publish path conformance (spec §5): runs against jetlog and nats-server -js."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.js.errors import APIError, NoStreamResponseError

from jetlog.transport.barrier import flush_barrier

from .conftest import Target
from .jsutil import api, publish_req


async def _wait_msgs(js: nats.js.JetStreamContext, stream: str, n: int, timeout: float = 5.0) -> None:
    async def check() -> None:
        while (await js.stream_info(stream)).state.messages < n:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(check(), timeout)


async def test_publish_sequence_dedup_and_expected_headers(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    assert await publish_req(nc, "orders.new", b"order 0") == {"stream": "ORDERS", "seq": 1}
    await js.publish("orders.new", b"order 1")
    await js.publish("orders.other", b"x")
    r = await publish_req(nc, "orders.new", b"dup", {"Nats-Msg-Id": "id-1"})
    assert r == {"stream": "ORDERS", "seq": 4}
    r = await publish_req(nc, "orders.new", b"different payload", {"Nats-Msg-Id": "id-1"})
    assert r == {"stream": "ORDERS", "seq": 4, "duplicate": True}
    ack = await js.publish("orders.new", b"again", headers={"Nats-Msg-Id": "id-1"})
    assert ack.duplicate is True and ack.seq == 4
    r = await publish_req(nc, "orders.new", b"", {"Nats-Expected-Stream": "WRONG"})
    assert r == {
        "error": {"code": 400, "err_code": 10060, "description": "expected stream does not match"},
        "stream": "ORDERS",
        "seq": 0,
    }
    await js.publish("orders.new", b"5", headers={"Nats-Msg-Id": "id-2"})
    r = await publish_req(nc, "orders.new", b"", {"Nats-Expected-Last-Sequence": "1"})
    assert r["error"] == {"code": 400, "err_code": 10071, "description": "wrong last sequence: 5"}
    assert (await publish_req(nc, "orders.new", b"", {"Nats-Expected-Last-Sequence": "5"}))["seq"] == 6
    r = await publish_req(nc, "orders.zz", b"", {"Nats-Expected-Last-Subject-Sequence": "0"})
    assert r == {"stream": "ORDERS", "seq": 7}
    r = await publish_req(nc, "orders.zz", b"", {"Nats-Expected-Last-Subject-Sequence": "0"})
    assert r["error"]["description"] == "wrong last sequence: 7"
    r = await publish_req(
        nc,
        "orders.q",
        b"",
        {
            "Nats-Expected-Last-Subject-Sequence": "7",
            "Nats-Expected-Last-Subject-Sequence-Subject": "orders.zz",
        },
    )
    assert r["seq"] == 8
    r = await publish_req(nc, "orders.q", b"", {"Nats-Expected-Last-Subject-Sequence-Subject": "orders.zz"})
    assert r["error"] == {
        "code": 400,
        "err_code": 10193,
        "description": "missing sequence for expected last sequence per subject",
    }
    await js.publish("orders.new", b"", headers={"Nats-Msg-Id": "id-3"})
    r = await publish_req(nc, "orders.new", b"", {"Nats-Expected-Last-Msg-Id": "id-1"})
    assert r["error"] == {"code": 400, "err_code": 10070, "description": "wrong last msg ID: id-3"}
    r = await publish_req(nc, "orders.new", b"", {"Nats-Rollup": "sub"})
    assert r["error"] == {"code": 500, "err_code": 10111, "description": "rollup not permitted"}
    r = await publish_req(nc, "orders.new", b"", {"Nats-TTL": "5s"})
    assert r["error"] == {"code": 400, "err_code": 10166, "description": "per-message TTL is disabled"}
    # Expected-* failures win over duplicate detection.
    r = await publish_req(nc, "orders.new", b"", {"Nats-Msg-Id": "id-3", "Nats-Expected-Stream": "NO"})
    assert r["error"]["err_code"] == 10060


async def test_headers_stored_verbatim(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="H", subjects=["h"])
    await js.publish("h", b"payload", headers={"Foo": "bar", "Nats-Msg-Id": "m1", "X-Empty": ""})
    m = await js.get_msg("H", 1)
    assert m.data == b"payload"
    assert m.headers == {"Foo": "bar", "Nats-Msg-Id": "m1", "X-Empty": ""}
    r = await api(nc, "$JS.API.STREAM.MSG.GET.H", {"seq": 1})
    import base64

    raw = base64.b64decode(r["message"]["hdrs"])
    assert raw == b"NATS/1.0\r\nFoo: bar\r\nNats-Msg-Id: m1\r\nX-Empty: \r\n\r\n"


async def test_plain_publish_is_stored_silently(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="P", subjects=["p.*"])
    for i in range(50):
        await nc.publish(f"p.{i % 3}", str(i).encode())
    await flush_barrier(nc)
    await _wait_msgs(js, "P", 50)
    info = await js.stream_info("P")
    assert info.state.last_seq == 50
    m = await js.get_msg("P", 50)
    assert m.subject == "p.1" and m.data == b"49"


async def test_publish_to_uncaptured_subject_gets_no_responders(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="N", subjects=["n"])
    with pytest.raises(NoStreamResponseError):
        await js.publish("not.captured", b"x")
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("not.captured", b"x", timeout=1)


async def test_no_ack_stream_never_answers(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="NA", subjects=["na"], no_ack=True)
    with pytest.raises(nats.errors.TimeoutError):
        await nc.request("na", b"x", timeout=0.5)
    await _wait_msgs(js, "NA", 1)


async def test_limits_discard_new_and_sizes(nc: nats.NATS) -> None:
    await api(
        nc,
        "$JS.API.STREAM.CREATE.LIM",
        {
            "name": "LIM",
            "subjects": ["lim.*"],
            "max_msgs": 2,
            "discard": "new",
            "max_msg_size": 10,
            "storage": "memory",
        },
    )
    assert (await publish_req(nc, "lim.a", b"1"))["seq"] == 1
    assert (await publish_req(nc, "lim.b", b"2"))["seq"] == 2
    r = await publish_req(nc, "lim.c", b"3")
    assert r == {
        "error": {"code": 503, "err_code": 10077, "description": "maximum messages exceeded"},
        "stream": "LIM",
        "seq": 0,
    }
    r = await publish_req(nc, "lim.a", b"01234567890")
    assert r["error"] == {
        "code": 400,
        "err_code": 10054,
        "description": "message size exceeds maximum allowed",
    }
    r = await publish_req(nc, "lim.a", b"12345", {"H": "v"})
    assert r["error"]["err_code"] == 10054
    info = await api(nc, "$JS.API.STREAM.INFO.LIM")
    assert info["state"]["messages"] == 2 and info["state"]["bytes"] == 44


async def test_max_bytes_discard_new(nc: nats.NATS) -> None:
    await api(
        nc, "$JS.API.STREAM.CREATE.MB", {"name": "MB", "subjects": ["mb"], "max_bytes": 100, "discard": "new"}
    )
    assert (await publish_req(nc, "mb", b"x" * 40))["seq"] == 1  # 22+2+40+8 = 72
    r = await publish_req(nc, "mb", b"x" * 40)
    assert r["error"] == {"code": 503, "err_code": 10077, "description": "maximum bytes exceeded"}


async def test_discard_old_limits(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="OLD", subjects=["old.*"], max_msgs=5, max_msgs_per_subject=2)
    for i in range(4):
        await js.publish("old.a", str(i).encode())
    for i in range(4):
        await js.publish("old.b", str(i).encode())
    info = await js.stream_info("OLD", subjects_filter=">")
    assert info.state.messages == 4
    assert info.state.subjects == {"old.a": 2, "old.b": 2}
    assert info.state.first_seq == 3 and info.state.last_seq == 8
    for i in range(3):
        await js.publish("old.c", str(i).encode())
    info = await js.stream_info("OLD")
    assert info.state.messages == 5
    assert info.state.first_seq == 4


async def test_discard_new_per_subject(nc: nats.NATS) -> None:
    await api(
        nc,
        "$JS.API.STREAM.CREATE.DPS",
        {
            "name": "DPS",
            "subjects": ["dps.*"],
            "discard": "new",
            "max_msgs_per_subject": 1,
            "discard_new_per_subject": True,
        },
    )
    assert (await publish_req(nc, "dps.a", b"1"))["seq"] == 1
    r = await publish_req(nc, "dps.a", b"2")
    assert r["error"] == {
        "code": 503,
        "err_code": 10077,
        "description": "maximum messages per subject exceeded",
    }
    assert (await publish_req(nc, "dps.b", b"1"))["seq"] == 2


async def test_rollups(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="R", subjects=["r.*"], allow_rollup_hdrs=True)
    for s in ["r.a", "r.a", "r.b", "r.a"]:
        await js.publish(s, b"v")
    ack = await js.publish("r.a", b"roll", headers={"Nats-Rollup": "sub"})
    assert ack.seq == 5
    info = await js.stream_info("R", subjects_filter=">")
    assert info.state.subjects == {"r.a": 1, "r.b": 1}
    r = await publish_req(nc, "r.a", b"", {"Nats-Rollup": "bogus"})
    assert r["error"] == {"code": 500, "err_code": 10111, "description": 'rollup value invalid: "bogus"'}
    await js.publish("r.b", b"all", headers={"Nats-Rollup": "all"})
    info = await js.stream_info("R")
    assert info.state.messages == 1 and info.state.first_seq == 6 and info.state.last_seq == 6


async def test_sealed_stream_rejects_everything(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="SE", subjects=["se"])
    await js.publish("se", b"1")
    cfg = (await js.stream_info("SE")).config
    cfg.sealed = True
    info = await js.update_stream(cfg)
    assert info.config.sealed is True and info.config.deny_delete is True and info.config.deny_purge is True
    r = await publish_req(nc, "se", b"2")
    assert r["error"] == {"code": 400, "err_code": 10109, "description": "invalid operation on sealed stream"}
    with pytest.raises(APIError) as e:
        await js.purge_stream("SE")
    assert e.value.err_code == 10109


async def test_ttl_values(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="TTL", subjects=["ttl"], allow_msg_ttl=True)
    for value, ok in [
        ("2s", True),
        ("60", True),
        ("never", True),
        ("500ms", False),
        ("abc", False),
        ("-1", False),
    ]:
        r = await publish_req(nc, "ttl", b"x", {"Nats-TTL": value})
        if ok:
            assert "seq" in r and "error" not in r, (value, r)
        else:
            assert r["error"] == {"code": 400, "err_code": 10165, "description": "invalid per-message TTL"}, (
                value
            )


async def test_ttl_expires_message(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="EXP", subjects=["exp.*"], allow_msg_ttl=True)
    await js.publish("exp.a", b"short", headers={"Nats-TTL": "1s"})
    await js.publish("exp.b", b"keep")

    async def gone() -> None:
        while (await js.stream_info("EXP")).state.messages != 1:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(gone(), 5)
    info = await js.stream_info("EXP")
    assert info.state.first_seq == 2


async def test_max_age_expires(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="AGE", subjects=["age"], max_age=0.5)
    await js.publish("age", b"1")
    await js.publish("age", b"2")

    async def empty() -> None:
        while (await js.stream_info("AGE")).state.messages:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(empty(), 5)
    info = await js.stream_info("AGE")
    assert info.state.first_seq == 3 and info.state.last_seq == 2


async def test_interest_stream_without_consumers_acks_but_stores_nothing(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="INT", subjects=["int"], retention="interest")
    ack = await js.publish("int", b"1")
    assert ack.seq == 1
    ack = await js.publish("int", b"2")
    assert ack.seq == 2
    info = await js.stream_info("INT")
    assert info.state.messages == 0 and info.state.last_seq == 2 and info.state.first_seq == 3


async def test_async_publish_window(nc: nats.NATS, target: Target) -> None:
    js = nc.jetstream(publish_async_max_pending=256)
    await js.add_stream(name="AS", subjects=["as"])
    futs = [await js.publish_async("as", str(i).encode()) for i in range(1000)]
    acks = await asyncio.gather(*futs)
    assert sorted(a.seq for a in acks) == list(range(1, 1001))
    info = await js.stream_info("AS")
    assert info.state.messages == 1000


async def test_memory_storage_semantics(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="MEM", subjects=["mem"], storage="memory")
    await js.publish("mem", b"abc", headers={"K": "v"})
    info = await js.stream_info("MEM")
    assert info.state.bytes == len("mem") + len(b"NATS/1.0\r\nK: v\r\n\r\n") + 3 + 16
    m = await js.get_msg("MEM", 1)
    assert m.data == b"abc" and m.headers == {"K": "v"}
