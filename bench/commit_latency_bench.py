"""Commit latency of ``FileStore`` (append → commit listener) with an idle and a busy event loop,
for several implementations of the commit path (not a test).

    .venv/bin/python bench/commit_latency_bench.py [--impls old,thread,helper] [--loops idle,busy]
        [--seconds 4] [--rounds 1] [--baseline-rev HEAD] [--dir DIR] [--uvloop]
        [--compression-study] [--json FILE]

Implementations:
  old     the store as committed at ``--baseline-rev`` (``git archive`` into a temp dir) with its
          default options (at 2f31d30: the helper process, one job in flight)
  thread  this tree with ``syncer="thread"``: write on the loop, fdatasync in a thread
  helper  this tree with the default fsync helper process (pipelined group commit)
  serial  this tree with the helper, ``pipeline.MAX_INFLIGHT = 1`` (no pipelining)

``--rounds N`` runs every case N times, alternating implementations within each round, and
reports per-metric medians.

Loops: ``idle`` (only the benchmark) and ``busy`` (plus a task that burns 0.4 ms of CPU and
yields with ``await asyncio.sleep(0)``, forever — the loop under publish load never blocks in
epoll). Per case, two measurements:
  latency     one 128 B append at a time; time from ``append`` to the commit listener
  throughput  128 B appends keeping up to 256 un-committed (nats-py's publish_async window);
              committed messages per second

Each case runs in its own process. Use a directory on a real disk (``--dir``; tmpfs makes
fdatasync free).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAYLOAD = 128
WINDOW = 256


# ---- worker (one case, in its own process) -------------------------------------------------


async def _burn(stop: asyncio.Event) -> None:
    while not stop.is_set():
        end = time.perf_counter() + 0.0004
        while time.perf_counter() < end:
            pass
        await asyncio.sleep(0)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] * 1e3 if xs else float("nan")


async def _case(args: argparse.Namespace) -> dict[str, Any]:
    from jetlog.log import FileStore  # from the tree chosen by the parent (PYTHONPATH)

    if args.inline_max is not None:
        import jetlog.log.commit as cmod

        cmod.COMPRESS_INLINE_MAX = args.inline_max
    if args.max_inflight is not None:
        import jetlog.log.pipeline as pmod

        pmod.MAX_INFLIGHT = args.max_inflight
    d = tempfile.mkdtemp(prefix="jetlog-commit-bench-", dir=args.dir)
    kw: dict[str, Any] = {"segment_bytes": 64 << 20, "compression": args.compression}
    if args.impl != "old":
        kw["syncer"] = "thread" if args.impl == "thread" else "helper"
    stop = asyncio.Event()
    burner = asyncio.create_task(_burn(stop)) if args.loop == "busy" else None
    out: dict[str, Any] = {}
    try:
        store = await FileStore.open(os.path.join(d, "s"), **kw)
        size = args.size
        payload = os.urandom(size // 2).hex().encode()[:size]
        done = asyncio.Event()
        t_commit = 0.0
        committed = 0

        def on_commit(seq: int) -> None:
            nonlocal t_commit, committed
            t_commit = time.perf_counter()
            committed = seq
            done.set()

        store.add_commit_listener(on_commit)
        for i in range(20):  # warm-up (and the helper's start)
            store.append("bench.w", b"", payload, i + 1)
            await store.flush()
        # latency: one message at a time
        lat: list[float] = []
        end = time.perf_counter() + args.seconds
        while (time.perf_counter() < end or len(lat) < 5) and len(lat) < args.max_samples:
            done.clear()
            t0 = time.perf_counter()
            seq = store.append("bench.l", b"", payload, time.time_ns())
            while committed < seq:
                done.clear()
                await done.wait()
            lat.append(t_commit - t0)
        out["lat_n"] = len(lat)
        out["lat_p50"] = _pct(lat, 0.5)
        out["lat_p90"] = _pct(lat, 0.9)
        out["lat_p99"] = _pct(lat, 0.99)
        # throughput: a publish_async-like window
        start_seq = committed
        t0 = time.perf_counter()
        end = t0 + args.seconds
        ts = time.time_ns()
        append = store.append
        while time.perf_counter() < end:
            while store.last_seq - committed < WINDOW:
                append("bench.t", b"", payload, ts)
            done.clear()
            await done.wait()
        dt = time.perf_counter() - t0
        out["rate"] = (committed - start_seq) / dt
        await store.close()
    finally:
        stop.set()
        if burner is not None:
            await burner
        shutil.rmtree(d, ignore_errors=True)
    return out


def _worker(args: argparse.Namespace) -> None:
    if args.uvloop:
        import uvloop

        res = uvloop.run(_case(args))
    else:
        res = asyncio.run(_case(args))
    print(json.dumps(res))


# ---- driver ---------------------------------------------------------------------------------


def _baseline(rev: str, into: str) -> str:
    """Extract ``jetlog/`` at ``rev`` into ``into``; return the directory for PYTHONPATH."""
    tar = subprocess.run(
        ["git", "-C", REPO, "archive", rev, "jetlog"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", into], input=tar, check=True)
    return into


def _run_case(src: str, args: argparse.Namespace, impl: str, loop: str, extra: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=src)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--impl",
        impl,
        "--loop",
        loop,
        "--seconds",
        str(args.seconds),
        "--max-samples",
        str(args.max_samples),
        "--size",
        str(args.size),
        *extra,
    ]
    if args.dir:
        cmd += ["--dir", args.dir]
    if args.uvloop:
        cmd.append("--uvloop")
    # Not the repo as cwd: ``-P``-less python puts the script's directory first, and the tree
    # under test must come from PYTHONPATH only.
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    if p.returncode != 0:
        raise RuntimeError(f"{impl}/{loop} failed:\n{p.stderr}")
    res: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return res


def _median(rs: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: statistics.median(r[k] for r in rs) for k in rs[0]}


def _table(rows: list[tuple[str, str, dict[str, Any]]]) -> str:
    lines = [
        "| impl | loop | latency p50 ms | p90 ms | p99 ms | samples | 128 B appends/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for impl, loop, r in rows:
        lines.append(
            f"| {impl} | {loop} | {r['lat_p50']:.3f} | {r['lat_p90']:.3f} | {r['lat_p99']:.3f} "
            f"| {r['lat_n']} | {r['rate']:,.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impls", default="old,thread,helper")
    ap.add_argument("--loops", default="idle,busy")
    ap.add_argument("--seconds", type=float, default=4.0, help="per measurement")
    ap.add_argument("--max-samples", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds; medians are reported")
    ap.add_argument("--size", type=int, default=PAYLOAD)
    ap.add_argument("--baseline-rev", default="HEAD")
    ap.add_argument("--dir", default=None, help="where stores are created (a real disk)")
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--compression-study", action="store_true", help="also: zstd inline vs thread")
    ap.add_argument("--json", default=None)
    # worker mode
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", default="helper", help=argparse.SUPPRESS)
    ap.add_argument("--loop", default="idle", help=argparse.SUPPRESS)
    ap.add_argument("--compression", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--inline-max", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--max-inflight", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args)
        return
    tmp = tempfile.mkdtemp(prefix="jetlog-baseline-")
    try:
        print(
            f"# commit latency: {platform.platform()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, {'uvloop' if args.uvloop else 'asyncio'} loop, "
            f"dir {args.dir or tempfile.gettempdir()}",
            flush=True,
        )
        impls = args.impls.split(",")
        old_src = _baseline(args.baseline_rev, tmp) if "old" in impls else ""
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for rnd in range(args.rounds):
            for loop in args.loops.split(","):
                for impl in impls:
                    src = old_src if impl == "old" else REPO
                    extra = ["--max-inflight", "1"] if impl == "serial" else []
                    r = _run_case(src, args, impl, loop, extra)
                    runs.setdefault((impl, loop), []).append(r)
                    vals = json.dumps({k: round(v, 3) for k, v in r.items()})
                    print(f"{rnd + 1} {impl:7} {loop:5} {vals}", flush=True)
        rows = [(impl, loop, _median(rs)) for (impl, loop), rs in runs.items()]
        rows.sort(key=lambda x: (args.loops.split(",").index(x[1]), impls.index(x[0])))
        print()
        if args.rounds > 1:
            print(f"medians of {args.rounds} rounds:")
        print(_table(rows))
        study: list[tuple[str, str, dict[str, Any]]] = []
        if args.compression_study:
            # 64 KiB messages, compressed store: zstd inline on the loop vs in the store thread.
            saved = args.size
            args.size = 64 << 10
            for name, inline_max in (("zstd inline", 1 << 20), ("zstd thread", 0)):
                for loop in args.loops.split(","):
                    extra = ["--compression", "--inline-max", str(inline_max)]
                    r = _run_case(REPO, args, "helper", loop, extra)
                    study.append((name, loop, r))
                    print(f"{name} {loop:5} {json.dumps({k: round(v, 3) for k, v in r.items()})}", flush=True)
            args.size = saved
            print()
            print("compressed store, 64 KiB messages, helper path:")
            print(_table(study).replace("128 B appends/s", "64 KiB appends/s"))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": rows, "compression": study}, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
