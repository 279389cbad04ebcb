"""Consumers deliver new messages in runs (``ConsumerDelivery._run``): what a client sees
(subjects, headers, payloads, sequences, pending counts, flow control, acks; pull requests'
batches, byte limits and the statuses that end them) is the same as with the one-by-one path
and as with nats-server -js."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from jetlog.consumer import delivery as delivery_mod
from jetlog.consumer.delivery import ConsumerDelivery
from jetlog.embedded import NatsServer

from .conftest import start_node

pytestmark = pytest.mark.timeout(90)

N = 600


async def _fill(js: Any) -> None:
    await js.add_stream(name="PR", subjects=["pr.>"])
    for i in range(N):
        subject = "pr.b" if i % 3 == 0 else "pr.a"
        data = (b"%d:" % i) + b"x" * ((i * 37) % 3000)
        headers = {"K": f"v{i}"} if i % 7 == 0 else None
        await js.publish(subject, data, headers=headers)


async def _consume(
    nc: nats.NATS, js: Any, cfg: ConsumerConfig, want: int, ack: bool
) -> list[tuple[Any, ...]]:
    got: list[tuple[Any, ...]] = []
    done = asyncio.get_running_loop().create_future()

    async def cb(msg: Any) -> None:
        md = msg.metadata
        got.append(
            (
                msg.subject,
                bytes(msg.data),
                (msg.headers or {}).get("K"),
                md.sequence.stream,
                md.sequence.consumer,
                md.num_pending,
                md.num_delivered,
            )
        )
        if ack:
            await msg.ack()
        if len(got) >= want and not done.done():
            done.set_result(None)

    sub = await js.subscribe(
        cfg.filter_subject or "pr.>",
        cb=cb,
        config=cfg,
        pending_msgs_limit=-1,
        pending_bytes_limit=-1,
    )
    await asyncio.wait_for(done, 30)
    await asyncio.sleep(0.2)  # nothing more (a duplicate) arrives after the last one
    await sub.unsubscribe()
    return got


async def _pull(nc: nats.NATS, js: Any) -> list[tuple[Any, ...]]:
    """Raw pull requests (nats-py cannot send max_bytes): what each one got and how it ended."""
    from nats.js.api import ConsumerConfig as CC

    await js.add_consumer("PR", CC(durable_name="pull", ack_policy=AckPolicy.EXPLICIT))
    out: list[tuple[Any, ...]] = []
    got = 0
    plan = [(50, 0), (100, 30000), (7, 0), (200, 100000), (1000, 0)]
    for batch, max_bytes in plan * 4:
        if got >= N:
            break
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        req: dict[str, Any] = {"batch": batch, "expires": 1_000_000_000}
        if max_bytes:
            req["max_bytes"] = max_bytes
        await nc.publish("$JS.API.CONSUMER.MSG.NEXT.PR.pull", json.dumps(req).encode(), reply=inbox)
        n = 0
        while True:
            msg = await sub.next_msg(timeout=5)
            status = (msg.headers or {}).get("Status")
            if status:
                h = msg.headers or {}
                out.append(
                    (
                        "status",
                        status,
                        h.get("Description"),
                        h.get("Nats-Pending-Messages"),
                        h.get("Nats-Pending-Bytes"),
                    )
                )
                break
            md = msg.metadata
            out.append(("msg", md.sequence.stream, md.sequence.consumer, md.num_pending))
            await msg.ack()
            n += 1
            got += 1
            if n == batch:
                break
        await sub.unsubscribe()
    return out


async def _scenario(url: str) -> tuple[list[tuple[Any, ...]], ...]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await _fill(js)
        explicit = await _consume(
            nc,
            js,
            ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT, flow_control=True, idle_heartbeat=2.0, max_ack_pending=100
            ),
            N,
            ack=True,
        )
        none = await _consume(
            nc,
            js,
            ConsumerConfig(
                ack_policy=AckPolicy.NONE, filter_subject="pr.b", flow_control=True, idle_heartbeat=2.0
            ),
            N // 3,
            ack=False,
        )
        pulled = await _pull(nc, js)
        return explicit, none, pulled
    finally:
        await nc.close()


def _check(
    explicit: list[tuple[Any, ...]], none: list[tuple[Any, ...]], pulled: list[tuple[Any, ...]]
) -> None:
    assert [r[3] for r in explicit] == list(range(1, N + 1))
    assert [r[4] for r in explicit] == list(range(1, N + 1))
    assert [r[5] for r in explicit] == list(range(N - 1, -1, -1))
    assert all(r[6] == 1 for r in explicit)
    for r in explicit:
        i = r[3] - 1
        assert r[0] == ("pr.b" if i % 3 == 0 else "pr.a")
        assert r[1] == (b"%d:" % i) + b"x" * ((i * 37) % 3000)
        assert r[2] == (f"v{i}" if i % 7 == 0 else None)
    assert [r[3] for r in none] == list(range(1, N + 1, 3))
    assert [r[5] for r in none] == list(range(N // 3 - 1, -1, -1))
    msgs = [r for r in pulled if r[0] == "msg"]
    assert [r[1] for r in msgs] == list(range(1, N + 1))
    assert [r[3] for r in msgs] == list(range(N - 1, -1, -1))
    assert any(r[0] == "status" and r[1] == "409" for r in pulled)  # byte limits ended some


async def test_deliveries_match_nats_server_and_the_one_by_one_path(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = 0
    real = ConsumerDelivery._run

    def counting(self: ConsumerDelivery, *args: Any) -> tuple[int, int, int]:
        nonlocal runs
        out = real(self, *args)
        runs += out[0] > 0
        return out

    monkeypatch.setattr(ConsumerDelivery, "_run", counting)
    async with NatsServer(jetstream=True, leafnode=False, store_dir=str(tmp_path / "js")) as srv:
        reference = await _scenario(srv.url)
    _check(*reference)
    results = []
    for fast in (True, False):
        monkeypatch.setattr(delivery_mod, "FAST_RUNS", fast)
        runs = 0
        async with NatsServer(leafnode=True) as srv:
            node = await start_node(srv, str(tmp_path / f"data-{fast}"))
            try:
                results.append(await _scenario(srv.url))
            finally:
                await node.stop()
        assert (runs > 0) == fast  # the runs were taken (or, turned off, never)
    for got in results:
        assert got == reference
