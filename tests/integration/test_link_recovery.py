"""Every upstream link recovers by itself.

A jetlog node runs with both links going through :class:`~jetlog.chaos.proxy.FaultProxy`
instances in front of a real nats-server (the test's own clients connect to the server
directly). Each link is cut each way a link breaks: a server restart on the same ports, a
killed TCP connection (RST), a protocol error in either direction (garbage from the server;
jetlog writing a frame the server refuses, so it sends ``-ERR`` and closes), and a payload
violation (a frame above max_payload written past jetlog's guard). Each time: the link comes back
by itself, ``/readyz`` follows, the API answers again within a few seconds, no acknowledged
message is lost, and pull and push consumers resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import nats
import pytest
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig

from jetlog.chaos.proxy import FaultProxy
from jetlog.embedded import NatsServer
from jetlog.transport.barrier import flush_barrier
from jetlog.transport.client import ClientLink

from .conftest import start_node

if TYPE_CHECKING:
    from jetlog.node import Node

MP = 64 * 1024
RECOVERY_BUDGET = 8.0  # seconds within which the API must answer again


async def until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    async def wait() -> None:
        while not cond():
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(wait(), timeout)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def http_get(port: int, path: str) -> tuple[int, str]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await w.drain()
    data = await asyncio.wait_for(r.read(), 5)
    w.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


@dataclass
class Rig:
    """Server, the two proxies, the node, and the test's own connection."""

    srv: NatsServer
    client_proxy: FaultProxy
    leaf_proxy: FaultProxy
    node: Node
    nc: nats.NATS
    acked: dict[int, bytes] = field(default_factory=dict)
    pushed: list[Msg] = field(default_factory=list)
    pulled: set[bytes] = field(default_factory=set)
    counter: int = 0
    psub: Any = None

    @property
    def http_port(self) -> int:
        assert self.node.http is not None
        return self.node.http.port

    async def publish(self, n: int, deadline: float = 15.0) -> None:
        """Publish ``n`` messages, retrying each until its PubAck arrives; record what is acked."""
        js = self.nc.jetstream(timeout=1)
        for _ in range(n):
            self.counter += 1
            data = b"m%d" % self.counter
            end = time.monotonic() + deadline
            while True:
                try:
                    # A retry after a lost PubAck must not store the message twice.
                    ack = await js.publish("rec.x", data, headers={"Nats-Msg-Id": data.decode()})
                    break
                except (nats.errors.Error, TimeoutError):
                    if time.monotonic() > end:
                        raise
                    await asyncio.sleep(0.1)
            self.acked[ack.seq] = data


