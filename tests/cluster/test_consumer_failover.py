"""Consumers continue on a new stream leader: a message whose ack was confirmed (AckSync) is
never delivered again, a delivered but unacknowledged one is delivered again after ack_wait,
and the consumer picks up where the old leader's replicated state was."""

from __future__ import annotations

import asyncio

import nats
import pytest

from jetlog.devcluster import LocalCluster

from .conftest import stream_info, wait_for

pytestmark = pytest.mark.slow


async def test_consumer_continues_after_leader_kill(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="C", subjects=["c.>"], num_replicas=3)
        for i in range(40):
            await js.publish("c.x", f"m{i}".encode())
        sub = await js.pull_subscribe(
            "c.x", durable="W", stream="C", config=nats.js.api.ConsumerConfig(ack_wait=2.0)
        )
        confirmed: set[int] = set()
        unacked: set[int] = set()
        for m in await sub.fetch(30, timeout=5):
            seq = m.metadata.sequence.stream
            if seq <= 20:
                await m.ack_sync()  # confirmed by the leader: must never come back
                confirmed.add(seq)
            else:
                unacked.add(seq)  # delivered, never acked: must come back
        assert len(confirmed) == 20 and len(unacked) == 10
        leader = (await stream_info(nc, "C"))["cluster"]["leader"]
        await cluster.kill(leader)

        async def new_leader() -> bool:
            try:
                return (await stream_info(nc, "C", timeout=1))["cluster"]["leader"] != leader
            except (TimeoutError, nats.errors.Error):
                return False

        await wait_for(new_leader, 10, "a new stream leader")
        seen: list[int] = []
        redelivered: dict[int, int] = {}

        async def drain() -> bool:
            try:
                msgs = await sub.fetch(40, timeout=1)
            except (TimeoutError, nats.errors.Error):
                msgs = []
            for m in msgs:
                seq = m.metadata.sequence.stream
                seen.append(seq)
                redelivered[seq] = m.metadata.num_delivered
                await m.ack_sync()
            return set(range(21, 41)) <= set(seen)

        await wait_for(drain, 30, "every unconfirmed message delivered on the new leader")
        assert not confirmed & set(seen), f"confirmed acks redelivered: {sorted(confirmed & set(seen))}"
        for seq in unacked:
            assert redelivered[seq] >= 2, f"seq {seq} was delivered before; num_delivered {redelivered[seq]}"
        ci = await js.consumer_info("C", "W")
        assert ci.ack_floor.stream_seq == 40
        assert ci.num_ack_pending == 0
        await cluster.start_node(leader)
        await asyncio.sleep(0.2)
    finally:
        await nc.close()
