"""More consumer behaviour, each test against jetlog and nats-server -js: ephemeral cleanup,
pause, names/list paging, bad input, headers_only, replay_policy original, rate limit."""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from jetlog.transport.barrier import flush_barrier

from .conftest import Target
from .jsutil import api, error_of


async def _until(pred, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await pred():
        if loop.time() > end:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.05)


async def _names(nc: nats.NATS, stream: str) -> list[str]:
    r = await api(nc, f"$JS.API.CONSUMER.NAMES.{stream}")
    return list(r["consumers"])


async def test_ephemeral_pull_deleted_after_inactivity_durable_kept(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="EPH", subjects=["eph"])
    r = await api(
        nc,
        "$JS.API.CONSUMER.CREATE.EPH.short",
        {
            "stream_name": "EPH",
            "config": {"name": "short", "inactive_threshold": 1_000_000_000, "ack_policy": "explicit"},
        },
    )
    assert r["config"]["inactive_threshold"] == 1_000_000_000
    await js.add_consumer("EPH", ConsumerConfig(durable_name="stay", ack_policy=AckPolicy.EXPLICIT))
    t0 = time.monotonic()

    async def gone() -> bool:
        return "short" not in await _names(nc, "EPH")

    await _until(gone, 10)
    assert 0.9 < time.monotonic() - t0 < 4.0
    assert await _names(nc, "EPH") == ["stay"]


async def test_ephemeral_push_deleted_when_deliver_subject_loses_interest(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="EPP", subjects=["epp"])
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await flush_barrier(nc)
    r = await api(
        nc,
        "$JS.API.CONSUMER.CREATE.EPP",
        {"stream_name": "EPP", "config": {"deliver_subject": inbox, "inactive_threshold": 500_000_000}},
    )
    name = r["name"]
    assert len(name) == 8
    await js.publish("epp", b"x")
    m = await sub.next_msg(timeout=3)
    assert m.subject == "epp" and m.data == b"x"
    info = await api(nc, f"$JS.API.CONSUMER.INFO.EPP.{name}")
    assert info["push_bound"] is True
    # Interest stays: not deleted after the threshold.
    await asyncio.sleep(1.2)
    assert await _names(nc, "EPP") == [name]
    await sub.unsubscribe()

    async def gone() -> bool:
        return await _names(nc, "EPP") == []

    await _until(gone, 10)


async def test_pause_and_resume(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="PA", subjects=["pa"])
    await js.add_consumer("PA", ConsumerConfig(durable_name="p", ack_policy=AckPolicy.EXPLICIT))
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1.5))
    r = await api(nc, "$JS.API.CONSUMER.PAUSE.PA.p", {"pause_until": until})
    assert r["type"] == "io.nats.jetstream.api.v1.consumer_pause_response"
    assert r["paused"] is True and r["pause_until"] == until and r["pause_remaining"] > 0
    info = await api(nc, "$JS.API.CONSUMER.INFO.PA.p")
    assert info["paused"] is True
    await js.publish("pa", b"1")
    psub = await js.pull_subscribe_bind("p", "PA")
    t0 = time.monotonic()
    msgs = await psub.fetch(1, timeout=5)
    assert msgs[0].data == b"1"
    assert time.monotonic() - t0 > 0.4  # held until the pause ended
    r = await api(nc, "$JS.API.CONSUMER.PAUSE.PA.p", {})
    assert r == {
        "type": "io.nats.jetstream.api.v1.consumer_pause_response",
        "paused": False,
        "pause_until": "0001-01-01T00:00:00Z",
    }
    r = await api(nc, "$JS.API.CONSUMER.PAUSE.PA.nope", {})
    assert error_of(r) == (404, 10014, "consumer not found")


