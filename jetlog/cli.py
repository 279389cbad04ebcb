"""The ``jetlog`` command: ``serve``, ``dev``, ``status``, ``bench``, ``fuzz``.

stdout carries only machine-readable lines (``ready nats://…``) and reports; logs go to stderr.
Exit status: 0 clean stop, 1 runtime failure (upstream unreachable, …), 2 bad configuration.

Stopping: SIGINT and SIGTERM stop a node cleanly, also when they reach the whole process group
(Ctrl-C in a terminal, ``kill -- -PGID``): ``jetlog dev`` runs its nats-server in a process
group of its own (stopped after the node, so the node's links never see it vanish), and the
fsync helper ignores both signals (it exits when the node closes its socket).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from jetlog.config import load_config
from jetlog.errors import ConfigError, JetlogError

log = logging.getLogger("jetlog")


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``,
    and ``exception`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        import datetime

        import msgspec

        out: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return msgspec.json.encode(out).decode()


def _setup_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])


def _run(main: Callable[[], Coroutine[Any, Any, int]], loop_kind: str) -> int:
    if loop_kind in ("auto", "uvloop"):
        try:
            import uvloop

            return uvloop.run(main())
        except ImportError:
            if loop_kind == "uvloop":
                raise
    return asyncio.run(main())


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT/SIGTERM (installed at once: a signal during start-up must not
    raise KeyboardInterrupt in the middle of it)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _serve_until_signal(
    node: Any, on_ready: Callable[[], None] | None = None, stop: asyncio.Event | None = None
) -> int:
    if stop is None:
        stop = _stop_on_signals()
    try:
        await node.start()
    except JetlogError as e:
        log.error("cannot start: %s", e)
        with contextlib.suppress(JetlogError):
            await node.stop()
        return 1
    except BaseException:
        # Anything else (a bug, a cancellation) still stops what the start had started before
        # it propagates: left to the loop's shutdown, a cluster node's tasks were cancelled
        # without their roles being stopped, and the process hung there instead of exiting.
        with contextlib.suppress(Exception):
            await node.stop()
        raise
    finally:
        _gc_serve()  # after ``_gc_quiet_start``
    if on_ready is not None and not stop.is_set():
        on_ready()
    await stop.wait()
    log.info("stopping")
    await node.stop()
    return 0


def _gc_quiet_start() -> None:
    """No cyclic garbage collection until the node is started (``_serve_until_signal``
    enables it): the imports and the opening of every stream allocate hundreds of thousands
    of objects, almost none of them garbage, and the collector's passes over them were ~6 %
    of a restart's CPU. What a start leaves in cycles is collected once it is enabled."""
    gc.disable()


GC_YOUNG = 20_000
"""Net allocations between two collections of the youngest generation while the node serves
(CPython's default: 700). The node's own objects hold few reference cycles, and what a busy
node allocates lives for a message or a request, long enough to be caught in a young collection
and promoted: 200 R3 streams under pipelined publishes made 470 young collections per node in
15 s that freed nothing and cost ~0.5 s of its ~8 s of CPU (~7 % in ``perf``); with 20,000, 3-4
collections of ~10 ms each. The cycles a node does leave (a traceback, a cancelled task's
future) are still collected, at most this many allocations later."""


def _gc_serve() -> None:
    """Cyclic garbage collection for a serving node: on again (``_gc_quiet_start`` held it off
    during the start), with the youngest generation collected every ``GC_YOUNG`` allocations."""
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    gc.enable()


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "upstream.url": args.nats_url,
        "upstream.leafnode_url": args.leafnode_url,
        "data_dir": args.data_dir,
        "name": args.name,
        "http.listen": args.http,
        "logging.level": args.log_level,
        "logging.format": getattr(args, "log_format", None),
        "cluster.name": getattr(args, "cluster_name", None),
        "cluster.peers": _split(getattr(args, "cluster_peers", None)),
        "cluster.default_replicas": getattr(args, "default_replicas", None),
        "cluster.rejoin": True if getattr(args, "rejoin", False) else None,
    }


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def cmd_serve(args: argparse.Namespace) -> int:
    """``jetlog serve``: run one node beside an existing nats-server."""
    try:
        cfg = load_config(args.config, _overrides(args))
    except ConfigError as e:
        print(f"jetlog: {e}", file=sys.stderr)
        return 2
    _setup_logging(cfg.logging.level, cfg.logging.format)
    _die_with_parent()
    _gc_quiet_start()
    from jetlog.node import Node

    gc.freeze()  # the modules just imported live as long as the process: never scan them again
    node = Node(cfg)

    def ready() -> None:
        print(f"ready {node.url}", flush=True)

    return _run(lambda: _serve_until_signal(node, ready), args.loop)


