"""A stream leader that hears from none of its in-sync followers holds consumer deliveries.

That is how a paused or cut-off leader looks from the inside until it applies its deposition:
its followers fetch from the new leader, which delivers and sees the acks, and redeliveries
from the stale leader's state would hand consumers messages they have acknowledged (chaos
finding 5 in docs/chaos.md). Here both followers are frozen (the same view for the leader):
redeliveries due every second must stop while they are frozen and resume when they are back.
"""

from __future__ import annotations

import asyncio
import json
import signal

import nats
import pytest
from nats.aio.msg import Msg

from jetlog.embedded import NatsServer

from .conftest import stream_info, wait_for

pytestmark = pytest.mark.slow


async def test_redeliveries_held_while_no_follower_fetches(upstream: NatsServer, make_cluster) -> None:  # type: ignore[no-untyped-def]
    lines: list[tuple[str, str]] = []
    cluster = await make_cluster(
        nats_url=upstream.url,
        leaf_url=upstream.leaf_url,
        log_level="info",
        on_stderr=lambda name, line: lines.append((name, line)),
    )
    nc = await nats.connect(upstream.url)
    frozen: list[str] = []
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="H", subjects=["h.>"], num_replicas=3)
        await js.publish("h.x", b"one")
        inbox = "deliver.h"
        got: asyncio.Queue[Msg] = asyncio.Queue()

        async def on_msg(m: Msg) -> None:
            got.put_nowait(m)

        await nc.subscribe(inbox, cb=on_msg)
        cfg = {
            "durable_name": "c",
            "deliver_subject": inbox,
            "ack_policy": "explicit",
            "ack_wait": 1_000_000_000,
        }
        r = await nc.request(
            "$JS.API.CONSUMER.CREATE.H.c", json.dumps({"stream_name": "H", "config": cfg}).encode(), 5
        )
        assert "error" not in json.loads(r.data), r.data
        first = await asyncio.wait_for(got.get(), 5)
        assert first.data == b"one"
        # Never acked: redelivered every ack_wait (1 s) by the leader.
        again = await asyncio.wait_for(got.get(), 5)
        assert again.data == b"one" and again.reply != first.reply

        leader = (await stream_info(nc, "H"))["cluster"]["leader"]
        frozen = [m for m in cluster.members if m != leader]
        for m in frozen:
            cluster.signal(m, signal.SIGSTOP)

        async def holding() -> bool:
            return any(n == leader and "holding consumer deliveries" in line for n, line in lines)

        await wait_for(holding, 10, "the leader to hold deliveries")
        while not got.empty():  # what was sent before the hold
            got.get_nowait()
        # Two and a half ack_wait periods without a single redelivery.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(got.get(), 2.5)

        for m in frozen:
            cluster.signal(m, signal.SIGCONT)
        frozen = []

        async def resumed() -> bool:
            # The leader resumes once a follower answers one of its replies; or, when the
            # thawed nodes saw it silent long enough, they elect another leader, which delivers.
            if any(n == leader and "consumer deliveries resume" in line for n, line in lines):
                return True
            try:
                now = (await stream_info(nc, "H", timeout=1)).get("cluster", {}).get("leader")
            except (TimeoutError, nats.errors.Error):
                return False
            return now not in (None, "", leader)  # an error reply (no leader yet) is not news

        await wait_for(resumed, 15, "deliveries to resume")
        back = await asyncio.wait_for(got.get(), 10)
        assert back.data == b"one"
    finally:
        for m in frozen:
            cluster.signal(m, signal.SIGCONT)
        await nc.close()
        await cluster.stop()
