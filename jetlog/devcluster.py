"""Local clusters of real ``jetlog serve`` processes: ``jetlog dev --nodes N``, the cluster
tests and the chaos checker all run nodes this way, so each can be killed (``kill -9``),
frozen (``SIGSTOP``) or restarted on its own.

A cluster directory holds ``cluster.json`` (node names, Raft and HTTP ports — Raft members are
identified by address, so a restarted node must get the same port) and ``cluster.secret``
(generated once, mode 0600, handed to the nodes through ``$JETLOG_CLUSTER_SECRET``, never on a
command line), and one data directory per node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Container
from dataclasses import dataclass, field

log = logging.getLogger("jetlog.dev")


def free_port(avoid: Container[int] = ()) -> int:
    """A TCP port that was free a moment ago on 127.0.0.1, not one of ``avoid`` (the kernel
    may hand out a port it just returned: two members must not get the same one)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in avoid:
            return port
    raise RuntimeError("no free TCP port outside the cluster's own")


def serve_argv(nats_url: str, leaf_url: str, data_dir: str, log_level: str, *extra: str) -> list[str]:
    """The command line of one ``jetlog serve`` child beside the given upstream (the dev
    cluster's nodes, the benchmark and fuzz targets)."""
    return [
        sys.executable,
        "-m",
        "jetlog",
        "serve",
        "--nats-url",
        nats_url,
        "--leafnode-url",
        leaf_url,
        "--data-dir",
        data_dir,
        "--log-level",
        log_level,
        *extra,
    ]


