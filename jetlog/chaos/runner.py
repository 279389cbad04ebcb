"""``jetlog chaos``: run seeded fault schedules against a local cluster of real processes and
check every history (Jepsen-style). See docs/chaos.md.

Per schedule: a fresh nats-server, a ``FaultProxy`` pair (client, leafnode) in front of each
node, N ``jetlog serve`` processes (fault control and the sync ledger enabled), an R3 stream and
a durable pull consumer; publishers and consumer workers run throughout while the schedule's
steps apply and heal faults. After the last heal the runner checks recovery (a publish is
acknowledged, every replica becomes current, the consumer receives every committed message,
each within ``STUCK_AFTER`` seconds), stops the nodes, reads every replica from its files and
hands the history to the checker. A schedule with anomalies keeps its directory (data and node
logs) as evidence.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, Any

import msgspec
import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig

from jetlog.chaos.checker import Anomaly, check, counts, summarize
from jetlog.chaos.faults import KINDS, Applied, Injector, Schedule, make_schedule
from jetlog.chaos.history import History
from jetlog.chaos.powerloss import LEDGER_ENV
from jetlog.chaos.proxy import FaultProxy
from jetlog.chaos.workload import ConsumerWorker, read_replica, run_publishers, stop_publishers
from jetlog.devcluster import LocalCluster
from jetlog.embedded import NatsServer

log = logging.getLogger("jetlog.chaos")

STREAM, SUBJECT, DURABLE = "CHAOS", "chaos.x", "C"
STUCK_AFTER = 20.0  # seconds after healing for a publish ack / current replicas / consumer drain
ACK_WAIT = 4.0


@dataclass
class Options:
    """What ``jetlog chaos`` was asked to do."""

    schedules: int = 10
    seed: int = 1
    duration: float = 10.0
    nodes: int = 3
    first: int = 0
    publishers: int = 3
    workers: int = 2
    ack: str = "mixed"  # sync | plain | mixed (worker 0 AckSync, the others plain)
    kinds: tuple[str, ...] = KINDS
    combos: bool = True
    workdir: str = ""
    keep: bool = False


@dataclass
class ScheduleResult:
    """One schedule's outcome."""

    schedule: Schedule
    anomalies: list[Anomaly] = field(default_factory=list)
    acked: int = 0
    deliveries: int = 0
    failovers: list[float] = field(default_factory=list)
    applied: list[Applied] = field(default_factory=list)
    dropped_bytes: int = 0
    seconds: float = 0.0
    directory: str = ""
    error: str = ""
    history: History | None = None


class _Logs:
    """Node stderr lines, one file per node in the schedule directory."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.files: dict[str, IO[str]] = {}

    def __call__(self, node: str, line: str) -> None:
        f = self.files.get(node)
        if f is None:
            f = self.files[node] = open(os.path.join(self.root, f"{node}.log"), "a")  # noqa: SIM115
        f.write(line + "\n")

    def note(self, text: str) -> None:
        now = time.time()
        stamp = f"{time.strftime('%H:%M:%S', time.localtime(now))},{int(now % 1 * 1000):03d}"
        for f in self.files.values():
            f.write(f"=== chaos {stamp} {text}\n")

    def close(self) -> None:
        for f in self.files.values():
            f.close()


async def _stream_info(nc: nats.NATS, timeout: float = 1.0) -> dict[str, Any] | None:
    try:
        msg = await nc.request(f"$JS.API.STREAM.INFO.{STREAM}", b"", timeout=timeout)
    except (TimeoutError, nats.errors.Error):
        return None
    info: dict[str, Any] = msgspec.json.decode(msg.data)
    return None if "error" in info else info


async def _leader(nc: nats.NATS) -> str | None:
    info = await _stream_info(nc)
    return str(info.get("cluster", {}).get("leader") or "") or None if info else None


async def _until(pred: Any, timeout: float, every: float = 0.1) -> bool:
    """Poll the async predicate until true or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        if await pred():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every)


