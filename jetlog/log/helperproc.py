"""The loop side of one fsync helper process (``syncworker.py``): spawning it, framing requests
and replies over its socket (partial sends and reads), passing fds with SCM_RIGHTS, noticing its
death and reaping it without a thread. The policy around it (restarts, re-issue, fallback) is
``syncer.Syncer``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from array import array
from collections import deque
from collections.abc import Callable
from typing import Protocol

from jetlog.log import syncworker as wire

_FRAME = wire.REQ.size


class HelperOwner(Protocol):
    """Who gets a helper's callbacks (``syncer.Syncer`` satisfies this structurally)."""

    @property
    def _loop(self) -> asyncio.AbstractEventLoop: ...

    def _hello(self, helper: HelperProcess) -> None: ...
    def _reply(self, rid: int, err: int) -> None: ...
    def _helper_died(self, helper: HelperProcess, why: str) -> None: ...


class HelperProcess:
    """One helper process and the loop side of its socket.

    ``owner`` gets ``_hello(helper)``, ``_reply(request id, errno)`` and
    ``_helper_died(helper, why)`` callbacks, all on the loop."""

    def __init__(self, owner: HelperOwner, argv: Callable[[int], list[str]]) -> None:
        self._owner = owner
        self._loop = owner._loop
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                argv(child.fileno()),
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()  # only the helper holds that end now: its death reads as EOF here
        self.pid = self.proc.pid
        self.sock = parent
        self.hello = False
        self.dead = False
        self._inbuf = bytearray()
        # Frames the socket did not take yet, each with a duplicate of the fd it carries (-1:
        # none), so a caller closing its fd meanwhile cannot make us send another file.
        self._out: deque[tuple[bytes, int]] = deque()
        parent.setblocking(False)
        self._loop.add_reader(parent.fileno(), self._readable)
        self._pidfd = -1
        with contextlib.suppress(AttributeError, OSError):
            self._pidfd = os.pidfd_open(self.pid)
            self._loop.add_reader(self._pidfd, self._exited)

    # ---- sending --------------------------------------------------------------------------
    def send(self, frame: bytes, fd: int = -1) -> None:
        """Queue one frame (with ``fd`` attached via SCM_RIGHTS); never blocks."""
        if self.dead:
            return
        if self._out:
            self._out.append((frame, os.dup(fd) if fd >= 0 else -1))
            return
        n = self._send_now(frame, fd)
        if 0 <= n < len(frame):
            # A partial send delivered the fd with its first byte: only bytes remain.
            self._out.append((frame[n:], os.dup(fd) if n == 0 and fd >= 0 else -1))
            self._loop.add_writer(self.sock.fileno(), self._writable)

    def _send_now(self, frame: bytes, fd: int) -> int:
        """Bytes the socket took (0 if it is full); -1 if the helper is gone."""
        try:
            if fd >= 0:
                anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array("i", [fd]).tobytes())]
                return self.sock.sendmsg([frame], anc)
            return self.sock.send(frame)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:
            self._die(f"send failed: {exc}")
            return -1

    def _writable(self) -> None:
        while self._out:
            frame, fd = self._out[0]
            n = self._send_now(frame, fd)
            if n <= 0:
                return  # full (wait for the next writable event) or dead (already cleaned up)
            self._out.popleft()
            if fd >= 0:
                os.close(fd)
            if n < len(frame):
                self._out.appendleft((frame[n:], -1))
                return
        self._loop.remove_writer(self.sock.fileno())

    # ---- receiving ------------------------------------------------------------------------
    def _readable(self) -> None:
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._die(f"receive failed: {exc}")
            return
        if not data:
            self._die("connection closed")
            return
        # Replies are fixed-size frames; keep a partial one for the next read.
        buf = self._inbuf
        buf += data
        n = len(buf) - len(buf) % _FRAME
        owner = self._owner
        for off in range(0, n, _FRAME):
            rid, err = wire.REP.unpack_from(buf, off)
            if rid == 0:
                self.hello = True
                owner._hello(self)
            else:
                owner._reply(rid, err)
        del buf[:n]

    def _exited(self) -> None:
        self._die(f"process exited (status {self.proc.poll()})")

    def _die(self, why: str) -> None:
        if self.dead:
            return
        self.close()
        self._owner._helper_died(self, why)

    # ---- lifecycle ------------------------------------------------------------------------
    def close(self) -> None:
        """Stop talking to the helper and kill it. It holds nothing of value: every request
        without a reply is either re-issued elsewhere or no longer awaited. ``reaped`` (or
        ``reap_now``) must follow."""
        if self.dead:
            return
        self.dead = True
        fileno = self.sock.fileno()
        self._loop.remove_reader(fileno)
        self._loop.remove_writer(fileno)
        if self._pidfd >= 0:
            self._loop.remove_reader(self._pidfd)
        for _, fd in self._out:
            if fd >= 0:
                os.close(fd)
        self._out.clear()
        self.sock.close()
        self.proc.kill()  # a no-op if it already exited (Popen polls first)

    async def reaped(self) -> None:
        """Wait (without a thread) until the killed process is gone, and reap it."""
        if self._pidfd >= 0:
            fut: asyncio.Future[None] = self._loop.create_future()

            def exited() -> None:
                if not fut.done():
                    fut.set_result(None)

            self._loop.add_reader(self._pidfd, exited)
            try:
                await fut
            finally:
                self._loop.remove_reader(self._pidfd)
                os.close(self._pidfd)
                self._pidfd = -1
        delay = 0.0005
        while self.proc.poll() is None:  # without a pidfd; with one, exited already
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    def reap_now(self) -> None:
        """Blocking ``close`` + reap, for a helper whose event loop is already closed."""
        self.dead = True
        with contextlib.suppress(OSError):
            self.sock.close()
        self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
