"""``jetlog bench --scale``: many streams, many consumers, and restart with a large store, for
jetlog and ``nats-server -js`` on the same machine with the same client.

Scenarios (each on a fresh target, targets alternating per round):

* ``streams``: N streams (default 1,000), each with one durable pull consumer.
* ``consumers``: one stream with N durable consumers (default 10,000), each filtered to its own
  subject; the stream sets ``max_consumers`` to N (nats-server 2.15 caps streams that do not say
  at 1,000 consumers, and so does jetlog).

For both: create time; server CPU while idle (10 s, after 3 s to settle) and RSS; then the p50
latency of a ``js.publish`` and of a ``fetch(1)`` + ack on one stream, next to the same figures
of a quiet target (one stream, one consumer).

* ``restart``: S streams (default 100) filled with M messages in all (default 10,000,000 of
  128 B, plain publishes with an acknowledged one every 10,000), the target stopped and started again on the same data; the figure is
  the time from starting the processes until every stream answers STREAM.INFO with all its
  messages.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats
from nats.js.api import AckPolicy, ConsumerConfig

from jetlog.bench import targets
from jetlog.bench.targets import Env

KINDS = ("jetlog", "nats")
IN_FLIGHT = 50  # API requests in flight while creating


@dataclass
class Figures:
    """One scenario on one target (times in seconds, latencies in µs)."""

    create_s: float = 0.0
    idle_cpu_ms_s: float = 0.0
    rss_mib: float = 0.0
    pub_p50_us: float = 0.0
    fetch_p50_us: float = 0.0
    restart_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)


def rss_mib(pids: list[int]) -> float:
    """Resident memory of ``pids`` and their descendants, MiB."""
    from jetlog.bench.cpu import descendants

    total = 0
    for p in descendants(pids):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total / 1024


async def _batched(calls: list[Callable[[], Awaitable[object]]]) -> None:
    for i in range(0, len(calls), IN_FLIGHT):
        await asyncio.gather(*(c() for c in calls[i : i + IN_FLIGHT]))


async def _latencies(
    js: nats.js.JetStreamContext, stream: str, subject: str, consumer: str
) -> tuple[float, float]:
    """p50 µs of 300 publishes and of 200 fetch(1) + ack on ``consumer``."""
    pubs = []
    for _ in range(300):
        t = time.perf_counter()
        await js.publish(subject, b"x" * 128)
        pubs.append(time.perf_counter() - t)
    sub = await js.pull_subscribe_bind(consumer, stream)
    fetches = []
    for _ in range(200):
        t = time.perf_counter()
        (m,) = await sub.fetch(1, timeout=10)
        await m.ack()
        fetches.append(time.perf_counter() - t)
    await sub.unsubscribe()
    return statistics.median(pubs) * 1e6, statistics.median(fetches) * 1e6


async def _idle(env: Env) -> tuple[float, float]:
    """(server CPU ms per second over 10 s of idleness, RSS MiB)."""
    await asyncio.sleep(3)
    c0, t0 = env.cpu_seconds(), time.monotonic()
    await asyncio.sleep(10)
    cpu = (env.cpu_seconds() - c0) / (time.monotonic() - t0) * 1000
    return cpu, rss_mib(env.pids())


async def many_streams(env: Env, n: int) -> Figures:
    """N streams with a durable consumer each."""
    nc = await nats.connect(env.url)
    try:
        js = nc.jetstream(timeout=60)
        f = Figures()
        t0 = time.perf_counter()

        def make(i: int) -> Callable[[], Awaitable[object]]:
            async def one() -> None:
                await js.add_stream(name=f"S{i}", subjects=[f"s{i}.>"])
                await js.add_consumer(
                    f"S{i}", ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT)
                )

            return one

        await _batched([make(i) for i in range(n)])
        f.create_s = time.perf_counter() - t0
        f.idle_cpu_ms_s, f.rss_mib = await _idle(env)
        f.pub_p50_us, f.fetch_p50_us = await _latencies(js, f"S{n // 2}", f"s{n // 2}.x", "c")
        return f
    finally:
        await nc.close()


async def many_consumers(env: Env, n: int) -> Figures:
    """One stream with N filtered durable consumers."""
    nc = await nats.connect(env.url)
    try:
        js = nc.jetstream(timeout=60)
        await js.add_stream(name="WIDE", subjects=["wide.>"], max_consumers=n)
        f = Figures()
        t0 = time.perf_counter()

        def make(i: int) -> Callable[[], Awaitable[object]]:
            cfg = ConsumerConfig(
                durable_name=f"c{i}", ack_policy=AckPolicy.EXPLICIT, filter_subject=f"wide.{i}"
            )
            return lambda: js.add_consumer("WIDE", cfg)

        await _batched([make(i) for i in range(n)])
        f.create_s = time.perf_counter() - t0
        f.idle_cpu_ms_s, f.rss_mib = await _idle(env)
        f.pub_p50_us, f.fetch_p50_us = await _latencies(js, "WIDE", f"wide.{n // 2}", f"c{n // 2}")
        return f
    finally:
        await nc.close()


async def quiet(env: Env) -> Figures:
    """The same latencies on a target with one stream and one consumer."""
    return await many_streams(env, 1)


async def _all_counted(url: str, counts: dict[str, int], timeout: float) -> None:
    """Until every stream in ``counts`` reports that many messages."""
    deadline = time.monotonic() + timeout
    nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.05)
    try:
        js = nc.jetstream(timeout=5)
        left = dict(counts)
        while left:
            for name in list(left):
                try:
                    info = await js.stream_info(name)
                except (nats.errors.Error, TimeoutError):
                    break
                if info.state.messages >= left[name]:
                    del left[name]
            if left:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{len(left)} streams not complete after {timeout:.0f}s")
                await asyncio.sleep(0.02)
    finally:
        await nc.close()


async def _restarted(env: Env, kind: str, counts: dict[str, int]) -> tuple[Env, float]:
    """Stop ``env`` keeping its data and start ``kind`` on it again: the new target and the
    seconds until every stream holds its count (the new target is stopped if that fails)."""
    await env.stop(keep=True)
    t0 = time.perf_counter()
    env = await targets.start(kind, tmp=env.tmp)
    try:
        await _all_counted(env.url, counts, 1800)
    except BaseException:
        await env.stop()
        raise
    return env, time.perf_counter() - t0


async def restart(kind: str, streams: int, msgs: int) -> Figures:
    """Fill, stop, start again on the same data; time until every stream is complete."""
    env = await targets.start(kind)
    counts = {f"R{i}": 0 for i in range(streams)}
    try:
        nc = await nats.connect(env.url)
        try:
            js = nc.jetstream(timeout=60)
            for name in counts:
                await js.add_stream(name=name, subjects=[f"{name.lower()}.x"])
            payload = b"r" * 128
            t0 = time.perf_counter()
            for i in range(msgs):
                if i % 10_000 == 9_999:
                    # Plain publishes outrun any store; an acknowledged one every 10,000 keeps
                    # the backlog bounded (a slow leaf or client connection would be cut).
                    await js.publish(f"r{i % streams}.x", payload)
                else:
                    await nc.publish(f"r{i % streams}.x", payload)
            await nc.flush()
            for i in range(streams):
                counts[f"R{i}"] = msgs // streams + (1 if i < msgs % streams else 0)
            await _all_counted(env.url, counts, 1800)
            fill = time.perf_counter() - t0
        finally:
            await nc.close()
        env, took = await _restarted(env, kind, counts)
        f = Figures(restart_s=took)
        f.extra["fill_s"] = fill
        f.rss_mib = rss_mib(env.pids())
        # At rest: every message older than the duplicate window. Right after the fill both
        # servers read back the message ids of the last two minutes before a stream is ready
        # (nats-server took ~2 s for that here, ~0.4 s without); a 1 s window stands in for
        # waiting two minutes.
        nc = await nats.connect(env.url)
        try:
            js = nc.jetstream(timeout=60)
            for name in counts:
                cfg = (await js.stream_info(name)).config
                cfg.duplicate_window = 1.0
                await js.update_stream(cfg)
        finally:
            await nc.close()
        await asyncio.sleep(1.5)
        env, f.extra["rest_s"] = await _restarted(env, kind, counts)
        return f
    finally:
        await env.stop()


async def run_scale(args: argparse.Namespace) -> str:
    """Every scenario, ``args.rounds`` alternating rounds; returns the markdown section."""
    res: dict[str, dict[str, list[Figures]]] = {}
    scenarios: list[tuple[str, Callable[[Env], Awaitable[Figures]]]] = [
        ("quiet (1 stream, 1 consumer)", quiet),
        (f"{args.streams:,} streams + 1 consumer each", lambda e: many_streams(e, args.streams)),
        (f"1 stream + {args.consumers:,} consumers", lambda e: many_consumers(e, args.consumers)),
    ]
    for rnd in range(args.rounds):
        order = KINDS if rnd % 2 == 0 else tuple(reversed(KINDS))
        for kind in order:
            for label, fn in scenarios:
                env = await targets.start(kind)
                try:
                    f = await fn(env)
                finally:
                    await env.stop()
                res.setdefault(label, {}).setdefault(kind, []).append(f)
                print(f"round {rnd + 1} {kind:8} {label:34} {f}", file=sys.stderr, flush=True)
            if args.restart_msgs:
                label = f"restart: {args.restart_msgs:,} msgs in {args.restart_streams} streams"
                f = await restart(kind, args.restart_streams, args.restart_msgs)
                res.setdefault(label, {}).setdefault(kind, []).append(f)
                print(f"round {rnd + 1} {kind:8} {label:34} {f}", file=sys.stderr, flush=True)
    return report(res, args)


def _med(fs: list[Figures], attr: str) -> float:
    return statistics.median(getattr(f, attr) for f in fs)


def report(res: dict[str, dict[str, list[Figures]]], args: argparse.Namespace) -> str:
    """The markdown section for ``docs/benchmarks.md``."""
    from jetlog.bench.report import machine as _machine

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Scale: many streams, many consumers, restart",
        "",
        f"Run: {now}. Machine: {_machine()}.",
        f"Rounds: {args.rounds} (alternating target order), medians quoted. Same nats-py client;",
        "jetlog's figures include the upstream nats-server it runs beside. Idle CPU: server CPU",
        "(ms per second) over 10 s with nothing happening; RSS: resident memory of the server",
        "processes; latencies: p50 of 300 `js.publish` and of 200 `fetch(1)` + ack.",
        "",
        "| scenario | target | create (s) | idle CPU (ms/s) | RSS (MiB) | publish p50 (µs) | fetch+ack p50 (µs) |",
        "|---|---|---|---|---|---|---|",
    ]
    restarts = []
    for label, per in res.items():
        if label.startswith("restart"):
            restarts.append((label, per))
            continue
        for kind in KINDS:
            fs = per.get(kind, [])
            if not fs:
                continue
            lines.append(
                f"| {label} | {kind} | {_med(fs, 'create_s'):.2f} | {_med(fs, 'idle_cpu_ms_s'):.1f} | "
                f"{_med(fs, 'rss_mib'):.0f} | {_med(fs, 'pub_p50_us'):.0f} | {_med(fs, 'fetch_p50_us'):.0f} |"
            )
    if restarts:
        lines += [
            "",
            "Restart: processes started on the data of a filled target, until every stream answers",
            "STREAM.INFO with all its messages: right after the fill (every message inside the",
            "2-minute duplicate window, whose message ids both servers read back), and again at rest",
            "(the streams' duplicate window set to 1 s first, as if the data were older).",
            "",
            "| scenario | target | restart after fill (s) | restart at rest (s) | RSS after (MiB) | fill (s) |",
            "|---|---|---|---|---|---|",
        ]
        for label, per in restarts:
            for kind in KINDS:
                fs = per.get(kind, [])
                if fs:
                    fill = statistics.median(f.extra["fill_s"] for f in fs)
                    rest = statistics.median(f.extra.get("rest_s", float("nan")) for f in fs)
                    lines.append(
                        f"| {label} | {kind} | {_med(fs, 'restart_s'):.2f} | {rest:.2f} | "
                        f"{_med(fs, 'rss_mib'):.0f} | {fill:.0f} |"
                    )
    lines += ["", REPRODUCE]
    return "\n".join(lines) + "\n"


REPRODUCE = "Reproduce: `.venv/bin/jetlog bench --scale --rounds 3 --out docs/benchmarks.md`."


async def run(args: argparse.Namespace) -> int:
    """Entry point of ``jetlog bench --scale``."""
    from jetlog.bench.report import write_report

    section = await run_scale(args)
    print(section)
    if args.out:
        write_report(args.out, section, section="scale")
    return 0
