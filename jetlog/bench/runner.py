"""Runs every case against each target in alternating rounds and writes the report.

Method: for each round the target order alternates (A B, B A, …) to spread machine noise; each
target starts fresh (new processes, new data directories); each case uses a fresh stream. The
report quotes the median of the rounds for each target and the ratio jetlog / nats.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
from typing import Any

import nats

from jetlog.bench import targets
from jetlog.bench.cases import Result, all_cases


def _nats_py_version() -> str:
    from importlib.metadata import version

    return version("nats-py")


def _machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{mem}; Linux {platform.release()}; "
        f"Python {platform.python_version()}; nats-py {_nats_py_version()}"
    )


async def _run_case(url: str, name: str, case: Any, quick: bool) -> Result:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=30)
        stream = "B" + "".join(ch for ch in name if ch.isalnum()).upper()
        try:
            return await case(nc, js, stream, quick)
        finally:
            try:
                await js.delete_stream(stream)
            except nats.errors.Error:
                pass
    finally:
        await nc.close()


async def run_bench(args: argparse.Namespace) -> int:
    """Entry point of ``jetlog bench``."""
    cases = all_cases()
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        cases = {k: v for k, v in cases.items() if any(w in k for w in wanted)}
    kinds = ["jetlog", "nats"]
    if getattr(args, "full", False):
        kinds += ["jetlog-interval", "nats-sync"]
    results: dict[str, dict[str, list[Result]]] = {c: {k: [] for k in kinds} for c in cases}
    for rnd in range(args.rounds):
        order = kinds if rnd % 2 == 0 else list(reversed(kinds))
        for kind in order:
            env = await targets.start(kind)
            try:
                for cname, case in cases.items():
                    r = await _run_case(env.url, cname, case, args.quick)
                    results[cname][kind].append(r)
                    print(
                        f"round {rnd + 1} {kind:16} {cname:24} {r.rate:10.0f}/s"
                        + (f"  p50 {r.p50_us:.0f}us p99 {r.p99_us:.0f}us" if r.p50_us else ""),
                        file=sys.stderr,
                        flush=True,
                    )
            finally:
                await env.stop()
    report = _report(results, kinds, args)
    print(report)
    if args.out:
        report += _kept_notes(args.out)
        with open(args.out, "w") as f:
            f.write(report)
    return 0


KEEP_MARKER = "<!-- kept across runs -->"


def _kept_notes(path: str) -> str:
    """Hand-written notes after ``KEEP_MARKER`` in an existing report survive a re-run."""
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        return ""
    i = old.find(KEEP_MARKER)
    return "\n" + old[i:] if i >= 0 else ""


def _med(rs: list[Result], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in rs) if rs else 0.0


def _report(results: dict[str, dict[str, list[Result]]], kinds: list[str], args: argparse.Namespace) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmarks: jetlog vs nats-server -js",
        "",
        f"Run: {now}. Machine: {_machine()}.",
        f"Rounds: {args.rounds} (alternating target order), medians quoted"
        + (" — quick mode, indicative only" if args.quick else "")
        + ".",
        "",
        "Same nats-py client, same machine, each target started fresh. jetlog fsyncs every",
        "group commit before acknowledging (`fsync = always`); nats-server -js acknowledges",
        "before its periodic fsync (default `sync_interval` 2 min).",
        "",
    ]
    ratios = [("jetlog", "nats", "jetlog / nats")]
    if "nats-sync" in kinds:
        ratios.append(("jetlog", "nats-sync", "jetlog / nats-sync (both fsync)"))
    if "jetlog-interval" in kinds:
        ratios.append(("jetlog-interval", "nats", "jetlog-interval / nats (neither)"))
    header = (
        "| case | "
        + " | ".join(f"{k} (ops/s)" for k in kinds)
        + " | "
        + " | ".join(r[2] for r in ratios)
        + " | p50 µs jetlog / nats |"
    )
    lines.append(header)
    lines.append("|" + "---|" * (len(kinds) + len(ratios) + 2))
    for cname, per in results.items():
        med = {k: _med(per[k], "rate") for k in kinds}
        cells = [f"{med[x] / med[y]:.2f}" if med[y] else "–" for x, y, _ in ratios]
        p50j, p50n = _med(per["jetlog"], "p50_us"), _med(per["nats"], "p50_us")
        lat = f"{p50j:.0f} / {p50n:.0f} ({p50j / p50n:.2f}x)" if p50n else "–"
        lines.append(
            f"| {cname} | "
            + " | ".join(f"{med[k]:,.0f}" for k in kinds)
            + " | "
            + " | ".join(cells)
            + f" | {lat} |"
        )
    lines.append("")
    lines.append("Reproduce: `make bench` (or `.venv/bin/jetlog bench --rounds 3 --out docs/benchmarks.md`).")
    return "\n".join(lines) + "\n"
