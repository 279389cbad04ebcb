"""A delivery pass decides under the stream's delivery lease; if the process stalls inside the
pass (SIGSTOP, a long pause) past the end of that lease, the pass's frames are not written:
another leader may have delivered the messages and seen them acknowledged meanwhile (chaos,
seed 5 schedule 2: a leader frozen mid-pass sent two deliveries 1.5 s late). The messages stay
pending and are redelivered after ``ack_wait``."""

from __future__ import annotations

import time
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from jetlog.embedded import NatsServer

from .conftest import start_node

pytestmark = pytest.mark.timeout(60)


async def test_a_pass_stalled_past_its_lease_writes_no_delivery(
    nats_server: NatsServer, tmp_path: Any
) -> None:
    node = await start_node(nats_server, str(tmp_path / "data"))
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="L", subjects=["l.>"])
        await js.publish("l.a", b"one")
        await js.add_consumer(
            "L", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT, ack_wait=1.0)
        )
        assert node.streams is not None
        stream = node.streams.streams["L"]
        consumer = stream.consumers.consumers["C"]
        # A lease that ends 50 ms after the pass's check, and a pass that stalls 200 ms after it.
        stream.delivery_lease = lambda: time.monotonic() + 0.05  # type: ignore[method-assign]
        real_pass = consumer._pull_pass

        def stalled_pass(now: int) -> bool:
            time.sleep(0.2)
            return real_pass(now)

        consumer._pull_pass = stalled_pass  # type: ignore[method-assign]
        sub = await js.pull_subscribe("l.>", durable="C", stream="L")
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.8)
        assert node.leaf.stats.stale_deliveries == 1
        # The message stayed pending: without the stall it is redelivered after ack_wait.
        del consumer._pull_pass
        del stream.delivery_lease
        msgs = await sub.fetch(1, timeout=5)
        assert [(m.data, m.metadata.num_delivered, m.metadata.sequence.stream) for m in msgs] == [
            (b"one", 2, 1)
        ]
        await msgs[0].ack_sync()
        await js.publish("l.b", b"two")
        msgs = await sub.fetch(1, timeout=5)
        assert [(m.data, m.metadata.num_delivered) for m in msgs] == [(b"two", 1)]
        assert node.leaf.stats.stale_deliveries == 1
    finally:
        await nc.close()
        await node.stop()
