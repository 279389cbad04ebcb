"""Only a stream's leader subscribes its acks on the upstream server (``$JS.ACK.<stream>.>``):
with a wildcard on every node the server delivered each ack to all three nodes, two of which
dropped it. Checked from the server's side (``/leafz?subs=1``), across a leader stepdown, and
with the acks still reaching the consumer."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from jetlog.devcluster import LocalCluster, free_port
from jetlog.embedded import NatsServer

from .conftest import stream_info, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
async def monitored() -> AsyncIterator[tuple[NatsServer, int]]:
    port = free_port()
    async with NatsServer(leafnode=True, extra_conf=f"http: 127.0.0.1:{port}") as srv:
        yield srv, port


def _ack_subs(port: int) -> dict[str, set[str]]:
    """Per leaf connection (by the jetlog node's name): its ``$JS.ACK`` subscriptions."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/leafz?subs=1", timeout=5) as r:
        body = json.loads(r.read())
    out: dict[str, set[str]] = {}
    for leaf in body.get("leafs") or []:
        subs = {s for s in leaf.get("subscriptions_list") or [] if s.startswith("$JS.ACK")}
        out[leaf.get("name", "?").removeprefix("jetlog-")] = subs
    return out


async def test_only_the_leader_subscribes_its_streams_acks(
    monitored: tuple[NatsServer, int], make_cluster: Any
) -> None:
    srv, port = monitored
    cluster: LocalCluster = await make_cluster(nats_url=srv.url, leaf_url=srv.leaf_url)
    nc = await nats.connect(srv.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="AI", subjects=["ai.>"], num_replicas=3)
        await js.add_consumer("AI", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))

        async def only(leader: str) -> bool:
            subs = _ack_subs(port)
            holders = {n for n, s in subs.items() if "$JS.ACK.AI.>" in s}
            return holders == {leader} and not any("$JS.ACK.>" in s for s in subs.values())

        for round_ in range(2):
            leader = (await stream_info(nc, "AI"))["cluster"]["leader"]
            await wait_for(
                lambda leader=leader: only(leader), 10, f"only {leader} to hold the ack subscription"
            )
            # The acks reach the consumer on its leader: acknowledged messages are not redelivered.
            for i in range(3):
                await js.publish("ai.x", b"m%d-%d" % (round_, i))
            psub = await js.pull_subscribe_bind("d", "AI")
            msgs = await psub.fetch(3, timeout=5)
            assert [m.data for m in msgs] == [b"m%d-%d" % (round_, i) for i in range(3)]
            for m in msgs:
                await m.ack_sync()
            info = await js.consumer_info("AI", "d")
            assert info.num_ack_pending == 0 and info.ack_floor.stream_seq == 3 * (round_ + 1)
            await psub.unsubscribe()
            if round_ == 0:
                msg = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.AI", b"", timeout=5)
                assert json.loads(msg.data).get("success") is True

                async def moved(old: str = leader) -> bool:
                    try:
                        return (await stream_info(nc, "AI", timeout=1))["cluster"]["leader"] not in ("", old)
                    except (TimeoutError, nats.errors.Error):
                        return False

                await wait_for(moved, 15, "the stream leader to move")
        await js.delete_stream("AI")
        await wait_for(lambda: _none(port), 10, "no ack subscription once the stream is deleted")
    finally:
        await nc.close()
        await cluster.stop()


async def _none(port: int) -> bool:
    return not any(s for s in _ack_subs(port).values())
