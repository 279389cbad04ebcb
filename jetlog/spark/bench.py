"""Spark source benchmark: ``python -m jetlog.spark.bench`` (``make bench-spark``).

Measures rows/s through a local[2] SparkSession, in the same run and alternating A/B:

* ``generator``: an in-process Arrow generator data source producing rows of the same schema and
  sizes (what a source costs when fetching is free) — the yardstick;
* ``jetlog bulk``: the ``jetlog`` source reading a ``jetlog dev`` node over
  ``$JETLOG.API.FETCH`` (columnar frames);
* ``jetlog direct`` / ``nats direct``: the Direct Get fallback against the same jetlog node and
  against ``nats-server -js`` (for comparison);

each into the ``noop`` sink and into Parquet, as bounded reads of the whole stream (the path a
micro-batch takes), median of the rounds. Prints a markdown table; ``--out`` puts it in its
marked section of a file (``spark``, or ``spark-r3`` with ``--cluster``: see
``bench.report.write_marked``), or appends it after a partial run (``--only``).

``--cluster`` reads a replicated stream instead: ``jetlog dev --nodes 3`` and an R3 stream; the
read tasks' FETCH requests go to any replica (a queue group per stream), and the report says how
many each node served, leader and followers.

``--pin`` gives the servers (the jetlog nodes, their upstream nats-server and ``nats-server -js``)
the first CPU and Spark (driver, JVM, Python workers) the others, as when the nodes run on
machines of their own: the ratio then measures what reading costs Spark itself, not what the
nodes and the relay take from it on shared cores. Children inherit the affinity of the process
that starts them, so each side's processes are started while this one is pinned to its CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from jetlog.bench.report import write_marked
from jetlog.spark.schema import source_schema

BATCH = 10_000


class _GenPartition(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end


class _GenReader(DataSourceReader):
    def __init__(self, rows: int, parts: int, size: int) -> None:
        self.rows, self.parts, self.size = rows, parts, size

    def partitions(self) -> list[InputPartition]:
        step = -(-self.rows // self.parts)
        return [_GenPartition(s, min(s + step, self.rows + 1)) for s in range(1, self.rows + 1, step)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        assert isinstance(partition, _GenPartition)
        schema = to_arrow_schema(source_schema(False), timezone="UTC")
        # Everything per batch is vectorized (numpy ranges, slices of arrays built once): the
        # yardstick must cost Spark as little as a source can. Built from Python ranges and
        # lists, its own columns cost its worker more than a jetlog frame decode (py-spy,
        # 2026-11-28), which flattered every ratio against it.
        stream = pa.array(["BENCH"] * BATCH, pa.string())
        subjects = pa.array([f"bench.{i % 8}" for i in range(BATCH)], pa.string())
        data = pa.array([b"x" * self.size] * BATCH, pa.binary())
        ts_type = pa.timestamp("us", tz="UTC")
        now_us = time.time_ns() // 1000
        for s in range(partition.start, partition.end, BATCH):
            n = min(BATCH, partition.end - s)
            seq = pa.array(np.arange(s, s + n, dtype=np.int64))
            ts = pa.array(np.arange(now_us + s, now_us + s + n, dtype=np.int64)).view(ts_type)
            yield pa.RecordBatch.from_arrays([stream[:n], seq, subjects[:n], data[:n], ts], schema=schema)


class GeneratorSource(DataSource):
    """Synthetic rows with the jetlog schema, built as Arrow batches in the executors."""

    @classmethod
    def name(cls) -> str:
        return "jetlog_bench_generator"

    def schema(self) -> StructType:
        return source_schema(False)

    def reader(self, schema: StructType) -> DataSourceReader:
        o = self.options
        return _GenReader(int(o["rows"]), int(o.get("partitions", "2")), int(o.get("size", "64")))


def _spark() -> SparkSession:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("jetlog-bench")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from jetlog.spark import register

    register(spark)
    spark.dataSource.register(GeneratorSource)
    return spark


async def _load(url: str, stream: str, rows: int, size: int, allow_direct: bool, replicas: int = 1) -> None:
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=["bench.>"], allow_direct=allow_direct, num_replicas=replicas)
    payload = b"x" * size
    for i in range(rows):
        await nc.publish(f"bench.{i % 8}", payload)
        if i % 2000 == 1999:
            await nc.flush()
            # Stay within what the store absorbs so plain publishes are not dropped as slow.
            while (await js.stream_info(stream)).state.messages < i - 20_000:
                await asyncio.sleep(0.01)
    await nc.flush()
    deadline = time.monotonic() + 120
    while (await js.stream_info(stream)).state.messages < rows:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{stream}: only {(await js.stream_info(stream)).state.messages} stored")
        await asyncio.sleep(0.1)
    await nc.close()


_NODE_HTTP = re.compile(r"node (\S+): http://(\S+) ")
_FETCH_COUNT = re.compile(r'^jetlog_read_requests_total\{kind="fetch"\} ([0-9.e+]+)$', re.M)


def _drain(stream: Any, nodes: dict[str, str]) -> None:
    """Read ``jetlog dev``'s stderr for ever (a full pipe would stall the nodes), noting each
    node's HTTP address from its start-up line."""
    for line in stream:
        m = _NODE_HTTP.search(line)
        if m:
            nodes[m.group(1)] = m.group(2)