async def test_names_and_list_paging(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="NL", subjects=["nl"])
    for n in ["c", "a", "b"]:
        await js.add_consumer("NL", ConsumerConfig(durable_name=n, ack_policy=AckPolicy.EXPLICIT))
    r = await api(nc, "$JS.API.CONSUMER.NAMES.NL")
    assert (r["total"], r["offset"], r["limit"], r["consumers"]) == (3, 0, 1024, ["a", "b", "c"])
    r = await api(nc, "$JS.API.CONSUMER.LIST.NL", {"offset": 1})
    assert (r["total"], r["offset"], r["limit"]) == (3, 1, 256)
    assert [c["name"] for c in r["consumers"]] == ["b", "c"]
    assert "_nats.ver" not in r["consumers"][0]["config"]["metadata"]
    r = await api(nc, "$JS.API.CONSUMER.NAMES.NOPE")
    assert error_of(r) == (404, 10059, "stream not found")
    infos = await js.consumers_info("NL")
    assert sorted(i.name for i in infos) == ["a", "b", "c"]


async def test_bad_input_never_disturbs_other_consumers(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="BAD", subjects=["bad.*"])
    for i in range(3):
        await js.publish("bad.x", str(i).encode())
    await js.add_consumer("BAD", ConsumerConfig(durable_name="good", ack_policy=AckPolicy.EXPLICIT))
    m = await nc.request("$JS.API.CONSUMER.MSG.NEXT.BAD.good", b'{"batch":"x"}', timeout=2)
    assert m.headers["Status"] == "400"
    assert m.headers["Description"].startswith("Bad Request - json: cannot unmarshal string")
    m = await nc.request(
        "$JS.API.CONSUMER.MSG.NEXT.BAD.good",
        json.dumps({"batch": 1, "expires": 1_000_000_000, "idle_heartbeat": 900_000_000}).encode(),
        timeout=2,
    )
    assert (m.headers["Status"], m.headers["Description"]) == (
        "400",
        "Bad Request - heartbeat value too large",
    )
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.API.CONSUMER.MSG.NEXT.BAD.nope", b"", timeout=2)
    # Bogus ack subjects and payloads: ignored (or replied to), never fatal.
    await nc.publish("$JS.ACK.BAD.good.x.y.z.w.v", b"")
    await nc.publish("$JS.ACK.BAD.good.1.999.999.0.0", b"+ACK")
    await nc.publish("$JS.ACK.BAD.good", b"garbage")
    await nc.publish("$JS.ACK.BAD.good.1.1.1.0.0", b"\xff\xfe-NAK {bad json")
    r = await nc.request("$JS.ACK.BAD.good.1.1.1.0.0", b"whatever", timeout=2)
    assert r.data == b""
    await flush_barrier(nc)
    psub = await js.pull_subscribe_bind("good", "BAD")
    msgs = await psub.fetch(3, timeout=3)
    assert [x.data for x in msgs] == [b"0", b"1", b"2"]
    for x in msgs:
        await x.ack_sync()
    info = await js.consumer_info("BAD", "good")
    assert (info.num_ack_pending, info.ack_floor.stream_seq) == (0, 3)


async def test_headers_only_push(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="HO", subjects=["ho"])
    await js.publish("ho", b"12345678", headers={"X-Foo": "bar"})
    sub = await js.subscribe("ho", config=ConsumerConfig(headers_only=True, deliver_policy=DeliverPolicy.ALL))
    m = await sub.next_msg(timeout=3)
    assert m.data == b""
    assert m.headers == {"X-Foo": "bar", "Nats-Msg-Size": "8"}
    await sub.unsubscribe()


