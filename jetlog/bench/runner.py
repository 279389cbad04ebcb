"""Runs every case against each target in alternating rounds and writes the report.

Method: for each round the target order alternates (A B, B A, …) to spread machine noise; each
target starts fresh (new processes, new data directories); each case uses a fresh stream. The
report quotes the median of the rounds for each target and the ratio jetlog / nats.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import sys
from typing import Any

import nats

from jetlog.bench import cases as case_mod
from jetlog.bench import targets
from jetlog.bench.cases import Result, all_cases
from jetlog.bench.floor import supports as floor_supports
from jetlog.bench.report import KEEP_MARKER, machine, write_report

__all__ = ["KEEP_MARKER", "run_bench", "write_report"]


async def _run_case(url: str, name: str, case: Any, quick: bool) -> Result:
    # FAIRNESS: nats-server -js leaves its writes unsynced (up to its 2 min sync interval) and
    # jetlog syncs each commit; without this, the jetlog target after it paid for writing back
    # the other's gigabytes (a shared ``syncfs`` of 200 streams took 416 ms behind 1.5 GB, and
    # the disk stayed busy with it). Untimed: each case starts on a clean page cache.
    await asyncio.to_thread(os.sync)
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
    if getattr(args, "scale", False):
        from jetlog.bench.scale import run as run_scale

        return await run_scale(args)
    cases = all_cases()
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        cases = {k: v for k, v in cases.items() if any(w in k for w in wanted)}
    kinds = ["jetlog", "nats"]
    if getattr(args, "full", False):
        kinds += ["jetlog-interval", "nats-sync"]
    if getattr(args, "cluster", False):
        kinds = ["jetlog-r3", "nats-r3", "jetlog"]
        if getattr(args, "full", False):
            kinds.append("nats-r3-sync")
    elif getattr(args, "floor", False):
        kinds.append("floor")
        cases = {k: v for k, v in cases.items() if floor_supports(k)}  # it serves no consumers
    results: dict[str, dict[str, list[Result]]] = {c: {k: [] for k in kinds} for c in cases}
    for rnd in range(args.rounds):
        order = kinds if rnd % 2 == 0 else list(reversed(kinds))
        for kind in order:
            env = await targets.start(kind)
            case_mod.REPLICAS = env.replicas
            case_mod.SERVER_CPU = env.cpu_seconds
            try:
                for cname, case in cases.items():
                    r = await _run_case(env.url, cname, case, args.quick)
                    results[cname][kind].append(r)
                    print(
                        f"round {rnd + 1} {kind:16} {cname:24} {r.rate:10.0f}/s  server CPU {r.cpu_us:7.1f}us/op"
                        + (f"  p50 {r.p50_us:.0f}us p99 {r.p99_us:.0f}us" if r.p50_us else ""),
                        file=sys.stderr,
                        flush=True,
                    )
            finally:
                await env.stop()
    report = _report(results, kinds, args)
    if getattr(args, "cluster", False):
        from jetlog.bench.cluster import cluster_extras

        report = report.replace(
            "# Benchmarks: jetlog vs nats-server -js", "## Cluster: jetlog R3 vs nats-server -js R3"
        ).replace(REPRODUCE, REPRODUCE_CLUSTER)
        report += await cluster_extras(args)
    elif "floor" in kinds:
        report = report.replace("# Benchmarks: jetlog vs nats-server -js", FLOOR_TITLE).replace(
            REPRODUCE, FLOOR_TEXT
        )
    print(report)
    if args.out:
        section = "cluster" if getattr(args, "cluster", False) else ("floor" if "floor" in kinds else None)
        write_report(args.out, report, section=section)
    return 0


REPRODUCE = "Reproduce: `make bench` (or `.venv/bin/jetlog bench --rounds 3 --full --out docs/benchmarks.md`; without `--full`, only the jetlog and nats columns)."
REPRODUCE_CLUSTER = (
    "Reproduce: `.venv/bin/jetlog bench --cluster --rounds 3 --only "
    '"pub-sync,pub-async,fetch(1000)" --failover-reps 10 --out docs/benchmarks.md` (with `--full`, '
    "also a nats-server R3 cluster with `sync_interval: always`, the durability of a jetlog R3 PubAck)."
)

FLOOR_TITLE = "## The relay's bound: jetlog, nats-server -js and a minimal stand-in behind the relay"
FLOOR_TEXT = (
    "`floor`: a plain nats-server and `jetlog.bench.floor`, one uvloop process that answers the "
    "publish and get cases from memory (publishes written and `fdatasync`ed as a group per socket "
    "read before their PubAcks, as `fsync = always`), with none of a store's work. Every jetlog "
    "request and publish crosses the upstream server twice more than nats-server's own JetStream; "
    "`floor / nats` is how far that alone lets a Python process behind the relay go on this "
    "machine, `jetlog / floor` what jetlog's own work costs on top of it. Reproduce: "
    "`.venv/bin/jetlog bench --floor --full --rounds 3 --out docs/benchmarks.md`."
)


def _med(rs: list[Result], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in rs) if rs else 0.0


def _lag(rs: list[Result]) -> str:
    lags = [r.lag_ms for r in rs if r.lag_ms]
    if not lags:
        return "– (not every message stored within the case's 120 s)"
    return f"{statistics.median(lags):.0f} ms"


def _report(results: dict[str, dict[str, list[Result]]], kinds: list[str], args: argparse.Namespace) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmarks: jetlog vs nats-server -js",
        "",
        f"Run: {now}. Machine: {machine()}.",
        f"Rounds: {args.rounds} (alternating target order), medians quoted"
        + (" — quick mode, indicative only" if args.quick else "")
        + ".",
        "",
        "Same nats-py client, same machine, each target started fresh, each case after a `sync`",
        "(no target pays for writing back another's unsynced data). jetlog fsyncs every",
        "group commit before acknowledging (`fsync = always`); nats-server -js acknowledges",
        "before its periodic fsync (default `sync_interval` 2 min). Server CPU: user + system",
        "time of every server-side process (nats-server(s), jetlog node(s) and their fsync",
        "helpers) over each case's timed window, per operation.",
        "",
    ]
    ratios = [("jetlog", "nats", "jetlog / nats")]
    if "jetlog-r3" in kinds:
        ratios = [("jetlog-r3", "nats-r3", "jetlog R3 / nats R3"), ("jetlog-r3", "jetlog", "jetlog R3 / R1")]
    if "nats-sync" in kinds:
        ratios.append(("jetlog", "nats-sync", "jetlog / nats-sync (both fsync)"))
    if "nats-r3-sync" in kinds:
        ratios.append(("jetlog-r3", "nats-r3-sync", "jetlog R3 / nats R3 sync (both fsync)"))
    if "jetlog-interval" in kinds:
        ratios.append(("jetlog-interval", "nats", "jetlog-interval / nats (neither)"))
    if "floor" in kinds:
        ratios.append(("floor", "nats", "floor / nats (the relay's bound)"))
        ratios.append(("jetlog", "floor", "jetlog / floor"))
    # The latency aims of synchronous publishes are against nats-server with the same
    # durability (sync_interval: always): show that ratio too when it was measured.
    same = next(
        (
            (a, b)
            for a, b in (("jetlog", "nats-sync"), ("jetlog-r3", "nats-r3-sync"))
            if a in kinds and b in kinds
        ),
        None,
    )
    sync_lat = int(same is not None)
    header = (
        "| case | "
        + " | ".join(f"{k} (ops/s)" for k in kinds)
        + " | "
        + " | ".join(r[2] for r in ratios)
        + f" | p50 µs {ratios[0][0]} / {ratios[0][1]} |"
        + (f" p50 µs {same[0]} / {same[1]} |" if same else "")
        + f" server CPU µs/op {ratios[0][0]} / {ratios[0][1]} |"
        + (" p50 µs / server CPU µs/op floor |" if "floor" in kinds else "")
    )
    lines.append(header)
    lines.append("|" + "---|" * (len(kinds) + len(ratios) + 3 + sync_lat + ("floor" in kinds)))
    for cname, per in results.items():
        med = {k: _med(per[k], "rate") for k in kinds}
        cells = [f"{med[x] / med[y]:.2f}" if med[y] and per[x] else "–" for x, y, _ in ratios]
        a, b = ratios[0][0], ratios[0][1]
        p50j, p50n = _med(per[a], "p50_us"), _med(per[b], "p50_us")
        lat = f"{p50j:.0f} / {p50n:.0f} ({p50j / p50n:.2f}x)" if p50n else "–"
        if same:
            p50s = _med(per[same[1]], "p50_us")
            p50o = _med(per[same[0]], "p50_us")
            lat += f" | {p50o:.0f} / {p50s:.0f} ({p50o / p50s:.2f}x)" if p50s else " | –"
        cpuj, cpun = _med(per[a], "cpu_us"), _med(per[b], "cpu_us")
        cpu = f"{cpuj:.1f} / {cpun:.1f} ({cpuj / cpun:.1f}x)" if cpun else "–"
        if "floor" in kinds:
            fl = per["floor"]
            cpu += (
                f" | {_med(fl, 'p50_us'):.0f} / {_med(fl, 'cpu_us'):.1f}"
                if fl and _med(fl, "p50_us")
                else (f" | – / {_med(fl, 'cpu_us'):.1f}" if fl else " | –")
            )
        lines.append(
            f"| {cname} | "
            + " | ".join(f"{med[k]:,.0f}" if per[k] else "–" for k in kinds)
            + " | "
            + " | ".join(cells)
            + f" | {lat} | {cpu} |"
        )
    lines.append("")
    lags = [
        f"{cname}: " + ", ".join(f"{k} {_lag(per[k])}" for k in kinds if per[k])
        for cname, per in results.items()
        if any(_med(per[k], "lag_ms") for k in kinds)
    ]
    if lags:
        lines.append(
            "Capture lag (from the publisher's last flush until every message is stored), medians: "
            + "; ".join(lags)
            + "."
        )
        lines.append("")
    lines.append(REPRODUCE)
    return "\n".join(lines) + "\n"
