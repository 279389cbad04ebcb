"""Three ``metaraft_child`` processes on free loopback ports: start, query, signal, restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from typing import Any

NAMES = ["n1", "n2", "n3"]


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Child:
    """One member process; ``request`` is one JSON line out, one back (bounded)."""

    def __init__(
        self, name: str, members: dict[str, str], data: str, conf: dict[str, Any] | None, volatile: bool
    ):
        self.name, self.members, self.data, self.conf, self.volatile = name, members, data, conf, volatile
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr: list[str] = []
        self._drain: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.started_at = 0.0

    async def start(self, timeout: float = 20.0) -> None:
        args = [sys.executable, "-m", "tests.integration.metaraft_child", self.name, json.dumps(self.members)]
        args += [self.data, json.dumps(self.conf) if self.conf else "-"]
        if self.volatile:
            args.append("--volatile")
        env = {**os.environ, "JETLOG_CLUSTER_SECRET": "proc-secret", "PYTHONUNBUFFERED": "1"}
        self.proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        self._drain = asyncio.create_task(self._read_stderr(self.proc))
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        if not line:
            await self.kill()
            raise AssertionError(f"{self.name} died at start:\n" + "\n".join(self.stderr[-30:]))
        self.started_at = time.monotonic()

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            self.stderr.append(line.decode(errors="replace").rstrip())

    async def request(self, req: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        async with self._lock:
            proc.stdin.write((json.dumps(req) + "\n").encode())
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), timeout)
        if not line:
            raise ConnectionError(f"{self.name} exited:\n" + "\n".join(self.stderr[-30:]))
        return json.loads(line)  # type: ignore[no-any-return]

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    async def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        await asyncio.wait_for(proc.wait(), 10)
        if self._drain is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._drain, 5)

    async def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            os.kill(proc.pid, signal.SIGCONT)
            proc.stdin.write(b'{"op": "exit"}\n')
            await proc.stdin.drain()
            await asyncio.wait_for(proc.wait(), 10)
        except (OSError, TimeoutError, ConnectionError):
            pass
        await self.kill()


class ProcCluster:
    """Three children; every wait is bounded; ``close`` ends every process it started."""

    def __init__(self, root: str, conf: dict[str, Any] | None = None, volatile: bool = False) -> None:
        self.members = {n: f"127.0.0.1:{p}" for n, p in zip(NAMES, free_ports(3), strict=True)}
        self.nodes = {n: Child(n, self.members, os.path.join(root, n), conf, volatile) for n in NAMES}

    async def start(self, names: list[str] | None = None) -> None:
        await asyncio.gather(*(self.nodes[n].start() for n in names or NAMES))

    def live(self) -> list[str]:
        return [n for n, c in self.nodes.items() if c.proc is not None]

    async def statuses(self, names: list[str]) -> dict[str, dict[str, Any]]:
        res = await asyncio.gather(*(self.nodes[n].request({"op": "status"}, 5) for n in names))
        return dict(zip(names, res, strict=True))

    async def agreed_leader(self, names: list[str], exclude: str | None = None, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = await self.statuses(names)
            leaders = {s["leader"] for s in st.values()}
            if len(leaders) == 1:
                ld = leaders.pop()
                if ld is not None and ld != exclude and (ld not in st or st[ld]["role"] == "leader"):
                    return str(ld)
            await asyncio.sleep(0.01)
        raise AssertionError(f"no agreed leader among {names}: {await self.statuses(names)}")

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.nodes.values()))
