"""Micro benchmark of the replication primitives of the stores (not a test).

    .venv/bin/python bench/replica_bench.py [--n 200000] [--size 128] [--batch 100]
        [--max-bytes 1000000] [--max-raw 0] [--compression] [--fsync always|interval]

Builds a leader FileStore of ``--n`` messages sealed into batches of ``--batch`` messages, reopens
it (reads then come from its files through the page cache) and measures:

- ``read_batches`` from the start to the end, ``--max-bytes`` per reply (a leader answering
  fetches): MB/s, batches/s and the longest single call (time the loop is blocked);
- ``append_batches`` of those replies into a follower FileStore (``--fsync``) with the group
  commit running between replies, until everything is durable; the CPU time inside
  ``append_batches`` alone; the longest call;
- the same appends into a ``MemStore(replicated=True)``.
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


async def build(path: str, args: argparse.Namespace) -> None:
    st = await FileStore.open(path, compression=args.compression)
    payload = os.urandom(args.size // 2) + bytes(args.size - args.size // 2)
    hdr = b"NATS/1.0\r\nNats-Msg-Id: 1234567890\r\n\r\n"
    for i in range(args.n):
        st.append(f"orders.{i % 16}", hdr if i % 2 else b"", payload, 1_700_000_000_000_000_000 + i)
        if i % args.batch == args.batch - 1:
            st.seal()
        if i % 20_000 == 0:
            await st.flush()
    await st.close()


async def run(args: argparse.Namespace) -> None:
    d = tempfile.mkdtemp(prefix="jetlog-rbench-", dir=args.dir)
    try:
        await build(os.path.join(d, "L"), args)
        leader = await FileStore.open(os.path.join(d, "L"))
        # warm the page cache once (a leader serving fetches reads recent, cached data)
        replies: list[bytes] = []
        after = (0, -1)
        while True:
            r = leader.read_batches(after, args.max_bytes)
            if not r.nbatches:
                break
            after = r.last
        t0 = time.perf_counter()
        worst = 0.0
        nb = 0
        after = (0, -1)
        while True:
            t = time.perf_counter()
            r = leader.read_batches(after, args.max_bytes, max_raw=args.max_raw)
            worst = max(worst, time.perf_counter() - t)
            if not r.nbatches:
                break
            replies.append(r.data)
            nb += r.nbatches
            after = r.last
        dt = time.perf_counter() - t0
        total = sum(len(x) for x in replies)
        print(
            f"read_batches: {total / dt / 1e6:,.0f} MB/s, {nb / dt:,.0f} batches/s, "
            f"{args.n / dt:,.0f} msgs/s ({len(replies)} replies of <= {args.max_bytes} B, "
            f"longest call {worst * 1e3:.2f} ms)"
        )
        await leader.close()

        for kind in ("file", "mem"):
            if kind == "file":
                fl: FileStore | MemStore = await FileStore.open(os.path.join(d, "F"), fsync=args.fsync)
            else:
                fl = MemStore(replicated=True)
            cpu = 0.0
            worst = 0.0
            t0 = time.perf_counter()
            for data in replies:
                t = time.perf_counter()
                fl.append_batches(data)
                el = time.perf_counter() - t
                cpu += el
                worst = max(worst, el)
                await asyncio.sleep(0)  # the group commit runs between replies
            await fl.flush()
            dt = time.perf_counter() - t0
            assert fl.last_seq == args.n
            print(
                f"append_batches ({kind}{', fsync ' + args.fsync if kind == 'file' else ''}): "
                f"{total / dt / 1e6:,.0f} MB/s, {nb / dt:,.0f} batches/s, {args.n / dt:,.0f} msgs/s "
                f"until durable; in append_batches {total / cpu / 1e6:,.0f} MB/s, "
                f"{cpu / args.n * 1e6:.2f} us/msg, longest call {worst * 1e3:.1f} ms"
            )
            await fl.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--batch", type=int, default=100, help="messages per leader batch")
    ap.add_argument("--max-bytes", type=int, default=1_000_000)
    ap.add_argument("--max-raw", type=int, default=0, help="read_batches' max_raw (0: none)")
    ap.add_argument("--compression", action="store_true")
    ap.add_argument("--fsync", default="always")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    print(
        f"n={args.n} size={args.size} batch={args.batch} compression={args.compression} "
        f"max_bytes={args.max_bytes} max_raw={args.max_raw}"
    )
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
