"""A rolling restart of the 3-node cluster under load (what an upgrade does): each node in turn
is stopped cleanly (SIGTERM) and started again while clients publish with acks. Publishing never
stops for long, every acknowledged message is on every replica exactly once and in order, and a
consumer's confirmed acks survive every handover."""

from __future__ import annotations

import itertools
import time

import nats
import pytest

from jetlog.devcluster import LocalCluster

from .conftest import stream_info, wait_for
from .workload import check_acked, read_replica, run_publishers, stop_publishers

pytestmark = pytest.mark.slow


async def _all_current(nc: nats.NATS) -> bool:
    try:
        cl = (await stream_info(nc, "RR"))["cluster"]
    except (TimeoutError, nats.errors.Error):
        return False
    reps = cl.get("replicas", [])
    return len(reps) == 2 and all(r["current"] and r.get("lag", 1) == 0 for r in reps)


async def test_rolling_restart_under_load_loses_nothing(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    js = nc.jetstream(timeout=5)
    await js.add_stream(name="RR", subjects=["rr.>"], num_replicas=3)
    pubs, tasks, pnc = await run_publishers(upstream.url, 3, "rr.x")
    try:
        await wait_for(lambda: _true(sum(len(p.acked) for p in pubs) > 100), 20, "first acks")
        sub = await js.pull_subscribe("rr.>", durable="RC", stream="RR")
        confirmed = 0
        for m in await sub.fetch(50, timeout=5):
            await m.ack_sync()
            confirmed = max(confirmed, m.metadata.sequence.stream)
        await wait_for(lambda: _all_current(nc), 30, "all replicas current")
        for name in sorted(cluster.members):
            before = sum(len(p.acked) for p in pubs)
            rc = await cluster.stop_node(name)
            assert rc == 0, f"{name} did not stop cleanly (exit {rc})"
            # The other two keep acknowledging while this one is down.
            await wait_for(
                lambda b=before: _true(sum(len(p.acked) for p in pubs) > b + 50), 20, f"acks without {name}"
            )
            await cluster.start_node(name)
            await wait_for(lambda: _all_current(nc), 30, f"{name} back in the ISR")
        ci = await js.consumer_info("RR", "RC")
        assert ci.ack_floor.stream_seq >= confirmed
        # Publishing never paused for long: the longest gap between two acks.
        times = sorted(t for p in pubs for t in p.ack_times)
        gap = max(b - a for a, b in itertools.pairwise(times))
        print(f"rolling restart: {len(times)} acks, longest pause {gap:.2f}s")
        assert gap < 5.0
        assert time.monotonic() - times[-1] < 5.0
    finally:
        await stop_publishers(pubs, tasks, pnc)
        await nc.close()
    await cluster.stop()
    copies = [await read_replica(m.data_dir, "RR") for m in cluster.members.values()]
    for c in copies:
        check_acked(pubs, c)
    common = min(max(c) for c in copies)
    assert all(
        {s: v for s, v in c.items() if s <= common} == {s: v for s, v in copies[0].items() if s <= common}
        for c in copies
    )
    assert sum(len(p.acked) for p in pubs) > 300


async def _true(v: bool) -> bool:
    return v
