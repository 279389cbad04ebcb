"""A consumer reads new messages ahead in batches: messages removed after they were read ahead
(deleted, purged, expired by limits) are never delivered, a filter change or a new message
behind the read-ahead is seen. Runs against jetlog and nats-server -js alike."""

from __future__ import annotations

import nats
from nats.js.api import AckPolicy, ConsumerConfig


async def _seqs(psub, n: int) -> list[int]:  # type: ignore[no-untyped-def]
    msgs = await psub.fetch(n, timeout=2)
    for m in msgs:
        await m.ack()
    return [m.metadata.sequence.stream for m in msgs]


async def test_removed_after_read_ahead_are_not_delivered(nc: nats.NATS) -> None:
    js = nc.jetstream()
    await js.add_stream(name="RA", subjects=["ra.>"])
    for i in range(20):
        await js.publish(f"ra.{i % 2}", b"m%d" % i)
    await js.add_consumer("RA", ConsumerConfig(durable_name="all", ack_policy=AckPolicy.EXPLICIT))
    await js.add_consumer(
        "RA", ConsumerConfig(durable_name="odd", ack_policy=AckPolicy.EXPLICIT, filter_subject="ra.1")
    )
    all_ = await js.pull_subscribe_bind("all", "RA")
    odd = await js.pull_subscribe_bind("odd", "RA")
    assert await _seqs(all_, 1) == [1]
    assert await _seqs(odd, 1) == [2]
    # Both have read ahead by now; remove messages inside what they hold.
    for s in (2, 3, 4, 6):
        await js.delete_msg("RA", s)
    assert await _seqs(all_, 3) == [5, 7, 8]
    assert await _seqs(odd, 2) == [8, 10]
    await js.purge_stream("RA", keep=5)  # keeps 16..20
    assert await _seqs(all_, 3) == [16, 17, 18]
    assert await _seqs(odd, 3) == [16, 18, 20]
    await js.publish("ra.1", b"late")
    assert await _seqs(all_, 5) == [19, 20, 21]
    assert await _seqs(odd, 1) == [21]
