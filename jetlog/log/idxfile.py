"""The ``.idx`` file of a segment: its format, encoding, and decoding over a mapping.

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

import os
import struct
import sys
from array import array
from typing import Any, cast

from jetlog.log import mapfile
from jetlog.log.columns import one_value
from jetlog.log.positions import NULL_LAST, is_null
from jetlog.log.segment import SegmentData, SegmentIO
from jetlog.wire import records as rc
from jetlog.wire.crc import crc32c
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
_LITTLE = sys.byteorder == "little"


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