@pytest.fixture
async def rig(tmp_path: Any) -> AsyncIterator[Rig]:
    async with contextlib.AsyncExitStack() as stack:
        srv = await NatsServer(leafnode=True, extra_conf=f"max_payload: {MP}").start()
        rigs: list[Rig] = []

        async def stop_server() -> None:
            # The restart test replaces the server: stop whichever runs now.
            await (rigs[0].srv if rigs else srv).stop()

        stack.push_async_callback(stop_server)
        cp = await stack.enter_async_context(FaultProxy("127.0.0.1", srv.ports["client"]))
        lp = await stack.enter_async_context(FaultProxy("127.0.0.1", srv.ports["leafnode"]))
        node = await start_node(
            srv,
            str(tmp_path / "data"),
            **{
                "upstream.url": f"nats://127.0.0.1:{cp.port}",
                "upstream.leafnode_url": f"nats-leaf://127.0.0.1:{lp.port}",
                "http.listen": "127.0.0.1:0",
            },
        )
        stack.push_async_callback(node.stop)
        nc = await nats.connect(srv.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        stack.push_async_callback(nc.close)
        rig = Rig(srv, cp, lp, node, nc)
        rigs.append(rig)
        js = nc.jetstream()
        await js.add_stream(name="REC", subjects=["rec.>"])
        await js.add_consumer("REC", ConsumerConfig(durable_name="PULL", ack_policy="explicit", ack_wait=1.5))

        async def on_push(m: Msg) -> None:
            rig.pushed.append(m)
            await m.ack()

        await js.subscribe(
            "rec.>",
            stream="REC",
            durable="PUSH",
            cb=on_push,
            manual_ack=True,
            config=ConsumerConfig(ack_wait=1.5, deliver_subject="push.rec"),
        )
        await rig.publish(5)
        rig.psub = await js.pull_subscribe_bind("PULL", "REC")
        for m in await rig.psub.fetch(5, timeout=3):
            rig.pulled.add(m.data)
            await m.ack_sync()
        assert rig.pulled == set(rig.acked.values())
        yield rig


async def check_recovered(rig: Rig, since: float) -> None:
    """The API answers, /readyz is 200, nothing acknowledged is lost, consumers resume."""
    node, nc = rig.node, rig.nc
    js = nc.jetstream(timeout=1)
    # The API answers again within the budget.
    while True:
        try:
            info = await js.stream_info("REC")
            break
        except (nats.errors.Error, TimeoutError):
            if time.monotonic() - since > RECOVERY_BUDGET:
                raise AssertionError(f"API not answering {RECOVERY_BUDGET}s after the fault") from None
            await asyncio.sleep(0.05)
    await until(lambda: node.ready() == (True, "ready"), "node ready", timeout=RECOVERY_BUDGET)
    assert await http_get(rig.http_port, "/readyz") == (200, "ready\n")
    # New messages are acknowledged and stored.
    await rig.publish(5)
    info = await js.stream_info("REC")
    assert info.state.messages == len(rig.acked) and info.state.last_seq == max(rig.acked)
    # Every acknowledged message is there, byte for byte.
    for seq, data in rig.acked.items():
        m = await js.get_msg("REC", seq)
        assert m.data == data
    # Pull: every message is delivered (the ones in flight during the fault come back after
    # ack_wait), and acked.
    end = time.monotonic() + 15
    while rig.pulled != set(rig.acked.values()) and time.monotonic() < end:
        try:
            msgs = await rig.psub.fetch(20, timeout=1)
        except TimeoutError:  # nats-py's fetch may also raise the bare asyncio one
            continue
        for m in msgs:
            rig.pulled.add(m.data)
            await m.ack()
    assert rig.pulled == set(rig.acked.values())
    # Push: the push consumer got everything too.
    await until(
        lambda: {m.data for m in rig.pushed} == set(rig.acked.values()),
        "push consumer caught up",
        timeout=15,
    )


async def wait_reconnected(rig: Rig, link: str, before: int) -> None:
    def count() -> int:
        return rig.node.client.reconnects if link == "client" else rig.node.leaf.stats.reconnects

    await until(lambda: count() > before, f"{link} link reconnect", timeout=RECOVERY_BUDGET)


def consumers(rig: Rig) -> list[Any]:
    assert rig.node.streams is not None
    stream = rig.node.streams.get("REC")
    assert stream is not None and stream.consumers is not None
    return [c for c in stream.consumers.consumers.values() if not c.p.push]


def reconnects(rig: Rig, link: str) -> int:
    return rig.node.client.reconnects if link == "client" else rig.node.leaf.stats.reconnects


def write_raw(rig: Rig, link: str, data: bytes) -> None:
    """Write bytes on jetlog's own socket, past every guard (what a bug would send)."""
    if link == "client":
        tr = rig.node.client.nc._transport
        assert tr is not None
        tr.write(data)
    else:
        proto = rig.node.leaf._proto
        assert proto is not None and proto.transport is not None
        proto.transport.write(data)


FAULTS: dict[str, Callable[[Rig, str], Awaitable[None]]] = {}


def fault(
    name: str,
) -> Callable[[Callable[[Rig, str], Awaitable[None]]], Callable[[Rig, str], Awaitable[None]]]:
    def deco(fn: Callable[[Rig, str], Awaitable[None]]) -> Callable[[Rig, str], Awaitable[None]]:
        FAULTS[name] = fn
        return fn

    return deco


@fault("tcp-reset")
async def _cut(rig: Rig, link: str) -> None:
    (rig.client_proxy if link == "client" else rig.leaf_proxy).cut()


@fault("garbage-from-server")
async def _garbage_in(rig: Rig, link: str) -> None:
    proxy = rig.client_proxy if link == "client" else rig.leaf_proxy
    assert proxy.inject(b"\x00\xffNOT A NATS FRAME\r\n") == 1


@fault("bad-frame-to-server")
async def _garbage_out(rig: Rig, link: str) -> None:
    # The server answers -ERR 'Unknown Protocol Operation' and closes the connection.
    write_raw(rig, link, b"BOGUS OPERATION\r\n")


@fault("payload-violation")
async def _payload(rig: Rig, link: str) -> None:
    # The server answers -ERR 'Maximum Payload Violation' and closes the connection.
    body = b"z" * (MP + 1)
    if link == "client":
        write_raw(rig, link, b"PUB oversize %d\r\n%s\r\n" % (len(body), body))
    else:
        write_raw(rig, link, b"LMSG oversize %d\r\n%s\r\n" % (len(body), body))


@pytest.mark.parametrize("link", ["client", "leaf"])
@pytest.mark.parametrize("kind", list(FAULTS))
async def test_link_recovers(rig: Rig, link: str, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jetlog")
    before = reconnects(rig, link)
    other = "leaf" if link == "client" else "client"
    other_before = reconnects(rig, other)
    # A pull request waiting in jetlog across the fault.
    waiting = asyncio.create_task(rig.psub.fetch(1, timeout=RECOVERY_BUDGET + 5))
    await until(lambda: any(c.waiting for c in consumers(rig)), "pull request waiting in jetlog")
    since = time.monotonic()
    await FAULTS[kind](rig, link)
    await wait_reconnected(rig, link, before)
    await rig.publish(1)
    # The request survived the fault and gets the first message published after it.
    (m,) = await waiting
    assert m.data == rig.acked[max(rig.acked)]
    rig.pulled.add(m.data)
    await m.ack_sync()
    await check_recovered(rig, since)
    # Only the faulted link went down.
    assert reconnects(rig, other) == other_before
    # One line per transition: down, reconnecting, up (failed attempts are debug).
    name = "upstream client link" if link == "client" else f"leaf link {rig.node.leaf.name}"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(name)]
    kinds = [ln[len(name) :].split()[0].rstrip(":") for ln in lines]
    assert kinds == ["down", "reconnecting", "up"], lines


async def test_server_restart_same_ports(rig: Rig) -> None:
    cb, lb = rig.node.client.reconnects, rig.node.leaf.stats.reconnects
    ports = dict(rig.srv.ports)
    await rig.srv.stop()
    await until(lambda: not rig.node.ready()[0], "node not ready while the server is down")
    assert (await http_get(rig.http_port, "/readyz"))[0] == 503
    since = time.monotonic()
    rig.srv = await NatsServer(
        leafnode=True,
        client_port=ports["client"],
        leaf_port=ports["leafnode"],
        extra_conf=f"max_payload: {MP}",
    ).start()
    await until(
        lambda: rig.node.client.reconnects > cb and rig.node.leaf.stats.reconnects > lb, "both links back"
    )
    await check_recovered(rig, since)


@pytest.mark.parametrize("link", ["client", "leaf"])
async def test_readyz_follows_link_state(rig: Rig, link: str) -> None:
    proxy = rig.client_proxy if link == "client" else rig.leaf_proxy
    proxy.refuse(True)
    proxy.cut()
    want = "client link down" if link == "client" else "leafnode link down"
    await until(lambda: rig.node.ready() == (False, want), f"ready() reports {want}")
    assert await http_get(rig.http_port, "/readyz") == (503, want + "\n")
    # Still down while the port refuses: several attempts fail (logged at debug), no recovery.
    before = reconnects(rig, link)
    await asyncio.sleep(1.0)
    assert reconnects(rig, link) == before and not rig.node.ready()[0]
    since = time.monotonic()
    proxy.heal()
    await check_recovered(rig, since)


async def test_client_link_detects_a_silent_partition(nats_server: NatsServer) -> None:
    """block(): no FIN, no RST; the link's PINGs go unanswered, it reconnects after heal."""
    async with FaultProxy("127.0.0.1", nats_server.ports["client"]) as proxy:
        link = ClientLink(
            [f"nats://127.0.0.1:{proxy.port}"], name="jl-part", ping_interval=0.2, max_outstanding_pings=2
        )
        got: list[bytes] = []
        await link.connect()
        try:
            await link.subscribe_raw("part.>", lambda s, r, h, d: got.append(d))
            proxy.block()
            await until(lambda: not link.connected, "partition detected by PINGs", timeout=10)
            proxy.heal()
            await until(lambda: link.connected, "link back after heal", timeout=10)
            assert link.reconnects == 1
            nc = await nats.connect(nats_server.url)
            await nc.publish("part.x", b"after")
            await flush_barrier(nc)
            await until(lambda: got == [b"after"], "subscription re-created")
            await nc.close()
        finally:
            await link.close()
        assert not link.connected


async def test_client_link_refuses_oversize_frames_and_stays_up(nats_server: NatsServer) -> None:
    link = ClientLink([nats_server.url], name="jl-guard")
    await link.connect()
    try:
        mp = link.max_payload
        assert mp == 1024 * 1024
        nc = await nats.connect(nats_server.url)
        sub = await nc.subscribe("g")
        await flush_barrier(nc)
        from jetlog.wire.leaf import LeafFrameError, PayloadTooLargeError

        with pytest.raises(PayloadTooLargeError):
            link.send("g", b"x" * (mp + 1))
        with pytest.raises(PayloadTooLargeError):  # header + payload counts
            link.send("g", b"x" * (mp - 10), hdr=b"NATS/1.0\r\nA: b\r\n\r\n")
        with pytest.raises(LeafFrameError):
            link.send("g" * 5000, b"x")
        link.send("g", b"y" * mp)  # exactly max_payload is fine
        m = await sub.next_msg(timeout=3)
        assert m.data == b"y" * mp
        await link.flush()
        assert link.connected and link.reconnects == 0
        await nc.close()
    finally:
        await link.close()


async def test_client_link_recovers_from_server_err(nats_server: NatsServer) -> None:
    """The cause of the original bug: nats-py closes a client for good on -ERR. The link
    reconnects instead, and re-creates its subscriptions."""
    link = ClientLink([nats_server.url], name="jl-err")
    await link.connect()
    assert link.fast_path
    try:
        got: list[bytes] = []
        await link.subscribe_raw("e.>", lambda s, r, h, d: got.append(d))
        tr = link.nc._transport
        assert tr is not None
        body = b"q" * (link.max_payload + 1)
        tr.write(b"PUB e.x %d\r\n%s\r\n" % (len(body), body))
        await until(lambda: link.reconnects == 1 and link.connected, "reconnected after -ERR")
        assert link.fast_path  # raw subscriptions are read from the new socket directly again
        nc = await nats.connect(nats_server.url)
        await nc.publish("e.y", b"after")
        await flush_barrier(nc)
        await until(lambda: got == [b"after"], "subscription re-created")
        await nc.close()
    finally:
        await link.close()


async def test_link_survives_repeated_faults(rig: Rig) -> None:
    """Several faults in a row on both links, including while still reconnecting."""
    since = time.monotonic()
    for _ in range(3):
        rig.client_proxy.cut()
        rig.leaf_proxy.cut()
        await asyncio.sleep(0.05)
    rig.client_proxy.cut()
    await check_recovered(rig, since)
    js = rig.nc.jetstream()
    r = await rig.nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=2)
    assert json.loads(r.data)["streams"] == ["REC"]
    assert (await js.stream_info("REC")).state.messages == len(rig.acked)


