"""A node whose Raft state was lost (its IDENTITY says it was a member) refuses to start as a
voter and says why; with --rejoin it takes the metadata from the others and serves again."""

from __future__ import annotations

import os
import shutil

import nats
import pytest

from jetlog.devcluster import LocalCluster

from .conftest import stream_info, wait_for

pytestmark = pytest.mark.slow


async def test_lost_raft_state_needs_rejoin(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="RJ", subjects=["rj.>"], num_replicas=3)
        for i in range(20):
            await js.publish("rj.x", str(i).encode())
        victim = "n3"
        await cluster.stop_node(victim)
        raft_dir = os.path.join(cluster.members[victim].data_dir, "raft")
        assert os.path.isdir(raft_dir) and os.path.exists(
            os.path.join(cluster.members[victim].data_dir, "IDENTITY")
        )
        shutil.rmtree(raft_dir)
        with pytest.raises(RuntimeError) as e:
            await cluster.start_node(victim, timeout=60)
        assert "rejoin" in str(e.value).lower(), str(e.value)[-2000:]
        await cluster.start_node(victim, extra=["--rejoin"])

        async def back() -> bool:
            reps = (await stream_info(nc, "RJ"))["cluster"]["replicas"]
            return all(r["current"] and r.get("lag", 1) == 0 for r in reps)

        await wait_for(back, 30, "the rejoined node in sync")
        # It serves again: the API answers through it too (it may lead after a stepdown).
        assert (await js.publish("rj.x", b"after")).seq == 21
    finally:
        await nc.close()
