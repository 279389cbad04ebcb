"""Benchmark targets: environments a benchmark case runs against.

* ``jetlog``: an upstream nats-server (JetStream off) plus a ``jetlog serve`` child process
  (fsync always, the default).
* ``jetlog-interval``: the same with ``storage.fsync = "interval"`` (the opt-in).
* ``nats``: ``nats-server -js`` with its defaults (it acknowledges before fsync; its default
  sync interval is 2 minutes).
* ``nats-sync``: ``nats-server -js`` with ``sync_interval: always`` (fsync per write), the
  durability jetlog gives by default.
* ``jetlog-r3``: one nats-server and a 3-node jetlog cluster (three processes), streams R3
  (``--default-replicas 3``).
* ``nats-r3``: a 3-server ``nats-server -js`` cluster (routes), streams R3; the client connects
  to one of the servers.
* ``nats-r3-sync``: the same cluster with ``sync_interval: always`` on every server, the
  durability a jetlog R3 PubAck gives (fsynced on every in-sync replica).
* ``floor``: a plain nats-server and the stand-in of :mod:`jetlog.bench.floor` behind it (the
  least any process answering JetStream from behind the relay can cost; publish and get cases
  only, see ``floor.supports``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import nats

from jetlog.devcluster import LocalCluster, free_port, serve_argv
from jetlog.embedded import NatsServer


def nats_cluster(tmp: str, n: int = 3, sync_always: bool = False) -> list[NatsServer]:
    """``n`` nats-server -js processes forming one cluster (not started). Fixed ports so a
    server can be restarted into the same cluster. ``sync_always``: every server fsyncs each
    write (``sync_interval: always``) instead of every 2 minutes."""
    taken: list[int] = []
    for _ in range(2 * n):  # route ports, then client ports, all distinct
        taken.append(free_port(taken))
    ports, clients = taken[:n], taken[n:]
    routes = ",".join(f"nats-route://127.0.0.1:{p}" for p in ports)
    return [
        NatsServer(
            jetstream=True,
            leafnode=False,
            store_dir=os.path.join(tmp, f"js{i}"),
            name=f"s{i}",
            client_port=clients[i],
            extra_conf=f"cluster {{ name: C, listen: 127.0.0.1:{p}, routes: [{routes}] }}",
            jetstream_conf="sync_interval: always" if sync_always else "",
        )
        for i, p in enumerate(ports)
    ]


@dataclass
class Env:
    """A running target: ``url`` for the client; ``stop()`` tears it down."""

    kind: str
    url: str
    srv: NatsServer
    proc: asyncio.subprocess.Process | None = None
    tmp: str = ""
    _drain: list[asyncio.Task[None]] = field(default_factory=list)
    extra: Any = None
    """Cluster targets: the ``LocalCluster`` (jetlog-r3) or the other servers (nats-r3)."""
    replicas: int = 1

    def pids(self) -> list[int]:
        """Every server-side process: the nats-server(s) and the jetlog node(s) (their fsync
        helpers are found as descendants)."""
        out = [p.pid for p in (self.srv.proc, self.proc) if p is not None]
        if isinstance(self.extra, LocalCluster):
            out += [m.proc.pid for m in self.extra.members.values() if m.proc is not None]
        elif isinstance(self.extra, list):
            out += [s.proc.pid for s in self.extra if s.proc is not None]
        return out

    def cpu_seconds(self) -> float:
        """Server-side CPU seconds used so far."""
        from jetlog.bench.cpu import tree_seconds

        return tree_seconds(self.pids())

    async def stop(self, keep: bool = False) -> None:
        """Stop every process; remove the data directories unless ``keep``."""
        if isinstance(self.extra, LocalCluster):
            await self.extra.stop()
        elif isinstance(self.extra, list):
            for s in self.extra:
                await s.stop()
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        for t in self._drain:
            t.cancel()
        await self.srv.stop()
        if self.tmp and not keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def r3_ready(url: str, timeout: float) -> None:
    """Wait until the nats-server cluster has a meta leader and can place an R3 stream: its
    routes form and its Raft elects a few seconds after the processes are up, and a case that
    starts earlier times out on its first ``add_stream``."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=2)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            try:
                await js.add_stream(name="BENCHPROBE", subjects=["benchprobe"], num_replicas=3)
                await js.delete_stream("BENCHPROBE")
                return
            except nats.errors.Error as e:
                if asyncio.get_running_loop().time() > deadline:
                    raise RuntimeError(f"nats-server cluster not ready after {timeout:.0f}s: {e!r}") from e
                await asyncio.sleep(0.25)
    finally:
        await nc.close()


