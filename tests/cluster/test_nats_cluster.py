"""Each jetlog node beside its own member of a 3-server nats-server cluster (routes): clients
connected to any server publish, read and consume; a node's failure is survived as with one
shared server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest

from jetlog.devcluster import free_port
from jetlog.embedded import NatsServer
from jetlog.transport.barrier import flush_barrier

from .conftest import stream_info, wait_for
from .workload import check_acked, read_replica, run_publishers, stop_publishers

pytestmark = pytest.mark.slow


@pytest.fixture
async def nats_cluster() -> AsyncIterator[list[NatsServer]]:
    ports = [free_port() for _ in range(3)]
    routes = ",".join(f"nats-route://127.0.0.1:{p}" for p in ports)
    servers = [
        NatsServer(
            leafnode=True,
            name=f"s{i}",
            extra_conf=f"cluster {{ name: C, listen: 127.0.0.1:{p}, routes: [{routes}] }}",
        )
        for i, p in enumerate(ports)
    ]
    await asyncio.gather(*(s.start() for s in servers))
    await _routes_ready(servers)
    try:
        yield servers
    finally:
        await asyncio.gather(*(s.stop() for s in servers))


async def test_nodes_beside_their_own_servers(nats_cluster: list[NatsServer], tmp_path, make_cluster) -> None:  # type: ignore[no-untyped-def]
    servers = nats_cluster
    cluster = await make_cluster(
        nats_url=[s.url for s in servers],
        leaf_url=[s.leaf_url for s in servers],
    )
    clients = [await nats.connect(s.url) for s in servers]
    try:
        js = [c.jetstream(timeout=5) for c in clients]
        await js[0].add_stream(name="N", subjects=["n.>"], num_replicas=3)
        for i in range(30):
            ack = await js[i % 3].publish("n.x", f"m{i}".encode())
            assert ack.seq == i + 1
        for i in range(3):
            assert (await js[i].get_msg("N", 5)).data == b"m4"
        sub = await js[2].pull_subscribe("n.x", durable="D", stream="N")
        got = list(await sub.fetch(30, timeout=5))
        assert [m.data for m in got] == [f"m{i}".encode() for i in range(30)]
        for m in got:
            await m.ack()
        pubs, tasks, pnc = await run_publishers(servers[1].url, 2, "n.y")
        try:
            await wait_for(lambda: _true(sum(len(p.acked) for p in pubs) > 30), 20, "acks")
            leader = (await stream_info(clients[0], "N"))["cluster"]["leader"]
            await cluster.kill(leader)
            n = sum(len(p.acked) for p in pubs)
            await wait_for(lambda: _true(sum(len(p.acked) for p in pubs) > n + 30), 20, "acks after the kill")
            await cluster.start_node(leader)

            async def current() -> bool:
                cl = (await stream_info(clients[0], "N"))["cluster"]
                return cl["leader"] != leader and all(
                    r["current"] and r.get("lag", 1) == 0 for r in cl["replicas"]
                )

            await wait_for(current, 30, "the restarted node back in the ISR")
        finally:
            await stop_publishers(pubs, tasks, pnc)
    finally:
        for c in clients:
            await c.close()
        await cluster.stop()
    for m in cluster.members.values():
        check_acked(pubs, await read_replica(m.data_dir, "N"))


async def _routes_ready(servers: list[NatsServer]) -> None:
    """Wait until a subscriber on each server is reachable from every other one."""
    conns = [await nats.connect(s.url) for s in servers]
    try:
        for i, c in enumerate(conns):

            async def pong(m: nats.aio.msg.Msg) -> None:
                await m.respond(b"ok")

            sub = await c.subscribe(f"probe.{i}", cb=pong)
            await flush_barrier(c)
            for other in conns:

                async def answered(o: nats.NATS = other, j: int = i) -> bool:
                    try:
                        await o.request(f"probe.{j}", b"", timeout=0.2)
                    except (TimeoutError, nats.errors.Error):
                        return False
                    return True

                await wait_for(answered, 15, "routes between the servers")
            await sub.unsubscribe()
    finally:
        for c in conns:
            await c.close()


async def _true(v: bool) -> bool:
    return v
