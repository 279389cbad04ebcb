"""Stream semantics hold on every replica: limits, message delete, purge, dedup, work-queue and
interest retention. Each replica's log is read back from its files after the nodes stop."""

from __future__ import annotations

import nats
import pytest
from nats.js.api import ConsumerConfig, RetentionPolicy

from jetlog.devcluster import LocalCluster

from .conftest import stream_info, wait_for
from .workload import read_replica

pytestmark = pytest.mark.slow


async def test_removals_replicate(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        # What is checked here is what each replica holds, not latency: a PubAck may take a few
        # seconds on a starved 2-core CI machine (one took over 5 s there once, under a CPU hog).
        js = nc.jetstream(timeout=15)
        await js.add_stream(name="LIM", subjects=["lim.>"], num_replicas=3, max_msgs=20)
        await js.add_stream(name="DEL", subjects=["del.>"], num_replicas=3)
        await js.add_stream(
            name="WQ", subjects=["wq.>"], num_replicas=3, retention=RetentionPolicy.WORK_QUEUE
        )
        await js.add_stream(
            name="INT", subjects=["int.>"], num_replicas=3, retention=RetentionPolicy.INTEREST
        )
        for i in range(50):
            await js.publish("lim.x", str(i).encode())
        for i in range(10):
            await js.publish(f"del.{i % 2}", str(i).encode())
        await js.delete_msg("DEL", 3)
        await js.purge_stream("DEL", subject="del.1")
        # Dedup: the same id twice is stored once.
        a1 = await js.publish("del.0", b"dup", headers={"Nats-Msg-Id": "x1"})
        a2 = await js.publish("del.0", b"dup", headers={"Nats-Msg-Id": "x1"})
        assert a1.seq == a2.seq and a2.duplicate
        wq = await js.pull_subscribe("wq.>", durable="W", stream="WQ")
        await js.add_consumer("INT", ConsumerConfig(durable_name="I", ack_policy="explicit"))
        for i in range(10):
            await js.publish("wq.x", str(i).encode())
            await js.publish("int.x", str(i).encode())
        for m in await wq.fetch(6, timeout=5):
            await m.ack_sync()
        isub = await js.pull_subscribe("int.x", durable="I", stream="INT")
        for m in await isub.fetch(4, timeout=5):
            await m.ack_sync()
        expect = {
            "LIM": set(range(31, 51)),
            "DEL": {1, 5, 7, 9, 11},
            "WQ": set(range(7, 11)),
            "INT": set(range(5, 11)),
        }
        for name, seqs in expect.items():

            async def settled(n: str = name, s: set[int] = seqs) -> bool:
                st = (await stream_info(nc, n))["state"]
                return st["messages"] == len(s)

            await wait_for(settled, 10, f"{name} state")
            # Every follower has caught up with the leader (so its log holds every op).

            async def current(n: str = name) -> bool:
                reps = (await stream_info(nc, n))["cluster"]["replicas"]
                return all(r["current"] and r.get("lag", 1) == 0 for r in reps)

            await wait_for(current, 10, f"{name} followers current")
    finally:
        await nc.close()
    await cluster.stop()
    for m in cluster.members.values():
        for name, seqs in expect.items():
            got = set(await read_replica(m.data_dir, name))
            assert got == seqs, f"{m.name} {name}: {sorted(got)} != {sorted(seqs)}"
