"""Background check of the segments a store trusted at open (``storage.verify_on_open = "lazy"``).

A clean restart with a lazy open reads no segment: a segment whose index file is intact (the
index has its own CRC), carries a content CRC and matches the segment's size is taken as the
index describes it, as nats-server takes its blocks from ``index.db``. What a lazy open skips
is the check for damage *at rest* (bit rot, a disk returning other bytes): every read still
checks each record's own CRC, so damaged bytes are never served, and this scrub then reads each
trusted segment once, in the background, one segment at a time for the whole process, and
compares its CRC32C with the one the index recorded when the bytes were written.

On a mismatch the damage is reported (an error log line) and made permanent for the next open:
the segment's index file is removed and its running CRC forgotten, so the index written later
(at a roll or close) carries no content CRC and the next open checks the segment batch by
batch and quarantines the damage exactly as a full open does (``recovery``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from collections.abc import Callable

from jetlog.log.segment import Segment
from jetlog.tasklog import failure_logger
from jetlog.wire.crc import crc32c

log = logging.getLogger("jetlog.log.scrub")
_log_failure = failure_logger(log, "scrub")

CHUNK = 1 << 20
"""Bytes read per call (one reused buffer per check)."""

START_DELAY = 2.0
"""Seconds after a store opens before its checks begin: a restart opens every stream first (the
checks would compete with that for the two cores and the disk), then checks in the background."""

_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _gate() -> asyncio.Semaphore:
    """One segment checked at a time in the whole process (per loop): after a restart of 100
    streams the checks queue instead of 100 threads reading at once beside the traffic."""
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(1)
    return gate


def file_crc(path: str, size: int) -> int | None:
    """CRC32C of the first ``size`` bytes of ``path``; None if the file is gone or shorter
    (truncated meanwhile: nothing to conclude). Read in chunks, not mapped: a segment may be
    truncated while it is read (a follower cutting a divergent tail), which would kill a
    process reading it through a mapping (SIGBUS). Blocking: call it in a thread."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        buf = memoryview(bytearray(min(size, CHUNK)))
        crc = off = 0
        while off < size:
            n = os.preadv(fd, [buf[: min(len(buf), size - off)]], off)
            if n <= 0:
                return None
            crc = crc32c(buf[:n], crc)
            off += n
        return crc
    finally:
        os.close(fd)


def _forget_index(seg: Segment) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(seg.idx_path)


class Scrub:
    """Checks a store's trusted segments once (see the module docstring); the task ends when
    they are all checked. ``segments`` returns the store's live segments."""

    def __init__(self, label: str, segments: Callable[[], list[Segment]]) -> None:
        self.label = label
        self._segments = segments
        self.checked = 0
        self.damaged = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        """Every trusted segment checked (or the scrub stopped)."""
        return self._task is None or self._task.done()

    def start(self) -> None:
        """Start checking, if anything is trusted."""
        if any(s.trusted is not None for s in self._segments()):
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"scrub:{self.label}")
            self._task.add_done_callback(_log_failure)

    async def wait(self) -> None:
        """Until every trusted segment was checked."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Cancel the checks (the store is closing); unchecked segments stay trusted."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        await asyncio.sleep(START_DELAY)
        for seg in [s for s in self._segments() if s.trusted is not None]:
            async with _gate():
                trusted = seg.trusted
                if trusted is None or not any(s is seg for s in self._segments()):
                    continue  # removed (retention) or rewritten (compaction) meanwhile
                covered, expected = trusted
                gen = seg.gen
                crc = await asyncio.to_thread(file_crc, seg.path, covered)
                if seg.gen != gen or seg.trusted is not trusted or crc is None:
                    continue  # rewritten or cut meanwhile: the new bytes are ours, checked
                seg.trusted = None
                self.checked += 1
                if crc == expected:
                    continue
                self.damaged += 1
                seg.wcrc = None
                await asyncio.to_thread(_forget_index, seg)
                log.error(
                    "segment %s does not match the CRC its index recorded when it was written "
                    "(damaged on disk): reads of damaged records fail their checks; its index was "
                    "removed, so the next start checks it batch by batch and quarantines the damage",
                    seg.path,
                )