def _fetches_served(nodes: dict[str, str]) -> dict[str, int]:
    """Bulk FETCH requests each node has answered (``jetlog_read_requests_total``)."""
    out = {}
    for name, addr in sorted(nodes.items()):
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
            m = _FETCH_COUNT.search(r.read().decode())
        out[name] = int(float(m.group(1))) if m else 0
    return out


async def _leader(url: str, stream: str) -> str:
    import nats

    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream)
        return info.cluster.leader if info.cluster and info.cluster.leader else "?"
    finally:
        await nc.close()


@contextlib.contextmanager
def _affinity(cpus: set[int] | None) -> Iterator[None]:
    """Run the block with this process pinned to ``cpus`` (``None``: unchanged); processes it
    starts keep that affinity. The previous affinity is restored after."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _split_cpus(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """``(servers, spark)`` CPU sets for ``--pin`` (``(None, None)`` without it)."""
    if not pin:
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    return {cpus[0]}, set(cpus[1:])


def _spark_cpu(exclude: set[int]) -> float:
    """CPU seconds (user + system) used so far by this process and its descendants (the Spark
    JVM and its Python workers), leaving out the subtrees rooted at ``exclude`` (the servers).
    Descendants that exited count through their reaper's children times."""
    parent: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        pid = int(entry)
        parent[pid] = int(fields[1])
        times[pid] = sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    me = os.getpid()
    total = 0.0
    for pid, t in times.items():
        p = pid
        while p not in (me, 0, 1) and p not in exclude:
            p = parent.get(p, 0)
        if p == me and pid not in exclude:
            total += t
    return total


