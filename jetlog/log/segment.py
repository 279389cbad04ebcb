"""One segment file and its index file: the I/O seam, per-segment metadata, the ``.idx`` format,
and turning segment bytes into index columns.

Files of a store directory::

    %020d.log   a segment: consecutive record batches (``jetlog.wire.records``); the name is
                the segment's base sequence (the first sequence it could hold: the stream's
                ``last_seq + 1`` when it was created)
    %020d.idx   the segment's index, written when the segment is sealed or the store closed
    LOCK        flock'ed by the process that has the store open
    quarantine/ corrupt segment files moved aside by recovery

Index file (little-endian; trusted only if its CRC is valid, its base matches, the segment is
at least ``covered`` bytes long, and every listed batch position holds a valid batch)::

    header (``IDX``): magic b"JLX\\x01" | crc u32 (CRC32C of every byte after this field) |
        version u16 (4) | flags u16 (bit 0: the segment was rewritten by compaction; bit 1:
        the content crc is set) |
        base u64 | covered u64 (segment bytes described) |
        n_records u32 | n_ops u32 | n_batches u32 | n_subjects u32 | n_ttl u32 |
        last_seq u64 | last_ts i64 | epoch u64 | content crc u32 (CRC32C of the segment's
        first ``covered`` bytes, computed only from bytes whose batches were checked, or
        from the bytes as written for a segment the process wrote from its first byte) |
        sum chunk u32 | n_sums u32
    columns: seqs Q[n] | ts q[n] | pos I[n] | aux I[n] | size I[n] | subject index I[n] |
        ttl entry index I[n_ttl] | ttl expiry q[n_ttl] | ops Q[2*n_ops] | batch offsets Q[n_batches] |
        batch last_seqs Q[n_batches] (``positions.NULL_LAST`` for null batches) |
        subject keys I[n_subjects] | subject lengths I[n_subjects] | subject bytes |
        size sums Q[n_sums] (the sum of ``size`` over each run of ``sum chunk`` records)

(Version 1 had no batch last_seqs; such a file is rebuilt from its segment on open. Version 2
had no content crc; such a file is checked batch by batch against its segment, as before.
Version 3 had no size sums; the index sums its columns on open instead.)

The size sums let a restart count a sealed segment's bytes without reading its ``size``
column: summing 10M entries in Python was a tenth of a restart's CPU.

The content crc makes opening a cleanly closed store cheap: one CRC32C over each segment
(C speed) proves the bytes are those the index was made from, instead of decoding and
checking every batch in Python. When it does not match, the segment is checked batch by batch
and rebuilt (a damaged batch is found and handled exactly as without an index).

Subject indexes are arbitrary u32 keys into the file's subject table (a writer may use its own
subject ids, which keeps writing an index free of per-record Python work).

The index describes the file content (every record, dead or alive, and every op), never
in-memory liveness: loading an index and replaying ops gives exactly what a full scan gives.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from array import array
from collections import OrderedDict
from typing import Any, Protocol, cast

from crc32c import crc32c

from jetlog.log import mapfile
from jetlog.log.columns import one_value, own_columns
from jetlog.log.positions import NULL_LAST, PosTable, is_null
from jetlog.wire import records as rc
from jetlog.wire.subjects import subject_bytes, subject_from_bytes

IDX = struct.Struct("<4sIHHQQIIIIIQqQ")
"""The index header of versions 1 and 2; version 3 follows it with the content crc."""
IDX_CONTENT = struct.Struct("<I")
IDX_SUMS = struct.Struct("<II")
"""Version 4: the size sums' chunk length and count, after the content crc."""
IDX_MAGIC = b"JLX\x01"
IDX_VERSION = 4
SUM_CHUNK = 8192
"""Records per size sum: the in-memory index's block length (``index.BLOCK_MAX``), so that a
sealed segment's blocks take their byte counts from the file."""
IDX_REWRITTEN = 0x1  # flags: compaction rewrote the segment (its batch positions changed)
IDX_HAS_CONTENT_CRC = 0x2  # flags: the content crc is set
COMPRESSED = 0x80000000  # aux high bit: record lives in a compressed batch at ``pos``
AUX_MASK = 0x7FFFFFFF
BODY_CACHE = 8  # decompressed batch bodies a store keeps for reads
_LITTLE = sys.byteorder == "little"


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


