"""Micro benchmark of FileStore appends with group commit (not a test).

    .venv/bin/python bench/store_bench.py [--n 300000] [--size 128] [--fsync always|interval]
        [--compression] [--window 0] [--profile]

Appends are fired from one coroutine in chunks of ``--chunk``, keeping at most ``--window``
messages un-committed (the commit listener releases more; 0 = unbounded). Reported: rate =
messages / (time until the last commit), Python time per append, and the latency from a chunk's
append to the commit covering it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from jetlog.log import FileStore, MemStore


async def run(args: argparse.Namespace) -> dict[str, float]:
    d = tempfile.mkdtemp(prefix="jetlog-bench-", dir=args.dir)
    try:
        if args.mem:
            store: FileStore | MemStore = MemStore()
        else:
            store = await FileStore.open(
                os.path.join(d, "s"),
                fsync=args.fsync,
                compression=args.compression,
                segment_bytes=args.segment_mib << 20,
            )
        commits = 0
        committed = 0
        progress = asyncio.Event()
        sent_at: dict[int, float] = {}
        lat: list[float] = []

        def on_commit(seq: int) -> None:
            nonlocal commits, committed
            commits += 1
            committed = seq
            now = time.perf_counter()
            lat.extend([now - sent_at.pop(s) for s in [s for s in sent_at if s <= seq]])
            progress.set()

        store.add_commit_listener(on_commit)
        payload = os.urandom(args.size)
        subjects = [f"bench.{i}" for i in range(16)]
        n = args.n
        t0 = time.perf_counter()
        ts = time.time_ns()
        i = 0
        append = store.append
        while i < n:
            end = min(n, i + args.chunk)
            for j in range(i, end):
                append(subjects[j & 15], b"", payload, ts + j)
            i = end
            sent_at[store.last_seq] = time.perf_counter()
            if args.window and store.last_seq - committed >= args.window and not args.mem:
                while store.last_seq - committed >= args.window:
                    progress.clear()
                    await progress.wait()
            else:
                await asyncio.sleep(0)
        t_append = time.perf_counter() - t0
        await store.flush()
        dt = time.perf_counter() - t0
        await store.close()
        lat.sort()
        p50 = lat[len(lat) // 2] * 1e3 if lat else 0.0
        p99 = lat[int(len(lat) * 0.99)] * 1e3 if lat else 0.0
        return {
            "msgs_per_s": n / dt,
            "append_us": t_append / n * 1e6,
            "commits": commits,
            "secs": dt,
            "p50_ms": p50,
            "p99_ms": p99,
        }
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--window", type=int, default=20_000)
    ap.add_argument("--fsync", default="always")
    ap.add_argument("--compression", action="store_true")
    ap.add_argument("--mem", action="store_true")
    ap.add_argument("--segment-mib", type=int, default=64)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        res = asyncio.run(run(args))
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    else:
        res = asyncio.run(run(args))
    print(
        f"{'mem' if args.mem else args.fsync}{' zstd' if args.compression else ''} size={args.size}: "
        f"{res['msgs_per_s']:,.0f} msgs/s, append {res['append_us']:.2f} us, commits={res['commits']}, "
        f"{res['secs']:.2f}s, commit latency p50 {res['p50_ms']:.1f} ms p99 {res['p99_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
