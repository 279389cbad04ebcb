"""``$JETLOG.API.OFFSETS`` (the Spark source's planning request) on a cluster: answered by
whichever node takes it, also while Raft elects a new leader after a kill -9; a stream whose
replicas are all down is "unavailable" (503/10008), never "does not exist"."""

from __future__ import annotations

import time

import msgspec
import nats
import pytest

from jetlog.devcluster import LocalCluster

from .conftest import wait_for

pytestmark = pytest.mark.slow

OFFSETS = "$JETLOG.API.OFFSETS"


async def _offsets(nc: nats.NATS, names: list[str], timeout: float) -> dict:  # type: ignore[type-arg]
    msg = await nc.request(OFFSETS, msgspec.json.encode({"streams": names}), timeout=timeout)
    return msgspec.json.decode(msg.data)  # type: ignore[no-any-return]


async def _answered(nc: nats.NATS, names: list[str]) -> dict:  # type: ignore[type-arg]
    """OFFSETS asked the way the Spark source asks: retried on a timeout. Right after a kill
    the upstream may still route one request to the dead node's queue subscription (it drops
    that subscription once it has noticed the closed connection)."""
    for _ in range(4):
        try:
            return await _offsets(nc, names, 1.5)
        except nats.errors.TimeoutError:
            continue
    raise AssertionError("OFFSETS unanswered four times in a row")


async def _raft_leader(nc: nats.NATS) -> str:
    body = msgspec.json.decode((await nc.request("$JETLOG.API.CLUSTER", b"", timeout=5)).data)
    return str(body["raft_leader"])


async def test_offsets_answered_through_a_raft_leader_kill(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="O3", subjects=["o3.>"], num_replicas=3)
        for i in range(20):
            await js.publish("o3.x", f"m{i}".encode())
        await js.add_stream(name="O1", subjects=["o1.>"], num_replicas=1)
        await js.publish("o1.x", b"one")

        async def caught_up() -> bool:
            # Whichever node answers: 10 in a row report the committed mark at 20.
            for _ in range(10):
                r = await _offsets(nc, ["O3"], 2)
                if r["streams"]["O3"] is None or r["streams"]["O3"]["hwm"] != 20:
                    return False
            return True

        await wait_for(caught_up, 15, "every node reports O3 committed to 20")
        r = await _offsets(nc, ["O3", "O1", "NOPE"], 2)
        assert r["streams"]["O1"]["first_seq"] == 1 and r["streams"]["O1"]["hwm"] == 1
        assert r["streams"]["NOPE"] is None

        victim = await _raft_leader(nc)
        await cluster.kill(victim)
        # Every request from the kill on is answered within a short timeout, and the R3 stream's
        # committed mark never goes backwards (each survivor holds all 20 committed messages).
        t0 = time.monotonic()
        answered = 0
        while time.monotonic() - t0 < 8:
            r = await _offsets(nc, ["O3"], 1.5)
            assert r["streams"]["O3"]["hwm"] == 20, r
            answered += 1
        assert answered >= 10
    finally:
        await nc.close()


async def test_offsets_unavailable_when_every_replica_is_down(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="U1", subjects=["u1.>"], num_replicas=1)
        await js.publish("u1.x", b"one")
        info = msgspec.json.decode((await nc.request("$JS.API.STREAM.INFO.U1", b"", timeout=5)).data)
        holder = info["cluster"]["leader"]
        await cluster.kill(holder)
        r = await _answered(nc, ["U1"])
        unavailable = {
            "code": 503,
            "err_code": 10008,
            "description": "JetStream system temporarily unavailable",
        }
        assert r == {"error": unavailable}
        await cluster.start_node(holder)

        async def back() -> bool:
            got = await _offsets(nc, ["U1"], 5)
            if "error" in got:
                assert got["error"] == unavailable
                return False
            u1 = got["streams"]["U1"]
            return bool(u1["first_seq"] == 1 and u1["hwm"] == 1)

        await wait_for(back, 30, "U1 answered again after its node restarted")
    finally:
        await nc.close()