async def run_schedule(sched: Schedule, opts: Options, root: str) -> ScheduleResult:
    """Run one schedule in directory ``root`` (see the module docstring)."""
    res = ScheduleResult(sched, directory=root)
    t0 = time.monotonic()
    os.makedirs(root, exist_ok=True)
    logs = _Logs(root)
    async with NatsServer(leafnode=True) as srv:
        host, cport = srv.url.rsplit("/", 1)[1].split(":")
        lport = int(srv.leaf_url.rsplit(":", 1)[1])
        proxies: dict[str, tuple[FaultProxy, FaultProxy]] = {}
        names = [f"n{i + 1}" for i in range(opts.nodes)]
        for name in names:
            pc, pl = FaultProxy(host, int(cport)), FaultProxy(host, lport)
            await pc.start()
            await pl.start()
            proxies[name] = (pc, pl)
        ledger = os.path.join(root, "ledger")
        cluster = LocalCluster(
            os.path.join(root, "cluster"),
            opts.nodes,
            nats_url=[f"nats://127.0.0.1:{proxies[n][0].port}" for n in names],
            leaf_url=[f"nats-leaf://127.0.0.1:{proxies[n][1].port}" for n in names],
            env={"JETLOG_FAULT_CONTROL": "1", LEDGER_ENV: ledger},
            on_stderr=logs,
        )
        control: nats.NATS | None = None
        try:
            await cluster.start(timeout=90)
            control = await nats.connect(srv.url, max_reconnect_attempts=-1)
            inj = Injector(
                cluster, proxies, control, ledger, random.Random(f"{sched.seed}:{sched.index}:pick")
            )
            await _run_workload(sched, opts, srv.url, cluster, inj, control, res, logs)
            if res.history is not None:
                res.anomalies = check(res.history)
                if res.anomalies or opts.keep:
                    _save_history(res.history, os.path.join(root, "history.json"))
        except (RuntimeError, OSError, nats.errors.Error, TimeoutError) as e:
            res.error = f"{type(e).__name__}: {e}"
        finally:
            if control is not None:
                with contextlib.suppress(nats.errors.Error, TimeoutError):
                    await control.close()
            await cluster.stop()
            for pc, pl in proxies.values():
                await pc.close()
                await pl.close()
            logs.close()
    res.seconds = time.monotonic() - t0
    return res


