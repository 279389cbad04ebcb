"""One segment file: the I/O seam, per-segment metadata, reading records, and turning segment
bytes into index columns (``SegmentData``).

Files of a store directory::

    %020d.log   a segment: consecutive record batches (``jetlog.wire.records``); the name is
                the segment's base sequence (the first sequence it could hold: the stream's
                ``last_seq + 1`` when it was created)
    %020d.idx   the segment's index, written when the segment is sealed or the store closed
    LOCK        flock'ed by the process that has the store open
    quarantine/ corrupt segment files moved aside by recovery

The index file format is ``idxfile``'s.
"""

from __future__ import annotations

import functools
import mmap
import os
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from jetlog.log.columns import own_columns
from jetlog.log.positions import NULL_LAST, PosTable, is_null
from jetlog.wire import records as rc
from jetlog.wire.crc import crc32c
from jetlog.wire.subjects import subject_from_bytes

COMPRESSED = rc.AUX_COMPRESSED  # aux high bit: record lives in a compressed batch at ``pos``
AUX_MASK = 0x7FFFFFFF
BODY_CACHE = 8  # decompressed batch bodies a store keeps for reads


def seg_name(base: int) -> str:
    return f"{base:020d}.log"


def idx_name(base: int) -> str:
    return f"{base:020d}.idx"


def file_msg_size(subject_len: int, hdr_len: int, data_len: int) -> int:
    """nats-server's file-store accounting for one message."""
    return 22 + subject_len + data_len + 8 + (4 + hdr_len if hdr_len else 0)


class SegmentIO(Protocol):
    """The file operations a store performs. Tests substitute implementations that fail."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int: ...

    def write(self, fd: int, bufs: list[bytes], at: int) -> None:
        """Write every buffer (in order) starting at offset ``at``, or raise ``OSError``."""
        ...

    def preallocate(self, fd: int, offset: int, length: int) -> None:
        """Allocate ``[offset, offset + length)`` (extending the file size), or raise
        ``OSError`` (the caller then writes without preallocation)."""
        ...

    def sync(self, fd: int) -> None:
        """Make written data durable (fdatasync)."""
        ...

    def sync_dir(self, path: str) -> None:
        """Make directory entries (creates, renames, unlinks) durable."""
        ...

    def pread(self, fd: int, n: int, offset: int) -> bytes: ...

    def truncate(self, fd: int, length: int) -> None: ...

    def close(self, fd: int) -> None: ...


WRITE_CHUNK = 512 << 10
"""Bytes per ``pwritev`` at most. A group commit can be megabytes (a 16 KiB publish flood
writes 1-3 MB jobs), and one buffered write of 2 MiB or more lets Linux (6.18 here, ext4
with large folios) put it in 2 MiB page-cache folios. On the test VM (Firecracker) such a
write costs at times 10-20x per byte (27-47 against 2.3 us per 16 KiB, whole files at a
time, one run in three to six), never with writes of 1 MiB or less (2.3-2.6 us). Measured
in the node: 3-22 us per 16 KiB written, rising with the job size, ~30 % of its CPU time."""
IOV_MAX = 512
"""Buffers per ``pwritev`` at most (Linux allows 1024)."""


def write_chunks(
    bufs: list[bytes], limit: int = WRITE_CHUNK, max_iov: int = IOV_MAX
) -> Iterator[list[bytes | memoryview]]:
    """Split ``bufs`` into consecutive chunks of at most ``limit`` bytes and ``max_iov``
    buffers, in order (a buffer longer than the room left is cut into ``memoryview`` slices);
    joined, the chunks are ``bufs`` joined. Pure: ``OsIO.write`` does one ``pwritev`` each."""
    chunk: list[bytes | memoryview] = []
    size = 0
    for b in bufs:
        n = len(b)
        off = 0
        while size + n - off > limit:  # fill the chunk up with a slice, pass it on
            take = limit - size  # > 0: a chunk is passed on as soon as it is full
            chunk.append(memoryview(b)[off : off + take])
            off += take
            yield chunk
            chunk, size = [], 0
        if off < n:
            chunk.append(memoryview(b)[off:] if off else b)
            size += n - off
        if size >= limit or len(chunk) >= max_iov:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _pwrite_all(fd: int, bufs: Sequence[bytes | memoryview], want: int, at: int) -> None:
    """``pwritev`` of ``bufs`` (``want`` bytes) at ``at``, a short write finished from where it
    stopped; an error propagates."""
    done = os.pwritev(fd, bufs, at)
    if done != want:
        rest = b"".join(bufs)[done:]
        at += done
        while rest:
            n = os.pwrite(fd, rest, at)
            rest = rest[n:]
            at += n


class OsIO:
    """``SegmentIO`` on the real file system."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)

    def write(self, fd: int, bufs: list[bytes], at: int) -> None:
        # pwritev in chunks (``write_chunks``); a short write is retried from where it
        # stopped, an error propagates (and fails the store). Positional, not O_APPEND: the
        # file may be preallocated past the data (``preallocate``).
        if len(bufs) <= IOV_MAX:
            want = sum(map(len, bufs))
            if want <= WRITE_CHUNK:
                # One chunk (a small job: many streams committing a few messages each): no
                # chunking generator.
                _pwrite_all(fd, bufs, want, at)
                return
        for chunk in write_chunks(bufs):
            want = sum(map(len, chunk))
            _pwrite_all(fd, chunk, want, at)
            at += want

    def preallocate(self, fd: int, offset: int, length: int) -> None:
        os.posix_fallocate(fd, offset, length)

    def sync(self, fd: int) -> None:
        os.fdatasync(fd)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        return os.pread(fd, n, offset)

    def truncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def close(self, fd: int) -> None:
        os.close(fd)


