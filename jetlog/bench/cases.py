"""Benchmark cases. Each runs on a fresh stream with one nats-py client and returns a rate
(operations per second) and, where meaningful, latency percentiles in microseconds."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import nats
from nats.js import JetStreamContext
from nats.js.kv import KeyValue


@dataclass
class Result:
    """One measurement. ``cpu_us``: server-side CPU µs per operation over the timed window;
    ``lag_ms``: plain publishes only, from the publisher's last flush until all were stored."""

    rate: float
    p50_us: float = 0.0
    p99_us: float = 0.0
    cpu_us: float = 0.0
    lag_ms: float = 0.0


def _no_cpu() -> float:
    return 0.0


SERVER_CPU: Callable[[], float] = _no_cpu
"""Server-side CPU seconds so far (the runner points it at the running target's processes)."""


class Window:
    """The timed part of a case: wall time and the server CPU spent in it."""

    def __init__(self) -> None:
        self.c0 = SERVER_CPU()
        self.t0 = time.perf_counter()

    def result(self, ops: int, p50: float = 0.0, p99: float = 0.0) -> Result:
        """Rate and CPU per op of ``ops`` operations since the window opened."""
        el = time.perf_counter() - self.t0
        cpu = SERVER_CPU() - self.c0
        return Result(ops / el, p50, p99, cpu / ops * 1e6 if ops else 0.0)


Case = Callable[[nats.NATS, JetStreamContext, str, bool], Awaitable[Result]]


def _pct(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


REPLICAS = 1
"""Replicas of every stream a case creates (the runner sets it per target)."""


async def _stream(js: JetStreamContext, name: str, **kw: object) -> None:
    kw.setdefault("num_replicas", REPLICAS)
    await js.add_stream(name=name, subjects=[f"{name.lower()}.>"], **kw)  # type: ignore[arg-type]


async def pub_sync(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool, size: int = 128) -> Result:
    """Sequential js.publish: one message in flight; rate and latency."""
    await _stream(js, name)
    payload = b"x" * size
    n = 300 if quick else 3000
    subj = f"{name.lower()}.s"
    for _ in range(50):
        await js.publish(subj, payload)
    lat = []
    w = Window()
    for _ in range(n):
        a = time.perf_counter()
        await js.publish(subj, payload)
        lat.append((time.perf_counter() - a) * 1e6)
    return w.result(n, _pct(lat, 0.5), _pct(lat, 0.99))


async def _completed(ajs: JetStreamContext, timeout: float = 120.0) -> None:
    """Wait for every outstanding PubAck. nats-py never resolves the future of a publish
    answered with a 503 (its reply handler raises instead), so an error reply would otherwise
    hang the benchmark: fail loudly after ``timeout`` instead."""
    try:
        await asyncio.wait_for(ajs.publish_async_completed(), timeout)
    except TimeoutError:
        raise RuntimeError(
            f"PubAcks still outstanding after {timeout:.0f}s (an error reply? see the log above)"
        ) from None


async def pub_async(
    nc: nats.NATS, js: JetStreamContext, name: str, quick: bool, size: int = 128, window: int = 256
) -> Result:
    """js.publish_async with a bounded window of outstanding PubAcks."""
    await _stream(js, name)
    n = 5000 if quick else (50000 if size <= 1024 else 15000)
    return await _publish_window(nc, [f"{name.lower()}.a"], n, window, b"x" * size)


async def _publish_window(nc: nats.NATS, subjects: list[str], n: int, window: int, payload: bytes) -> Result:
    """``n`` js.publish_async round-robin over ``subjects``, at most ``window`` PubAcks
    outstanding; timed until the last PubAck."""
    ajs = nc.jetstream(publish_async_max_pending=window)
    w = Window()
    for i in range(n):
        await ajs.publish_async(subjects[i % len(subjects)], payload)
    await _completed(ajs)
    return w.result(n)


async def pub_async_spread(
    nc: nats.NATS, js: JetStreamContext, name: str, quick: bool, streams: int = 200, window: int = 1024
) -> Result:
    """js.publish_async of 128 B messages round-robin over ``streams`` streams (many streams
    committing at once: each sync covers a few messages of one stream), bounded window."""
    names = [f"{name}{i}" for i in range(streams)]
    try:
        for s in names:
            await _stream(js, s)
        subjects = [f"{s.lower()}.a" for s in names]
        return await _publish_window(nc, subjects, 5000 if quick else 50000, window, b"x" * 128)
    finally:
        for s in names:
            with contextlib.suppress(nats.errors.Error):
                await js.delete_stream(s)


async def pub_fire(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool, size: int = 128) -> Result:
    """Plain nc.publish (no reply): rate at which messages are stored."""
    await _stream(js, name)
    payload = b"x" * size
    n = 20000 if quick else 200000
    subj = f"{name.lower()}.f"
    w = Window()
    for i in range(n):
        await nc.publish(subj, payload)
        if i % 5000 == 4999:
            await asyncio.sleep(0)
    await nc.flush()
    flushed = time.perf_counter()
    deadline = time.monotonic() + 120
    while True:
        info = await js.stream_info(name)
        if info.state.messages >= n or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.002)
    res = w.result(info.state.messages)
    if info.state.messages >= n:  # else not all stored in time: no lag to report
        res.lag_ms = (time.perf_counter() - flushed) * 1e3
    return res