async def _run_workload(
    sched: Schedule,
    opts: Options,
    url: str,
    cluster: LocalCluster,
    inj: Injector,
    control: nats.NATS,
    res: ScheduleResult,
    logs: _Logs,
) -> None:
    js = control.jetstream(timeout=10)
    await js.add_stream(name=STREAM, subjects=["chaos.>"], num_replicas=min(3, opts.nodes))
    await js.add_consumer(
        STREAM, ConsumerConfig(durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT)
    )
    hist = History(stream=STREAM, ack_wait=ACK_WAIT, wall_offset=time.time() - time.monotonic())
    pubs, ptasks, pconns = await run_publishers(url, opts.publishers, SUBJECT, timeout=0.5, separate=True)
    workers = [
        ConsumerWorker(
            url, STREAM, DURABLE, w, double_ack=opts.ack == "sync" or (opts.ack == "mixed" and w == 0)
        )
        for w in range(opts.workers)
    ]
    wtasks = [asyncio.create_task(w.run(), name=f"chaos-worker-{w.worker}") for w in workers]
    stopped = False
    try:
        started = time.monotonic()
        await _until(lambda: _true(sum(len(p.acked) for p in pubs) >= 20), 20)
        await asyncio.sleep(max(0.0, sched.warmup - (time.monotonic() - started)))
        for step in sched.steps:
            leader = await _leader(control)
            applied: list[Applied] = []
            taken: set[str] = set()
            for f in step.faults:
                node = inj.pick(f.target, leader, taken)
                taken.add(node)
                a = Applied(f, node, time.monotonic(), was_leader=node == leader)
                logs.note(f"apply {f.label()} on {node} (leader {leader})")
                await inj.apply(f, node)
                applied.append(a)
            await asyncio.sleep(step.hold)
            for a in reversed(applied):
                logs.note(f"heal {a.fault.label()} on {a.node}")
                a.t_heal = time.monotonic()
                try:
                    a.dropped_bytes = await inj.heal(a.fault, a.node)
                except RuntimeError as e:  # a node that does not come back
                    hist.stuck.append(f"{a.node} did not restart after {a.fault.label()}: {str(e)[-400:]}")
            res.applied += applied
            await asyncio.sleep(step.gap)
        await inj.heal_all()
        t_healed = time.monotonic()
        logs.note("healed; checking recovery")
        hist.stuck += inj.errors
        # Stuck? The publishers keep retrying: one must get an ack soon after healing.
        ok = await _until(
            lambda: _true(any(t > t_healed for p in pubs for t in p.ack_times[-2:])), STUCK_AFTER
        )
        hist.probe_s = min(t for p in pubs for t in p.ack_times if t > t_healed) - t_healed if ok else None
        await stop_publishers(pubs, ptasks, pconns)
        stopped = True
        info: dict[str, Any] = {}

        async def current() -> bool:
            nonlocal info
            got = await _stream_info(control)
            if got is None:
                return False
            info = got
            reps = got.get("cluster", {}).get("replicas", [])
            return len(reps) == min(3, opts.nodes) - 1 and all(
                r.get("current") and not r.get("lag") for r in reps
            )

        # Already stuck: do not wait the full time for each further symptom.
        later = STUCK_AFTER if ok else 5.0
        if not await _until(current, later):
            hist.stuck.append(f"replicas not current {STUCK_AFTER:.0f}s after healing: {info.get('cluster')}")
        hist.hw = int(info.get("state", {}).get("last_seq", 0)) if info else 0

        def drained() -> bool:
            got = {d.sseq for w in workers for d in w.deliveries if d.sseq <= hist.hw}
            return len(got) >= hist.hw

        hist.consumer_drained = await _until(lambda: _true(drained()), later)
    finally:
        if not stopped:
            await stop_publishers(pubs, ptasks, pconns)
        for w in workers:
            w.stop.set()
        for t in wtasks:
            try:
                await asyncio.wait_for(t, 5)
            except (TimeoutError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("consumer worker failed")
    await cluster.stop()
    for name, m in cluster.members.items():
        hist.replicas[name] = await read_replica(m.data_dir, STREAM)
    for p in pubs:
        hist.acks += p.records
    for w in workers:
        hist.deliveries += w.deliveries
        hist.confirms += w.confirms
    res.acked = len(hist.acks)
    res.deliveries = len(hist.deliveries)
    res.dropped_bytes = sum(a.dropped_bytes for a in res.applied)
    res.failovers = failover_times(res.applied, sorted(t for p in pubs for t in p.ack_times))
    res.history = hist


def _save_history(h: History, path: str) -> None:
    """Evidence: the client-side history (acks, deliveries, confirms, HW, recovery notes); the
    replicas' logs stay in the node data directories beside it."""
    with open(path, "wb") as f:
        f.write(msgspec.json.encode(dataclasses.replace(h, replicas={})))


def failover_times(applied: list[Applied], ack_times: list[float], min_gap: float = 0.2) -> list[float]:
    """For each fault that hit the stream leader: :func:`failover_time` while it held. A fault
    healed before acks resumed counts none."""
    out = []
    for a in applied:
        if not a.was_leader:
            continue
        t = failover_time(a.t_apply, a.t_heal, ack_times, min_gap)
        if t is not None:
            out.append(t)
    return out


def failover_time(t_fault: float, t_end: float, ack_times: list[float], min_gap: float = 0.2) -> float | None:
    """Seconds from ``t_fault`` to the first acknowledgement after the longest silence (no ack
    for at least ``min_gap``) that began after it, among the acks (sorted arrival times)
    before ``t_end``; None without such a silence. Not the first ack after the fault: acks
    already in flight arrive after it, and a cut-off leader may go on acknowledging until it
    fences itself."""
    best = (0.0, 0.0)  # (gap, end)
    prev = t_fault
    for t in ack_times:
        if not t_fault < t < t_end:
            continue
        if t - prev > best[0]:
            best = (t - prev, t)
        prev = t
    return best[1] - t_fault if best[0] >= min_gap else None


async def _true(v: bool) -> bool:
    return v


def _line(res: ScheduleResult, n: int, total: int) -> str:
    c = counts(res.anomalies)
    bad = {k: v for k, v in c.items() if v}
    fo = f"failover {max(res.failovers):.2f}s" if res.failovers else "failover -"
    verdict = "ERROR " + res.error if res.error else ("ANOMALIES " + str(bad) if bad else "ok")
    return (
        f"[{n}/{total}] #{res.schedule.index} {res.schedule.describe()} | acked {res.acked} "
        f"delivered {res.deliveries} | {fo} | {res.seconds:.0f}s | {verdict}"
    )


async def run_chaos(opts: Options, out: IO[str] = sys.stdout) -> int:
    """Run the schedules, print a line each and the final report; 1 if anything was found."""
    base = opts.workdir or tempfile.mkdtemp(prefix="jetlog-chaos-")
    os.makedirs(base, exist_ok=True)
    print(
        f"jetlog chaos: seed {opts.seed}, schedules {opts.first}..{opts.first + opts.schedules - 1}, "
        f"~{opts.duration:.0f}s each, {opts.nodes} nodes, faults {','.join(opts.kinds)}"
        f"{'' if opts.combos else ' (no combinations)'}, dir {base}",
        file=out,
        flush=True,
    )
    results: list[ScheduleResult] = []
    t0 = time.monotonic()
    for n, index in enumerate(range(opts.first, opts.first + opts.schedules), 1):
        sched = make_schedule(opts.seed, index, opts.duration, opts.kinds, opts.combos)
        root = os.path.join(base, f"s{opts.seed}-{index}")
        res = await run_schedule(sched, opts, root)
        results.append(res)
        print(_line(res, n, opts.schedules), file=out, flush=True)
        if res.anomalies or res.error:
            for text in summarize(res.anomalies, limit=5):
                print(f"    {text}", file=out)
            print(f"    evidence kept in {root} (node logs n*.log)", file=out, flush=True)
        elif not opts.keep:
            shutil.rmtree(root, ignore_errors=True)
    report(results, time.monotonic() - t0, opts, out)
    if not opts.keep and not opts.workdir and not any(r.anomalies or r.error for r in results):
        shutil.rmtree(base, ignore_errors=True)
    return 1 if any(r.anomalies or r.error for r in results) else 0


def report(results: list[ScheduleResult], seconds: float, opts: Options, out: IO[str]) -> None:
    """The final report: anomalies per kind, failover times, messages."""
    total: dict[str, int] = {}
    for r in results:
        for k, v in counts(r.anomalies).items():
            total[k] = total.get(k, 0) + v
    fo = sorted(t for r in results for t in r.failovers)
    faults: dict[str, int] = {}
    for r in results:
        for a in r.applied:
            faults[a.fault.kind] = faults.get(a.fault.kind, 0) + 1
    print("", file=out)
    print(f"== jetlog chaos report (seed {opts.seed}, {len(results)} schedules, {seconds:.0f}s) ==", file=out)
    print("faults applied: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())), file=out)
    print(
        f"messages: acked {sum(r.acked for r in results)}, delivered {sum(r.deliveries for r in results)}, "
        f"unsynced bytes dropped by power loss {sum(r.dropped_bytes for r in results)}",
        file=out,
    )
    if fo:
        print(
            f"failover (leader fault -> first ack, {len(fo)} cases): p50 {statistics.median(fo):.2f}s "
            f"max {fo[-1]:.2f}s",
            file=out,
        )
    else:
        print("failover: no leader fault failed over while held", file=out)
    print("anomalies: " + ", ".join(f"{k} {v}" for k, v in total.items()), file=out)
    errors = [r for r in results if r.error]
    if errors:
        print(f"schedules that could not run: {len(errors)}", file=out)
    bad = [r for r in results if r.anomalies or r.error]
    for r in bad:
        print(
            f"  reproduce: jetlog chaos --seed {opts.seed} --first {r.schedule.index} --schedules 1 "
            f"--duration {opts.duration:g} --nodes {opts.nodes}{_flags(opts)}  ({r.directory})",
            file=out,
        )
    print("result: " + ("ANOMALIES FOUND" if bad else "no anomalies"), file=out, flush=True)


def _flags(opts: Options) -> str:
    out = "" if opts.kinds == KINDS else f" --faults {','.join(opts.kinds)}"
    if opts.ack != Options.ack:
        out += f" --ack {opts.ack}"
    if opts.publishers != Options.publishers:
        out += f" --publishers {opts.publishers}"
    if opts.workers != Options.workers:
        out += f" --consumers {opts.workers}"
    return out + ("" if opts.combos else " --no-combos")


def options_from_args(args: argparse.Namespace) -> Options:
    """``Options`` from the parsed ``jetlog chaos`` command line."""
    kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip()) if args.faults else KINDS
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown} (choose from {', '.join(KINDS)})")
    if args.nodes < 3:
        # One node has no Raft to partition and no second node for a step's second fault; two
        # lose their Raft quorum to any one fault, which the checker would report as stuck.
        raise ValueError(
            f"--nodes must be at least 3, not {args.nodes}: the checker runs an R3 stream on a "
            "cluster that keeps its Raft quorum through one faulted node"
        )
    return Options(
        schedules=args.schedules,
        seed=args.seed,
        duration=args.duration,
        nodes=args.nodes,
        first=args.first,
        publishers=args.publishers,
        workers=args.consumers,
        ack=args.ack,
        kinds=kinds,
        combos=not args.no_combos,
        workdir=args.workdir or "",
        keep=args.keep,
    )
