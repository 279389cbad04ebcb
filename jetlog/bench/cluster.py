"""Cluster measurements for ``jetlog bench --cluster``: failover time and catch-up rate.

* **Failover**: a client publishes one message at a time (100 ms PubAck timeout, retried with
  the same ``Nats-Msg-Id``) to an R3 stream; the stream leader is killed with ``kill -9``; the
  figure is the time from the kill to the first PubAck after it. The killed node (or server)
  is restarted and back in sync before the next repetition. jetlog: the leader is a jetlog node
  (the nats-server stays up). nats-server -js: the leader is a server of the 3-server cluster;
  the client is connected to another server, so the figure is the stream's failover and not a
  client reconnect.
* **Catch-up**: a follower is stopped while messages are published, then started again; the
  figure is how fast it gets back in sync (messages and bytes per second).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors

from jetlog.bench import targets
from jetlog.embedded import NatsServer


async def _info(nc: nats.NATS, stream: str) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=2)
    body = msgspec.json.decode(msg.data)
    if "error" in body:
        raise nats.errors.Error(str(body["error"]))
    return dict(body)


async def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(TimeoutError, nats.errors.Error):
            if await cond():
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class _Publisher:
    """One message at a time, 100 ms timeout, retried with the same id until acknowledged."""

    def __init__(self, js: Any, subject: str) -> None:
        self.js, self.subject = js, subject
        self.acks: list[float] = []
        self.sent: list[float] = []
        """When the acknowledged attempt of each message was sent (parallel to ``acks``)."""
        self.stop = asyncio.Event()

    async def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                await self.js.publish(self.subject, b"x" * 128, headers={"Nats-Msg-Id": f"f{i}"}, timeout=0.1)
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error):
                continue
            self.sent.append(t)
            self.acks.append(time.monotonic())
            i += 1

    def recovered(self, t0: float) -> bool:
        """Whether a publish sent after ``t0`` has been acknowledged."""
        return any(s >= t0 for s in self.sent[-2:])

    def gap(self, t0: float) -> float:
        """Time from ``t0`` to the first acknowledgement of a publish sent after it. A publish
        in flight at the kill can be acknowledged by the dying leader a moment later: that is
        not the new leader serving, so it does not count."""
        return min(a for s, a in zip(self.sent, self.acks, strict=True) if s >= t0) - t0


async def _leader(nc: nats.NATS, stream: str, timeout: float = 60) -> str:
    """The stream's current leader, waiting through an election."""
    got: list[str] = []

    async def has_leader() -> bool:
        name = (await _info(nc, stream)).get("cluster", {}).get("leader")
        if name:
            got.append(str(name))
        return bool(name)

    await _wait(has_leader, timeout, f"a leader for {stream}")
    return got[-1]


async def _all_current(nc: nats.NATS, stream: str) -> bool:
    """A leader and both followers current (whichever node leads by now)."""
    cl = (await _info(nc, stream)).get("cluster", {})
    reps = cl.get("replicas", [])
    return bool(cl.get("leader")) and len(reps) == 2 and all(r.get("current") for r in reps)


async def failover_jetlog(reps: int) -> list[float]:
    """kill -9 of the stream leader of a 3-node jetlog cluster, ``reps`` times."""
    env = await targets.start("jetlog-r3")
    cluster = env.extra
    out: list[float] = []
    try:
        nc = await nats.connect(env.url)
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="FO", subjects=["fo.>"], num_replicas=3)
        for rep in range(reps):
            pub = _Publisher(nc.jetstream(timeout=0.1), "fo.x")
            task = asyncio.create_task(pub.run())
            await _wait(lambda p=pub: _n(len(p.acks) > 50), 30, "acks")
            leader = await _leader(nc, "FO")
            t0 = time.monotonic()
            await cluster.kill(leader)
            await _wait(lambda p=pub, t0=t0: _n(p.recovered(t0)), 30, "an ack after the kill")
            gap = pub.gap(t0)
            out.append(gap)
            pub.stop.set()
            await task
            print(f"failover jetlog rep {rep + 1}: {gap:.3f}s", file=sys.stderr, flush=True)
            await cluster.start_node(leader)
            await _wait(lambda: _all_current(nc, "FO"), 60, "replicas back in sync")
        await nc.close()
    finally:
        await env.stop()
    return out


