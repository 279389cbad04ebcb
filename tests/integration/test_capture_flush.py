"""Capture.flush round-trips only the links that got new subscriptions, and is still a barrier:
a publish made from another connection right after it returns is captured. Real nats-server,
real leaf link and client link."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import nats
import pytest

from jetlog.embedded import NatsServer
from jetlog.transport.barrier import flush_barrier
from jetlog.transport.capture import Capture
from jetlog.transport.client import ClientLink
from jetlog.transport.leaf import LeafConnection

from .test_leaf_link import collector, until


def _count_flushes(link: Any) -> list[int]:
    """Count ``link.flush`` calls (the real method still runs)."""
    calls = [0]
    real = link.flush

    async def counted(timeout: float = 5.0) -> None:
        calls[0] += 1
        await real(timeout)

    link.flush = counted
    return calls


async def _published_and_captured(
    app: nats.NATS, subject: str, data: bytes, got: list[Any], what: str
) -> None:
    """Publish from another connection at once and wait until the capture has it."""
    await app.publish(subject, data)
    await flush_barrier(app)
    await until(lambda: len(got) == 1, what=what)
    assert got[0][0] == subject and got[0][3] == data


@pytest.fixture
async def capture(nats_server: NatsServer) -> AsyncIterator[tuple[Capture, list[int], list[int]]]:
    leaf = LeafConnection(nats_server.leaf_url, name="jetlog-capture-flush")
    await leaf.connect(5)
    client = ClientLink([nats_server.url], name="jl-capture-flush")
    await client.connect()
    try:
        leaf_calls, client_calls = _count_flushes(leaf), _count_flushes(client)
        yield Capture(leaf, client), leaf_calls, client_calls
    finally:
        await client.close()
        await leaf.close()


async def test_flush_round_trips_only_links_with_new_subscriptions(
    nats_server: NatsServer, capture: tuple[Capture, list[int], list[int]]
) -> None:
    cap, leaf_calls, client_calls = capture
    app = await nats.connect(nats_server.url)
    try:
        # A stream subject: captured on the leaf link; only that link is flushed.
        got_leaf, cb_leaf = collector()
        cap.subscribe("orders.>", cb_leaf)
        await cap.flush()
        assert (leaf_calls[0], client_calls[0]) == (1, 0)
        await _published_and_captured(app, "orders.1", b"a", got_leaf, "the leaf capture")

        # Nothing new: no round trip at all.
        await cap.flush()
        assert (leaf_calls[0], client_calls[0]) == (1, 0)

        # A KV subject: the hub never forwards $KV.> to a leaf, so the client link captures it
        # and only the client link is flushed.
        got_kv, cb_kv = collector()
        cap.subscribe("$KV.B.>", cb_kv)
        await cap.flush()
        assert (leaf_calls[0], client_calls[0]) == (1, 1)
        await _published_and_captured(app, "$KV.B.k", b"v", got_kv, "the client-link capture")
    finally:
        await app.close()


async def test_subscription_made_during_a_flush_is_flushed_again(
    nats_server: NatsServer, capture: tuple[Capture, list[int], list[int]]
) -> None:
    cap, leaf_calls, _ = capture
    app = await nats.connect(nats_server.url)
    try:
        got, cb = collector()
        cap.subscribe("a.>", cb)
        first = asyncio.ensure_future(cap.flush())
        await asyncio.sleep(0)  # the first flush has taken its count and is in flight
        cap.subscribe("b.>", cb)
        await cap.flush()  # must cover b.> although a flush is in flight
        await first
        assert leaf_calls[0] == 2
        for subject in ("a.1", "b.1"):
            await app.publish(subject, b"x")
        await flush_barrier(app)
        await until(lambda: len(got) == 2, what="both captures")
        assert sorted(m[0] for m in got) == ["a.1", "b.1"]
    finally:
        await app.close()


async def test_every_concurrent_create_is_captured_at_once(
    nats_server: NatsServer, capture: tuple[Capture, list[int], list[int]]
) -> None:
    # Many concurrent "creates" (subscribe, then flush), each publishing from another
    # connection as soon as its flush returns: every message is captured.
    cap, _, _ = capture
    app = await nats.connect(nats_server.url)
    got: list[str] = []

    def cb_for(i: int) -> Callable[[str, str | None, bytes, bytes], None]:
        return lambda s, r, h, d: got.append(s)

    async def create(i: int) -> None:
        cap.subscribe(f"s{i}.>", cb_for(i))
        await cap.flush()
        await app.publish(f"s{i}.x", b"x")

    try:
        await asyncio.gather(*(create(i) for i in range(40)))
        await flush_barrier(app)
        await until(lambda: len(got) == 40, what="40 captures")
        assert sorted(got) == sorted(f"s{i}.x" for i in range(40))
    finally:
        await app.close()
