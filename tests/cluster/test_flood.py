"""A sustained flood of large messages keeps every follower in the ISR.

Each fetch reply is cut at the upstream's ``max_payload`` while the leader's log keeps growing,
so under a flood a follower that keeps pace never reaches the log end it was last told about.
It must not count as lagging for that (it did: both followers left the ISR after
``isr_lag_time`` and publishes got 503/10008 in the middle of ``jetlog bench --cluster``).
"""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from jetlog.embedded import NatsServer

from .conftest import stream_info, wait_for

pytestmark = pytest.mark.slow

SIZE = 16 * 1024
FLOOD_S = 4.0  # twice isr_lag_time
WINDOW = 512  # outstanding PubAcks: 8 MiB, eight max_payload fetch replies


async def test_flood_of_16k_messages_keeps_the_isr(upstream: NatsServer, make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = await make_cluster(nats_url=upstream.url, leaf_url=upstream.leaf_url, log_level="info")
    nc = await nats.connect(upstream.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="F", subjects=["f.>"], num_replicas=3)
        payload = b"z" * SIZE
        isr_sizes: list[int] = []

        async def watch() -> None:
            while True:
                try:
                    info = await stream_info(nc, "F", timeout=5)
                    isr_sizes.append(1 + sum(1 for r in info["cluster"]["replicas"] if r["current"]))
                except (TimeoutError, nats.errors.Error):
                    pass
                await asyncio.sleep(0.25)

        watcher = asyncio.create_task(watch())
        t0 = time.monotonic()
        # WINDOW outstanding PubAcks: many fetch replies' worth ahead of the followers for the
        # whole run, so every reply is cut at max_payload and a follower never reaches the log
        # end it was last told about (what the old rule required; with a window of 192 the old
        # rule passed). The window bounds how far the leader runs ahead of the ISR, so a
        # follower that keeps pace lags by about WINDOW / throughput (~0.13 s here).
        sem = asyncio.Semaphore(WINDOW)
        errors: list[Exception] = []

        async def one(i: int) -> None:
            try:
                ack = await js.publish("f.x", payload, timeout=30)
                assert ack.seq >= 1
            except Exception as e:  # collected, asserted below
                errors.append(e)
            finally:
                sem.release()

        tasks = []
        while time.monotonic() - t0 < FLOOD_S:
            await sem.acquire()
            tasks.append(asyncio.create_task(one(len(tasks))))
        await asyncio.gather(*tasks)
        watcher.cancel()
        n = len(tasks)
        assert not errors, f"{len(errors)} of {n} publishes failed, first: {errors[0]!r}"
        assert isr_sizes and min(isr_sizes) == 3, (
            f"ISR sizes seen during the flood of {n}: {isr_sizes}\n{cluster.log_tail()}"
        )

        async def all_current() -> bool:
            info = await stream_info(nc, "F")
            return info["state"]["messages"] == n and all(r["current"] for r in info["cluster"]["replicas"])

        await wait_for(all_current, 30, "every replica current with all messages")
    finally:
        await nc.close()
        await cluster.stop()