def mapped_crc(io: SegmentIO, path: str, size: int) -> int | None:
    """CRC32C of ``path`` if it is exactly ``size`` bytes long (None otherwise), computed over a
    read-only mapping: no copy into a new ``bytes`` (reading a 17 MB segment that way and
    checking it cost ~9.7 ms here, mapped ~2.9 ms; a restart checks every segment). Blocking."""
    if size <= 0:
        return None
    fd = io.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size != size:
            return None
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
            return crc32c(m)
    finally:
        io.close(fd)


def read_file(io: SegmentIO, path: str) -> bytes:
    """The whole content of ``path``."""
    fd = io.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        parts = []
        off = 0
        while off < size:
            b = io.pread(fd, min(size - off, 1 << 26), off)
            if not b:
                break
            parts.append(b)
            off += len(b)
        return b"".join(parts)
    finally:
        io.close(fd)


CHUNK = 256 * 1024
"""Uncompressed records are read through aligned chunks of this size (see ``read_record``)."""
CHUNK_CACHE = 32
"""Chunks kept per store (8 MiB)."""


def read_record(
    io: SegmentIO,
    seg: Segment,
    fd: int,
    pos: int,
    aux: int,
    dctx: Any,
    bodies: OrderedDict[tuple[int, int, int], bytes],
    chunks: OrderedDict[tuple[int, int, int], bytes] | None = None,
) -> rc.Record:
    """The record an index entry ``(pos, aux)`` of ``seg`` points at, read through ``fd``.

    A record in a compressed batch (``aux & COMPRESSED``) is cut from the batch's decompressed
    body, which is cached in ``bodies`` (an LRU of ``BODY_CACHE`` entries keyed by segment base,
    generation and offset). Raises ``rc.BatchError`` when a checksum does not match."""
    if not aux & COMPRESSED:
        if chunks is None:
            return rc.decode_record(io.pread(fd, aux, pos), 0)[0]
        # Consumers read sequentially: one pread per chunk instead of one per record. Records
        # never change in place (a rewrite bumps ``seg.gen``), so a cached chunk is valid as long
        # as it covers the record; a chunk read near the end of the active segment may be short
        # and is simply read again once later records are needed. A preallocated writer's
        # chunk stops at its committed size: the zeros past it are not records yet.
        c = pos // CHUNK
        off = pos - c * CHUNK
        if off + aux > CHUNK:
            return rc.decode_record(io.pread(fd, aux, pos), 0)[0]
        key = (seg.base, seg.gen, c)
        buf = chunks.get(key)
        if buf is None or off + aux > len(buf):
            want = CHUNK if seg.alloc <= 0 else max(0, min(CHUNK, seg.size - c * CHUNK))
            buf = chunks[key] = io.pread(fd, want, c * CHUNK)
            if len(chunks) > CHUNK_CACHE:
                chunks.popitem(last=False)
            if off + aux > len(buf):
                return rc.decode_record(io.pread(fd, aux, pos), 0)[0]
        else:
            chunks.move_to_end(key)
        return rc.decode_record(buf, off)[0]
    key = (seg.base, seg.gen, pos)
    body = bodies.get(key)
    if body is not None:
        bodies.move_to_end(key)
    else:
        h = rc.decode_header(io.pread(fd, rc.HEADER_SIZE, pos))
        stored = io.pread(fd, h.body_len, pos + rc.HEADER_SIZE)
        if len(stored) != h.body_len or crc32c(stored) != h.body_crc:
            raise rc.BatchError(pos, "batch body does not match its header", torn=False)
        raw = rc.raw_body(h, stored, dctx, pos)
        body = bodies[key] = raw if isinstance(raw, bytes) else bytes(raw)
        if len(bodies) > BODY_CACHE:
            bodies.popitem(last=False)
    return rc.decode_record(body, aux & AUX_MASK)[0]


