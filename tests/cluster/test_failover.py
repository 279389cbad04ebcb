"""Faults with real processes: kill -9 or freeze a stream leader or a follower while clients
publish with acks. A new leader acknowledges within seconds; every acknowledged message is on
every in-sync replica exactly once, in order, byte for byte; the lost node rejoins by itself."""

from __future__ import annotations

import asyncio
import signal
import time

import nats
import pytest

from jetlog.devcluster import LocalCluster

from .conftest import failover_gap, stream_info, wait_for
from .workload import check_acked, read_replica, run_publishers, stop_publishers

pytestmark = pytest.mark.slow


async def _setup(url: str) -> nats.NATS:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=5)
    await js.add_stream(name="F", subjects=["f.>"], num_replicas=3)
    return nc


async def _leader(nc: nats.NATS) -> str:
    return str((await stream_info(nc, "F"))["cluster"]["leader"])


async def _all_current(nc: nats.NATS, leader: str | None = None) -> bool:
    """The leader (``leader`` if given: a node resuming from a freeze may still answer for a
    moment as the leader it was) reports both followers in the ISR with no lag."""
    try:
        cl = (await stream_info(nc, "F"))["cluster"]
    except (TimeoutError, nats.errors.Error):
        return False
    if leader is not None and cl.get("leader") != leader:
        return False
    reps = cl.get("replicas", [])
    return len(reps) == 2 and all(r["current"] and r.get("lag", 1) == 0 for r in reps)


async def _verify_replicas(cluster: LocalCluster, pubs) -> int:  # type: ignore[no-untyped-def]
    await cluster.stop()
    copies = [await read_replica(m.data_dir, "F") for m in cluster.members.values()]
    for m, msgs in zip(cluster.members.values(), copies, strict=True):
        try:
            check_acked(pubs, msgs)
        except AssertionError as e:
            tail = "\n".join(m.stderr_tail[-60:])
            raise AssertionError(f"replica {m.name}: {e}\n--- {m.name} log:\n{tail}") from None
    # Every replica holds the same committed log.
    common = min(max(c) if c else 0 for c in copies)
    for c in copies[1:]:
        assert {s: v for s, v in c.items() if s <= common} == {
            s: v for s, v in copies[0].items() if s <= common
        }
    return sum(len(p.acked) for p in pubs)


@pytest.mark.parametrize("fault", ["kill", "stop"])
async def test_leader_fault_under_load(cluster: LocalCluster, upstream, fault: str) -> None:  # type: ignore[no-untyped-def]
    nc = await _setup(upstream.url)
    pubs, tasks, pnc = await run_publishers(upstream.url, 3, "f.x")
    try:
        await wait_for(lambda: _async(sum(len(p.acked) for p in pubs) > 100), 20, "first acks")
        leader = await _leader(nc)
        t_fault = time.monotonic()
        if fault == "kill":
            await cluster.kill(leader)
        else:
            cluster.signal(leader, signal.SIGSTOP)
        acked_before = sum(len(p.acked) for p in pubs)

        async def acks_resume() -> bool:
            return any(t > t_fault + 0.05 for p in pubs for t in p.ack_times[-3:]) and (
                sum(len(p.acked) for p in pubs) > acked_before + 10
            )

        await wait_for(acks_resume, 15, "acks after the fault")
        new_leader = await _leader(nc)
        assert new_leader != leader
        gap = await failover_gap(pubs, t_fault)
        print(f"{fault}: acks resumed {gap:.2f}s after the fault")
        assert gap < 5.0
        await asyncio.sleep(1.0)
        if fault == "kill":
            await cluster.start_node(leader)
        else:
            cluster.signal(leader, signal.SIGCONT)
        await wait_for(lambda: _all_current(nc, new_leader), 30, "the old leader back in the ISR")
        await asyncio.sleep(0.5)
    finally:
        await stop_publishers(pubs, tasks, pnc)
        await nc.close()
    n = await _verify_replicas(cluster, pubs)
    assert n > 150


async def test_follower_kill_and_rejoin(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await _setup(upstream.url)
    pubs, tasks, pnc = await run_publishers(upstream.url, 2, "f.y")
    try:
        await wait_for(lambda: _async(sum(len(p.acked) for p in pubs) > 50), 20, "first acks")
        leader = await _leader(nc)
        follower = next(m for m in cluster.members if m != leader)
        await cluster.kill(follower)
        before = sum(len(p.acked) for p in pubs)
        # The leader keeps acknowledging (ISR 2 of 3 >= min_insync 2).
        await wait_for(
            lambda: _async(sum(len(p.acked) for p in pubs) > before + 50), 15, "acks without the follower"
        )
        await cluster.start_node(follower)
        await wait_for(lambda: _all_current(nc), 30, "follower back in the ISR")
    finally:
        await stop_publishers(pubs, tasks, pnc)
        await nc.close()
    await _verify_replicas(cluster, pubs)


async def _async(v: bool) -> bool:
    return v
