"""Consumer state survives kill -9: nothing confirmed by a double ack is redelivered, and
everything un-acknowledged is."""

from __future__ import annotations

import asyncio

import nats
from nats.js.api import AckPolicy, ConsumerConfig

from .nodeproc import node_and_client


async def _drain(psub: object, want: int, timeout: float = 10.0) -> list[nats.aio.msg.Msg]:
    got: list[nats.aio.msg.Msg] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while len(got) < want and loop.time() < end:
        try:
            got.extend(await psub.fetch(want - len(got), timeout=1))  # type: ignore[attr-defined]
        except TimeoutError:  # nats-py's fetch may also raise the bare asyncio one
            continue
    return got


async def test_double_acked_never_redelivered_unacked_always(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with node_and_client(str(tmp_path / "data")) as (node, nc):
        js = nc.jetstream(timeout=3)
        await js.add_stream(name="CR", subjects=["cr.*"])
        for i in range(60):
            await js.publish(f"cr.{i % 3}", str(i).encode())
        await js.add_consumer(
            "CR", ConsumerConfig(durable_name="work", ack_policy=AckPolicy.EXPLICIT, ack_wait=1.0)
        )
        psub = await js.pull_subscribe_bind("work", "CR")
        msgs = await _drain(psub, 60)
        assert len(msgs) == 60
        double_acked, unacked = set(), set()
        for m in msgs:
            seq = m.metadata.sequence.stream
            if seq % 3 == 0:
                await m.ack_sync()  # confirmed: must never come back
                double_acked.add(seq)
            elif seq % 3 == 1:
                await m.ack()  # plain ack: may come back (at least once), need not
            else:
                unacked.add(seq)
        await node.kill()
        await node.start()
        psub = await js.pull_subscribe_bind("work", "CR")
        again = await _drain(psub, len(unacked), timeout=15)
        seqs = {m.metadata.sequence.stream for m in again}
        assert unacked <= seqs, f"un-acked messages not redelivered: {sorted(unacked - seqs)}"
        assert not (double_acked & seqs), f"double-acked redelivered: {sorted(double_acked & seqs)}"
        for m in again:
            assert m.metadata.num_delivered >= 2
            assert m.data == str(m.metadata.sequence.stream - 1).encode()
            await m.ack_sync()
        info = await js.consumer_info("CR", "work")
        assert info.num_ack_pending == 0
        assert info.delivered.stream_seq == 60


async def test_a_stop_rewrites_consumer_state_only_when_it_changed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A clean stop compacts a stream's consumer-state log if consumers changed since it was
    opened; a stop with nothing new leaves the file as it is (same inode), and the state a
    later start recovers is right either way."""
    async with node_and_client(str(tmp_path / "data")) as (node, nc):
        clog = tmp_path / "data" / "streams" / "CS" / "consumers" / "consumers.log"
        js = nc.jetstream(timeout=3)
        await js.add_stream(name="CS", subjects=["cs.*"])
        for i in range(10):
            await js.publish(f"cs.{i % 2}", str(i).encode())
        await js.add_consumer("CS", ConsumerConfig(durable_name="w", ack_policy=AckPolicy.EXPLICIT))
        psub = await js.pull_subscribe_bind("w", "CS")
        for m in await _drain(psub, 4):
            await m.ack_sync()
        assert await node.terminate() == 0
        first = clog.stat()
        await node.start()
        assert await node.terminate() == 0  # nothing changed: the file is left alone
        again = clog.stat()
        assert (again.st_ino, again.st_size, again.st_mtime_ns) == (
            first.st_ino,
            first.st_size,
            first.st_mtime_ns,
        )
        await node.start()
        psub = await js.pull_subscribe_bind("w", "CS")
        msgs = await _drain(psub, 6)
        assert [m.metadata.sequence.stream for m in msgs] == list(range(5, 11))
        for m in msgs[:2]:
            await m.ack_sync()
        assert await node.terminate() == 0  # two acks: compacted into a new file
        assert clog.stat().st_ino != first.st_ino
        await node.start()
        info = await js.consumer_info("CS", "w")
        assert info.ack_floor.stream_seq == 6 and info.num_ack_pending == 4