class Segment:
    """Metadata of one segment (owned by the loop; worker threads get copies of what they need).

    ``nrecords``/``nlive``: records physically in the file / still live. ``min_seq``/``max_seq``:
    sequence range of its records (0 when it has none). Until the segment's index file is
    written (``idx_ok``), ``ops``/``batches``/``blast``/``ttl`` accumulate what the index will
    list. ``table``: its batch positions (kept for the segment's life, for replication).
    ``rewritten``: compaction rewrote it, so positions inside it are not the original ones.
    """

    __slots__ = (
        "alloc",
        "base",
        "batches",
        "blast",
        "broken",
        "compacting",
        "dir",
        "erase",
        "fd",
        "gen",
        "idx_file",
        "idx_ok",
        "last_seq",
        "last_ts",
        "max_seq",
        "min_seq",
        "nlive",
        "nrecords",
        "ops",
        "rewritten",
        "sealed",
        "size",
        "table",
        "trusted",
        "ttl",
        "wcrc",
        "wlen",
    )

    def __init__(self, directory: str, base: int) -> None:
        self.dir = directory
        self.base = base
        self.fd: int | None = None
        self.size = 0  # bytes written to the file
        # The file size this process preallocated it to (``commit.reserve``), past ``size``
        # while it is the writer; 0 when not preallocated, -1 when preallocation failed.
        self.alloc = 0
        # CRC32C of the first ``wlen`` bytes, kept as this process writes them in order from
        # offset 0 (a segment it created, or one found on disk whose whole content matched
        # its index file's CRC at open); None for other segments found on disk. It becomes the
        # index file's content CRC without reading the segment back (see ``note_written``).
        self.wcrc: int | None = None
        self.wlen = 0
        # (covered, content CRC) of a segment a lazy open took on its index file's word
        # without reading it; None once the scrub checked it (or when it was read at open).
        self.trusted: tuple[int, int] | None = None
        # (covered, content CRC, epoch) of the current-format index file found on disk that
        # describes this segment exactly; a close that finds the segment as it was (same size
        # and running CRC, same store epoch) leaves that file alone without encoding a new one.
        self.idx_file: tuple[int, int, int] | None = None
        self.nrecords = 0
        self.nlive = 0
        self.min_seq = 0
        self.max_seq = 0
        self.last_seq = base - 1
        self.last_ts = 0
        self.sealed = False
        self.idx_ok = False
        self.compacting = False
        self.broken = False
        self.erase = False
        self.gen = 0
        self.ops = array("Q")
        self.batches = array("Q")
        self.blast = array("Q")  # last_seq of each batch of ``batches`` (``NULL_LAST``: null)
        self.ttl: dict[int, int] = {}
        self.table = PosTable()
        self.rewritten = False

    @property
    def path(self) -> str:
        return os.path.join(self.dir, seg_name(self.base))

    @property
    def idx_path(self) -> str:
        return os.path.join(self.dir, idx_name(self.base))

    def __repr__(self) -> str:
        return f"Segment({self.base}, size={self.size}, records={self.nrecords}, live={self.nlive})"


