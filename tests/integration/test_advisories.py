"""JetStream advisories on ``$JS.EVENT.ADVISORY.>``: the same actions against a real
``nats-server -js`` and a jetlog node produce the same advisories (subjects, types, fields and
values, apart from ids and timestamps)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import nats.errors
import nats.js.api

from jetlog.embedded import NatsServer
from jetlog.transport.barrier import flush_barrier

from .conftest import start_node


async def _actions(url: str) -> list[tuple[str, dict[str, Any]]]:
    nc = await nats.connect(url)
    got: list[tuple[str, dict[str, Any]]] = []

    async def cb(m: Any) -> None:
        if not m.subject.endswith(".API"):  # API audit advisories: not sent by jetlog
            got.append((m.subject, json.loads(m.data)))

    try:
        await nc.subscribe("$JS.EVENT.ADVISORY.>", cb=cb)
        await flush_barrier(nc)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="ADV", subjects=["adv.>"])
        await js.update_stream(name="ADV", subjects=["adv.>"], max_msgs=10)
        await js.publish("adv.a", b"x")
        sub = await js.pull_subscribe(
            "adv.>", durable="AD", stream="ADV", config=nats.js.api.ConsumerConfig(max_deliver=3)
        )
        (m,) = await sub.fetch(1, timeout=5)
        await m.nak()
        (m,) = await sub.fetch(1, timeout=5)
        await m.term()
        await js.publish("adv.b", b"y")
        for _ in range(3):
            (m,) = await sub.fetch(1, timeout=5)
            await m.nak()
        # The redelivery after the third NAK would pass max_deliver: the advisory instead.
        try:
            extra = await sub.fetch(1, timeout=0.5)
        except (TimeoutError, nats.errors.TimeoutError):
            extra = []
        assert extra == []
        await js.delete_consumer("ADV", "AD")
        await js.delete_stream("ADV")

        async def settle() -> None:
            while not got or not got[-1][0].startswith("$JS.EVENT.ADVISORY.STREAM.DELETED"):
                await asyncio.sleep(0.02)

        await asyncio.wait_for(settle(), 5)
    finally:
        await nc.close()
    return got


def _norm(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for subject, body in events:
        assert set(body) >= {"type", "id", "timestamp"}, body
        assert body["timestamp"].endswith("Z")
        out.append((subject, {k: v for k, v in body.items() if k not in ("id", "timestamp")}))
    return out


async def test_advisories_match_nats_server(tmp_path: Any) -> None:
    async with NatsServer(jetstream=True) as real:
        want = _norm(await _actions(real.url))
    async with NatsServer(leafnode=True) as srv:
        node = await start_node(srv, str(tmp_path / "n"))
        try:
            got = _norm(await _actions(srv.url))
        finally:
            await node.stop()
    kinds = [".".join(s.split(".")[3:5]) for s, _ in want]
    # The workload covers every advisory jetlog sends on a single node.
    assert set(kinds) >= {
        "STREAM.CREATED",
        "STREAM.UPDATED",
        "CONSUMER.CREATED",
        "CONSUMER.MSG_NAKED",
        "CONSUMER.MSG_TERMINATED",
        "CONSUMER.MAX_DELIVERIES",
        "CONSUMER.DELETED",
        "STREAM.DELETED",
    }, kinds
    assert got == want
