"""Measure the metadata Raft with real processes (not a test; prints JSON).

``python -m tests.integration.meta_raft_measure [--reps N] [--load K]`` (``--load``: K busy-loop
processes compete for the CPUs meanwhile): first-leader time, failover after
SIGKILL and SIGSTOP of the leader, sequential commit latency (barriers) from the leader and from
a follower, with the durable journal and without (``--volatile`` children).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
import time
from typing import Any

from tests.integration.metaprocs import NAMES, ProcCluster


def summary(xs: list[float], scale: float = 1.0) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "n": len(xs),
        "p50": round(statistics.median(xs) * scale, 3),
        "p90": round(xs[int(0.9 * (len(xs) - 1))] * scale, 3),
        "max": round(xs[-1] * scale, 3),
    }


async def first_leader(reps: int) -> dict[str, Any]:
    from_created, from_spawn = [], []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as d:
            c = ProcCluster(d)
            try:
                t0 = time.monotonic()
                await c.start()
                created = max(ch.started_at for ch in c.nodes.values())
                await c.agreed_leader(NAMES)
                t = time.monotonic()
                from_created.append(t - created)
                from_spawn.append(t - t0)
            finally:
                await c.close()
    return {
        "all_created_to_agreed_leader_s": summary(from_created),
        "spawn_to_agreed_leader_s": summary(from_spawn),
    }


async def failover(reps: int, sig: int) -> dict[str, Any]:
    times = []
    with tempfile.TemporaryDirectory() as d:
        c = ProcCluster(d)
        try:
            await c.start()
            for _ in range(reps):
                leader = await c.agreed_leader(NAMES)
                for n in NAMES:
                    await c.nodes[n].request({"op": "ready", "timeout": 10}, 15)
                await asyncio.sleep(1.0)  # idle links, as in steady state
                others = [n for n in NAMES if n != leader]
                t0 = time.monotonic()
                if sig == signal.SIGKILL:
                    await c.nodes[leader].kill()
                else:
                    c.nodes[leader].signal(sig)
                await c.agreed_leader(others, exclude=leader, timeout=10)
                times.append(time.monotonic() - t0)
                if sig == signal.SIGKILL:
                    await c.nodes[leader].start()
                else:
                    c.nodes[leader].signal(signal.SIGCONT)
        finally:
            await c.close()
    return summary(times)


async def latency(n: int, volatile: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        c = ProcCluster(d, volatile=volatile)
        try:
            await c.start()
            leader = await c.agreed_leader(NAMES)
            follower = next(x for x in NAMES if x != leader)
            out = {}
            for role, who in (("leader", leader), ("follower", follower)):
                await c.nodes[who].request({"op": "bench", "n": 50}, 60)  # warm-up
                lats = (await c.nodes[who].request({"op": "bench", "n": n}, 120))["lats"]
                out[role] = summary(lats, 1000.0)
            return out
        finally:
            await c.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--load", type=int, default=0, help="busy-loop processes running meanwhile")
    a = ap.parse_args()
    hogs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import time\nt=time.time()+600\nwhile time.time()<t: pass"
        )
        for _ in range(a.load)
    ]
    try:
        res = await measure(a)
    finally:
        for h in hogs:
            h.kill()
            await h.wait()
    print(json.dumps({"load_processes": a.load, **res}, indent=1))


async def measure(a: argparse.Namespace) -> dict[str, Any]:
    return {
        "first_leader": await first_leader(a.reps),
        "failover_sigkill_s": await failover(a.reps, signal.SIGKILL),
        "failover_sigstop_s": await failover(a.reps, signal.SIGSTOP),
        "commit_ms_durable": await latency(a.commits, volatile=False),
        "commit_ms_volatile": await latency(a.commits, volatile=True),
    }


if __name__ == "__main__":
    asyncio.run(main())