class OsIO:
    """``SegmentIO`` on the real file system."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)

    def write(self, fd: int, bufs: list[bytes], at: int) -> None:
        # pwritev in chunks (IOV_MAX is 1024 on Linux); a short write is retried from where it
        # stopped, an error propagates (and fails the store). Positional, not O_APPEND: the
        # file may be preallocated past the data (``preallocate``).
        i = 0
        while i < len(bufs):
            chunk = bufs[i : i + 512]
            want = sum(len(b) for b in chunk)
            done = os.pwritev(fd, chunk, at)
            at += done
            if done != want:
                rest = b"".join(chunk)[done:]
                while rest:
                    n = os.pwrite(fd, rest, at)
                    rest = rest[n:]
                    at += n
            i += 512

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


def checked_content_crc(
    io: SegmentIO, path: str, covered: int, batches: array[int], blast: array[int]
) -> int | None:
    """The content crc of a segment's index file: CRC32C of the file's first ``covered`` bytes,
    read back from disk, if the batches the index lists are all there and valid (None
    otherwise: the index is then written without it and checked batch by batch on open).
    Blocking: call it in a thread. A crc of unchecked bytes would vouch for damage already
    on disk."""
    fd = io.open(path, os.O_RDONLY)
    try:
        buf = io.pread(fd, covered, 0) if covered else b""
    finally:
        io.close(fd)
    d = SegmentData(0)
    d.batches, d.blast, d.covered = batches, blast, covered
    if len(buf) != covered or not verify_idx(d, buf, check_crc=True):
        return None
    return crc32c(buf)


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
        batch's content is inconsistent (which a CRC-valid batch written by us never is)."""
        self.size_sums = None
        for off, h in batches:
            body = rc.raw_body(h, rc.check_body(buf, off, h), dctx, off)
            compressed = h.compressed
            for m in rc.iter_record_meta(body, h, off):
                if self.seqs and m.seq <= self.seqs[-1]:
                    raise rc.BatchError(off, f"record sequence {m.seq} not increasing", torn=False)
                self.seqs.append(m.seq)
                self.ts.append(m.ts)
                if compressed:
                    self.pos.append(off)
                    self.aux.append(COMPRESSED | m.off)
                else:
                    self.pos.append(off + rc.HEADER_SIZE + m.off)
                    self.aux.append(m.length)
                self.size.append(file_msg_size(len(m.subject), m.hdr_len, m.data_len))
                self.lsid.append(self.subject_index(subject_from_bytes(m.subject)))
                if m.ttl:
                    self.ttl[m.seq] = m.ttl
            for a, b in rc.decode_ops(body, h):
                self.ops.append(a)
                self.ops.append(b)
            self.batches.append(off)
            self.blast.append(NULL_LAST if is_null(h) else h.last_seq)
            self.last_seq = max(self.last_seq, h.last_seq)
            self.last_ts = h.last_ts
            self.epoch = max(self.epoch, h.epoch)
            self.covered = off + h.size
            self.has_batches = True


# ---- index files --------------------------------------------------------------------------


