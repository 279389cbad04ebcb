"""Push consumers deliver new messages in runs (``ConsumerDelivery._push_run``): what a client
sees (subjects, headers, payloads, sequences, pending counts, flow control, acks) is the same
as with the one-by-one path and as with nats-server -js."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from jetlog.consumer import consumer as consumer_mod
from jetlog.consumer.delivery import ConsumerDelivery
from jetlog.embedded import NatsServer

from .conftest import Target

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


async def _scenario(url: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
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
        return explicit, none
    finally:
        await nc.close()


def _check(explicit: list[tuple[Any, ...]], none: list[tuple[Any, ...]]) -> None:
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


async def test_push_deliveries_match_nats_server(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = 0
    real = ConsumerDelivery._push_run

    def counting(self: ConsumerDelivery, now: int, budget: int, pending: int) -> tuple[int, int]:
        nonlocal runs
        out = real(self, now, budget, pending)
        runs += out[0] > 0
        return out

    monkeypatch.setattr(ConsumerDelivery, "_push_run", counting)
    explicit, none = await _scenario(target.url)
    _check(explicit, none)
    if target.is_jetlog:
        assert runs > 0  # the runs were taken, not only the one-by-one path


async def test_one_by_one_path_gives_the_same(
    nats_server: NatsServer, jetlog_node: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumer_mod, "FAST_PUSH", False)
    explicit, none = await _scenario(nats_server.url)
    _check(explicit, none)
