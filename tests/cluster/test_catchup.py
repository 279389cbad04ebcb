"""A follower back after missing many messages catches up and says so in its log (where it
stands, the rate, when done), then holds exactly the leader's log."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import nats
import pytest

from jetlog.devcluster import LocalCluster

from .conftest import stream_info, wait_for
from .workload import read_replica

pytestmark = pytest.mark.slow


async def _readyz(http: str) -> tuple[int, str]:
    host, port = http.rsplit(":", 1)
    r, w = await asyncio.open_connection(host, int(port))
    w.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    await w.drain()
    data = await asyncio.wait_for(r.read(), 5)
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode().strip()


async def _is(got: Any, want: tuple[int, str]) -> bool:
    return bool(await got == want)


async def test_catch_up_progress_is_logged(cluster: LocalCluster, upstream) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="CU", subjects=["cu.>"], num_replicas=3)
        leader = (await stream_info(nc, "CU"))["cluster"]["leader"]
        follower = next(n for n in sorted(cluster.members) if n != leader)
        await cluster.kill(follower)
        total = 15_000
        for i in range(0, total, 500):
            acks = await asyncio.gather(
                *(js.publish("cu.x", b"%08d" % k + b"." * 92) for k in range(i, i + 500))
            )
            assert acks[-1].seq == i + 500
        await cluster.start_node(follower)
        seen: list[tuple[int, str]] = []

        async def current() -> bool:
            seen.append(await _readyz(cluster.members[follower].http))
            reps = (await stream_info(nc, "CU"))["cluster"].get("replicas", [])
            return any(r["name"] == follower and r["current"] and r.get("lag", 1) == 0 for r in reps)

        await wait_for(current, 60, f"{follower} caught up")
        # While out of the ISR it is not ready, saying why; once back in, ready.
        assert {s for s in seen if s[0] != 200} <= {(503, "catching up: CU")}, seen
        await wait_for(lambda: _is(_readyz(cluster.members[follower].http), (200, "ready")), 10, "ready")
    finally:
        await nc.close()
    log = "\n".join(cluster.members[follower].stderr_tail)
    assert re.search(rf"stream CU: catching up from {leader}: \d+ messages behind", log), log[-3000:]
    m = re.search(rf"stream CU: caught up with {leader}: (\d+) messages in [\d.]+s \(\d+ msgs/s\)", log)
    assert m is not None, log[-3000:]
    assert int(m.group(1)) >= total - 500
    await cluster.stop()
    mine = await read_replica(cluster.members[follower].data_dir, "CU")
    theirs = await read_replica(cluster.members[leader].data_dir, "CU")
    assert len(mine) == total and mine == theirs
