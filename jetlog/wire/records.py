"""Record batches: the unit of append, recovery, compression and (later) replication.

Sans-I/O: pure functions over ``bytes``/``memoryview``; nothing here touches a file.

A batch is self-describing so a follower can store a leader's bytes verbatim and decode them on
their own. All integers are little-endian.

Batch header (64 bytes, ``HEADER``)::

    off  size  field
      0     4  magic        b"JLB\\x01"
      4     4  hdr_crc      CRC32C of header bytes [8, 64)  (covers body_crc and every field below)
      8     4  body_crc     CRC32C of the body exactly as stored (compressed bytes if compressed)
     12     4  body_len     stored body length
     16     4  raw_len      body length after decompression (== body_len when not compressed)
     20     1  version      1
     21     1  flags        bit 0: body is zstd-compressed
     22     2  reserved     0
     24     4  n_records
     28     4  n_ops
     32     8  epoch        leader epoch (u64; 0 for a single node)
     40     8  base_seq     the stream's last sequence *before* this batch
     48     8  last_seq     the stream's last sequence *after* this batch (skips are representable)
     56     8  last_ts      the stream's last timestamp after this batch (i64 ns)

The header has its own CRC (in addition to the body CRC) for one reason: recovery must tell a
*torn* tail (a valid header whose body was only partly written) from *corruption*; a header
CRC lets the scanner trust ``body_len`` before it has read the body.

Body (after decompression): ``n_records`` records, then ``n_ops`` ops. Record (``REC``, 32 bytes
fixed, then the optional TTL and the variable parts)::

    crc u32 (CRC32C of every record byte after this field) | seq u64 | ts i64 | subj_len u16 |
    flags u8 (bit 0: has TTL) | reserved u8 | hdr_len u32 | data_len u32 |
    [ttl_expiry i64 if flags & 1] | subject (utf-8) | header block | data

The per-record CRC lets a single message read be verified without the batch. Sequences in a
batch are strictly increasing, all in ``(base_seq, last_seq]``, not necessarily contiguous.

Op (``OP``, 16 bytes): an inclusive removal range ``first u64 | last u64``. Ops only target
sequences stored before them; inside one batch records are applied before ops (ops never
target the batch's later records, since those have higher sequences than any op range).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, Protocol

from jetlog.errors import StorageError
from jetlog.wire.crc import crc32c
from jetlog.wire.subjects import subject_bytes, subject_from_bytes

MAGIC = b"JLB\x01"
VERSION = 1
F_ZSTD = 0x01
_KNOWN_FLAGS = F_ZSTD
RF_TTL = 0x01

HEADER = struct.Struct("<4sIIIIBBHIIQQQq")
HEADER_SIZE = HEADER.size  # 64
_HDR_TAIL = struct.Struct("<IIIBBHIIQQQq")  # header bytes [8, 64) for hdr_crc
REC = struct.Struct("<IQqHBBII")
REC_SIZE = REC.size  # 32
REC_NOCRC = struct.Struct("<QqHBBII")  # REC without its crc field (what the crc covers first)
TTL = struct.Struct("<q")
OP = struct.Struct("<QQ")
OP_SIZE = OP.size
CRC = struct.Struct("<I")

MAX_BODY = 1 << 30  # a header claiming more is impossible (segments roll far below this)
SPLIT_BODY = 1 << 20  # writers split pending batches larger than this


class BatchError(StorageError):
    """A batch could not be decoded. ``torn`` is True when the buffer simply ends before the
    batch does (an incomplete write), False for corruption (CRC mismatch, impossible header)."""

    def __init__(self, offset: int, reason: str, *, torn: bool) -> None:
        self.offset = offset
        self.reason = reason
        self.torn = torn
        super().__init__(f"{'torn' if torn else 'corrupt'} batch at offset {offset}: {reason}")


class Record(NamedTuple):
    """One decoded record. ``ttl`` is the absolute expiry in ns (0 = none)."""

    seq: int
    ts: int
    subject: str
    hdr: bytes
    data: bytes
    ttl: int = 0


class BatchHeader(NamedTuple):
    """The decoded fixed header of a batch."""

    body_crc: int
    body_len: int
    raw_len: int
    version: int
    flags: int
    n_records: int
    n_ops: int
    epoch: int
    base_seq: int
    last_seq: int
    last_ts: int

    @property
    def size(self) -> int:
        """Total stored size of the batch (header + stored body)."""
        return HEADER_SIZE + self.body_len

    @property
    def compressed(self) -> bool:
        return bool(self.flags & F_ZSTD)


class Batch(NamedTuple):
    """A fully decoded batch."""

    header: BatchHeader
    records: list[Record]
    ops: list[tuple[int, int]]


# ---- encoding -----------------------------------------------------------------------------


def encode_record(seq: int, ts: int, subject: bytes, hdr: bytes, data: bytes, ttl: int = 0) -> bytes:
    """Encode one record (with its CRC). ``subject`` is already utf-8 encoded."""
    if ttl:
        rec = REC_NOCRC.pack(seq, ts, len(subject), RF_TTL, 0, len(hdr), len(data)) + TTL.pack(ttl)
        rec = rec + subject + hdr + data
    else:
        rec = REC_NOCRC.pack(seq, ts, len(subject), 0, 0, len(hdr), len(data)) + subject + hdr + data
    return CRC.pack(crc32c(rec)) + rec


def record_size(subject_len: int, hdr_len: int, data_len: int, ttl: int = 0) -> int:
    """Encoded size of a record."""
    return REC_SIZE + (8 if ttl else 0) + subject_len + hdr_len + data_len


def encode_ops(ops: Iterable[Sequence[int]]) -> bytes:
    """Encode removal ranges ``[(first, last), ...]``."""
    return b"".join([OP.pack(a, b) for a, b in ops])


def build_header(
    body: bytes,
    raw_len: int,
    *,
    flags: int,
    n_records: int,
    n_ops: int,
    epoch: int,
    base_seq: int,
    last_seq: int,
    last_ts: int,
) -> bytes:
    """The 64-byte header for a stored ``body`` (already compressed if ``flags & F_ZSTD``)."""
    tail = _HDR_TAIL.pack(
        crc32c(body),
        len(body),
        raw_len,
        VERSION,
        flags,
        0,
        n_records,
        n_ops,
        epoch,
        base_seq,
        last_seq,
        last_ts,
    )
    return MAGIC + CRC.pack(crc32c(tail)) + tail


def seal_batch(
    raw_body: bytes,
    *,
    n_records: int,
    n_ops: int,
    epoch: int,
    base_seq: int,
    last_seq: int,
    last_ts: int,
    compressor: object | None = None,
) -> tuple[bytes, bytes]:
    """Turn a raw body (encoded records then encoded ops) into ``(header, stored_body)``.

    ``compressor`` is a ``zstandard.ZstdCompressor`` (not thread-safe: one per thread) or None.
    """
    flags = 0
    body = raw_body
    if compressor is not None and raw_body:
        body = compressor.compress(raw_body)  # type: ignore[attr-defined]
        flags = F_ZSTD
    hdr = build_header(
        body,
        len(raw_body),
        flags=flags,
        n_records=n_records,
        n_ops=n_ops,
        epoch=epoch,
        base_seq=base_seq,
        last_seq=last_seq,
        last_ts=last_ts,
    )
    return hdr, body


def encode_batch(
    records: Iterable[Record],
    ops: Iterable[Sequence[int]] = (),
    *,
    epoch: int = 0,
    base_seq: int,
    last_seq: int | None = None,
    last_ts: int | None = None,
    compressor: object | None = None,
) -> bytes:
    """Encode a whole batch. ``last_seq``/``last_ts`` default to the last record's values
    (``base_seq``/0 when there are no records)."""
    parts: list[bytes] = []
    prev = base_seq
    lts = 0
    for r in records:
        if r.seq <= prev:
            raise ValueError(f"record sequences must increase past base_seq ({r.seq} <= {prev})")
        parts.append(encode_record(r.seq, r.ts, subject_bytes(r.subject), r.hdr, r.data, r.ttl))
        prev = r.seq
        lts = r.ts
    op_list = [(int(a), int(b)) for a, b in ops]
    n_records = len(parts)
    parts.append(encode_ops(op_list))
    hdr, body = seal_batch(
        b"".join(parts),
        n_records=n_records,
        n_ops=len(op_list),
        epoch=epoch,
        base_seq=base_seq,
        last_seq=prev if last_seq is None else last_seq,
        last_ts=lts if last_ts is None else last_ts,
        compressor=compressor,
    )
    return hdr + body


# ---- decoding -----------------------------------------------------------------------------


def decode_header(buf: bytes | bytearray | memoryview, offset: int = 0) -> BatchHeader:
    """Decode and validate the header at ``offset``. Raises ``BatchError`` (torn when fewer than
    64 bytes remain)."""
    if len(buf) - offset < HEADER_SIZE:
        raise BatchError(offset, "incomplete header", torn=True)
    magic, hcrc = struct.unpack_from("<4sI", buf, offset)
    if magic != MAGIC:
        raise BatchError(offset, "bad magic", torn=False)
    if crc32c(memoryview(buf)[offset + 8 : offset + HEADER_SIZE]) != hcrc:
        raise BatchError(offset, "header crc mismatch", torn=False)
    (
        body_crc,
        body_len,
        raw_len,
        version,
        flags,
        _rsv,
        n_records,
        n_ops,
        epoch,
        base_seq,
        last_seq,
        last_ts,
    ) = _HDR_TAIL.unpack_from(buf, offset + 8)
    h = BatchHeader(
        body_crc,
        body_len,
        raw_len,
        version,
        flags,
        n_records,
        n_ops,
        epoch,
        base_seq,
        last_seq,
        last_ts,
    )
    reason = _impossible(h)
    if reason:
        raise BatchError(offset, reason, torn=False)
    return h


def _impossible(h: BatchHeader) -> str:
    if h.version != VERSION:
        return f"unknown version {h.version}"
    if h.flags & ~_KNOWN_FLAGS:
        return f"unknown flags {h.flags:#x}"
    if h.body_len > MAX_BODY or h.raw_len > MAX_BODY:
        return "impossible body length"
    if not h.flags & F_ZSTD and h.raw_len != h.body_len:
        return "raw length differs from body length in an uncompressed batch"
    if h.last_seq < h.base_seq or h.n_records > h.last_seq - h.base_seq:
        return "impossible sequence range"
    if h.n_records * REC_SIZE + h.n_ops * OP_SIZE > h.raw_len:
        return "counts exceed body length"
    return ""


def check_body(buf: bytes | bytearray | memoryview, offset: int, h: BatchHeader) -> memoryview:
    """Return the stored body of the batch at ``offset`` after checking it is complete and its
    CRC matches."""
    start = offset + HEADER_SIZE
    end = start + h.body_len
    if end > len(buf):
        raise BatchError(offset, "incomplete body", torn=True)
    body = memoryview(buf)[start:end]
    if crc32c(body) != h.body_crc:
        raise BatchError(offset, "body crc mismatch", torn=False)
    return body


def raw_body(
    h: BatchHeader, body: bytes | memoryview, decompressor: object | None = None, offset: int = 0
) -> bytes | memoryview:
    """The decompressed body. ``decompressor`` is a ``zstandard.ZstdDecompressor`` (required
    for compressed batches; one per thread)."""
    if not h.flags & F_ZSTD:
        return body
    if decompressor is None:
        raise BatchError(offset, "compressed batch needs a decompressor", torn=False)
    try:
        out: bytes = decompressor.decompress(body, max_output_size=h.raw_len)  # type: ignore[attr-defined]
    except Exception as exc:  # zstd raises its own ZstdError; any failure means corruption here
        raise BatchError(offset, f"zstd: {exc}", torn=False) from exc
    if len(out) != h.raw_len:
        raise BatchError(offset, "decompressed length mismatch", torn=False)
    return out


def decode_record(body: bytes | bytearray | memoryview, off: int, verify: bool = True) -> tuple[Record, int]:
    """Decode the record at ``off`` of a raw body; return it and the offset after it."""
    try:
        crc, seq, ts, slen, flags, _rsv, hlen, dlen = REC.unpack_from(body, off)
    except struct.error as exc:
        raise BatchError(off, "truncated record header", torn=False) from exc
    p = off + REC_SIZE
    ttl = 0
    if flags & RF_TTL:
        (ttl,) = TTL.unpack_from(body, p)
        p += 8
    end = p + slen + hlen + dlen
    if end > len(body):
        raise BatchError(off, "record overruns body", torn=False)
    mv = memoryview(body)
    if verify and crc32c(mv[off + 4 : end]) != crc:
        raise BatchError(off, f"record crc mismatch (seq {seq})", torn=False)
    # Subjects need not be UTF-8 (nats-server stores any bytes); the CRC guards them.
    subject = subject_from_bytes(bytes(mv[p : p + slen]))
    p += slen
    return Record(seq, ts, subject, bytes(mv[p : p + hlen]), bytes(mv[p + hlen : end]), ttl), end


def decode_ops(body: bytes | bytearray | memoryview, h: BatchHeader) -> list[tuple[int, int]]:
    """The removal ranges of a raw body."""
    start = h.raw_len - h.n_ops * OP_SIZE
    return [OP.unpack_from(body, start + i * OP_SIZE) for i in range(h.n_ops)]


def decode_batch(
    buf: bytes | bytearray | memoryview, offset: int = 0, *, decompressor: object | None = None
) -> tuple[Batch, int]:
    """Decode the batch at ``offset``; return it and the offset of the next batch.

    Raises ``BatchError`` with ``torn`` set when the buffer ends inside the batch.
    """
    h = decode_header(buf, offset)
    body = raw_body(h, check_body(buf, offset, h), decompressor, offset)
    recs_end = h.raw_len - h.n_ops * OP_SIZE
    records: list[Record] = []
    p = 0
    prev = h.base_seq
    for _ in range(h.n_records):
        rec, p = decode_record(body, p)
        if rec.seq <= prev or rec.seq > h.last_seq:
            raise BatchError(offset, f"record sequence {rec.seq} out of order", torn=False)
        prev = rec.seq
        records.append(rec)
    if p != recs_end:
        raise BatchError(offset, "records do not fill the body", torn=False)
    return Batch(h, records, decode_ops(body, h)), offset + h.size


class RecordMeta(NamedTuple):
    """Where a record sits in a raw body and what the index needs, without copying payloads."""

    off: int
    length: int
    seq: int
    ts: int
    subject: bytes
    hdr_len: int
    data_len: int
    ttl: int


def iter_record_meta(
    body: bytes | bytearray | memoryview, h: BatchHeader, offset: int = 0
) -> list[RecordMeta]:
    """Metadata of every record of a (CRC-checked, decompressed) raw body, validating the
    layout (sequence order and lengths). ``offset`` is only used in error messages."""
    out: list[RecordMeta] = []
    unpack = REC.unpack_from
    blen = h.raw_len - h.n_ops * OP_SIZE
    mv = memoryview(body)
    p = 0
    prev = h.base_seq
    try:
        for _ in range(h.n_records):
            _crc, seq, ts, slen, flags, _rsv, hlen, dlen = unpack(body, p)
            q = p + REC_SIZE
            ttl = 0
            if flags & RF_TTL:
                (ttl,) = TTL.unpack_from(body, q)
                q += 8
            end = q + slen + hlen + dlen
            if seq <= prev or seq > h.last_seq or end > blen:
                raise BatchError(offset, f"bad record layout at body offset {p}", torn=False)
            out.append(RecordMeta(p, end - p, seq, ts, bytes(mv[q : q + slen]), hlen, dlen, ttl))
            prev = seq
            p = end
    except struct.error as exc:
        raise BatchError(offset, "truncated record", torn=False) from exc
    if p != blen:
        raise BatchError(offset, "records do not fill the body", torn=False)
    return out


AUX_COMPRESSED = 0x80000000
"""Index ``aux`` flag: the record lives in a compressed batch (its ``pos`` is the batch's, the
rest of ``aux`` its offset in the raw body)."""


class RecordSink(Protocol):
    """Columns ``walk_records`` appends to (the replica reply's, ``RecordColumns``)."""

    @property
    def seqs(self) -> array[int]: ...
    @property
    def ts(self) -> array[int]: ...
    @property
    def keys(self) -> list[bytes]: ...
    @property
    def sizes(self) -> array[int]: ...
    @property
    def pos(self) -> array[int]: ...
    @property
    def aux(self) -> array[int]: ...
    @property
    def payloads(self) -> list[tuple[bytes, bytes] | None]: ...
    @property
    def ttl(self) -> list[tuple[int, int]]: ...


class RecordColumns:
    """Empty columns for ``walk_records``."""

    __slots__ = ("aux", "keys", "payloads", "pos", "seqs", "sizes", "ts", "ttl")

    def __init__(self) -> None:
        self.seqs: array[int] = array("Q")
        self.ts: array[int] = array("q")
        self.keys: list[bytes] = []
        self.sizes: array[int] = array("I")
        self.pos: array[int] = array("I")
        self.aux: array[int] = array("I")
        self.payloads: list[tuple[bytes, bytes] | None] = []
        self.ttl: list[tuple[int, int]] = []


def walk_records(
    raw: bytes, h: BatchHeader, out: RecordSink, *, file: bool, base: int, fail: Callable[[str], Exception]
) -> None:
    """Append the records of a (CRC-checked, decompressed) raw body to ``out``'s columns in one
    pass, no object per record but its subject, checking the layout as ``iter_record_meta``
    does (``fail(reason)`` is raised). ``file``: a file store's columns, ``pos`` relative to
    ``base`` (the batch's offset: the record's own position, or the batch's when it is
    compressed) and the file-store size formula; else a memory store's, with the payloads.
    Recovery and a follower's appends both index records this way (~1.2 µs a record here,
    against ~2 µs through ``iter_record_meta``'s tuples)."""
    unpack = REC.unpack_from
    seqs, ts, keys, sizes, pos, aux = out.seqs, out.ts, out.keys, out.sizes, out.pos, out.aux
    payloads = out.payloads
    blen = h.raw_len - h.n_ops * OP_SIZE
    compressed = h.compressed
    top = h.last_seq
    prev = h.base_seq
    at = base + HEADER_SIZE
    p = 0
    try:
        for _ in range(h.n_records):
            _crc, seq, t, slen, flags, _rsv, hlen, dlen = unpack(raw, p)
            q = p + REC_SIZE
            if flags & RF_TTL:
                out.ttl.append((seq, TTL.unpack_from(raw, q)[0]))
                q += 8
            d = q + slen + hlen
            end = d + dlen
            if seq <= prev or seq > top or end > blen:
                raise fail(f"bad record layout at body offset {p}")
            seqs.append(seq)
            ts.append(t)
            keys.append(raw[q : q + slen])
            if file:
                # nats-server's file-store accounting (``segment.file_msg_size``)
                sizes.append(30 + slen + dlen + (4 + hlen if hlen else 0))
                if compressed:
                    pos.append(base)
                    aux.append(AUX_COMPRESSED | p)
                else:
                    pos.append(at + p)
                    aux.append(end - p)
            else:
                sizes.append(slen + hlen + dlen + 16)
                payloads.append((raw[q + slen : d], raw[d:end]))
            prev = seq
            p = end
    except struct.error as exc:
        raise fail("truncated record") from exc
    if p != blen:
        raise fail("records do not fill the body")