def _run(spark: SparkSession, reader: Any, sink: str, tmp: str) -> float:
    t = time.perf_counter()
    if sink == "noop":
        reader.load().write.format("noop").mode("overwrite").save()
    else:
        path = os.path.join(tmp, "parquet")
        reader.load().write.mode("overwrite").parquet(path)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a markdown table (and write it, see ``--out``)."""
    ap = argparse.ArgumentParser(description="Spark source benchmark")
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this")
    ap.add_argument("--cluster", action="store_true", help="read an R3 stream of a 3-node jetlog dev cluster")
    ap.add_argument(
        "--pin", action="store_true", help="servers on the first CPU, Spark on the others (separate machines)"
    )
    args = ap.parse_args(argv)
    replicas = 3 if args.cluster else 1
    server_cpus, spark_cpus = _split_cpus(args.pin)

    from jetlog.embedded import NatsServer

    tmp = tempfile.mkdtemp(prefix="jetlog-spark-bench-")
    cmd = [sys.executable, "-m", "jetlog", "dev", "--port", "0", "--data-dir", os.path.join(tmp, "dev")]
    if args.cluster:
        cmd += ["--nodes", "3"]
    with _affinity(server_cpus):
        dev = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    nodes: dict[str, str] = {}
    assert dev.stderr is not None
    threading.Thread(target=_drain, args=(dev.stderr, nodes), daemon=True).start()
    nats_js = NatsServer(jetstream=True, leafnode=False, store_dir=os.path.join(tmp, "js"))
    loop = asyncio.new_event_loop()
    results: dict[str, list[float]] = {}
    cpu_us: dict[str, list[float]] = {}  # Spark's CPU (driver, JVM, Python workers) per row
    served: dict[str, int] = {}
    leader = ""
    try:
        assert dev.stdout is not None
        line = dev.stdout.readline().strip()
        if not line.startswith("ready "):
            raise RuntimeError(f"jetlog dev did not start: {line!r}")
        jl_url = line.split(" ", 1)[1]
        print(f"loading {args.rows} x {args.size} B (R{replicas})", file=sys.stderr)
        loop.run_until_complete(_load(jl_url, "BENCH", args.rows, args.size, True, replicas))
        if not args.cluster:
            with _affinity(server_cpus):
                loop.run_until_complete(nats_js.start())
            loop.run_until_complete(_load(nats_js.url, "BENCH", args.rows, args.size, True))
        with _affinity(spark_cpus):
            spark = _spark()
        if spark_cpus is not None:
            os.sched_setaffinity(0, spark_cpus)  # the driver's own work is Spark's too
        # What is not Spark's CPU: the jetlog dev tree (nodes, their nats-server) and nats-server -js.
        servers = {dev.pid} | ({nats_js.proc.pid} if nats_js.proc is not None else set())

        def src(url: str, fetch: str, fmt: str = "jlr1") -> Any:
            return (
                spark.read.format("jetlog")
                .option("servers", url)
                .option("streams", "BENCH")
                .option("minPartitions", "2")
                .option("fetch", fetch)
                .option("fetchFormat", fmt)
            )

        def gen() -> Any:
            return (
                spark.read.format("jetlog_bench_generator")
                .option("rows", str(args.rows))
                .option("size", str(args.size))
            )

        cases = {
            "generator → noop": (gen, "noop"),
            "jetlog bulk → noop": (lambda: src(jl_url, "bulk"), "noop"),
            "jetlog bulk, JLC1 frames → noop": (lambda: src(jl_url, "bulk", "jlc1"), "noop"),
            "generator → parquet": (gen, "parquet"),
            "jetlog bulk → parquet": (lambda: src(jl_url, "bulk"), "parquet"),
            "jetlog direct → noop": (lambda: src(jl_url, "direct"), "noop"),
            "nats-server direct → noop": (lambda: src(nats_js.url, "direct"), "noop"),
        }
        if args.cluster:
            cases = {
                k.replace("jetlog bulk", "jetlog R3 bulk"): v
                for k, v in cases.items()
                if k.startswith("generator") or k in ("jetlog bulk → noop", "jetlog bulk → parquet")
            }
        if args.only:
            cases = {k: v for k, v in cases.items() if args.only in k or k.startswith("generator")}
        for make, sink in cases.values():  # warm-up: workers, planner, first-query costs
            _run(
                spark,
                make().option("endingOffsets", '{"BENCH": 2001}') if make is not gen else make(),
                sink,
                tmp,
            )
        for r in range(args.rounds):
            order = list(cases.items())
            if r % 2:
                order.reverse()
            for name, (make, sink) in order:
                cpu0 = _spark_cpu(servers)
                dt = _run(spark, make(), sink, tmp)
                cpu_us.setdefault(name, []).append((_spark_cpu(servers) - cpu0) / args.rows * 1e6)
                results.setdefault(name, []).append(args.rows / dt)
                print(f"round {r + 1} {name:28} {args.rows / dt:>12,.0f} rows/s", file=sys.stderr, flush=True)
        spark.stop()
        if args.cluster:
            served = _fetches_served(nodes)
            leader = loop.run_until_complete(_leader(jl_url, "BENCH"))
    finally:
        dev.terminate()
        try:
            dev.wait(30)
        except subprocess.TimeoutExpired:
            dev.kill()
        loop.run_until_complete(nats_js.stop())
        loop.close()
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in results.items()}
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = (
        "an R3 stream of a 3-node `jetlog dev --nodes 3` cluster" if args.cluster else "one `jetlog dev` node"
    )
    pinned = (
        f" Pinned: servers on CPU {sorted(server_cpus)}, Spark on CPU {sorted(spark_cpus)} (`--pin`)."
        if server_cpus is not None and spark_cpus is not None
        else ""
    )
    lines = [
        "### On an R3 stream (`python -m jetlog.spark.bench --cluster`)"
        if args.cluster
        else "## Spark source (`make bench-spark`)",
        "",
        f"Run: {now}; {args.rows:,} rows x {args.size} B read from {where}; local[2], 2 read tasks, "
        f"{args.rounds} rounds (alternating order), medians; wall time of a bounded read of the whole stream."
        + pinned
        + " Spark CPU: user + system time of the driver, the JVM and its Python workers per row read "
        "(the servers' processes left out): what reading costs Spark, whatever the two share.",
        "",
        "| case | rows/s | / generator (same sink) | Spark CPU µs/row | generator's / this |",
        "|---|---|---|---|---|",
    ]
    cpu = {k: statistics.median(v) for k, v in cpu_us.items()}
    for name, v in med.items():
        sink = name.split("→ ")[1]
        base = med.get(f"generator → {sink}", 0.0)
        cbase = cpu.get(f"generator → {sink}", 0.0)
        rate = f"{v / base:.2f}" if base else "–"
        c = cpu.get(name, 0.0)
        lines.append(
            f"| {name} | {v:,.0f} | {rate} | {c:.2f} | {cbase / c:.2f} |"
            if c and cbase
            else f"| {name} | {v:,.0f} | {rate} | {c:.2f} | – |"
        )
    if served:
        total = sum(served.values()) or 1
        lines += [
            "",
            "Bulk FETCH requests answered, per node (warm-up included): "
            + ", ".join(f"{n}{' (leader)' if n == leader else ''} {c:,}" for n, c in served.items())
            + f"; followers answered {sum(c for n, c in served.items() if n != leader) / total:.0%}.",
        ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        if args.only or args.pin:
            # A partial or pinned run (e.g. the long read) is an addition, not the section's table.
            with open(args.out, "a") as f:
                f.write("\n" + report)
        else:
            write_marked(args.out, "spark-r3" if args.cluster else "spark", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
