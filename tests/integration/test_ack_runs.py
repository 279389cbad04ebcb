"""Acks arriving together are applied together (``ConsumerService._on_ack_run``,
``Consumer.on_acks``): a burst of plain acks mixed with naks, terms, acks with a reply
subject, malformed ack subjects and acks of a consumer that does not exist leaves the same
consumer state as on nats-server -js, on a limits and on a work-queue stream, and the same
state after a restart (the consumer-state log holds every ack)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest

from jetlog.consumer.consumer import Consumer
from jetlog.embedded import NatsServer

from .conftest import start_node

pytestmark = pytest.mark.timeout(90)

N = 60


async def _burst(nc: nats.NATS, stream: str, retention: str) -> dict[str, Any]:
    """Fetch N messages with one pull request, answer them in one burst of publishes, then
    report what the server says of the consumer and stream (and the next delivery)."""
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], retention=retention)
    for i in range(N):
        await js.publish(f"{stream.lower()}.x", b"m%d" % i)
    cfg = {
        "durable_name": "d",
        "ack_policy": "explicit",
        "ack_wait": 30_000_000_000,
        "max_ack_pending": 1000,
    }
    await nc.request(
        f"$JS.API.CONSUMER.CREATE.{stream}.d",
        json.dumps({"stream_name": stream, "config": cfg}).encode(),
        timeout=5,
    )
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.d", b'{"batch": %d}' % N, reply=inbox)
    replies: list[str] = []
    for _ in range(N):
        m = await sub.next_msg(timeout=5)
        assert m.reply
        replies.append(m.reply)
    await sub.unsubscribe()

    answers = nc.new_inbox()
    asub = await nc.subscribe(answers + ".*")
    # One burst: nothing awaited between these publishes, so the server forwards them in a
    # few socket writes and the node reads many in one.
    for i, reply in enumerate(replies):
        if i == 10:
            await nc.publish(reply, b"-NAK")
        elif i == 11:
            await nc.publish(reply, b"+TERM")
        elif i == 12:
            await nc.publish(reply, b"+ACK", reply=answers + ".a")  # an ack that wants an answer
        elif i == 13:
            await nc.publish(reply, b"+WPI")
        elif i == 14:
            continue  # left pending
        elif i == 15:
            await nc.publish(reply.replace(".d.", ".nobody.", 1), b"", reply=answers + ".b")
        elif i == 16:
            await nc.publish(f"$JS.ACK.{stream}.d.1.x.y.1.0", b"")  # malformed: ignored
            await nc.publish(reply, b"")
        else:
            await nc.publish(reply, b"+ACK" if i % 2 else b"")
    got: dict[str, str] = {}
    for _ in range(2):
        try:
            m = await asub.next_msg(timeout=3)
        except nats.errors.TimeoutError:
            break
        got[m.subject[len(answers) + 1 :]] = (m.headers or {}).get("Status", "") or m.data.decode()
    await asub.unsubscribe()
    await nc.flush()

    async def info() -> dict[str, Any]:
        r = await nc.request(f"$JS.API.CONSUMER.INFO.{stream}.d", b"", timeout=5)
        return dict(json.loads(r.data))

    # The burst is processed when the consumer's floor stops moving.
    deadline = asyncio.get_running_loop().time() + 10
    last: dict[str, Any] = {}
    while True:
        cur = await info()
        if cur.get("num_ack_pending") == last.get("num_ack_pending") and cur.get("num_ack_pending", 99) <= 4:
            break
        last = cur
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"acks not applied: {cur}")
        await asyncio.sleep(0.1)
    s = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
    state = json.loads(s.data)["state"]
    return {
        "answers": got,
        "ack_floor": cur["ack_floor"]["stream_seq"],
        "num_ack_pending": cur["num_ack_pending"],
        "num_redelivered": cur["num_redelivered"],
        "delivered": cur["delivered"]["stream_seq"],
        "msgs": state["messages"],
        "first_seq": state["first_seq"],
    }


async def _scenario(url: str) -> list[dict[str, Any]]:
    nc = await nats.connect(url)
    try:
        return [await _burst(nc, "LIM", "limits"), await _burst(nc, "WQ", "workqueue")]
    finally:
        await nc.close()


async def test_an_ack_burst_leaves_the_state_nats_server_leaves(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with NatsServer(jetstream=True, leafnode=False, store_dir=str(tmp_path / "js")) as srv:
        reference = await _scenario(srv.url)
    lim, wq = reference
    assert lim["answers"] == {"a": "", "b": "503"}  # the ack with a reply; no such consumer
    # Pending: the nak'd, the wpi'd, the unanswered one and the one acked to another consumer.
    assert lim["num_ack_pending"] == 4
    assert lim["ack_floor"] == 10 and lim["msgs"] == N
    assert wq["msgs"] == 4 and wq["first_seq"] == 11  # acked and termed ones removed

    batched: list[int] = []
    real = Consumer.on_acks

    def counting(self: Consumer, acks: list[tuple[int, int]]) -> None:
        batched.append(len(acks))
        real(self, acks)

    monkeypatch.setattr(Consumer, "on_acks", counting)
    async with NatsServer(leafnode=True) as srv:
        data = str(tmp_path / "data")
        node = await start_node(srv, data)
        try:
            got = await _scenario(srv.url)
        finally:
            await node.stop()
        assert got == reference
        assert max(batched) > 1  # acks were applied in runs, not only one by one
        # The consumer-state log holds every ack: the same state after a restart.
        node = await start_node(srv, data)
        try:
            nc = await nats.connect(srv.url)
            try:
                for stream, want in (("LIM", lim), ("WQ", wq)):
                    r = await nc.request(f"$JS.API.CONSUMER.INFO.{stream}.d", b"", timeout=5)
                    ci = json.loads(r.data)
                    assert ci["ack_floor"]["stream_seq"] == want["ack_floor"]
                    assert ci["num_ack_pending"] == want["num_ack_pending"]
            finally:
                await nc.close()
        finally:
            await node.stop()
