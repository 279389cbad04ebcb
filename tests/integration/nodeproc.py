"""Run ``jetlog serve`` as a real child process (for kill -9, SIGSTOP and restart tests)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import nats

from jetlog.devcluster import serve_argv
from jetlog.embedded import NatsServer


@dataclass
class NodeProcess:
    """One ``jetlog serve`` process beside ``srv``; ``start`` waits for its ``ready`` line."""

    srv: NatsServer
    data_dir: str
    extra_args: list[str] = field(default_factory=list)
    proc: asyncio.subprocess.Process | None = None
    stderr_lines: list[str] = field(default_factory=list)
    _drain: asyncio.Task[None] | None = None

    async def start(self, timeout: float = 30.0) -> str:
        args = serve_argv(self.srv.url, self.srv.leaf_url, self.data_dir, "info", *self.extra_args)
        self.proc = await asyncio.create_subprocess_exec(
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._drain = asyncio.create_task(self._read_stderr())
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            await self.kill()
            raise AssertionError(
                "jetlog did not become ready:\n" + "\n".join(self.stderr_lines[-40:])
            ) from None
        text = line.decode().strip()
        if not text.startswith("ready "):
            await self.kill()
            raise AssertionError(
                f"unexpected first stdout line {text!r}:\n" + "\n".join(self.stderr_lines[-40:])
            )
        return text.split(" ", 1)[1]

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            line = await self.proc.stderr.readline()
            if not line:
                return
            self.stderr_lines.append(line.decode(errors="replace").rstrip())

    async def kill(self) -> None:
        """SIGKILL (no chance to flush anything)."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        await self._stop_drain()

    async def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit status."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(self.proc.wait(), timeout)
        await self._stop_drain()
        return rc

    async def _stop_drain(self) -> None:
        if self._drain is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._drain, 5)
            self._drain = None


@contextlib.asynccontextmanager
async def node_and_client(data_dir: str) -> AsyncIterator[tuple[NodeProcess, nats.NATS]]:
    """A nats-server, one started jetlog process on ``data_dir`` and a client of it that
    reconnects across the node's restarts; the client is closed and the node stopped after."""
    async with NatsServer(leafnode=True) as srv:
        node = NodeProcess(srv, data_dir)
        nc = await nats.connect(await node.start(), max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        try:
            yield node, nc
        finally:
            await nc.close()
            await node.terminate()
