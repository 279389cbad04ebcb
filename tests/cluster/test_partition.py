"""Partitions: a stream leader cut off from the Raft group (silent drop, no FIN), and a stream
leader whose NATS links go silent (fault-injecting proxies). Either way another node leads
within seconds, nothing acknowledged is lost, and the cut-off node rejoins after healing."""

from __future__ import annotations

import asyncio
import time

import msgspec
import nats
import pytest

from jetlog.chaos.proxy import FaultProxy
from jetlog.devcluster import LocalCluster
from jetlog.embedded import NatsServer

from .conftest import failover_gap, stream_info, wait_for
from .workload import check_acked, read_replica, run_publishers, stop_publishers

pytestmark = pytest.mark.slow


async def _leader(nc: nats.NATS) -> str:
    return str((await stream_info(nc, "P"))["cluster"]["leader"])


async def _current(nc: nats.NATS, leader: str) -> bool:
    try:
        cl = (await stream_info(nc, "P"))["cluster"]
    except (TimeoutError, nats.errors.Error):
        return False
    reps = cl.get("replicas", [])
    return (
        cl.get("leader") == leader
        and len(reps) == 2
        and all(r["current"] and r.get("lag", 1) == 0 for r in reps)
    )


async def _verify(cluster: LocalCluster, pubs) -> None:  # type: ignore[no-untyped-def]
    await cluster.stop()
    for m in cluster.members.values():
        check_acked(pubs, await read_replica(m.data_dir, "P"))


async def test_leader_cut_from_raft(upstream: NatsServer, tmp_path, make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = await make_cluster(
        nats_url=upstream.url,
        leaf_url=upstream.leaf_url,
        env={"JETLOG_FAULT_CONTROL": "1"},
    )
    nc = await nats.connect(upstream.url)
    pubs, tasks, pnc = await run_publishers(upstream.url, 2, "p.x")
    try:
        await nc.jetstream(timeout=5).add_stream(name="P", subjects=["p.>"], num_replicas=3)
        await wait_for(lambda: _true(sum(len(p.acked) for p in pubs) > 50), 20, "first acks")
        leader = await _leader(nc)
        others = [m for m in cluster.members if m != leader]
        t0 = time.monotonic()
        await _fault(nc, leader, others)
        for o in others:
            await _fault(nc, o, [leader])
        new_leader = await _wait_new_leader(nc, leader)
        gap = await failover_gap(pubs, t0)
        print(f"raft partition: acks resumed {gap:.2f}s after the cut")
        assert gap < 5.0
        await asyncio.sleep(0.5)
        await _fault(nc, leader, [])
        for o in others:
            await _fault(nc, o, [])
        await wait_for(lambda: _current(nc, new_leader), 30, "the cut-off node back in the ISR")
    finally:
        await stop_publishers(pubs, tasks, pnc)
        await nc.close()
    await _verify(cluster, pubs)


@pytest.mark.parametrize("also_raft_leader", [False, True])
async def test_leader_nats_links_blocked(
    upstream: NatsServer, tmp_path, make_cluster, also_raft_leader: bool
) -> None:  # type: ignore[no-untyped-def]
    host, cport = upstream.url.rsplit("/", 1)[1].split(":")
    lport = int(upstream.leaf_url.rsplit(":", 1)[1])
    proxies = []
    for _ in range(3):
        pc, pl = FaultProxy(host, int(cport)), FaultProxy(host, lport)
        await pc.start()
        await pl.start()
        proxies.append((pc, pl))
    cluster = await make_cluster(
        nats_url=[f"nats://127.0.0.1:{pc.port}" for pc, _ in proxies],
        leaf_url=[f"nats-leaf://127.0.0.1:{pl.port}" for _, pl in proxies],
    )
    nc = await nats.connect(upstream.url)
    pubs, tasks, pnc = await run_publishers(upstream.url, 2, "p.x")
    try:
        await nc.jetstream(timeout=5).add_stream(name="P", subjects=["p.>"], num_replicas=3)
        await wait_for(lambda: _true(sum(len(p.acked) for p in pubs) > 50), 20, "first acks")
        leader = await _leader(nc)
        if also_raft_leader:
            # The worst case: the node cut off is also the controller (Raft leader), which must
            # notice that it cannot judge liveness and hand the controller role over.
            raft_leader = msgspec.json.decode((await nc.request("$JETLOG.API.CLUSTER", b"", timeout=5)).data)[
                "raft_leader"
            ]
            if leader != raft_leader:
                body = msgspec.json.encode({"placement": {"preferred": raft_leader}})
                await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.P", body, timeout=5)
                await wait_for(
                    lambda: _is_leader(nc, raft_leader), 10, "the stream leader on the Raft leader"
                )
                leader = raft_leader
        i = list(cluster.members).index(leader)
        t0 = time.monotonic()
        for p in proxies[i]:
            p.block()
        try:
            new_leader = await _wait_new_leader(nc, leader)
            gap = await failover_gap(pubs, t0)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{cluster.log_tail()}") from None
        print(f"NATS partition: acks resumed {gap:.2f}s after the cut")
        assert gap < 5.0
        await asyncio.sleep(0.5)
        for p in proxies[i]:
            p.heal()
            p.cut()  # the silent connections were declared dead by now; start over
        try:
            await wait_for(lambda: _current(nc, new_leader), 60, "the cut-off node back in the ISR")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{cluster.log_tail()}") from None
    finally:
        await stop_publishers(pubs, tasks, pnc)
        await nc.close()
        try:
            await _verify(cluster, pubs)
        finally:
            for pc, pl in proxies:
                await pc.close()
                await pl.close()


async def _is_leader(nc: nats.NATS, node: str) -> bool:
    try:
        return await _leader(nc) == node
    except (TimeoutError, nats.errors.Error):
        return False


async def _fault(nc: nats.NATS, node: str, drop: list[str]) -> None:
    msg = await nc.request(
        f"$JETLOG.jetlog.FAULT.{node}", msgspec.json.encode({"raft_drop": drop}), timeout=2
    )
    assert msgspec.json.decode(msg.data)["raft_drop"] == drop


async def _wait_new_leader(nc: nats.NATS, old: str) -> str:
    out: list[str] = []

    async def moved() -> bool:
        try:
            cur = await _leader(nc)
        except (TimeoutError, nats.errors.Error):
            return False
        out[:] = [cur]
        return cur != old

    await wait_for(moved, 10, "a new leader")
    return out[0]


async def _true(v: bool) -> bool:
    return v
