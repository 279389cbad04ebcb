"""The leader-epoch checkpoint of a store (KIP-101/KIP-279): ``(epoch, start position)`` pairs.

``start`` is the store's ``log_end()`` when the epoch began: the epoch's batches follow it.
Entries only ever grow in epoch. Adding an entry drops the entries starting at or after its
start (they cover no batch: Kafka's ``LeaderEpochFileCache.assign`` does the same).

Where entries come from:
- ``begin_epoch`` (a leader): sealed, then ``(epoch, log_end())`` is added and persisted before
  the call returns (an epoch may hold no batch yet, which only the file can remember).
- ``observe`` (a follower appending a leader's batches, or a writer's first batch of an epoch
  nobody began, e.g. epoch 0 of a single-node history): in memory only. Every batch carries its
  epoch, so recovery re-derives such entries from the batch headers (below); the next write of
  the file includes them.
- ``truncate``/``reset`` clip/clear the entries and persist before touching any data.

Once retention deleted the start of the log, the entries are seen through ``clamp`` (as Kafka's
``truncateFromStart``): of the epochs whose first batch is at or before the first batch still
present, only the latest remains, starting at the log start. A recovered checkpoint then equals
the one in memory before the restart, whether its entries came from the file or from the batch
headers.

Truncation keeps the epochs that started before the truncation point (Kafka's
``truncateFromEnd``). The KIP-279 exchange converges: a follower whose latest epoch is ``e``
gets ``(e', end)`` with ``e' <= e`` and truncates to ``min(end, its own end of e')``, which
drops every epoch of its own above ``e'``; it stops once the leader answers its latest epoch.

File ``epochs`` in the store directory, replaced atomically (tmp + fsync + rename + directory
fsync)::

    magic b"JLE\\x01" | crc u32 (CRC32C of every later byte) | count u32 |
    count x (epoch u64 | last_seq u64 | k i64)

Recovery (``load_epochs``, in the open thread): read the file (a damaged one is moved to
``quarantine/`` and treated as missing), drop entries starting beyond the recovered log end,
then add the epochs of batches the file does not know: epochs never decrease along a log, so
a binary search over the batch headers (one 64-byte read each) finds where each later epoch
begins. A store with batches and no file (a single-node history) thus gets epoch 0 (or
whatever its batches carry) from the start of its log.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from jetlog.log.segment import Segment, SegmentIO
from jetlog.log.store import EpochError, Pos
from jetlog.wire import records as rc
from jetlog.wire.crc import crc32c

log = logging.getLogger("jetlog.log.epochs")

FILE = "epochs"
_HEAD = struct.Struct("<4sII")
_ENTRY = struct.Struct("<QQq")
_MAGIC = b"JLE\x01"

Entry = tuple[int, Pos]


class EpochCache:
    """The checkpoint of one store (loop side). ``path``: the store directory (None: memory,
    nothing is persisted)."""

    def __init__(self, entries: list[Entry], path: str | None = None) -> None:
        self.entries = list(entries)
        self.path = path

    @property
    def latest(self) -> int:
        """The highest known epoch (-1 when none)."""
        return self.entries[-1][0] if self.entries else -1

    def _add(self, epoch: int, start: Pos) -> None:
        while self.entries and self.entries[-1][1] >= start:
            self.entries.pop()
        self.entries.append((epoch, start))

    def begin(self, epoch: int, start: Pos) -> None:
        """A leader starts ``epoch`` at ``start``; the caller persists."""
        if epoch <= self.latest:
            raise EpochError(f"epoch {epoch} is not above the latest known epoch {self.latest}")
        self._add(epoch, start)

    def observe(self, epoch: int, start: Pos) -> None:
        """A batch of ``epoch`` follows ``start`` in the log (in memory; see the module
        docstring)."""
        if epoch > self.latest:
            self._add(epoch, start)

    def clip(self, to: Pos) -> None:
        """Truncation to ``to``: forget the epochs starting at or after it (they have no batch
        left)."""
        while self.entries and self.entries[-1][1] >= to:
            self.entries.pop()

    def view(self, start: Pos, first: Pos | None) -> list[Entry]:
        """The entries of a log that starts at ``start`` and whose first batch is at ``first``
        (``clamp``)."""
        return clamp(self.entries, start, first)

    def end_of(self, epoch: int, start: Pos, first: Pos | None, end: Pos) -> tuple[int, Pos]:
        """``epoch_end`` of a log that starts at ``start``, holds its first batch at ``first``
        and ends at ``end``."""
        entries = clamp(self.entries, start, first)
        i = bisect_right([e for e, _ in entries], epoch) - 1
        if i < 0:
            return (-1, start)
        nxt = entries[i + 1][1] if i + 1 < len(entries) else end
        return (entries[i][0], nxt)

    async def persist(self, run: Callable[[Callable[[], None]], Any]) -> None:
        """Write the file (``run`` executes a blocking function off the loop and is awaited)."""
        if self.path is None:
            return
        blob = encode(self.entries)
        path = self.path
        await run(lambda: write_file(path, blob))


def clamp(entries: list[Entry], start: Pos, first: Pos | None) -> list[Entry]:
    """``entries`` of a log that starts at ``start`` with its first batch at ``first`` (None: it
    holds none). An epoch starting below ``first`` has its first batch at or before it, so of
    those only the latest still covers a batch of the log; it now starts at ``start``. A log
    without batches keeps only the epochs begun at its start or later (none with a batch)."""
    if first is None:
        return [en for en in entries if en[1] >= start]
    i = 0
    while i + 1 < len(entries) and entries[i + 1][1] < first:
        i += 1
    out = entries[i:]
    if out and out[0][1] < first:
        out[0] = (out[0][0], start)
    return out


def encode(entries: list[Entry]) -> bytes:
    body = struct.pack("<I", len(entries)) + b"".join(_ENTRY.pack(e, s, k) for e, (s, k) in entries)
    return _MAGIC + struct.pack("<I", crc32c(body)) + body


def decode(buf: bytes) -> list[Entry] | None:
    """The entries of a file, or None if it is damaged."""
    if len(buf) < _HEAD.size:
        return None
    magic, crc, n = _HEAD.unpack_from(buf, 0)
    if magic != _MAGIC or crc32c(memoryview(buf)[8:]) != crc or len(buf) != _HEAD.size + n * _ENTRY.size:
        return None
    out: list[Entry] = []
    for i in range(n):
        e, s, k = _ENTRY.unpack_from(buf, _HEAD.size + i * _ENTRY.size)
        if out and (e <= out[-1][0] or (s, k) < out[-1][1]):
            return None
        out.append((e, (s, k)))
    return out


def write_file(directory: str, blob: bytes) -> None:
    """Atomically replace the checkpoint file (blocking)."""
    path = os.path.join(directory, FILE)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, blob)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    _sync_dir(directory)


def remove_file(directory: str) -> None:
    """Delete the checkpoint file (blocking, durable)."""
    try:
        os.unlink(os.path.join(directory, FILE))
    except FileNotFoundError:
        return
    _sync_dir(directory)


def _sync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- recovery -------------------------------------------------------------------------------


class _Headers:
    """Random access to the batch headers of a log (by global batch number), for recovery."""

    def __init__(self, io: SegmentIO, segs: list[Segment]) -> None:
        self.io = io
        self.segs = [s for s in segs if len(s.table)]
        self.cum = [0]
        for s in self.segs:
            self.cum.append(self.cum[-1] + len(s.table))
        self.n = self.cum[-1]
        self.fds: dict[int, int] = {}

    def _loc(self, g: int) -> tuple[Segment, int]:
        i = bisect_right(self.cum, g) - 1
        return self.segs[i], g - self.cum[i]

    def pos(self, g: int) -> Pos:
        seg, j = self._loc(g)
        return seg.table.pos(j)

    def epoch(self, g: int) -> int:
        seg, j = self._loc(g)
        fd = self.fds.get(seg.base)
        if fd is None:
            fd = self.fds[seg.base] = self.io.open(seg.path, os.O_RDONLY)
        return rc.decode_header(self.io.pread(fd, rc.HEADER_SIZE, seg.table.off[j])).epoch

    def after(self, pos: Pos) -> int:
        """The first batch number whose position is above ``pos``."""
        lo, hi = 0, self.n
        while lo < hi:
            mid = (lo + hi) // 2
            if self.pos(mid) <= pos:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def close(self) -> None:
        for fd in self.fds.values():
            self.io.close(fd)
        self.fds.clear()


def load_epochs(directory: str, io: SegmentIO, segs: list[Segment], start: Pos, end: Pos) -> list[Entry]:
    """The checkpoint of a recovered log that starts at ``start`` and ends at ``end`` (see the
    module docstring). Blocking; raises ``OSError``/``BatchError`` only if a batch header the
    tables point at cannot be read (recovery just validated them)."""
    path = os.path.join(directory, FILE)
    entries: list[Entry] = []
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except FileNotFoundError:
        buf = None
    if buf is not None:
        got = decode(buf)
        if got is None:
            log.error("epoch checkpoint %s is damaged; rebuilding it from the batch headers", path)
            qdir = os.path.join(directory, "quarantine")
            os.makedirs(qdir, exist_ok=True)
            os.rename(path, os.path.join(qdir, f"{FILE}.{time.time_ns()}"))
            _sync_dir(directory)
        else:
            entries = [(e, s) for e, s in got if s <= end]
    hs = _Headers(io, segs)
    try:
        entries = clamp(entries, start, hs.pos(0) if hs.n else None)
        if not hs.n:
            return entries
        latest = entries[-1][0] if entries else -1
        g0 = hs.after(entries[-1][1]) if entries else 0
        while g0 < hs.n and hs.epoch(hs.n - 1) > latest:
            lo, hi = g0, hs.n - 1  # the first batch of a later epoch is in [lo, hi]
            if hs.epoch(lo) == hs.epoch(hi):
                hi = lo  # one epoch from here to the end (a store that never changed epoch)
            while lo < hi:
                mid = (lo + hi) // 2
                if hs.epoch(mid) > latest:
                    hi = mid
                else:
                    lo = mid + 1
            latest = hs.epoch(lo)
            at = hs.pos(lo - 1) if lo > 0 else start
            while entries and entries[-1][1] >= at:
                entries.pop()
            entries.append((latest, at))
            g0 = lo + 1
        return entries
    finally:
        hs.close()
