"""Raft lost everywhere for a few seconds while every node stays alive on NATS (what a CPU-starved
host does to the Raft threads): every stream leader is fenced, and nobody else answers the
publishes meanwhile. They are held and answered once Raft is back: every ``publish_async``
future resolves with its PubAck, every message is stored once, in publish order (before, the
leader refused them with 10008, on which nats-py's futures never resolve: docs/internals.md,
nineteenth pass).

The stream is R1, so that no other node can take it over: after the heal, pysyncobj may
reconnect one node a second later than the others, and a controller then rightly moves an R3
stream off it (its held publishes are dropped with the demotion, as a deposed leader's must be;
1 run in 7 went that way with an R3 stream)."""

from __future__ import annotations

import asyncio
import time

import msgspec
import nats
import pytest

from jetlog.devcluster import LocalCluster
from jetlog.embedded import NatsServer

from .conftest import node_metrics, stream_info

pytestmark = pytest.mark.slow

CUT = 1.6
"""Seconds Raft is cut: more than the node timeout (1 s), so that the leader is fenced."""


async def _fault(nc: nats.NATS, node: str, drop: list[str]) -> None:
    msg = await nc.request(
        f"$JETLOG.jetlog.FAULT.{node}", msgspec.json.encode({"raft_drop": drop}), timeout=2
    )
    assert msgspec.json.decode(msg.data)["raft_drop"] == drop


async def test_publishes_wait_out_a_raft_outage_and_are_acknowledged(
    upstream: NatsServer, tmp_path, make_cluster
) -> None:  # type: ignore[no-untyped-def]
    cluster: LocalCluster = await make_cluster(
        nats_url=upstream.url, leaf_url=upstream.leaf_url, env={"JETLOG_FAULT_CONTROL": "1"}
    )
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="H", subjects=["h.>"], num_replicas=1)
        await js.publish("h.x", b"first")
        leader = (await stream_info(nc, "H"))["cluster"]["leader"]
        ajs = nc.jetstream(publish_async_max_pending=4096)
        futs: list[asyncio.Future] = []  # type: ignore[type-arg]
        cut_at = healed_at = 0.0
        t0 = time.monotonic()
        i = 0
        members = list(cluster.members)
        while time.monotonic() - t0 < CUT + 2.0:
            now = time.monotonic() - t0
            if not cut_at and now >= 0.5:
                for n in members:
                    await _fault(nc, n, [m for m in members if m != n])
                cut_at = time.monotonic()
            if cut_at and not healed_at and time.monotonic() - cut_at >= CUT:
                for n in members:
                    await _fault(nc, n, [])
                healed_at = time.monotonic()
            futs.append(await ajs.publish_async("h.x", b"m%d" % i))
            i += 1
            await asyncio.sleep(0.01)
        _, pending = await asyncio.wait(futs, timeout=20)
        assert not pending, f"{len(pending)} of {len(futs)} publishes never answered"
        acks = [f.result() for f in futs]  # raises for an error PubAck
        assert [a.seq for a in acks] == list(range(2, len(futs) + 2))
        info = await js.stream_info("H")
        assert info.state.messages == len(futs) + 1 and info.state.last_seq == len(futs) + 1
        sub = await js.pull_subscribe("h.x", durable="check", stream="H")
        got: list[bytes] = []
        while len(got) < len(futs) + 1:
            got += [m.data for m in await sub.fetch(500, timeout=5)]
        assert got == [b"first"] + [b"m%d" % k for k in range(len(futs))]
        # The leader did hold publishes (the outage fenced it), and dropped none.
        m = node_metrics(cluster.members[leader].http)
        held = m['jetlog_stream_fence_held_total{stream="H"}']
        print(f"fence hold: {len(futs)} publishes, {held:.0f} held by the leader")
        assert held > 0
        assert m['jetlog_stream_fence_dropped_total{stream="H"}'] == 0
        assert (await stream_info(nc, "H"))["cluster"]["leader"] == leader
    finally:
        await nc.close()