@dataclass
class Member:
    """One node of a local cluster."""

    name: str
    raft_port: int
    http_port: int
    data_dir: str
    proc: asyncio.subprocess.Process | None = None
    stderr_tail: list[str] = field(default_factory=list)
    _drain: asyncio.Task[None] | None = None

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class LocalCluster:
    """N ``jetlog serve`` processes beside given upstream URLs (see module docstring)."""

    def __init__(
        self,
        root: str,
        nodes: int,
        *,
        nats_url: str | list[str],
        leaf_url: str | list[str],
        cluster_name: str = "jetlog",
        extra_args: list[str] | None = None,
        log_level: str = "info",
        on_stderr: Callable[[str, str], None] | None = None,
        env: dict[str, str] | None = None,
        own_sessions: bool = True,
    ) -> None:
        self.root = os.path.abspath(root)
        self.n = nodes
        self.nats_urls = [nats_url] * nodes if isinstance(nats_url, str) else list(nats_url)
        self.leaf_urls = [leaf_url] * nodes if isinstance(leaf_url, str) else list(leaf_url)
        self.cluster_name = cluster_name
        self.extra_args = list(extra_args or [])
        self.log_level = log_level
        self.on_stderr = on_stderr
        self.env = dict(env or {})
        # Tests signal nodes one by one (own sessions); `jetlog dev` keeps them in its process
        # group so a Ctrl-C reaches every node as it reaches the command.
        self.own_sessions = own_sessions
        self.members: dict[str, Member] = {}
        self.secret = ""
        self._load_layout()

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` stderr lines of every node, each prefixed with its name (for
        failure messages)."""
        return "\n".join(f"[{m.name}] {ln}" for m in self.members.values() for ln in m.stderr_tail[-lines:])

    # ---- layout ------------------------------------------------------------------------------

    def _load_layout(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        layout_path = os.path.join(self.root, "cluster.json")
        secret_path = os.path.join(self.root, "cluster.secret")
        layout: dict[str, dict[str, int]] = {}
        if os.path.exists(layout_path):
            with open(layout_path) as f:
                layout = json.load(f).get("nodes", {})
        names = [f"n{i + 1}" for i in range(self.n)]
        changed = False
        for name in names:
            entry = layout.get(name)
            if entry is None:
                taken = {p for e in layout.values() for p in e.values()}
                raft = free_port(taken)
                entry = layout[name] = {"raft_port": raft, "http_port": free_port(taken | {raft})}
                changed = True
            self.members[name] = Member(
                name, entry["raft_port"], entry["http_port"], os.path.join(self.root, name)
            )
        if changed:
            self._save_layout()
        if os.path.exists(secret_path):
            with open(secret_path) as f:
                self.secret = f.read().strip()
        if not self.secret:
            self.secret = secrets.token_urlsafe(32)
            fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.secret + "\n")

    @property
    def peers(self) -> str:
        """The ``--cluster-peers`` value."""
        return ",".join(f"{m.name}@127.0.0.1:{m.raft_port}" for m in self.members.values())

    def argv(self, name: str) -> list[str]:
        """The command line of one node (what an operator would run to restart it)."""
        m = self.members[name]
        i = list(self.members).index(name)
        return serve_argv(
            self.nats_urls[i],
            self.leaf_urls[i],
            m.data_dir,
            self.log_level,
            "--name",
            name,
            "--cluster-name",
            self.cluster_name,
            "--cluster-peers",
            self.peers,
            "--http",
            m.http,
            *self.extra_args,
        )

    # ---- processes ---------------------------------------------------------------------------

    async def start(self, timeout: float = 60.0) -> None:
        """Start every node that is not running; wait until all print ``ready``."""
        await asyncio.gather(
            *(self.start_node(n, timeout) for n in self.members if not self.members[n].running)
        )

    async def start_node(self, name: str, timeout: float = 60.0, extra: list[str] | None = None) -> None:
        """Start one node and wait for its ``ready`` line.

        The monitoring port was free when the layout was made; since then the kernel may have
        handed it to another socket as an ephemeral port (an outgoing connection's). A node
        that exits because of that gets a new monitoring port (saved in the layout) and one
        more start, twice at most. The Raft port is every member's peer address and stays."""
        for attempt in range(3):
            try:
                await self._start_node_once(name, timeout, extra)
                return
            except RuntimeError as e:
                m = self.members[name]
                taken = f"('127.0.0.1', {m.http_port}): address already in use"
                if attempt == 2 or taken not in str(e):
                    raise
                ours = {p for o in self.members.values() for p in (o.raft_port, o.http_port)}
                old, m.http_port = m.http_port, free_port(ours)
                log.warning(
                    "node %s: monitoring port %d taken meanwhile; retrying on %d", name, old, m.http_port
                )
                self._save_layout()

    def _save_layout(self) -> None:
        layout_path = os.path.join(self.root, "cluster.json")
        nodes: dict[str, dict[str, int]] = {}
        if os.path.exists(layout_path):
            with open(layout_path) as f:
                nodes = json.load(f).get("nodes", {})
        nodes.update(
            {m.name: {"raft_port": m.raft_port, "http_port": m.http_port} for m in self.members.values()}
        )
        with open(layout_path + ".tmp", "w") as f:
            json.dump({"cluster": self.cluster_name, "nodes": nodes}, f, indent=1)
        os.replace(layout_path + ".tmp", layout_path)

    async def _start_node_once(self, name: str, timeout: float, extra: list[str] | None) -> None:
        m = self.members[name]
        env = {
            **os.environ,
            **self.env,
            "JETLOG_CLUSTER_SECRET": self.secret,
            "PYTHONUNBUFFERED": "1",
            "JETLOG_PARENT_PID": str(os.getpid()),
        }
        m.stderr_tail = []
        m.proc = await asyncio.create_subprocess_exec(
            *self.argv(name),
            *(extra or []),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=self.own_sessions,
        )
        m._drain = asyncio.create_task(self._drain_stderr(m))
        assert m.proc.stdout is not None
        try:
            line = await asyncio.wait_for(m.proc.stdout.readline(), timeout)
        except TimeoutError:
            await self.kill(name)
            raise RuntimeError(
                f"node {name} did not become ready:\n" + "\n".join(m.stderr_tail[-40:])
            ) from None
        if not line.startswith(b"ready "):
            await self.kill(name)
            raise RuntimeError(f"node {name} exited before ready:\n" + "\n".join(m.stderr_tail[-40:]))

    async def _drain_stderr(self, m: Member) -> None:
        assert m.proc is not None and m.proc.stderr is not None
        while True:
            raw = await m.proc.stderr.readline()
            if not raw:
                return
            line = raw.decode(errors="replace").rstrip()
            m.stderr_tail.append(line)
            if len(m.stderr_tail) > 400:
                del m.stderr_tail[:100]
            if self.on_stderr is not None:
                self.on_stderr(m.name, line)

    def signal(self, name: str, sig: int) -> None:
        """Send a signal to one node (SIGSTOP/SIGCONT to freeze and resume it)."""
        m = self.members[name]
        if m.proc is not None and m.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                m.proc.send_signal(sig)

    async def kill(self, name: str) -> None:
        """``kill -9`` one node (a crash)."""
        m = self.members[name]
        if m.proc is None:
            return
        self.signal(name, signal.SIGKILL)
        await m.proc.wait()
        await self._reap(m)

    async def stop_node(self, name: str, timeout: float = 15.0) -> int | None:
        """Stop one node cleanly (SIGTERM; SIGKILL after ``timeout``)."""
        m = self.members[name]
        if m.proc is None:
            return None
        if m.proc.returncode is None:
            self.signal(name, signal.SIGCONT)
            self.signal(name, signal.SIGTERM)
            try:
                await asyncio.wait_for(m.proc.wait(), timeout)
            except TimeoutError:
                self.signal(name, signal.SIGKILL)
                await m.proc.wait()
        code = m.proc.returncode
        await self._reap(m)
        return code

    async def _reap(self, m: Member) -> None:
        if m._drain is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(m._drain, 2)
            m._drain = None

    async def stop(self) -> None:
        """Stop every node."""
        await asyncio.gather(*(self.stop_node(n) for n in self.members))


async def run_dev(nodes: int, data_dir: str, client_port: int, log_level: str, extra_args: list[str]) -> int:
    """``jetlog dev --nodes N``: one local nats-server and N node processes, until a signal."""
    from jetlog.embedded import NatsServer, NatsServerError

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    srv = NatsServer(leafnode=True, client_port=client_port, own_process_group=True)
    try:
        await srv.start()
    except NatsServerError as e:
        log.error("%s", e)
        return 1

    def relay(name: str, line: str) -> None:
        print(f"[{name}] {line}", file=sys.stderr, flush=True)

    cluster = LocalCluster(
        data_dir,
        nodes,
        nats_url=srv.url,
        leaf_url=srv.leaf_url,
        extra_args=extra_args,
        log_level=log_level,
        on_stderr=relay,
        own_sessions=False,
    )
    try:
        starting = asyncio.ensure_future(cluster.start())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await starting
            return 0
        stopping.cancel()
        try:
            starting.result()
        except RuntimeError as e:
            log.error("%s", e)
            return 1
        print(f"ready {srv.url}", flush=True)
        log.info("data directory: %s", cluster.root)
        for m in cluster.members.values():
            log.info(
                "node %s: http://%s (status page; /metrics /jsz /varz /healthz /readyz), data %s",
                m.name,
                m.http,
                m.data_dir,
            )
        log.info("connect JetStream clients to %s (Ctrl-C to stop)", srv.url)
        await stop.wait()
        log.info("stopping")
        return 0
    finally:
        await cluster.stop()
        await srv.stop()
