"""Group commit: the pending-batch structures the loop fills and the job a worker thread runs.

The loop encodes each mutation into the open batch at once (records are fully encoded, with
their CRC, in ``append``). The flusher takes everything pending as one job; the worker thread
joins bodies, compresses, builds headers, writes them in order with ``writev`` and fsyncs once.
While a job is in flight new mutations accumulate for the next one.

Crash ordering: a segment roll inside a job syncs the old segment before the new file is
created, so a later segment never holds data whose predecessor's tail could be missing
(recovery treats a damaged non-last segment as corruption, not as a torn tail).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from jetlog.errors import StorageError
from jetlog.log.segment import Segment, SegmentIO
from jetlog.wire import records as rc


class OpenBatch:
    """The batch currently being filled (loop side)."""

    __slots__ = ("base_seq", "body", "first_rec", "last_rec", "nrec", "ops", "parts", "pos", "seg")

    def __init__(self, seg: Segment, pos: int, base_seq: int) -> None:
        self.seg = seg
        self.pos = pos  # file offset its header will have (an estimate when compressing)
        self.base_seq = base_seq
        self.parts: list[bytes] = []
        self.body = 0
        self.nrec = 0
        self.first_rec = 0
        self.last_rec = 0
        self.ops: list[tuple[int, int]] = []


class PendingBatch(NamedTuple):
    """A closed batch waiting for the flusher. ``pos`` is the expected file offset (-1 when
    compressed: only the writer knows it)."""

    seg: Segment
    pos: int
    parts: list[bytes]
    nrec: int
    ops: list[tuple[int, int]]
    epoch: int
    base_seq: int
    last_seq: int
    last_ts: int
    first_rec: int
    last_rec: int
    sealed: bool = False  # ``parts`` is already ``[header, body]``


def seal_pending(b: PendingBatch, compressor: Any) -> PendingBatch:
    """Join and checksum a pending batch (``parts`` becomes ``[header, stored body]``).

    Uncompressed stores do this on the loop when a job is taken (a memcpy and a CRC, cheap),
    so the flusher thread only makes syscalls: each time that thread needs the GIL back it may
    wait a whole switch interval behind a busy loop, and that wait is commit latency.
    """
    if b.sealed:
        return b
    raw = b"".join(b.parts)
    if b.ops:
        raw += rc.encode_ops(b.ops)
    hdr, body = rc.seal_batch(
        raw,
        n_records=b.nrec,
        n_ops=len(b.ops),
        epoch=b.epoch,
        base_seq=b.base_seq,
        last_seq=b.last_seq,
        last_ts=b.last_ts,
        compressor=compressor if b.nrec else None,
    )
    return b._replace(parts=[hdr, body], sealed=True)


class Roll(NamedTuple):
    """Seal ``old`` and start writing ``new`` (a new file)."""

    old: Segment
    new: Segment


class Job(NamedTuple):
    """Everything one group commit writes."""

    number: int
    actions: list[PendingBatch | Roll]
    last_seq: int
    seg: Segment
    fd: int
    size: int
    sync: bool


class JobResult(NamedTuple):
    batch_pos: list[int]
    sizes: list[tuple[Segment, int]]
    fds: list[tuple[Segment, int]]


def run_job(io: SegmentIO, job: Job, compressor: Any) -> JobResult:
    """Write (and fsync) a job. Runs in the flusher thread. Raises ``OSError`` on I/O failure
    (the store then fails closed) or ``StorageError`` if the layout drifted (a bug)."""
    batch_pos: list[int] = []
    sizes: list[tuple[Segment, int]] = []
    fds: list[tuple[Segment, int]] = []
    seg, fd, size = job.seg, job.fd, job.size
    bufs: list[bytes] = []
    try:
        for act in job.actions:
            if isinstance(act, Roll):
                if bufs:
                    io.write(fd, bufs)
                    bufs = []
                io.sync(fd)
                sizes.append((seg, size))
                new_fd = io.open(act.new.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND)
                fds.append((act.new, new_fd))
                io.sync_dir(act.new.dir)
                seg, fd, size = act.new, new_fd, 0
                continue
            hdr, body = seal_pending(act, compressor).parts
            if act.pos >= 0 and act.pos != size:
                raise StorageError(f"internal: batch expected at {act.pos}, segment is {size} bytes")
            batch_pos.append(size)
            bufs.append(hdr)
            bufs.append(body)
            size += len(hdr) + len(body)
        if bufs:
            io.write(fd, bufs)
        if job.sync:
            io.sync(fd)
    except BaseException:
        for _, nfd in fds:
            try:
                io.close(nfd)
            except OSError:
                pass
        raise
    sizes.append((seg, size))
    return JobResult(batch_pos, sizes, fds)