async def _prefill(nc: nats.NATS, js: JetStreamContext, name: str, n: int, direct: bool) -> None:
    await _stream(js, name, allow_direct=direct)
    ajs = nc.jetstream(publish_async_max_pending=512)
    for i in range(n):
        await ajs.publish_async(f"{name.lower()}.k{i % 100}", b"v" * 128)
    await _completed(ajs)


async def _random_gets(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool, direct: bool) -> Result:
    n_msgs = 2000 if quick else 10000
    await _prefill(nc, js, name, n_msgs, direct)
    rng = random.Random(2 if direct else 1)
    n = 300 if quick else 3000
    lat = []
    w = Window()
    for _ in range(n):
        a = time.perf_counter()
        await js.get_msg(name, rng.randint(1, n_msgs), direct=direct)
        lat.append((time.perf_counter() - a) * 1e6)
    return w.result(n, _pct(lat, 0.5), _pct(lat, 0.99))


async def msg_get(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool) -> Result:
    """STREAM.MSG.GET by random sequence, one at a time."""
    return await _random_gets(nc, js, name, quick, direct=False)


async def direct_get(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool) -> Result:
    """DIRECT.GET by random sequence, one at a time."""
    return await _random_gets(nc, js, name, quick, direct=True)


async def _bucket(js: JetStreamContext, name: str) -> KeyValue:
    from nats.js.api import KeyValueConfig

    return await js.create_key_value(KeyValueConfig(bucket=name, history=1, replicas=REPLICAS))


async def kv_put(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool) -> Result:
    """Sequential KV put (one in flight, 100 keys in turn); rate and latency."""
    kv = await _bucket(js, name)
    try:
        n = 300 if quick else 3000
        for i in range(50):
            await kv.put(f"k{i % 100}", b"v" * 128)
        lat = []
        w = Window()
        for i in range(n):
            a = time.perf_counter()
            await kv.put(f"k{i % 100}", b"v" * 128)
            lat.append((time.perf_counter() - a) * 1e6)
        return w.result(n, _pct(lat, 0.5), _pct(lat, 0.99))
    finally:
        await js.delete_key_value(name)


async def kv_get(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool) -> Result:
    """KV get of a random key out of 1,000, one at a time; rate and latency."""
    kv = await _bucket(js, name)
    try:
        keys = 1000
        for i in range(keys):
            await kv.put(f"k{i}", b"v" * 128)
        rng = random.Random(3)
        n = 300 if quick else 3000
        lat = []
        w = Window()
        for _ in range(n):
            a = time.perf_counter()
            await kv.get(f"k{rng.randrange(keys)}")
            lat.append((time.perf_counter() - a) * 1e6)
        return w.result(n, _pct(lat, 0.5), _pct(lat, 0.99))
    finally:
        await js.delete_key_value(name)


