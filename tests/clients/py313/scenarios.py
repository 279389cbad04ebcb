"""Consumer scenarios with nats-jetstream 0.3.0 (the ADR-37 "simplified" API; Python 3.13).

    .venv313/bin/python scenarios.py <nats-url> <scenario>

Each scenario sets up its own stream, does its work and prints exactly one JSON line on stdout:
{"ok": true, ...observations} or {"ok": false, "error": "..."} (exit status 1). The
observations are asserted by tests/clients/test_nats_jetstream.py against jetlog and against a
real nats-server -js. This file runs under .venv313 only (it is not collected by pytest).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import nats.jetstream as njs
from nats.client import connect

STEP = 5.0  # bound on any single wait inside a scenario


class _HeartbeatWarnings(logging.Handler):
    """Counts nats-jetstream's "Heartbeat timeout" warnings (2 x idle_heartbeat without a message)."""

    def emit(self, record: logging.LogRecord) -> None:
        if "Heartbeat timeout" in record.getMessage():
            hb_warnings.append(record.getMessage())


hb_warnings: list[str] = []
logging.getLogger("nats").addHandler(_HeartbeatWarnings())
logging.getLogger("nats").propagate = False


def view(m: Any) -> dict[str, Any]:
    md = m.metadata
    return {
        "subject": m.subject,
        "data": m.data.decode(),
        "stream": md.stream,
        "consumer": md.consumer,
        "sseq": md.sequence.stream,
        "dseq": md.sequence.consumer,
        "delivered": md.num_delivered,
        "pending": md.num_pending,
        "ts": md.timestamp.timestamp(),
    }


def counters(ci: Any) -> dict[str, Any]:
    return {
        "delivered": [ci.delivered["consumer_seq"], ci.delivered["stream_seq"]],
        "ack_floor": [ci.ack_floor["consumer_seq"], ci.ack_floor["stream_seq"]],
        "ack_pending": ci.num_ack_pending,
        "redelivered": ci.num_redelivered,
        "pending": ci.num_pending,
    }


async def until(cond: Callable[[], Awaitable[bool]], what: str, timeout: float = STEP) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def collect(batch: Any) -> list[Any]:
    return [m async for m in batch]


async def setup(js: Any, name: str, subjects: list[str]) -> Any:
    return await js.create_stream(name=name, subjects=subjects)


async def publish_n(js: Any, subject: str, n: int, prefix: str = "m", start: int = 0) -> None:
    for i in range(start, start + n):
        await js.publish(subject, f"{prefix}{i}".encode())


async def info(stream: Any, name: str) -> dict[str, Any]:
    return counters(await stream.get_consumer_info(name))


# ---------------------------------------------------------------------------------------------


async def sc_fetch(js: Any) -> dict[str, Any]:
    stream = await setup(js, "S", ["s.>"])
    await publish_n(js, "s.a", 5)
    c = await stream.create_consumer(name="dur", durable_name="dur", ack_policy="explicit")
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    b = await c.fetch(max_messages=3, max_wait=2)
    first = await collect(b)
    out["first_ms"] = (time.monotonic() - t0) * 1000
    out["first"] = [view(m) for m in first]
    out["first_error"] = repr(b.error) if b.error else None
    for m in first:
        await m.ack()
    t0 = time.monotonic()
    b = await c.fetch(max_messages=5, max_wait=1)
    second = await collect(b)
    out["second_ms"] = (time.monotonic() - t0) * 1000
    out["second"] = [view(m) for m in second]
    out["second_error"] = repr(b.error) if b.error else None
    await second[-1].double_ack()  # #4 left unacked
    out["info"] = await info(stream, "dur")
    # no_wait with nothing left: 404 at once.
    t0 = time.monotonic()
    b = await c.fetch_nowait(max_messages=5)
    out["nowait"] = [view(m) for m in await collect(b)]
    out["nowait_ms"] = (time.monotonic() - t0) * 1000
    # A fetch with heartbeats on an empty consumer ends at expiry without an error.
    t0 = time.monotonic()
    b = await c.fetch(max_messages=2, max_wait=1.5, heartbeat=0.5)
    out["hb_fetch"] = [view(m) for m in await collect(b)]
    out["hb_fetch_ms"] = (time.monotonic() - t0) * 1000
    out["hb_fetch_error"] = repr(b.error) if b.error else None
    return out


