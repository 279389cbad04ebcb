"""The client link's own read path and requests, against a real nats-server.

Raw subscriptions are read from the socket by ``ClientLink``'s fast path while nats-py keeps
the rest of the connection (PING/PONG, INFO, errors, its own subscriptions); requests resolve
from that path without nats-py's request machinery.
"""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from jetlog.embedded import NatsServer
from jetlog.errors import TransportError
from jetlog.transport.barrier import flush_barrier
from jetlog.transport.client import ClientLink
from jetlog.wire.leaf import PayloadTooLargeError

from .test_link_recovery import until


async def test_raw_messages_arrive_whole_and_in_order_beside_nats_py(nats_server: NatsServer) -> None:
    link = ClientLink([nats_server.url], name="jl-raw")
    await link.connect()
    nc = await nats.connect(nats_server.url)
    try:
        assert link.fast_path
        got: list[tuple[str, str | None, bytes, bytes]] = []
        await link.subscribe_raw("raw.>", lambda s, r, h, d: got.append((s, r, h, d)))
        # A nats-py subscription on the link's own client keeps working beside the raw ones.
        theirs: list[bytes] = []

        async def on_theirs(m: nats.aio.msg.Msg) -> None:
            theirs.append(m.data)

        await link.nc.subscribe("theirs.>", cb=on_theirs)
        await link.flush()
        sent = []
        for i in range(300):
            size = (0, 1, 100, 70_000, 200_000)[i % 5]  # the big ones span many socket reads
            body = bytes([i % 251]) * size
            if i % 3 == 0:
                hdr = {"N": str(i), "Dup": "x"}
                await nc.publish(f"raw.{i}", body, reply=f"r.{i}", headers=hdr)
            else:
                await nc.publish(f"raw.{i}", body)
            await nc.publish(f"theirs.{i}", str(i).encode())
            sent.append((i, size))
        await flush_barrier(nc)
        await until(lambda: len(got) == 300 and len(theirs) == 300, "every message", timeout=30)
        for (i, size), (subject, reply, hdr, data) in zip(sent, got, strict=True):
            assert subject == f"raw.{i}"
            assert data == bytes([i % 251]) * size
            if i % 3 == 0:
                assert reply == f"r.{i}"
                # The header block is stored verbatim (order and case as sent).
                assert hdr.startswith(b"NATS/1.0\r\n") and f"N: {i}\r\n".encode() in hdr
            else:
                assert reply is None and hdr == b""
        assert theirs == [str(i).encode() for i in range(300)]
        assert link.nc.stats["in_msgs"] >= 300
        # PING/PONG still work through nats-py (the server's and ours).
        await link.flush()
        assert link.connected and link.fast_path
    finally:
        await nc.close()
        await link.close()


def _record_writes(nc: nats.NATS) -> list[bytes]:
    """The commands ``nc`` writes from now on, in socket order (first word of each)."""
    order: list[bytes] = []
    tr = nc._transport
    assert tr is not None
    write, writelines = tr.write, tr.writelines

    def rec_write(b: bytes) -> None:
        order.append(bytes(b).split(b" ", 1)[0].strip())
        write(b)

    def rec_writelines(bs: list[bytes]) -> None:
        order.extend(bytes(b).split(b" ", 1)[0].strip() for b in bs)
        writelines(bs)

    tr.write, tr.writelines = rec_write, rec_writelines  # type: ignore[method-assign]
    return order


async def test_flush_barrier_writes_queued_commands_before_its_ping(nats_server: NatsServer) -> None:
    # nats-py 2.16's own flush() writes PING ahead of a SUB still queued for its flusher task,
    # so its PONG does not prove the subscription is registered (a CI flake: no responders).
    nc = await nats.connect(nats_server.url)
    link = ClientLink([nats_server.url], name="jl-barrier")
    await link.connect()
    try:

        async def nothing(m: nats.aio.msg.Msg) -> None:
            pass

        order = _record_writes(nc)
        await nc.subscribe("b.one", cb=nothing)
        await nc.publish("b.one", b"x")
        await flush_barrier(nc)
        assert order == [b"SUB", b"PUB", b"PING"]
        # The link's flush (readiness after subscribing the API) is the same barrier.
        order = _record_writes(link.nc)
        await link.subscribe_raw("b.two", lambda s, r, h, d: None)
        await link.flush()
        assert order == [b"SUB", b"PING"]
        # And it is a real round trip: a publish from another connection right after it is
        # delivered, every time.
        got: list[bytes] = []
        for i in range(50):
            subject = f"b.many.{i}"
            await link.subscribe_raw(subject, lambda s, r, h, d: got.append(d))
            await link.flush()
            await nc.publish(subject, str(i).encode())
        await flush_barrier(nc)
        await until(lambda: len(got) == 50, "50 deliveries")
        assert got == [str(i).encode() for i in range(50)]
    finally:
        await nc.close()
        await link.close()


