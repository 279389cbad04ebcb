"""Benchmark targets: environments a benchmark case runs against.

* ``jetlog``: an upstream nats-server (JetStream off) plus a ``jetlog serve`` child process
  (fsync always, the default).
* ``jetlog-interval``: the same with ``storage.fsync = "interval"`` (the opt-in).
* ``nats``: ``nats-server -js`` with its defaults (it acknowledges before fsync; its default
  sync interval is 2 minutes).
* ``nats-sync``: ``nats-server -js`` with ``sync_interval: always`` (fsync per write), the
  durability jetlog gives by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from jetlog.embedded import NatsServer


@dataclass
class Env:
    """A running target: ``url`` for the client; ``stop()`` tears it down."""

    kind: str
    url: str
    srv: NatsServer
    proc: asyncio.subprocess.Process | None = None
    tmp: str = ""
    _drain: list[asyncio.Task[None]] = field(default_factory=list)

    async def stop(self) -> None:
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
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def start(kind: str) -> Env:
    """Start a fresh target of the given kind (fresh data directories)."""
    tmp = tempfile.mkdtemp(prefix=f"jetlog-bench-{kind}-")
    if kind in ("nats", "nats-sync"):
        sync = "\n  sync_interval: always" if kind == "nats-sync" else ""
        conf = f'jetstream {{\n  store_dir: "{tmp}/js"{sync}\n}}'
        srv = NatsServer(jetstream=False, leafnode=False, extra_conf=conf)
        await srv.start()
        return Env(kind, srv.url, srv, tmp=tmp)
    srv = NatsServer(leafnode=True)
    await srv.start()
    args = [
        sys.executable,
        "-m",
        "jetlog",
        "serve",
        "--nats-url",
        srv.url,
        "--leafnode-url",
        srv.leaf_url,
        "--data-dir",
        os.path.join(tmp, "data"),
        "--log-level",
        "warning",
    ]
    env = dict(os.environ)
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
