"""The ``jetlog`` command: ``serve``, ``dev``, ``status``, ``bench``.

stdout carries only machine-readable lines (``ready nats://…``); logs go to stderr.
Exit status: 0 clean stop, 1 runtime failure (upstream unreachable, …), 2 bad configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _run(main: Callable[[], Coroutine[Any, Any, int]], loop_kind: str) -> int:
    if loop_kind in ("auto", "uvloop"):
        try:
            import uvloop

            return uvloop.run(main())
        except ImportError:
            if loop_kind == "uvloop":
                raise
    return asyncio.run(main())


async def _serve_until_signal(node: Any, on_ready: Callable[[], None] | None = None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await node.start()
    except JetlogError as e:
        log.error("cannot start: %s", e)
        with contextlib.suppress(JetlogError):
            await node.stop()
        return 1
    if on_ready is not None:
        on_ready()
    await stop.wait()
    log.info("stopping")
    await node.stop()
    return 0


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "upstream.url": args.nats_url,
        "upstream.leafnode_url": args.leafnode_url,
        "data_dir": args.data_dir,
        "name": args.name,
        "http.listen": args.http,
        "logging.level": args.log_level,
    }


def cmd_serve(args: argparse.Namespace) -> int:
    """``jetlog serve``: run one node beside an existing nats-server."""
    try:
        cfg = load_config(args.config, _overrides(args))
    except ConfigError as e:
        print(f"jetlog: {e}", file=sys.stderr)
        return 2
    _setup_logging(cfg.logging.level)
    from jetlog.node import Node

    node = Node(cfg)

    def ready() -> None:
        print(f"ready {node.url}", flush=True)

    return _run(lambda: _serve_until_signal(node, ready), args.loop)


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

    async def main() -> int:
        from jetlog.embedded import NatsServer, NatsServerError
        from jetlog.node import Node

        srv = NatsServer(leafnode=True, client_port=port)
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
            try:
                cfg = load_config(args.config, overrides)
            except ConfigError as e:
                print(f"jetlog: {e}", file=sys.stderr)
                return 2
            node = Node(cfg)
            log.info("data directory: %s", os.path.abspath(cfg.data_dir))

            def ready() -> None:
                print(f"ready {srv.url}", flush=True)
                log.info("connect JetStream clients to %s (Ctrl-C to stop)", srv.url)

            return await _serve_until_signal(node, ready)
        finally:
            await srv.stop()

    return _run(main, args.loop)


def cmd_status(args: argparse.Namespace) -> int:
    """``jetlog status``: account and stream summary through the JetStream API."""

    async def main() -> int:
        import nats

        try:
            nc = await nats.connect(args.nats_url, connect_timeout=3, max_reconnect_attempts=0)
        except (OSError, TimeoutError, nats.errors.Error) as e:
            print(f"jetlog: cannot connect to {args.nats_url}: {e}", file=sys.stderr)
            return 1
        try:
            js = nc.jetstream()
            info = await js.account_info()
            print(f"streams: {info.streams}  consumers: {info.consumers}  storage: {info.storage} B")
            for s in await js.streams_info():
                st = s.state
                print(
                    f"  {s.config.name}: {st.messages} msgs, {st.bytes} B, "
                    f"seq {st.first_seq}..{st.last_seq}, subjects {s.config.subjects}"
                )
        except nats.errors.Error as e:
            print(f"jetlog: {e}", file=sys.stderr)
            return 1
        finally:
            await nc.close()
        return 0

    return asyncio.run(main())


def cmd_bench(args: argparse.Namespace) -> int:
    """``jetlog bench``: jetlog and nats-server -js side by side."""
    _setup_logging(args.log_level or "warning")
    from jetlog.bench.runner import run_bench

    return asyncio.run(run_bench(args))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    p = argparse.ArgumentParser(prog="jetlog", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--config", help="TOML configuration file")
        sp.add_argument("--nats-url", help="upstream client URL (upstream.url)")
        sp.add_argument("--leafnode-url", help="upstream leafnode URL (upstream.leafnode_url)")
        sp.add_argument("--data-dir", help="data directory (data_dir)")
        sp.add_argument("--name", help="node name (name)")
        sp.add_argument("--http", help="HTTP listen address for /metrics /healthz /readyz")
        sp.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
        sp.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto")

    s = sub.add_parser("serve", help="run a node beside an existing nats-server")
    common(s)
    s.set_defaults(fn=cmd_serve)
    d = sub.add_parser("dev", help="embedded default: local nats-server + one node")
    common(d)
    d.add_argument("--port", type=int, default=4222, help="client port (a free one if busy)")
    d.set_defaults(fn=cmd_dev)
    st = sub.add_parser("status", help="show account and streams")
    st.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    st.set_defaults(fn=cmd_status)
    b = sub.add_parser("bench", help="benchmark jetlog against nats-server -js")
    b.add_argument("--out", default="", help="write the markdown report here")
    b.add_argument("--quick", action="store_true", help="short runs (smoke)")
    b.add_argument("--rounds", type=int, default=3, help="alternating A/B rounds per case")
    b.add_argument("--only", default="", help="comma-separated case names")
    b.add_argument("--full", action="store_true", help="also fsync=interval jetlog and sync=always nats")
    b.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    b.set_defaults(fn=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``jetlog`` console script."""
    args = build_parser().parse_args(argv)
    raise SystemExit(args.fn(args))