async def sc_next(js: Any) -> dict[str, Any]:
    stream = await setup(js, "N", ["n.>"])
    await publish_n(js, "n.a", 2)
    c = await stream.create_consumer(name="nx", durable_name="nx", ack_policy="explicit")
    out: dict[str, Any] = {"got": []}
    for _ in range(2):
        m = await c.next(max_wait=1)
        out["got"].append(view(m))
        await m.double_ack()
    t0 = time.monotonic()
    try:
        await c.next(max_wait=1)
        out["empty"] = "message"
    except TimeoutError as e:
        out["empty"] = type(e).__name__
    out["empty_ms"] = (time.monotonic() - t0) * 1000

    async def later() -> None:
        await asyncio.sleep(0.3)
        await js.publish("n.late", b"late")

    task = asyncio.create_task(later())
    t0 = time.monotonic()
    m = await c.next(max_wait=3)
    out["late_ms"] = (time.monotonic() - t0) * 1000
    out["late"] = view(m)
    await task
    await m.double_ack()
    out["info"] = await info(stream, "nx")
    return out


async def sc_messages(js: Any) -> dict[str, Any]:
    """ADR-37 consume: messages() across an idle period longer than the pull expiry, then the
    consumer is deleted underneath it."""
    stream = await setup(js, "M", ["m.>"])
    await publish_n(js, "m.a", 5)
    c = await stream.create_consumer(name="cons", durable_name="cons", ack_policy="explicit")
    ms = await c.messages(max_messages=10, max_wait=2, heartbeat=0.5)
    out: dict[str, Any] = {}
    before = [await asyncio.wait_for(ms.__anext__(), STEP) for _ in range(5)]
    for m in before:
        await m.ack()
    out["before"] = [view(m) for m in before]
    # The scenario: the iterator waits through an idle period longer than two pull expiries
    # (heartbeats must keep arriving, or the client logs "Heartbeat timeout"), then new
    # messages are published and must arrive on the same iterator.
    hb_warnings.clear()
    t_pub: list[float] = []

    async def publish_later() -> None:
        await asyncio.sleep(4.5)
        t_pub.append(time.monotonic())
        await publish_n(js, "m.b", 3, prefix="late")

    task = asyncio.create_task(publish_later())
    after = [await asyncio.wait_for(ms.__anext__(), 10) for _ in range(3)]
    await task
    t0 = t_pub[0]
    out["idle_hb_warnings"] = len(hb_warnings)
    out["after_ms"] = (time.monotonic() - t0) * 1000
    out["after"] = [view(m) for m in after]
    for m in after:
        await m.double_ack()
    out["info"] = await info(stream, "cons")

    # Consumer deleted mid-stream: 409 Consumer Deleted ends the iteration.
    t0 = time.monotonic()
    await stream.delete_consumer("cons")
    try:
        m = await asyncio.wait_for(ms.__anext__(), STEP)
        out["after_delete"] = view(m)
    except StopAsyncIteration:
        out["after_delete"] = "stopped"
    out["stop_ms"] = (time.monotonic() - t0) * 1000
    out["active"] = ms.is_active
    await ms.stop()
    return out


async def sc_ordered(js: Any) -> dict[str, Any]:
    stream = await setup(js, "O", ["o.>"])
    await publish_n(js, "o.a", 10)
    out: dict[str, Any] = {}

    # fetch(): every call recreates the server-side consumer from the next stream sequence.
    oc = await js.ordered_consumer("O")
    first_name = oc.name
    out["fetch1"] = [view(m) for m in await collect(await oc.fetch(max_messages=3, max_wait=2))]
    out["fetch2"] = [view(m) for m in await collect(await oc.fetch(max_messages=3, max_wait=2))]
    out["fetch_names"] = [first_name, oc.name]
    ci = await stream.get_consumer_info(oc.name)
    out["config"] = {
        "ack_policy": ci.config.ack_policy,
        "deliver_policy": ci.config.deliver_policy,
        "opt_start_seq": ci.config.opt_start_seq,
        "mem_storage": ci.config.mem_storage,
        "num_replicas": ci.config.num_replicas,
        "inactive_threshold": ci.config.inactive_threshold.total_seconds()
        if ci.config.inactive_threshold
        else None,
        "durable_name": ci.config.durable_name,
    }
    await oc.close()

    async def gone() -> bool:
        names = [n async for n in js.consumer_names("O")]
        return not any(n.startswith(first_name.rsplit("_", 1)[0]) for n in names)

    await until(gone, "close() to delete the ordered consumer's server-side consumers")

    # messages(): continuous; the server-side consumer is deleted underneath it and recreated.
    oc = await js.ordered_consumer("O")
    ms = await oc.messages(max_wait=2, heartbeat=0.5)
    got = [await asyncio.wait_for(ms.__anext__(), STEP) for _ in range(10)]
    out["consumed"] = [view(m) for m in got]
    name1 = oc.name
    await stream.delete_consumer(name1)
    t0 = time.monotonic()
    await publish_n(js, "o.b", 5, prefix="n")
    more = [await asyncio.wait_for(ms.__anext__(), 10) for _ in range(5)]
    out["recover_ms"] = (time.monotonic() - t0) * 1000
    out["after_delete"] = [view(m) for m in more]
    out["names"] = [name1, oc.name]
    out["server_consumers"] = sorted([n async for n in js.consumer_names("O")])
    await ms.stop()
    await oc.close()
    return out


