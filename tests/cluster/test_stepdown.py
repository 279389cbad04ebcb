"""$JS.API.STREAM.LEADER.STEPDOWN and $JS.API.META.LEADER.STEPDOWN move leadership without losing
anything acknowledged."""

from __future__ import annotations

import msgspec
import nats
import pytest

from jetlog.devcluster import LocalCluster

from .conftest import stream_info, wait_for
from .workload import check_acked, read_replica, run_publishers, stop_publishers

pytestmark = pytest.mark.slow


async def test_stream_stepdown_under_load(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    pubs, tasks, pnc = await run_publishers(upstream.url, 2, "sd.x")
    try:
        await nc.jetstream(timeout=5).add_stream(name="SD", subjects=["sd.>"], num_replicas=3)
        await wait_for(lambda: _true(sum(len(p.acked) for p in pubs) > 30), 20, "first acks")
        leaders = []
        for _ in range(3):
            before = (await stream_info(nc, "SD"))["cluster"]["leader"]
            msg = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.SD", b"", timeout=5)
            body = msgspec.json.decode(msg.data)
            assert body == {
                "type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response",
                "success": True,
            }

            async def moved(b: str = before) -> bool:
                try:
                    return (await stream_info(nc, "SD", timeout=1))["cluster"]["leader"] != b
                except (TimeoutError, nats.errors.Error):
                    return False

            await wait_for(moved, 10, "the stream leader to move")
            leaders.append((await stream_info(nc, "SD"))["cluster"]["leader"])
            n = sum(len(p.acked) for p in pubs)
            await wait_for(
                lambda n=n: _true(sum(len(p.acked) for p in pubs) > n + 20), 10, "acks on the new leader"
            )
        assert len(set(leaders)) >= 2
    finally:
        await stop_publishers(pubs, tasks, pnc)
        await nc.close()
    await cluster.stop()
    for m in cluster.members.values():
        check_acked(pubs, await read_replica(m.data_dir, "SD"))


async def test_meta_stepdown(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="MS", subjects=["ms.>"], num_replicas=3)
        for _ in range(2):
            msg = await nc.request("$JS.API.META.LEADER.STEPDOWN", b"{}", timeout=10)
            body = msgspec.json.decode(msg.data)
            assert body == {"type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response", "success": True}
            # Metadata changes still go through (a new Raft leader took over).
            await js.add_stream(name=f"MS{_}", subjects=[f"ms{_}.>"], num_replicas=3)
            assert (await js.publish(f"ms{_}.a", b"x")).seq == 1
        assert sorted(s.config.name for s in await js.streams_info()) == ["MS", "MS0", "MS1"]
    finally:
        await nc.close()


async def _true(v: bool) -> bool:
    return v