async def test_leaf_backlog_rechecked_against_a_smaller_max_payload() -> None:
    """Frames buffered while disconnected are re-checked after the reconnect: the restarted
    server may allow less, and one oversize frame would make it close the link again."""
    from jetlog.transport.leaf import LeafConnection

    srv = await NatsServer(leafnode=True).start()
    ports = dict(srv.ports)
    link = LeafConnection(srv.leaf_url, name="jl-shrink", reconnect_delay=0.05, reconnect_max_delay=0.2)
    try:
        await link.connect(5)
        assert link.max_payload == 1024 * 1024
        await srv.stop()
        await until(lambda: not link.connected, "link down")
        link.publish("shrink.x", b"b" * 100_000)  # fine for the old server, buffered
        link.publish("shrink.x", b"small")
        srv = await NatsServer(
            leafnode=True,
            client_port=ports["client"],
            leaf_port=ports["leafnode"],
            extra_conf=f"max_payload: {MP}",
        ).start()
        nc = await nats.connect(srv.url)
        sub = await nc.subscribe("shrink.x")
        await flush_barrier(nc)
        await link.wait_connected(10)
        assert link.max_payload == MP
        await until(lambda: link.has_interest("shrink.x"), "interest")
        link.publish("shrink.x", b"after")
        got = [await sub.next_msg(timeout=3)]
        if got[0].data == b"small":  # the buffered one made it (it was sent before the SUB)
            got.append(await sub.next_msg(timeout=3))
        assert got[-1].data == b"after"
        await link.flush()
        assert link.connected and link.stats.reconnects == 1
        assert b"maximum payload" not in b"".join(srv._log).lower()
        await nc.close()
    finally:
        await link.close()
        await srv.stop()


async def test_client_link_subscriptions_made_while_down(nats_server: NatsServer) -> None:
    """subscribe_raw/unsubscribe during an outage take effect when the link is back."""
    async with FaultProxy("127.0.0.1", nats_server.ports["client"]) as proxy:
        link = ClientLink([f"nats://127.0.0.1:{proxy.port}"], name="jl-down-subs")
        await link.connect()
        try:
            got: list[tuple[str, bytes]] = []
            old = await link.subscribe_raw("old.>", lambda s, r, h, d: got.append((s, d)))
            proxy.refuse(True)
            proxy.cut()
            await until(lambda: not link.connected, "link down")
            await link.subscribe_raw("new.>", lambda s, r, h, d: got.append((s, d)))
            await link.unsubscribe(old)
            proxy.heal()
            await until(lambda: link.connected, "link back")
            nc = await nats.connect(nats_server.url)
            await nc.publish("old.x", b"1")
            await nc.publish("new.x", b"2")
            await flush_barrier(nc)
            await until(lambda: got == [("new.x", b"2")], "only the new subscription delivers")
            await nc.close()
        finally:
            await link.close()
