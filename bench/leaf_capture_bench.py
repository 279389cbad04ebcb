"""Capture throughput: plain ``nc.publish`` traffic through the hub to a receiver.

Compares jetlog's :class:`~jetlog.transport.leaf.LeafConnection` capture callback with a nats-py
subscriber on the same subject. The publisher is a separate process (nats-py, publishing as
fast as it can), so it does not share the receiver's event loop; the server is the embedded
nats-server. The rate is messages received / time between the first and the last one.

Run: ``.venv/bin/python bench/leaf_capture_bench.py [--n 300000] [--size 128] [--uvloop]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import nats

from jetlog.embedded import NatsServer
from jetlog.transport.leaf import LeafConnection

PUBLISHER = r"""
import asyncio, sys, time, nats
async def main(url, n, size):
    nc = await nats.connect(url, flusher_queue_size=4096, pending_size=8 * 1024 * 1024)
    payload = b"x" * size
    t0 = time.perf_counter()
    for i in range(n):
        await nc.publish("cap.bench", payload)
    await nc.flush(timeout=60)
    dt = time.perf_counter() - t0
    print(f"{n / dt:.0f}", flush=True)
    await nc.close()
asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


class Counter:
    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.done = asyncio.get_running_loop().create_future()

    def hit(self) -> None:
        if self.count == 0:
            self.first = time.perf_counter()
        self.count += 1
        if self.count == self.n:
            self.last = time.perf_counter()
            if not self.done.done():
                self.done.set_result(None)


async def publish(url: str, n: int, size: int) -> tuple[asyncio.subprocess.Process, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PUBLISHER, url, str(n), str(size), stdout=asyncio.subprocess.PIPE
    )
    return proc, proc.stdout


async def run_one(srv: NatsServer, mode: str, n: int, size: int) -> None:
    counter = Counter(n)
    link: LeafConnection | None = None
    nc: Any = None
    if mode == "leaf":
        link = LeafConnection(srv.leaf_url, name="bench-capture")
        await link.connect(5)
        link.subscribe("cap.bench", lambda s, r, h, p: counter.hit())
        await link.flush()
    else:
        nc = await nats.connect(srv.url)

        async def cb(msg: Any) -> None:
            counter.hit()

        await nc.subscribe("cap.bench", cb=cb, pending_msgs_limit=n + 1, pending_bytes_limit=1 << 34)
        await nc.flush()
    proc, out = await publish(srv.url, n, size)
    try:
        await asyncio.wait_for(asyncio.shield(counter.done), 120)
    except TimeoutError:
        pass
    pub_rate = (await out.read()).decode().strip()
    await proc.wait()
    if counter.count == n:
        rate = n / (counter.last - counter.first)
        print(
            f"{mode:8s} received {n:,} x {size} B: {rate:>10,.0f} msgs/s   (publisher pushed {int(pub_rate):,}/s)"
        )
    else:
        print(f"{mode:8s} received only {counter.count:,} of {n:,} (drops); publisher {pub_rate}/s")
    if link is not None:
        await link.close()
    if nc is not None:
        await nc.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    async with NatsServer(leafnode=True) as srv:
        for _ in range(args.rounds):
            for mode in ("leaf", "nats-py"):
                await run_one(srv, mode, args.n, args.size)


if __name__ == "__main__":
    if "--uvloop" in sys.argv:
        sys.argv.remove("--uvloop")
        import uvloop

        uvloop.install()
    asyncio.run(main())