async def start(kind: str, tmp: str | None = None) -> Env:
    """Start a target of the given kind: on fresh data directories, or on those under ``tmp``
    (left by ``Env.stop(keep=True)``; single-node kinds)."""
    tmp = tmp or tempfile.mkdtemp(prefix=f"jetlog-bench-{kind}-")
    if kind == "jetlog-r3":
        srv = NatsServer(leafnode=True)
        await srv.start()
        cluster = LocalCluster(
            os.path.join(tmp, "c"),
            3,
            nats_url=srv.url,
            leaf_url=srv.leaf_url,
            extra_args=["--default-replicas", "3"],
            log_level="warning",
        )
        await cluster.start(timeout=120)
        return Env(kind, srv.url, srv, tmp=tmp, extra=cluster, replicas=3)
    if kind in ("nats-r3", "nats-r3-sync"):
        servers = nats_cluster(tmp, sync_always=kind == "nats-r3-sync")
        await asyncio.gather(*(s.start() for s in servers))
        r3 = Env(kind, servers[0].url, servers[0], tmp=tmp, extra=servers[1:], replicas=3)
        try:
            await r3_ready(r3.url, 60)
        except BaseException:
            await r3.stop()
            raise
        return r3
    if kind in ("nats", "nats-sync"):
        srv = NatsServer(
            jetstream=True,
            leafnode=False,
            store_dir=f"{tmp}/js",
            jetstream_conf="sync_interval: always" if kind == "nats-sync" else "",
        )
        await srv.start()
        return Env(kind, srv.url, srv, tmp=tmp)
    if kind == "floor":
        return await _start_floor(tmp)
    srv = NatsServer(leafnode=True)
    await srv.start()
    args = serve_argv(srv.url, srv.leaf_url, os.path.join(tmp, "data"), "warning")
    env = dict(os.environ)
    env["JETLOG_PARENT_PID"] = str(os.getpid())  # a killed benchmark leaves no node behind
    if kind == "jetlog-interval":
        cfg = os.path.join(tmp, "jetlog.toml")
        with open(cfg, "w") as f:
            f.write('[storage]\nfsync = "interval"\nsync_interval = 1.0\n')
        args += ["--config", cfg]
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if not line.startswith(b"ready "):
        err = await proc.stderr.read()
        await srv.stop()
        raise RuntimeError(f"jetlog did not start: {line!r} {err.decode()[-2000:]}")
    e = Env(kind, srv.url, srv, proc=proc, tmp=tmp)
    e._drain = [asyncio.create_task(_drain(proc.stdout)), asyncio.create_task(_drain(proc.stderr))]
    return e


async def _start_floor(tmp: str) -> Env:
    """A plain nats-server (JetStream off) and the floor stand-in connected to it."""
    srv = NatsServer(leafnode=False)
    await srv.start()
    u = urlparse(srv.url)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jetlog.bench.floor",
        u.hostname or "127.0.0.1",
        str(u.port),
        tmp,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
    except TimeoutError:
        line = b""
    if not line.startswith(b"ready"):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        err = await proc.stderr.read()
        await srv.stop()
        raise RuntimeError(f"the floor stand-in did not start: {line!r} {err.decode()[-2000:]}")
    e = Env("floor", srv.url, srv, proc=proc, tmp=tmp)
    e._drain = [asyncio.create_task(_drain(proc.stdout)), asyncio.create_task(_drain(proc.stderr))]
    return e