async def _consumer_fill(nc: nats.NATS, js: JetStreamContext, name: str, n: int) -> None:
    await _stream(js, name)
    ajs = nc.jetstream(publish_async_max_pending=512)
    for _ in range(n):
        await ajs.publish_async(f"{name.lower()}.x", b"v" * 128)
    await _completed(ajs)


async def fetch_batches(
    nc: nats.NATS, js: JetStreamContext, name: str, quick: bool, ack: str = "none"
) -> Result:
    """Pull consumer: fetch(1000) repeatedly until the stream is drained; msgs/s.

    ack: ``none`` (ack policy none), ``explicit`` (``ack()`` each message), ``all`` (ack policy
    all, ``ack()`` on the last message of each batch).
    """
    from nats.js.api import AckPolicy, ConsumerConfig

    n = 20000 if quick else 100000
    await _consumer_fill(nc, js, name, n)
    policy = {"none": AckPolicy.NONE, "explicit": AckPolicy.EXPLICIT, "all": AckPolicy.ALL}[ack]
    await js.add_consumer(name, ConsumerConfig(durable_name="bench", ack_policy=policy, max_ack_pending=-1))
    psub = await js.pull_subscribe_bind("bench", name)
    got = 0
    w = Window()
    while got < n:
        msgs = await psub.fetch(1000, timeout=10)
        got += len(msgs)
        if ack == "explicit":
            for m in msgs:
                await m.ack()
        elif ack == "all" and msgs:
            await msgs[-1].ack()
    await nc.flush()
    return w.result(got)


async def push_rate(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool) -> Result:
    """Push consumer (ack none, flow control + heartbeats): delivered msgs/s."""
    from nats.js.api import AckPolicy, ConsumerConfig

    n = 20000 if quick else 100000
    await _consumer_fill(nc, js, name, n)
    done = asyncio.get_running_loop().create_future()
    count = 0

    async def cb(msg: object) -> None:
        nonlocal count
        count += 1
        if count >= n and not done.done():
            done.set_result(None)

    w = Window()
    sub = await js.subscribe(
        f"{name.lower()}.x",
        cb=cb,
        config=ConsumerConfig(ack_policy=AckPolicy.NONE, flow_control=True, idle_heartbeat=5.0),
        pending_msgs_limit=-1,
        pending_bytes_limit=-1,
    )
    await asyncio.wait_for(done, 120)
    r = w.result(count)
    await sub.unsubscribe()
    return r


def all_cases() -> dict[str, Case]:
    """Every case by name, in report order."""
    cases: dict[str, Case] = {"pub-sync 128B": pub_sync, "kv-put 128B": kv_put}
    for window in (256, 1024):
        for size, label in ((128, "128B"), (1024, "1KiB"), (16384, "16KiB")):

            def make(s: int = size, w: int = window) -> Case:
                async def case(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool) -> Result:
                    return await pub_async(nc, js, name, quick, size=s, window=w)

                return case

            cases[f"pub-async w{window} {label}"] = make()
    cases["pub-async 200 streams w1024 128B"] = pub_async_spread
    cases["pub-fire 128B"] = pub_fire
    cases["msg-get"] = msg_get
    cases["direct-get"] = direct_get
    cases["kv-get"] = kv_get

    def fetch_case(ack: str) -> Case:
        async def case(nc: nats.NATS, js: JetStreamContext, name: str, quick: bool) -> Result:
            return await fetch_batches(nc, js, name, quick, ack)

        return case

    cases["fetch(1000) ack none"] = fetch_case("none")
    cases["fetch(1000) ack explicit each"] = fetch_case("explicit")
    cases["fetch(1000) ack all on last"] = fetch_case("all")
    cases["push ack none (flow control)"] = push_rate
    return cases