async def sc_acks(js: Any) -> dict[str, Any]:
    """double_ack, nak, nak_with_delay, in_progress, term, and a duplicate double_ack."""
    stream = await setup(js, "A", ["a.>"])
    await publish_n(js, "a.x", 4)
    c = await stream.create_consumer(
        name="ak", durable_name="ak", ack_policy="explicit", ack_wait=timedelta(seconds=1)
    )
    out: dict[str, Any] = {}
    m1, m2, m3, m4 = await collect(await c.fetch(max_messages=4, max_wait=2))
    await m1.double_ack()
    await m1.double_ack()  # duplicate: the server still answers
    out["dup_double_ack"] = "ok"
    await m2.nak()
    r2 = await c.next(max_wait=2)
    out["nak"] = view(r2)
    await r2.double_ack()
    await m3.term()
    t_nak = time.monotonic()
    await m4.nak_with_delay(0.8)

    async def termed() -> bool:
        return (await stream.get_consumer_info("ak")).num_ack_pending == 1

    await until(termed, "+TERM of #3")
    out["after_term"] = await info(stream, "ak")
    r4 = await c.next(max_wait=3)
    out["nak_delay_ms"] = (time.monotonic() - t_nak) * 1000
    out["nak_delay"] = view(r4)
    # +WPI 0.7 s into a 1 s ack_wait: no redelivery at 1.0 s (the next 0.6 s stay quiet).
    await asyncio.sleep(0.7)  # the scenario: work, then report progress
    await r4.in_progress()
    try:
        again = await c.next(max_wait=0.6)
        out["wpi"] = view(again)
    except TimeoutError:
        out["wpi"] = "no redelivery"
    await r4.double_ack()
    out["final"] = await info(stream, "ak")
    return out


async def sc_info(js: Any) -> dict[str, Any]:
    """The spec §3.3 walk-through, with nats-jetstream's calls."""
    stream = await setup(js, "ORDERS", ["orders.>"])
    await publish_n(js, "orders.new", 3, prefix="msg")
    c = await stream.create_consumer(name="dur1", durable_name="dur1", ack_policy="explicit")
    steps: list[dict[str, Any]] = [await info(stream, "dur1")]
    (m1,) = await collect(await c.fetch(max_messages=1, max_wait=2))
    steps.append(await info(stream, "dur1"))
    m2, m3 = await collect(await c.fetch(max_messages=2, max_wait=2))
    steps.append(await info(stream, "dur1"))
    await m1.ack()
    await m2.ack()
    await m3.nak()

    async def floor() -> bool:
        ci = await stream.get_consumer_info("dur1")
        return ci.ack_floor["stream_seq"] == 2 and ci.num_ack_pending == 1

    await until(floor, "acks of #1 and #2")
    steps.append(await info(stream, "dur1"))
    r3 = await c.next(max_wait=2)
    steps.append(await info(stream, "dur1"))
    await r3.double_ack()
    steps.append(await info(stream, "dur1"))
    ci = await stream.get_consumer_info("dur1")
    return {
        "steps": steps,
        "redelivery": view(r3),
        "reply": r3.reply,
        "config": {
            "ack_wait": ci.config.ack_wait.total_seconds() if ci.config.ack_wait else None,
            "max_deliver": ci.config.max_deliver,
            "max_ack_pending": ci.config.max_ack_pending,
            "max_waiting": ci.config.max_waiting,
        },
    }


SCENARIOS: dict[str, Callable[[Any], Awaitable[dict[str, Any]]]] = {
    "fetch": sc_fetch,
    "next": sc_next,
    "messages": sc_messages,
    "ordered": sc_ordered,
    "acks": sc_acks,
    "info": sc_info,
}


async def main(url: str, name: str) -> dict[str, Any]:
    fn = SCENARIOS[name]
    nc = await connect(url, timeout=3.0, allow_reconnect=False)
    try:
        return await fn(njs.new(nc))
    finally:
        await nc.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in SCENARIOS:
        print(json.dumps({"ok": False, "error": f"usage: scenarios.py <url> <{'|'.join(SCENARIOS)}>"}))
        sys.exit(2)
    try:
        result = asyncio.run(main(sys.argv[1], sys.argv[2]))
    except BaseException as e:  # report anything, including timeouts, as one JSON line
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}))
        sys.exit(1)
    print(json.dumps({"ok": True, **result}, default=str))
