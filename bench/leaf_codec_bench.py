"""Micro benchmark of the leafnode codec (jetlog.wire.leaf): parse and encode rates.

Run: ``.venv/bin/python bench/leaf_codec_bench.py [--n 200000]``. Reports frames/s for parsing
small LMSG frames (in 64 KiB reads, as a socket delivers them, and as one big buffer), HMSG
frames, byte-at-a-time feeding (correctness path, small n), and for encoding LMSG/HMSG.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from jetlog.wire import leaf

REPEAT = 5


def _rate(n: int, fn: Callable[[], float]) -> str:
    """Best of REPEAT runs: this VM's CPU speed varies a lot run to run, the best is the signal."""
    secs = min(fn() for _ in range(REPEAT))
    return f"{n / secs:>12,.0f} frames/s  ({secs * 1e9 / n:6.0f} ns/frame, best of {REPEAT})"


def bench_parse(n: int, payload_size: int, chunk: int, hdr: bytes = b"", reply: str | None = None) -> float:
    payload = b"x" * payload_size
    frames = [leaf.encode_msg(f"orders.{i % 1000}", payload, reply, hdr) for i in range(n)]
    data = b"".join(frames)
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    p = leaf.LeafParser()
    t0 = time.perf_counter()
    count = 0
    for c in chunks:
        count += len(p.feed(c))
    secs = time.perf_counter() - t0
    assert count == n, (count, n)
    return secs


def bench_parse_dispatch(n: int, payload_size: int, chunk: int) -> float:
    """Parse + the per-event loop a consumer runs (what LeafConnection does per frame)."""
    payload = b"x" * payload_size
    data = b"".join(leaf.encode_msg(f"orders.{i % 1000}", payload) for i in range(n))
    chunks = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    p = leaf.LeafParser()
    got = 0

    def cb(subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
        nonlocal got
        got += 1

    MSG = leaf.MSG
    t0 = time.perf_counter()
    for c in chunks:
        for ev in p.feed(c):
            if ev[0] == MSG:
                cb(ev[1], ev[2], ev[3], ev[4])
    secs = time.perf_counter() - t0
    assert got == n
    return secs


def bench_encode(n: int, payload_size: int, hdr: bytes = b"", reply: str | None = None) -> float:
    payload = b"x" * payload_size
    subjects = [f"orders.{i % 1000}" for i in range(1000)]
    enc = leaf.encode_msg
    t0 = time.perf_counter()
    for i in range(n):
        enc(subjects[i % 1000], payload, reply, hdr, (), 1048576)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300_000)
    args = ap.parse_args()
    n = args.n
    ack = "$JS.ACK.ORDERS.c.1.5.5.1700000000000000000.0@orders.new"
    hdr = b"NATS/1.0\r\nNats-Msg-Id: abc\r\n\r\n"
    print(f"leaf codec micro benchmark, n={n}")
    print("parse LMSG 16B, 64KiB reads      ", _rate(n, lambda: bench_parse(n, 16, 65536)))
    print("parse LMSG 128B, 64KiB reads     ", _rate(n, lambda: bench_parse(n, 128, 65536)))
    print("parse LMSG 128B, one buffer      ", _rate(n, lambda: bench_parse(n, 128, 1 << 40)))
    print(
        "parse LMSG 128B+reply, 64KiB     ",
        _rate(n, lambda: bench_parse(n, 128, 65536, reply="_INBOX.abc.1")),
    )
    print("parse HMSG 128B, 64KiB reads     ", _rate(n, lambda: bench_parse(n, 128, 65536, hdr=hdr)))
    print("parse+dispatch LMSG 128B, 64KiB  ", _rate(n, lambda: bench_parse_dispatch(n, 128, 65536)))
    print("parse LMSG 128B, 1-byte feeds    ", _rate(2000, lambda: bench_parse(2000, 128, 1)))
    print("encode LMSG 128B                 ", _rate(n, lambda: bench_encode(n, 128)))
    print("encode LMSG 128B + $JS.ACK reply ", _rate(n, lambda: bench_encode(n, 128, reply=ack)))
    print("encode HMSG 128B + $JS.ACK reply ", _rate(n, lambda: bench_encode(n, 128, hdr=hdr, reply=ack)))


if __name__ == "__main__":
    main()
