"""The seam between a store and its fsync service, and the records ``Syncer`` keeps per file and
per request (kept apart from ``syncer.py``, which is the helper's lifecycle and the routing).

``SyncService`` is what a store needs; ``Syncer`` (the helper process) is the real one and
``ThreadSync`` a plain thread-pool one for tests and tools.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from jetlog.log import syncworker as wire
from jetlog.log.segment import SegmentIO
from jetlog.log.syncledger import LEDGER

__all__ = ["SyncService", "ThreadSync"]


class SyncService(Protocol):
    """How a store makes files durable. Handles are small ints naming registered fds."""

    def register(self, fd: int) -> int:
        """Start tracking ``fd`` (a regular file or a directory); return its handle."""
        ...

    def forget(self, handle: int) -> None:
        """Stop tracking a handle (no sync of it may be awaited any more)."""
        ...

    def fdatasync(self, handle: int) -> Awaitable[None]:
        """Make the file's written data durable; ``OSError`` on an I/O error. Covers everything
        written to the file before the call. May be a coroutine function or return a future;
        the file store pipelines its commits on the future (``pipeline.py``), which must
        complete without further calls (``Syncer`` sends a held-back request at the end of the
        loop pass by itself)."""
        ...

    def fsync(self, handle: int) -> Awaitable[None]:
        """``fsync`` (used for directory fds: creates, renames, unlinks)."""
        ...


def sync_fd(fd: int, op: int) -> int:
    """Thread fallback: one sync, the errno as a result (0 = success)."""
    try:
        if op == wire.OP_FSYNC:
            os.fsync(fd)
        else:
            os.fdatasync(fd)
    except OSError as exc:
        return exc.errno or errno.EIO
    return 0


class ThreadSync:
    """``SyncService`` on a thread executor through a ``SegmentIO`` (the pre-helper path, kept
    for ``FileStore.open(syncer="thread")``, tests and benchmarks). It pays the GIL hand-off
    described in the module docstring on every sync."""

    def __init__(self, io: SegmentIO, executor: ThreadPoolExecutor) -> None:
        self._io = io
        self._exec = executor
        self._fds: dict[int, int] = {}
        self._ids = itertools.count(1)

    def register(self, fd: int) -> int:
        h = next(self._ids)
        self._fds[h] = fd  # the store keeps its fd open until after ``forget``
        return h

    def forget(self, handle: int) -> None:
        self._fds.pop(handle, None)

    def fdatasync(self, handle: int) -> asyncio.Future[None]:
        return asyncio.get_running_loop().run_in_executor(self._exec, self._io.sync, self._fds[handle])

    def fsync(self, handle: int) -> asyncio.Future[None]:
        return asyncio.get_running_loop().run_in_executor(self._exec, os.fsync, self._fds[handle])


class FileHandle:
    """A registered fd. Once a request names it, ``fd`` is our duplicate (``owned``): closed
    once forgotten *and* idle, so a running sync (thread fallback) never touches a closed or
    reused fd number. Until then it is the caller's own fd, which is open for as long as the
    handle is registered: only a sync on the loop (``try_inline_fdatasync``) uses it, while
    the caller waits. The duplicate is made late because ``dup`` in a process whose threads
    are opening files is slow (the fd table grows under RCU): ~60 µs each, three per stream
    on a restart."""

    __slots__ = ("dev", "fd", "forgotten", "inflight", "owned", "path", "sent")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.owned = False
        self.inflight = 0
        self.forgotten = False
        # Passed to the running helper yet: an fd goes over (SCM_RIGHTS) with its first
        # request, not at registration. A restart opens a store's writer, its directory and
        # its consumer log for every stream, and most are not written before they close.
        self.sent = False
        self.path: str | None = None  # test-only sync ledger (syncledger.py); None when off
        self.dev: int | None = None  # its filesystem (``st_dev``), looked up when first needed


class SyncRequest:
    """One sync request (awaited through ``fut``)."""

    __slots__ = ("fut", "h", "handle", "op", "rid", "size", "t0")

    def __init__(self, rid: int, op: int, handle: int, h: FileHandle, fut: asyncio.Future[None]) -> None:
        self.t0 = time.monotonic()
        self.rid = rid
        self.op = op
        self.handle = handle
        self.h = h
        self.fut = fut
        # Test-only sync ledger: the file size when requested = what this sync makes durable.
        self.size = LEDGER.size_of(h.path, h.fd) if h.path is not None and LEDGER is not None else 0


# Syncer states