def _die_with_parent() -> None:
    """Nodes started by ``jetlog dev``, the tests or the chaos runner stop (SIGTERM) when the
    process that started them dies, even by ``kill -9``: nothing outlives its owner.
    ``$JETLOG_PARENT_PID`` names that owner (Linux only; elsewhere this does nothing)."""
    parent = os.environ.get("JETLOG_PARENT_PID", "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):
        raise SystemExit(0)  # the owner is already gone


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cmd_dev(args: argparse.Namespace) -> int:
    """``jetlog dev``: a local nats-server (JetStream off, leafnode on) plus a node."""
    _setup_logging(args.log_level or "info")
    port = args.port if args.port and _port_free(args.port) else -1
    if args.port and port == -1:
        log.warning("port %d is busy; using a free port", args.port)
    if args.nodes > 1:
        from jetlog.devcluster import run_dev

        extra = ["--default-replicas", str(args.default_replicas)] if args.default_replicas else []
        data = args.data_dir or os.path.join(".", "data", f"dev-{args.nodes}")
        return _run(lambda: run_dev(args.nodes, data, port, args.log_level or "info", extra), args.loop)

    async def main() -> int:
        from jetlog.embedded import NatsServer, NatsServerError
        from jetlog.node import Node

        stop = _stop_on_signals()
        # Its own process group: Ctrl-C reaches jetlog only, which stops the node first and
        # then the server (a server gone first makes both links report a lost connection).
        srv = NatsServer(leafnode=True, client_port=port, own_process_group=True)
        try:
            await srv.start()
        except NatsServerError as e:
            log.error("%s", e)
            return 1
        try:
            overrides = _overrides(args)
            overrides["upstream.url"] = srv.url
            overrides["upstream.leafnode_url"] = srv.leaf_url
            overrides["data_dir"] = args.data_dir or os.path.join(".", "data", "dev")
            if not args.http:
                # The status page and /metrics come with the embedded default (8222, as
                # nats-server's monitoring port, when free).
                overrides["http.listen"] = "127.0.0.1:8222" if _port_free(8222) else "127.0.0.1:0"
            try:
                cfg = load_config(args.config, overrides)
            except ConfigError as e:
                print(f"jetlog: {e}", file=sys.stderr)
                return 2
            node = Node(cfg)
            log.info("data directory: %s", os.path.abspath(cfg.data_dir))

            def ready() -> None:
                print(f"ready {srv.url}", flush=True)
                if node.http is not None:
                    log.info(
                        "node %s: http://%s:%d (status page; /metrics /jsz /varz /healthz /readyz)",
                        cfg.name,
                        node.http.host,
                        node.http.port,
                    )
                log.info("connect JetStream clients to %s (Ctrl-C to stop)", srv.url)

            return await _serve_until_signal(node, ready, stop)
        finally:
            await srv.stop()

    return _run(main, args.loop)


def cmd_status(args: argparse.Namespace) -> int:
    """``jetlog status``: account, cluster and stream summary through the JetStream API.

    Fails fast and plainly: an unreachable or silent server gives one line on stderr and exit
    status 1 within ``--timeout`` (nats-py alone would retry and print tracebacks)."""
    from jetlog import admin

    return admin.run(args, admin.status)


def _why(e: BaseException) -> str:
    from jetlog.admin import why

    return why(e)


def cmd_fuzz(args: argparse.Namespace) -> int:
    """``jetlog fuzz``: hostile API requests against jetlog, compared with nats-server."""
    _setup_logging(args.log_level or "warning")
    from jetlog.chaos.fuzz import render, run_fuzz, verdict
    from jetlog.errors import JetlogError as _Err

    def progress(target: str, i: int) -> None:
        if args.progress and i % 1000 == 0:
            print(f"jetlog fuzz: {target}: {i}/{args.requests}", file=sys.stderr, flush=True)

    try:
        report = asyncio.run(
            run_fuzz(
                args.seed,
                args.requests,
                url=args.url,
                nats_url=args.nats_url,
                compare_nats=not args.no_compare,
                answer_timeout=args.answer_timeout,
                oversize_reads=args.oversize_reads,
                progress=progress,
            )
        )
    except _Err as e:
        print(f"jetlog fuzz: {e}", file=sys.stderr)
        return 1
    text = render(report)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 1 if verdict(report) else 0


def cmd_bench(args: argparse.Namespace) -> int:
    """``jetlog bench``: jetlog and nats-server -js side by side."""
    _setup_logging(args.log_level or "warning")
    from jetlog.bench.runner import run_bench

    return asyncio.run(run_bench(args))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jetlog")
    except PackageNotFoundError:  # a source checkout that was never installed
        from jetlog import __version__

        return __version__


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked: reading the installed distributions' metadata
    costs ~20 ms, on every node start otherwise."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, help=help, default=argparse.SUPPRESS)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"jetlog {_version()}")
        parser.exit()


LOG_LEVELS = ["debug", "info", "warning", "error"]


def cmd_chaos(args: argparse.Namespace) -> int:
    """``jetlog chaos``: seeded fault schedules against a local cluster, checked (docs/chaos.md)."""
    _setup_logging(args.log_level or "warning")
    from jetlog.chaos.runner import options_from_args, run_chaos

    try:
        opts = options_from_args(args)
    except ValueError as e:
        print(f"jetlog: {e}", file=sys.stderr)
        return 2
    return asyncio.run(run_chaos(opts))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    p = argparse.ArgumentParser(prog="jetlog", description=__doc__.splitlines()[0])
    p.add_argument("--version", action=_VersionAction, help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--config", help="TOML configuration file")
        sp.add_argument("--nats-url", help="upstream client URL (upstream.url)")
        sp.add_argument("--leafnode-url", help="upstream leafnode URL (upstream.leafnode_url)")
        sp.add_argument("--data-dir", help="data directory (data_dir)")
        sp.add_argument("--name", help="node name (name)")
        sp.add_argument("--http", help="HTTP listen address for /metrics /healthz /readyz")
        sp.add_argument("--log-level", choices=LOG_LEVELS, help="log level on stderr (logging.level)")
        sp.add_argument(
            "--log-format",
            choices=["text", "json"],
            help="log lines for people or JSON lines (logging.format)",
        )
        sp.add_argument(
            "--loop",
            choices=["auto", "uvloop", "asyncio"],
            default="auto",
            help="event loop: uvloop when installed (auto), or force one",
        )
        sp.add_argument(
            "--cluster-peers",
            help="every cluster member as name@host:raft_port, comma separated (cluster.peers); "
            "the secret comes from cluster.secret_file or $JETLOG_CLUSTER_SECRET",
        )
        sp.add_argument("--cluster-name", help="cluster name (cluster.name)")
        sp.add_argument(
            "--rejoin",
            action="store_true",
            help="start although this node's Raft state was lost (its IDENTITY file remains): take "
            "the metadata from the other members; only while they are healthy (cluster.rejoin)",
        )
        sp.add_argument(
            "--default-replicas",
            type=int,
            help="replicas for streams that do not set num_replicas (cluster.default_replicas)",
        )

    s = sub.add_parser("serve", help="run a node beside an existing nats-server")
    common(s)
    s.set_defaults(fn=cmd_serve)
    d = sub.add_parser("dev", help="embedded default: local nats-server + one node")
    common(d)
    d.add_argument("--port", type=int, default=4222, help="client port (a free one if busy)")
    d.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="number of jetlog nodes; more than 1 starts a cluster of that many processes",
    )
    d.set_defaults(fn=cmd_dev)
    st = sub.add_parser("status", help="show account and streams")
    st.add_argument("--nats-url", default="nats://127.0.0.1:4222", help="server to ask (default %(default)s)")
    st.add_argument(
        "--timeout",
        type=float,
        default=3.0,
        help="seconds to connect and for each answer (default %(default)s)",
    )
    st.add_argument("--json", action="store_true", help="print account, cluster and stream infos as JSON")
    st.set_defaults(fn=cmd_status)
    b = sub.add_parser("bench", help="benchmark jetlog against nats-server -js")
    b.add_argument("--out", default="", help="write the markdown report here")
    b.add_argument("--quick", action="store_true", help="short runs (smoke)")
    b.add_argument("--rounds", type=int, default=3, help="alternating A/B rounds per case")
    b.add_argument("--only", default="", help="comma-separated case names")
    b.add_argument(
        "--full",
        action="store_true",
        help="also fsync=interval jetlog and sync=always nats (with --cluster: a sync=always nats R3 cluster)",
    )
    b.add_argument(
        "--cluster",
        action="store_true",
        help="3-node jetlog (R3) vs a 3-server nats-server -js cluster (R3) and single-node jetlog (R1), "
        "plus failover time and follower catch-up",
    )
    b.add_argument(
        "--floor",
        action="store_true",
        help="also a minimal stand-in behind a plain nats-server (the relay's bound; publish and get cases)",
    )
    b.add_argument(
        "--failover-reps", type=int, default=10, help="kill -9 repetitions per target for --cluster"
    )
    b.add_argument(
        "--scale",
        action="store_true",
        help="many streams, many consumers and restart with a large store, jetlog vs nats-server -js",
    )
    b.add_argument("--streams", type=int, default=1000, help="--scale: streams, one consumer each")
    b.add_argument("--consumers", type=int, default=10000, help="--scale: consumers on one stream")
    b.add_argument(
        "--restart-msgs",
        type=int,
        default=10_000_000,
        help="--scale: messages stored before the restart is timed (0: skip the restart)",
    )
    b.add_argument("--restart-streams", type=int, default=100, help="--scale: streams they are spread over")
    b.add_argument("--log-level", choices=LOG_LEVELS, help="log level on stderr (default warning)")
    b.set_defaults(fn=cmd_bench)
    f = sub.add_parser("fuzz", help="hostile JetStream API requests, compared with nats-server -js")
    f.add_argument("--requests", type=int, default=1000, help="number of requests (default %(default)s)")
    f.add_argument("--seed", type=int, default=1, help="seed of the request sequence (default %(default)s)")
    f.add_argument(
        "--url", default="", help="fuzz this server instead of an embedded nats-server + jetlog serve child"
    )
    f.add_argument("--nats-url", default="", help="reference nats-server -js (default: an embedded one)")
    f.add_argument("--no-compare", action="store_true", help="skip the run against nats-server -js")
    f.add_argument(
        "--answer-timeout",
        type=float,
        default=0.5,
        help="seconds a request waits before it counts as unanswered (replies up to 3 s later "
        "count as late answers; default %(default)s)",
    )
    f.add_argument(
        "--oversize-reads",
        action="store_true",
        help="also read back max_payload messages (STREAM.MSG.GET/Direct Get replies above max_payload)",
    )
    f.add_argument("--out", default="", help="also write the report to this file")
    f.add_argument("--progress", action="store_true", help="print progress to stderr every 1000 requests")
    f.add_argument("--log-level", choices=LOG_LEVELS, help="log level on stderr (default warning)")
    f.set_defaults(fn=cmd_fuzz)

    ch = sub.add_parser(
        "chaos",
        help="run seeded fault schedules against a local cluster and check the history",
        description="Jepsen-style checker: a local nats-server and N jetlog processes per schedule, "
        "publishers and consumers under kill -9, power loss, SIGSTOP, NATS-link and Raft partitions; "
        "reports lost, duplicated, reordered, divergent, consumer and stuck anomalies. "
        "Exit status 1 if any anomaly was found.",
    )
    ch.add_argument("--schedules", type=int, default=10, help="number of schedules to run (default 10)")
    ch.add_argument("--seed", type=int, default=1, help="seed of the random schedules (default 1)")
    ch.add_argument(
        "--duration", type=float, default=10.0, help="seconds of faults per schedule (default 10)"
    )
    ch.add_argument(
        "--nodes", type=int, default=3, help="jetlog processes per cluster (at least 3; default 3)"
    )
    ch.add_argument(
        "--first",
        type=int,
        default=0,
        help="index of the first schedule; with --schedules 1 replays one schedule of a seed",
    )
    ch.add_argument(
        "--faults",
        default="",
        help="comma-separated fault kinds to draw from: kill,powerloss,stop,nats,raft (default all)",
    )
    ch.add_argument("--no-combos", action="store_true", help="one fault per step (no two faults at once)")
    ch.add_argument("--publishers", type=int, default=3, help="publisher clients (default 3)")
    ch.add_argument("--consumers", type=int, default=2, help="consumer workers on the durable (default 2)")
    ch.add_argument(
        "--ack",
        choices=["sync", "plain", "mixed"],
        default="mixed",
        help="consumer acks: AckSync, plain +ACK, or mixed (worker 0 AckSync) (default mixed)",
    )
    ch.add_argument("--workdir", default="", help="directory for the clusters (default: a temp dir)")
    ch.add_argument("--keep", action="store_true", help="keep every schedule's data and node logs")
    ch.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="runner log level")
    ch.set_defaults(fn=cmd_chaos)
    from jetlog import admin

    admin.add_parsers(sub)
    return p


def cmd_admin(args: argparse.Namespace) -> int:
    """``jetlog stream …`` / ``jetlog consumer …`` (``jetlog.admin``)."""
    from jetlog import admin

    return admin.run(args, args.admin)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``jetlog`` console script."""
    args = build_parser().parse_args(argv)
    fn = cmd_admin if getattr(args, "admin", None) is not None else args.fn
    raise SystemExit(fn(args))