def _le(a: array[Any]) -> bytes:
    if not _LITTLE:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def encode_idx(
    base: int,
    covered: int,
    seqs: array[int],
    ts: array[int],
    pos: array[int],
    aux: array[int],
    size: array[int],
    lsid: array[int],
    subjects: dict[int, str],
    ttl: dict[int, int],
    ops: array[int],
    batches: array[int],
    blast: array[int],
    last_seq: int,
    last_ts: int,
    epoch: int,
    rewritten: bool = False,
    *,
    content_crc: int | None,
) -> bytes:
    """Serialize an index file (``content_crc``: CRC32C of the segment's first ``covered``
    bytes, see :func:`content_crc`)."""
    n = len(seqs)
    ttl_idx = array("I")
    ttl_exp = array("q")
    if ttl:
        where = {s: i for i, s in enumerate(seqs) if s in ttl}
        for s, exp in sorted(ttl.items()):
            i = where.get(s)
            if i is not None:
                ttl_idx.append(i)
                ttl_exp.append(exp)
    keys = array("I", subjects.keys())
    raw = [subject_bytes(s) for s in subjects.values()]
    sums = array("Q", [sum(size[c : c + SUM_CHUNK]) for c in range(0, n, SUM_CHUNK)])
    lens = array("I", [len(b) for b in raw])
    body = b"".join(
        [
            _le(seqs),
            _le(ts),
            _le(pos),
            _le(aux),
            _le(size),
            _le(lsid),
            _le(ttl_idx),
            _le(ttl_exp),
            _le(ops),
            _le(batches),
            _le(blast),
            _le(keys),
            _le(lens),
            *raw,
            _le(sums),
        ]
    )
    tail = (
        IDX.pack(
            IDX_MAGIC,
            0,
            IDX_VERSION,
            (IDX_REWRITTEN if rewritten else 0) | (IDX_HAS_CONTENT_CRC if content_crc is not None else 0),
            base,
            covered,
            n,
            len(ops) // 2,
            len(batches),
            len(subjects),
            len(ttl_idx),
            last_seq,
            last_ts,
            epoch,
        )[8:]
        + IDX_CONTENT.pack(content_crc or 0)
        + IDX_SUMS.pack(SUM_CHUNK, len(sums))
    )
    crc = crc32c(body, crc32c(tail))
    return IDX_MAGIC + struct.pack("<I", crc) + tail + body


def _keys_known(lsid: array[int], subjects: dict[int, str]) -> bool:
    """Every subject key of the records is in the file's subject table."""
    if not lsid:
        return True
    if not subjects:
        return False
    if len(subjects) == 1:
        # One subject (a segment of a single-subject stream): a byte comparison.
        (key,) = subjects
        return lsid[0] == key and one_value(lsid)
    lo, hi = min(subjects), max(subjects)
    if hi - lo + 1 == len(subjects):
        # Contiguous keys (what writers produce): two passes in C instead of a set of keys.
        return lo <= min(lsid) and max(lsid) <= hi
    return set(lsid) <= subjects.keys()


def map_idx(path: str, base: int) -> SegmentData | None:
    """The index file at ``path``, parsed over a read-only mapping of it (None if absent,
    damaged or of another segment).

    Its six per-message columns are not copied: they are views of the mapping (``views`` in
    :func:`decode_idx`), which the in-memory index's blocks keep. A restart of 10M stored
    messages used to read 330 MB of index files into new anonymous memory: ~127k page faults,
    most of its time on this VM. Mapped, the pages are the page cache's own (one fault maps
    sixteen). Safe because an index file is never written in place: it is replaced by a rename
    or unlinked (``write_idx_file``, compaction, truncation, the scrub), and a mapping keeps
    the file it was made of (``mapfile``)."""
    if not (_LITTLE and mapfile.AVAILABLE):
        try:
            with open(path, "rb") as f:
                return decode_idx(f.read(), base)
        except FileNotFoundError:
            return None
    view = mapfile.map_file(path)
    return None if view is None else decode_idx(view, base, views=True)


