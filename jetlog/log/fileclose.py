"""Closing a ``FileStore``: its tasks stop in order (the scrub; the flusher after a last flush;
maintenance once the index files it is writing are written), the writer segment is left as a
clean close leaves it (preallocation cut, interval mode's last sync, its index file unless the
one found at open is current), then its thread, descriptors, directory lock and sync service
are released. ``abandon`` (a test hook) drops everything as a crash would.

Apart from ``filestore.py`` because it is one sequence of steps, run once per store, over nearly
all of its parts; the store keeps thin ``close`` and ``_abandon`` methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Protocol

from jetlog.log.maintenance import MaintenanceHost, idx_snapshot
from jetlog.log.recovery import write_idx_file

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from jetlog.log.commit import StoreSync
    from jetlog.log.maintenance import Maintenance
    from jetlog.log.pipeline import Flusher
    from jetlog.log.scrub import Scrub
    from jetlog.log.segment import Segment

log = logging.getLogger("jetlog.log.filestore")  # the store's: what a close reports is about it


class CloseHost(MaintenanceHost, Protocol):
    """What closing uses of its ``FileStore`` (which satisfies this structurally): besides what
    ``idx_snapshot`` reads, the parts that it stops and releases."""

    scrub: Scrub
    _refuse: bool
    _failed: BaseException | None
    _fl: Flusher
    _maint: Maintenance
    _ss: StoreSync
    _seg: Segment
    _exec: ThreadPoolExecutor
    _lock_fd: int

    def _fail(self, exc: BaseException) -> None: ...


async def close(st: CloseHost) -> None:
    if st._closed:
        return
    st._closed = True
    st._refuse = True
    await st.scrub.stop()
    if st._failed is None:
        st._fl.stopping = True
        st._fl.kick()
        with contextlib.suppress(Exception):
            await st._fl.task
        await st._maint.indexes_written()
        await st._maint.stop()
        w = st._wseg
        if st._failed is None and w.fd is not None and w.alloc > w.size:
            # A preallocated writer ends at its data again. Not synced for that: if the
            # cut is lost, recovery cuts the zero tail itself.
            try:
                st._io.truncate(w.fd, w.size)
                w.alloc = 0
            except OSError as exc:
                log.warning("could not cut %s back to its data: %s", w.path, exc)
        if st._failed is None and st._fl.unsynced and w.fd is not None:
            try:  # interval mode: what was written since the last sync becomes durable now
                await st._ss.sync_writer()
            except OSError as exc:
                st._fail(exc)
        seg = st._seg
        if st._failed is None and not _idx_current(seg, st.epoch):
            try:
                build = idx_snapshot(st, seg)
                await asyncio.to_thread(lambda: write_idx_file(seg, st._io, build(), unless_same=True))
            except OSError as exc:
                log.warning("could not write index of %s: %s", seg.path, exc)
    else:
        st._fl.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await st._fl.task
        await st._maint.indexes_written()
        await st._maint.stop()
    await _shutdown(st)


async def _shutdown(st: CloseHost) -> None:
    # The store thread first: with ``syncer="thread"`` a cancelled job's sync may still run
    # there on our fds. Joined in a thread: the loop serves other streams meanwhile.
    await asyncio.to_thread(st._exec.shutdown, True)
    for seg in st._segs:
        st._close_fd(seg)
    with contextlib.suppress(OSError):
        os.close(st._lock_fd)
    await st._ss.close()


async def abandon(st: CloseHost) -> None:
    """Test hook: drop everything as a crash would (no flush, no index files)."""
    st._closed = True
    st._refuse = True
    # CRASH POINT: the flusher is cancelled before anything here yields to the loop. Stopping
    # the scrub first let the flusher take what was still queued and write it (even roll a
    # segment: sync the old one, create the next) after the "crash"; a test that then cut the
    # segment it saw as the writer cut synced bytes, with a later file already there.
    st._fl.task.cancel()
    await st.scrub.stop()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await st._fl.task
    await st._maint.cancel_indexes()
    await st._maint.stop()
    await _shutdown(st)


def _idx_current(seg: Segment, epoch: int) -> bool:
    """The index file found at open still describes ``seg`` exactly, with the store's epoch:
    the segment holds the same bytes (its size and the running CRC of what this process
    found and wrote are those the file recorded; a truncation, a rewrite or damage found by
    the scrub leaves the running CRC unknown). A close then has nothing to write: encoding
    the index to find it unchanged copied every column of the writer segment (~1 ms per
    100,000 messages) and took a thread per store."""
    f = seg.idx_file
    return (
        f is not None
        and seg.wcrc is not None
        and (seg.size, seg.wlen, seg.wcrc, epoch) == (f[0], f[0], f[1], f[2])
    )