async def test_replay_original_keeps_gaps(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="RO", subjects=["ro"])
    for i in range(3):
        await js.publish("ro", str(i).encode())
        await asyncio.sleep(0.3)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await flush_barrier(nc)
    await api(
        nc,
        "$JS.API.CONSUMER.CREATE.RO",
        {"stream_name": "RO", "config": {"deliver_subject": inbox, "replay_policy": "original"}},
    )
    times = []
    for _ in range(3):
        await sub.next_msg(timeout=5)
        times.append(time.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(0.2 < g < 0.6 for g in gaps), gaps


async def test_rate_limit_slows_push(nc: nats.NATS, target: Target) -> None:
    js = nc.jetstream()
    await js.add_stream(name="RL", subjects=["rl"])
    payload = b"x" * 100_000
    for _ in range(30):
        await js.publish("rl", payload)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await flush_barrier(nc)
    # 8 Mbit/s = 1 MB/s with a 1 MiB burst (max_payload): 3 MB takes about 2 s, not ~0.
    await api(
        nc,
        "$JS.API.CONSUMER.CREATE.RL",
        {"stream_name": "RL", "config": {"deliver_subject": inbox, "rate_limit_bps": 8_000_000}},
    )
    t0 = time.monotonic()
    for _ in range(30):
        await sub.next_msg(timeout=10)
    elapsed = time.monotonic() - t0
    assert 1.2 < elapsed < 6.0, elapsed


async def test_backoff_schedules_redeliveries(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="BO", subjects=["bo"])
    await js.publish("bo", b"x")
    await js.add_consumer(
        "BO",
        ConsumerConfig(durable_name="b", ack_policy=AckPolicy.EXPLICIT, backoff=[0.5, 1.5], max_deliver=4),
    )
    r = await api(nc, "$JS.API.CONSUMER.INFO.BO.b")
    assert r["config"]["ack_wait"] == 500_000_000  # backoff[0] replaces ack_wait
    assert r["config"]["backoff"] == [500_000_000, 1_500_000_000]
    psub = await js.pull_subscribe_bind("b", "BO")
    stamps = []
    t0 = time.monotonic()
    for _ in range(3):
        msgs = await psub.fetch(1, timeout=5)
        stamps.append(time.monotonic() - t0)
        assert msgs[0].data == b"x"
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert 0.35 < gaps[0] < 1.2, gaps  # after the 1st delivery: backoff[0]
    assert 1.2 < gaps[1] < 2.6, gaps  # after the 2nd: backoff[1]
    assert msgs[0].metadata.num_delivered == 3


async def test_pull_request_dropped_when_inbox_loses_interest(target: Target) -> None:
    nc = await nats.connect(target.url)
    other = await nats.connect(target.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="DI", subjects=["di"])
        await js.add_consumer("DI", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))
        inbox = other.new_inbox()
        sub = await other.subscribe(inbox)
        await other.publish(
            "$JS.API.CONSUMER.MSG.NEXT.DI.d",
            json.dumps({"batch": 1, "expires": 30_000_000_000}).encode(),
            reply=inbox,
        )
        await flush_barrier(other)

        async def waiting(n: int) -> bool:
            return (await api(nc, "$JS.API.CONSUMER.INFO.DI.d"))["num_waiting"] == n

        await _until(lambda: waiting(1), 5)
        await sub.unsubscribe()
        await flush_barrier(other)
        await _until(lambda: waiting(0), 5)
        # The message published afterwards is not lost to the dead request.
        await js.publish("di", b"kept")
        psub = await js.pull_subscribe_bind("d", "DI")
        msgs = await psub.fetch(1, timeout=3)
        assert msgs[0].data == b"kept" and msgs[0].metadata.num_delivered == 1
    finally:
        await other.close()
        await nc.close()


async def _create_consumers(nc: nats.NATS, stream: str, names: list[str]) -> list[dict]:  # type: ignore[type-arg]
    """Create durables ``names`` (50 requests in flight); their replies in order."""
    out: list[dict] = []  # type: ignore[type-arg]
    for i in range(0, len(names), 50):
        out += await asyncio.gather(
            *(
                api(
                    nc,
                    f"$JS.API.CONSUMER.CREATE.{stream}.{n}",
                    {"stream_name": stream, "config": {"durable_name": n, "ack_policy": "explicit"}},
                    timeout=10,
                )
                for n in names[i : i + 50]
            )
        )
    return out


async def test_default_consumer_limit_per_stream(nc: nats.NATS) -> None:
    # nats-server 2.15 gives every stream without its own max_consumers a limit of 1000
    # (jetstream.limits.default_max_consumers); a stream's own limit, even a larger one, wins.
    js = nc.jetstream()
    for stream, own, limit in (("DEF", None, 1000), ("OWN", 1002, 1002)):
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], max_consumers=own)
        replies = await _create_consumers(nc, stream, [f"c{i}" for i in range(limit)])
        assert [error_of(r) for r in replies] == [None] * limit
        # The one beyond the limit, on its own (concurrent creates may be taken in any order).
        (over,) = await _create_consumers(nc, stream, ["over"])
        assert error_of(over) == (400, 10026, "maximum consumers limit reached")
        info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
        assert (info["config"]["max_consumers"], info["state"]["consumer_count"]) == (own or -1, limit)