async def test_requests(nats_server: NatsServer) -> None:
    link = ClientLink([nats_server.url], name="jl-req")
    await link.connect()
    nc = await nats.connect(nats_server.url)
    try:

        async def echo(m: nats.aio.msg.Msg) -> None:
            if m.data == b"slow":
                await asyncio.sleep(0.5)
            await m.respond(b"re:" + m.data)

        await nc.subscribe("svc", cb=echo)
        await flush_barrier(nc)
        assert await link.request("svc", b"one", 2.0) == b"re:one"
        # Many at once: each gets its own reply.
        bodies = [str(i).encode() for i in range(200)]
        replies = await asyncio.gather(*(link.request("svc", b, 5.0) for b in bodies))
        assert replies == [b"re:" + b for b in bodies]
        # Nobody listening: the server's no-responders status, at once.
        t0 = time.monotonic()
        with pytest.raises(TransportError, match="no responders"):
            await link.request("nobody.here", b"", 5.0)
        assert time.monotonic() - t0 < 2.0
        # A reply later than the timeout: TimeoutError, and the late reply is dropped.
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            await link.request("svc", b"slow", 0.1)
        assert 0.09 <= time.monotonic() - t0 < 0.4
        await asyncio.sleep(0.6)
        assert await link.request("svc", b"after", 2.0) == b"re:after"
        assert link._replies == {}
        # The link down: refused at once.
        await link.close()
        with pytest.raises(TransportError):
            await link.request("svc", b"x", 1.0)
    finally:
        await nc.close()
        await link.close()


async def test_many_frames_to_one_subject_leave_in_one_write_and_in_order(nats_server: NatsServer) -> None:
    """``send_many`` (a Direct Get batch, a bulk reply and its status) writes its frames as one
    socket write, in order; a frame the server would refuse ends the run after the frames
    before it."""
    link = ClientLink([nats_server.url], name="jl-many")
    await link.connect()
    nc = await nats.connect(nats_server.url)
    try:
        got: list[tuple[bytes, bytes]] = []

        async def on_msg(m: nats.aio.msg.Msg) -> None:
            got.append((m.headers.get("N", "").encode() if m.headers else b"", m.data))

        await nc.subscribe("many.x", cb=on_msg)
        await flush_barrier(nc)
        writes: list[int] = []
        transport = link.nc._transport
        assert transport is not None
        real_write = transport.write

        def counting(data: bytes) -> None:
            writes.append(len(data))
            real_write(data)

        transport.write = counting  # type: ignore[method-assign]
        frames = [(b"NATS/1.0\r\nN: %d\r\n\r\n" % i if i % 2 else b"", b"m%04d" % i) for i in range(1_000)]
        link.send_many("many.x", frames)
        assert len(writes) == 1
        await until(lambda: len(got) == 1_000, "every frame", timeout=10)
        assert got == [(b"%d" % i if i % 2 else b"", b"m%04d" % i) for i in range(1_000)]
        # The 3rd frame is above max_payload: the first two leave, then the refusal.
        big = b"x" * (link.max_payload + 1)
        with pytest.raises(PayloadTooLargeError):
            link.send_many("many.x", [(b"", b"a"), (b"", b"b"), (b"", big), (b"", b"c")])
        await until(lambda: len(got) == 1_002, "the frames before the refused one", timeout=10)
        await nc.flush()
        assert got[1_000:] == [(b"", b"a"), (b"", b"b")] and len(writes) == 2
    finally:
        transport.write = real_write  # type: ignore[method-assign]
        await nc.close()
        await link.close()