async def failover_nats(reps: int, tmp: str) -> list[float]:
    """kill -9 of the stream leader's server in a 3-server nats-server -js cluster."""
    servers = targets.nats_cluster(tmp)
    await asyncio.gather(*(s.start() for s in servers))
    by_name = {s.name: s for s in servers}
    out: list[float] = []
    try:
        await targets.r3_ready(servers[0].url, 60)
        nc0 = await nats.connect([s.url for s in servers])
        js0 = nc0.jetstream(timeout=5)
        await js0.add_stream(name="FO", subjects=["fo.>"], num_replicas=3)
        for rep in range(reps):
            leader = await _leader(nc0, "FO")
            other = next(s for s in servers if s.name != leader)
            nc = await nats.connect(other.url)
            pub = _Publisher(nc.jetstream(timeout=0.1), "fo.x")
            task = asyncio.create_task(pub.run())
            await _wait(lambda p=pub: _n(len(p.acks) > 50), 30, "acks")
            victim = by_name[str(leader)]
            t0 = time.monotonic()
            assert victim.proc is not None
            victim.proc.kill()
            await victim.stop()
            await _wait(lambda p=pub, t0=t0: _n(p.recovered(t0)), 60, "an ack after the kill")
            gap = pub.gap(t0)
            out.append(gap)
            pub.stop.set()
            await task
            await nc.close()
            print(f"failover nats rep {rep + 1}: {gap:.3f}s", file=sys.stderr, flush=True)
            fresh = NatsServer(
                jetstream=True,
                leafnode=False,
                store_dir=victim.store_dir,
                name=victim.name,
                client_port=victim.client_port,
                extra_conf=victim.extra_conf,
            )
            await fresh.start()
            servers[servers.index(victim)] = by_name[str(leader)] = fresh
            probe = await nats.connect(other.url)
            await _wait(lambda c=probe: _all_current(c, "FO"), 60, "replicas back in sync")
            await probe.close()
        await nc0.close()
    finally:
        for s in servers:
            await s.stop()
    return out


async def catchup_jetlog(n: int) -> tuple[float, float]:
    """A follower stopped while ``n`` messages of 128 bytes are published, then restarted:
    (messages/s, MB/s) until it is back in sync."""
    env = await targets.start("jetlog-r3")
    cluster = env.extra
    try:
        nc = await nats.connect(env.url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="CU", subjects=["cu.>"], num_replicas=3)
        leader = (await _info(nc, "CU"))["cluster"]["leader"]
        victim = next(m for m in cluster.members if m != leader)
        await cluster.stop_node(victim)
        payload = b"x" * 128
        for i in range(0, n, 1000):
            futs = [await js.publish_async("cu.x", payload) for _ in range(min(1000, n - i))]
            await asyncio.gather(*futs)
        t0 = time.monotonic()
        await cluster.start_node(victim)

        async def caught_up() -> bool:
            reps = (await _info(nc, "CU"))["cluster"]["replicas"]
            r = next(x for x in reps if x["name"] == victim)
            return bool(r.get("current")) and r.get("lag", 1) == 0

        await _wait(caught_up, 300, "the follower to catch up")
        el = time.monotonic() - t0
        await nc.close()
        return n / el, n * (128 + 30) / el / 1e6
    finally:
        await env.stop()


async def cluster_extras(args: argparse.Namespace) -> str:
    """The failover and catch-up section of the report."""
    import tempfile

    reps = max(1, getattr(args, "failover_reps", 10))
    jl = await failover_jetlog(reps)
    with tempfile.TemporaryDirectory(prefix="jetlog-bench-nats-fo-") as tmp:
        nt = await failover_nats(reps, tmp)
    n = 20_000 if args.quick else 200_000
    rate, mbs = await catchup_jetlog(n)
    lines = [
        "",
        "### Failover (first PubAck after `kill -9` of the stream leader, R3)",
        "",
        "| target | median | min | max | reps |",
        "|---|---|---|---|---|",
        f"| jetlog (3 nodes) | {statistics.median(jl):.2f} s | {min(jl):.2f} s | {max(jl):.2f} s | {len(jl)} |",
        f"| nats-server -js (3 servers) | {statistics.median(nt):.2f} s | {min(nt):.2f} s | {max(nt):.2f} s | {len(nt)} |",
        "",
        "### Catch-up of a restarted follower (jetlog R3)",
        "",
        f"{n:,} messages of 128 B published while a follower was down: back in sync at "
        f"{rate:,.0f} msgs/s ({mbs:.1f} MB/s of message data), including its restart.",
        "",
    ]
    return "\n".join(lines)


async def _n(v: bool) -> bool:
    return v