class SegmentData:
    """Columns describing a segment's content (from an index file or a scan)."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.seqs = array("Q")
        self.ts = array("q")
        self.pos = array("I")
        self.aux = array("I")
        self.size = array("I")
        self.lsid = array("I")  # key into ``subjects``
        self.subjects: dict[int, str] = {}
        self._subj_ix: dict[str, int] = {}
        self._next_key = 0
        self.ttl: dict[int, int] = {}  # seq -> expiry
        self.ops = array("Q")  # flat (first, last) pairs
        self.batches = array("Q")
        self.blast = array("Q")  # last_seq per batch (``NULL_LAST`` for a null batch)
        self.rewritten = False
        self.covered = 0
        self.last_seq = base - 1
        self.last_ts = 0
        self.epoch = 0
        self.has_batches = False
        self.content_crc: int | None = None  # from a version-3 index file
        # Version 4: the sum of ``size`` over each ``sum_chunk`` records (None: not known).
        self.size_sums: array[int] | None = None
        self.sum_chunk = 0

    def own(self) -> None:
        """Copy columns that are views of a mapped index file (``map_idx``) into arrays, before
        anything is appended to them (which the size sums would no longer describe)."""
        self.size_sums = None
        own_columns(
            self, (("seqs", "Q"), ("ts", "q"), ("pos", "I"), ("aux", "I"), ("size", "I"), ("lsid", "I"))
        )

    def subject_index(self, subject: str) -> int:
        """The key of ``subject`` in ``subjects`` (a fresh key if new)."""
        i = self._subj_ix.get(subject)
        if i is None:
            i = self._subj_ix[subject] = self._next_key
            self._next_key += 1
            self.subjects[i] = subject
        return i

    def add_batches(
        self, buf: bytes | memoryview, batches: list[tuple[int, rc.BatchHeader]], dctx: Any
    ) -> None:
        """Index the given (already CRC-checked) batches of ``buf``. Raises ``BatchError`` if a
        batch's content is inconsistent (which a CRC-valid batch written by us never is); then
        nothing was added. This is the scan of a writer segment that has no index file after a
        crash: its records are walked into columns in one pass (``walk_records``) and the
        columns appended whole."""
        self.size_sums = None
        cols = rc.RecordColumns()
        ops: list[int] = []
        offs: list[int] = []
        lasts: list[int] = []
        last_seq, last_ts, epoch, covered = self.last_seq, self.last_ts, self.epoch, self.covered
        prev = self.seqs[-1] if self.seqs else -1
        for off, h in batches:
            raw = rc.raw_body(h, rc.check_body(buf, off, h), dctx, off)
            if not isinstance(raw, bytes):
                raw = bytes(raw)  # the subjects are sliced out of it as keys
            n0 = len(cols.seqs)
            rc.walk_records(raw, h, cols, file=True, base=off, fail=functools.partial(_bad_batch, off))
            if len(cols.seqs) > n0:
                # Within a batch ``walk_records`` checked the order; across batches, here.
                if cols.seqs[n0] <= prev:
                    raise rc.BatchError(off, f"record sequence {cols.seqs[n0]} not increasing", torn=False)
                prev = cols.seqs[-1]
            for a, b in rc.decode_ops(raw, h):
                ops.append(a)
                ops.append(b)
            offs.append(off)
            lasts.append(NULL_LAST if is_null(h) else h.last_seq)
            last_seq = max(last_seq, h.last_seq)
            last_ts = h.last_ts
            epoch = max(epoch, h.epoch)
            covered = off + h.size
        keys = {k: self.subject_index(subject_from_bytes(k)) for k in dict.fromkeys(cols.keys)}
        self.seqs.extend(cols.seqs)
        self.ts.extend(cols.ts)
        self.pos.extend(cols.pos)
        self.aux.extend(cols.aux)
        self.size.extend(cols.sizes)
        self.lsid.extend(array("I", map(keys.__getitem__, cols.keys)))
        self.ttl.update(cols.ttl)
        self.ops.extend(ops)
        self.batches.extend(offs)
        self.blast.extend(lasts)
        self.last_seq, self.last_ts, self.epoch, self.covered = last_seq, last_ts, epoch, covered
        if batches:
            self.has_batches = True


def _bad_batch(off: int, reason: str) -> rc.BatchError:
    return rc.BatchError(off, reason, torn=False)


def seg_table(d: SegmentData) -> PosTable:
    """The position table of a segment described by ``d``."""
    return PosTable.from_batches(d.batches, d.blast, d.covered)