def decode_idx(buf: bytes | memoryview, base: int, *, views: bool = False) -> SegmentData | None:
    """Parse an index file; None if it is damaged or belongs to another segment. ``views``
    (a little-endian host): the per-message columns are read-only views into ``buf`` (cast
    ``memoryview``s, which index, slice, bisect and sum like the arrays); the others are
    copied, as the store appends to them."""
    if len(buf) < IDX.size:
        return None
    (
        magic,
        crc,
        version,
        flags,
        ibase,
        covered,
        n,
        n_ops,
        n_batches,
        n_subj,
        n_ttl,
        last_seq,
        last_ts,
        epoch,
    ) = IDX.unpack_from(buf, 0)
    if magic != IDX_MAGIC or version not in (2, 3, IDX_VERSION) or ibase != base:
        return None
    if crc32c(memoryview(buf)[8:]) != crc:
        return None
    d = SegmentData(base)
    p = IDX.size
    if version >= 3:
        if len(buf) < p + IDX_CONTENT.size:
            return None
        if flags & IDX_HAS_CONTENT_CRC:
            (d.content_crc,) = IDX_CONTENT.unpack_from(buf, p)
        p += IDX_CONTENT.size
    n_sums = 0
    if version >= 4:
        if len(buf) < p + IDX_SUMS.size:
            return None
        d.sum_chunk, n_sums = IDX_SUMS.unpack_from(buf, p)
        p += IDX_SUMS.size

    view = memoryview(buf)

    def take(typecode: str, count: int, as_view: bool = False) -> array[Any]:
        nonlocal p
        a = array(typecode)
        nbytes = a.itemsize * count
        if p + nbytes > len(buf):
            raise ValueError("short index file")
        if as_view and count:
            # Read-only: a store that wrote to one would raise, never change the file.
            col = view[p : p + nbytes].cast(typecode)  # type: ignore[call-overload]
            p += nbytes
            return cast("array[Any]", col)
        a.frombytes(view[p : p + nbytes])  # one copy (a bytes slice would make two)
        if not _LITTLE:
            a.byteswap()
        p += nbytes
        return a

    try:
        d.seqs = take("Q", n, views)
        d.ts = take("q", n, views)
        d.pos = take("I", n, views)
        d.aux = take("I", n, views)
        d.size = take("I", n, views)
        d.lsid = take("I", n, views)
        ttl_idx = take("I", n_ttl)
        ttl_exp = take("q", n_ttl)
        d.ops = take("Q", 2 * n_ops)
        d.batches = take("Q", n_batches)
        d.blast = take("Q", n_batches)
        keys = take("I", n_subj)
        lens = take("I", n_subj)
        for key, ln in zip(keys, lens, strict=True):
            name = subject_from_bytes(bytes(buf[p : p + ln]))
            d.subjects[key] = name
            d._subj_ix[name] = key
            p += ln
        if version >= 4:
            d.size_sums = take("Q", n_sums)
            if d.sum_chunk <= 0 or n_sums != -(-n // d.sum_chunk):
                return None
        d._next_key = max(keys, default=-1) + 1
        if p != len(buf) or not _keys_known(d.lsid, d.subjects):
            return None
        d.ttl = {d.seqs[i]: int(e) for i, e in zip(ttl_idx, ttl_exp, strict=True) if i < n}
    except (ValueError, UnicodeDecodeError):
        return None
    d.covered = covered
    d.last_seq = last_seq
    d.last_ts = last_ts
    d.epoch = epoch
    d.has_batches = bool(n_batches)
    d.rewritten = bool(flags & IDX_REWRITTEN)
    return d


def verify_idx(d: SegmentData, buf: bytes, *, check_crc: bool) -> bool:
    """True if the index describes ``buf[:covered]``: its content crc matches (version 3, when
    ``check_crc``), or its batch offsets tile it exactly with valid batches whose last
    sequences it lists."""
    if d.covered > len(buf):
        return False
    if check_crc and d.content_crc is not None:
        return crc32c(memoryview(buf)[: d.covered]) == d.content_crc
    p = 0
    for off, last in zip(d.batches, d.blast, strict=True):
        if off != p:
            return False
        try:
            h = rc.decode_header(buf, off)
            if check_crc:
                rc.check_body(buf, off, h)
        except rc.BatchError:
            return False
        if last != (NULL_LAST if is_null(h) else h.last_seq):
            return False
        p = off + h.size
    return p == d.covered


def seg_table(d: SegmentData) -> PosTable:
    """The position table of a segment described by ``d``."""
    return PosTable.from_batches(d.batches, d.blast, d.covered)
