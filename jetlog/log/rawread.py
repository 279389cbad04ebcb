"""Bulk reads: runs of stored records (JLR1, :mod:`jetlog.wire.rawframe`) and the file store's
``iter_range`` reader (``bulk_reader``).

A file store's records sit in its segment files back to back inside each batch, already in the
wire layout with their CRCs. A read of a committed range therefore becomes: walk the index for
runs of live entries, split them where the bytes are not contiguous (batch headers, compressed
batches), and ``pread`` each run in one call. Python work is per run, not per record; the
records are checked (CRC) and columnized by the reader.

Anything the fast path cannot serve as stored bytes — a compressed batch, a store without
segment files — is re-encoded record by record into a run of its own (still correct, just the
old cost).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable
from operator import sub
from typing import TYPE_CHECKING, NamedTuple, Protocol

from jetlog.errors import StorageError
from jetlog.log.runstops import run_stops
from jetlog.log.segment import CHUNK, COMPRESSED
from jetlog.log.store import StoredMsg
from jetlog.wire import rawframe as rf
from jetlog.wire import records as rc
from jetlog.wire.crc import crc32c
from jetlog.wire.subjects import subject_bytes

if TYPE_CHECKING:
    from jetlog.log.index import Block, Index
    from jetlog.log.segment import Segment, SegmentIO


class RawReadHost(Protocol):
    """What the bulk readers use of a ``FileStore`` (which satisfies this structurally)."""

    _io: SegmentIO
    _ix: Index
    _committed: int
    _chunks: OrderedDict[tuple[int, int, int], bytes]

    @property
    def committed_seq(self) -> int: ...

    def _read(self, blk: Block, i: int) -> StoredMsg: ...
    def _open_fd(self, seg: Segment) -> int: ...


class RawRead(NamedTuple):
    """Runs of one reply. ``too_big`` is the sequence of a record that alone exceeds the budget
    (nothing else is returned then); ``next_seq`` is the first sequence not covered."""

    runs: list[rf.Run]
    nrec: int
    next_seq: int
    too_big: int = 0


def _encoded(m: StoredMsg) -> bytes:
    return rc.encode_record(m.seq, m.ts, subject_bytes(m.subject), m.hdr, m.data)


def runs_from_messages(msgs: Iterable[StoredMsg], start: int, stop: int, budget: int, limit: int) -> RawRead:
    """The generic path: records re-encoded into one run (any store). ``stop`` is exclusive."""
    used = rf.FRAME_OVERHEAD + rf.RUN_OVERHEAD
    pos: list[int] = []
    parts: list[bytes] = []
    off = 0
    next_seq = start
    for m in msgs:
        rec = _encoded(m)
        if len(pos) >= limit or (used + rf.ROW_OVERHEAD + len(rec) > budget and pos):
            return RawRead(_one_run(pos, parts), len(pos), next_seq)
        if used + rf.ROW_OVERHEAD + len(rec) > budget:
            return RawRead([], 0, m.seq, too_big=m.seq)
        used += rf.ROW_OVERHEAD + len(rec)
        pos.append(off)
        parts.append(rec)
        off += len(rec)
        next_seq = m.seq + 1
    return RawRead(_one_run(pos, parts), len(pos), max(next_seq, stop))


def _one_run(pos: list[int], parts: list[bytes]) -> list[rf.Run]:
    if not pos:
        return []
    return [rf.Run(len(pos), array("I", pos).tobytes(), 0, b"".join(parts))]


class _Open(NamedTuple):
    """The last run, when it may continue in the next index block: it began an uncompressed
    stored batch without ops and did not hold all of it (``head`` that batch's header), or it
    began inside a batch (``head`` None: a range's first run, cut). Its segment, the file
    position where it ends, and its first sequence (the batch's when ``head`` is set)."""

    seg: Segment
    end: int
    head: rc.BatchHeader | None
    first_seq: int


def read_runs(
    store: RawReadHost, start: int, stop: int, budget: int, limit: int, *, check_cuts: bool = False
) -> RawRead:
    """Committed live records ``start <= seq < stop`` of a file store as runs of stored bytes,
    at most ``budget`` frame bytes and ``limit`` records.

    ``check_cuts`` (replies to a reader): the first and last runs, when the range cuts their
    stored batch, are checked here against the batch's stored CRC (:func:`_check_cut`)."""
    where: list[_Where | None] = []
    got = _read_runs(store, start, stop, budget, limit, where)
    if check_cuts and got.runs:
        runs = got.runs
        for i in {0, len(runs) - 1}:
            run, at = runs[i], where[i]
            if run.flags or at is None:
                continue
            crc = _check_cut(store, at, run)
            if crc is not None:
                runs[i] = run._replace(flags=rf.RUN_CHECKED, crc=crc)
    return got


class _Where(NamedTuple):
    """Where a run of stored bytes came from: its index block, its first entry there, and the
    header of its batch when the run begins that batch."""

    blk: Block
    k: int
    head: rc.BatchHeader | None


def _read_runs(
    store: RawReadHost, start: int, stop: int, budget: int, limit: int, where: list[_Where | None]
) -> RawRead:
    """:func:`read_runs`; ``where`` receives one entry per run appended (``None`` for runs
    re-encoded or joined across index blocks)."""
    last = min(stop - 1, store.committed_seq)
    runs: list[rf.Run] = []
    used = rf.FRAME_OVERHEAD
    count = 0
    next_seq = start
    # JOIN: an index block ends wherever its 8,192nd entry falls, usually inside a stored
    # batch, so a batch often arrives here as two runs (one per block), contiguous in the same
    # file. They are joined again, so the reader checks the batch with one CRC call instead
    # of one per record (a read of ~10k small records per frame crossed a block boundary in
    # nearly every frame: ~a quarter of all records went through the per-record check).
    tail: _Open | None = None
    for blk, i, j in store._ix.iter_live_runs(start, last):
        # Run ends are computed for a window of the block that covers what the byte budget can
        # still take (a fetch of ~1 MiB reads ~10k small records, a block holds up to 8,192
        # entries: computing them for the whole live range cost a third of the node's time).
        stops: bytes | None = None
        s_from = s_to = i
        k = i
        while k < j:
            seq = blk.seqs[k]
            if count >= limit:
                return RawRead(runs, count, seq)
            if blk.aux[k] & COMPRESSED:
                # Inside a compressed batch: decompress (cached) and re-encode this one record.
                rec = _encoded(store._read(blk, k))
                size = rf.RUN_OVERHEAD + rf.ROW_OVERHEAD + len(rec)
                if used + size > budget:
                    return RawRead(runs, count, seq, too_big=0 if count else seq)
                runs.append(rf.single(rec))
                where.append(None)
                used += size
                count += 1
                next_seq = seq + 1
                k += 1
                tail = None
                continue
            if stops is None or k >= s_to:
                # Entries from s_to on start past the remaining budget: no run can reach them.
                s_from = k
                s_to = min(j, bisect_right(blk.pos, blk.pos[k] + max(budget - used, 0), k, j) + 1)
                stops = run_stops(blk, s_from, s_to)
            f = stops.find(1, k - s_from)
            e = min(s_to if f < 0 else s_from + f + 1, k + (limit - count))
            base = blk.pos[k]
            cut = _fit(blk, k, e, budget - used - rf.RUN_OVERHEAD)
            if cut == k:
                return RawRead(runs, count, seq, too_big=0 if count else seq)
            # The batch the last run began, when this run continues it (JOIN).
            cont = tail if tail is not None and tail.seg is blk.seg and tail.end == base else None
            if cut < e and used >= budget // 2:
                # The budget would cut this run (most often one stored batch) short. With the
                # frame already half full, end it before the run instead: the next read starts
                # at the run's first record, so both frames carry whole batches, which the
                # reader checks with one CRC call each instead of one per record.
                if cont is not None and cont.head is not None and len(runs) > 1:
                    # The batch began in the last run (JOIN): leave all of it to the next read.
                    return RawRead(runs[:-1], count - runs[-1].nrec, cont.first_seq)
                return RawRead(runs, count, seq)
            length = blk.pos[cut - 1] + blk.aux[cut - 1] - base
            head: rc.BatchHeader | None
            if cont is not None:
                prev = runs[-1]
                data: bytes | memoryview = bytes(prev.data) + _pread(store, blk, base, length)
                head, first = cont.head, cont.first_seq
                whole = head is not None and head.body_len == len(data)
                runs[-1] = rf.Run(
                    prev.nrec + cut - k,
                    prev.pos + blk.pos[k:cut].tobytes(),
                    prev.pos_base,
                    data,
                    rf.RUN_WHOLE_BATCH if whole else 0,
                    head.body_crc if head is not None and whole else 0,
                )
                # ``where[-1]`` still names the joined run's first entry: its bytes go on back
                # to back in the file, which is all ``_check_cut`` needs of it.
                used += rf.ROW_OVERHEAD * (cut - k) + length
            else:
                data, flags, crc, head = _pread_run(store, blk, base, length)
                runs.append(rf.Run(cut - k, blk.pos[k:cut].tobytes(), base, data, flags, crc))
                where.append(None if flags else _Where(blk, k, head))
                used += rf.RUN_OVERHEAD + rf.ROW_OVERHEAD * (cut - k) + length
                first, whole = seq, bool(flags)
            # A batch split by an index block continues in the next one (JOIN): a run that began
            # it (``head``) or, for a range's first run, one that began inside it (no ``head``,
            # nothing before it in this reply). A run after a gap inside a batch is not joined.
            joinable = head is not None or len(runs) == 1
            tail = _Open(blk.seg, base + length, head, first) if joinable and not whole else None
            count += cut - k
            next_seq = blk.seqs[cut - 1] + 1
            if cut < e:
                return RawRead(runs, count, next_seq)  # the budget is spent
            k = e
    return RawRead(runs, count, max(next_seq, last + 1, start))


def _fit(blk: Block, k: int, e: int, room: int) -> int:
    """Largest ``cut`` in ``[k, e]`` such that entries ``k..cut-1`` (a contiguous run) take at
    most ``room`` frame bytes: their stored bytes plus one position each."""
    pos, aux = blk.pos, blk.aux
    base = pos[k]
    if pos[e - 1] + aux[e - 1] - base + rf.ROW_OVERHEAD * (e - k) <= room:
        return e
    # Upper bound from the start positions alone, then bisect on the exact cost.
    lo, hi = k, bisect_right(pos, base + room, k, e)
    while lo < hi:
        mid = (lo + hi + 1) // 2  # candidate cut
        if pos[mid - 1] + aux[mid - 1] - base + rf.ROW_OVERHEAD * (mid - k) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _pread_run(
    store: RawReadHost, blk: Block, base: int, length: int
) -> tuple[bytes | memoryview, int, int, rc.BatchHeader | None]:
    """The run's bytes; (flag, stored body CRC) when the run is exactly one whole batch body;
    and the header of the batch the run begins, when it begins an uncompressed batch without
    ops (``None`` otherwise).

    The 64 bytes before the run are read with it: when they are the batch's header (valid
    header CRC, uncompressed, no ops, body length equal to the run), the reader can check the
    whole run against the stored body CRC in one call. Otherwise they are just the tail of
    earlier records (the run starts mid-batch) and the reader checks record CRCs one by one.
    """
    if base < rc.HEADER_SIZE:
        return _pread(store, blk, base, length), 0, 0, None
    buf = _pread(store, blk, base - rc.HEADER_SIZE, length + rc.HEADER_SIZE)
    data = memoryview(buf)[rc.HEADER_SIZE :]
    try:
        h = rc.decode_header(buf, 0)
    except rc.BatchError:
        return data, 0, 0, None
    if h.compressed or h.n_ops:
        return data, 0, 0, None
    if h.body_len != length:
        return data, 0, 0, h
    return data, rf.RUN_WHOLE_BATCH, h.body_crc, h


CUT_CHECK_SLACK = 64 << 10
"""Bytes of a cut batch outside its run that :func:`_check_cut` reads on top of twice the run."""

CUT_CHECK_PER_RECORD = 4 << 10
"""...and per record of the run. COST: the reader checks a record it has to check on its own
in ~1.5 µs (a Python-level CRC call); the node reads and checksums a MiB of page cache in
~110 µs (~0.1 ns a byte). Reading up to 4 KiB of batch per record spared keeps the node's share
under a third of what it saves the reader (a 1.9 % sliver of per-record checks, ~a fifth of a
Spark task's decoding, went unflagged with the slack alone)."""

_SCAN_BACK = (64, 1024, 8192)  # growing windows searched for the start of a run's batch


def _check_cut(store: RawReadHost, at: _Where, run: rf.Run) -> int | None:
    """CRC32C of ``run``'s bytes when the whole stored batch it was cut from matches the
    batch's stored body CRC; ``None`` when that cannot be shown cheaply.

    WHY: a reader's range ends (a Spark task pipelines fixed sub-ranges) cut a stored batch at
    each end of nearly every frame, and the reader checks a cut run record by record, one
    Python-level CRC call each: ~a quarter of a Spark read's CPU. Checked here instead, the
    stored bytes are proven intact against the batch's own CRC (what the reader would have
    proven against the records' CRCs) and the run travels with a CRC of exactly the bytes
    sent, which the reader checks in one call (:data:`rawframe.RUN_CHECKED`). The batch's
    other records are read but not sent; they need not be live or committed. Anything
    unexpected (a batch beginning in another index block, compressed, with ops, too large
    next to the run, a mismatch: a record erased in place, a write still in progress) leaves
    the run as it was, checked record by record by the reader, so this can only save work.
    """
    blk, k, head = at
    n = len(run.data)
    cap = 2 * n + CUT_CHECK_SLACK + CUT_CHECK_PER_RECORD * run.nrec
    base = run.pos_base  # == blk.pos[k]
    pre: bytes | memoryview = b""
    try:
        if head is None:  # the run starts inside its batch: find the batch's first record
            at_blk, b = blk, _batch_start(blk, k)
            while True:
                if b < 0 or base - at_blk.pos[b] > cap:
                    return None
                got = _batch_head(store, at_blk, b, base)
                if got is not None:
                    break
                # The records run back to back from entry 0 and no batch begins there: the
                # batch began in an earlier block (a block fills up inside a batch; small
                # records put one batch across several).
                before = _block_before(store, at_blk) if b == 0 else None
                if before is None:
                    return None
                at_blk, b = before, _batch_start(before, len(before.seqs) - 1)
            head, pre = got
        suf_len = head.body_len - len(pre) - n
        if suf_len < 0 or len(pre) + suf_len > cap:
            return None
        own = crc32c(run.data)
        whole = crc32c(run.data, crc32c(pre)) if pre else own
        if suf_len:
            whole = crc32c(_pread(store, blk, base + n, suf_len), whole)
    except StorageError:
        return None  # bytes the reply does not carry; the reader checks the run itself
    return own if whole == head.body_crc else None


def _batch_head(
    store: RawReadHost, blk: Block, b: int, base: int
) -> tuple[rc.BatchHeader, memoryview] | None:
    """The header of the stored batch whose first record is entry ``b`` of ``blk``, and the
    batch's bytes from that record up to file position ``base``; None when ``b`` is no such
    start (no batch header before it) or the batch is compressed or holds ops."""
    pos = blk.pos[b]
    plen = base - pos
    if plen <= 0 or pos < rc.HEADER_SIZE:
        return None
    buf = _pread(store, blk, pos - rc.HEADER_SIZE, rc.HEADER_SIZE + plen)
    try:
        head = rc.decode_header(buf, 0)
    except rc.BatchError:
        return None
    if head.compressed or head.n_ops:
        return None
    return head, memoryview(buf)[rc.HEADER_SIZE :]


def _block_before(store: RawReadHost, blk: Block) -> Block | None:
    """The index block before ``blk`` when its last entry's record is followed, in the same
    segment file, directly by ``blk``'s first (one run of records across the two)."""
    blocks = store._ix.blocks
    i = bisect_right(store._ix.firsts, blk.seqs[0]) - 1
    if i <= 0 or blocks[i] is not blk:
        return None
    before = blocks[i - 1]
    if before.seg is not blk.seg or not before.seqs:
        return None
    last = len(before.seqs) - 1
    return before if before.pos[last] + before.aux[last] == blk.pos[0] else None


def _batch_start(blk: Block, k: int) -> int:
    """The first entry of the run of entries ending at ``k`` whose records lie back to back in
    the file (a stored batch's records do; a batch header separates two batches), or -1 when
    it lies more than the largest window back. Entry 0 of the block may be that start or the
    chain may go on in the block before; the batch header read at it tells which."""
    for w in _SCAN_BACK:
        lo = max(0, k - w)
        # Byte t - lo is 1 where a run ends after entry t: where entry t + 1 does not
        # directly follow entry t, or either is compressed. The last such byte is the same
        # as for the gaps alone: entry k is uncompressed (its run was read as stored bytes),
        # and a compressed entry ends a run after itself too (its ``aux`` is above any
        # position), so a stop added before one is never the last.
        f = run_stops(blk, lo, k + 1).rfind(1)
        if f >= 0:
            return lo + f + 1
        if lo == 0:
            return 0
    return -1


def _pread(store: RawReadHost, blk: Block, pos: int, length: int) -> bytes:
    seg = blk.seg
    fd = seg.fd if seg.fd is not None else store._open_fd(seg)
    try:
        data = store._io.pread(fd, length, pos)
    except OSError as exc:
        raise StorageError(f"cannot read {seg.path}: {exc}") from exc
    if len(data) != length:
        raise StorageError(f"short read of {seg.path} at {pos}: {len(data)} of {length} bytes")
    return data


HEADER_SCAN_BUDGET = 4 << 20
"""Bytes per read while scanning stored records for header blocks."""


def _may_have_headers(blk: Block, i: int, j: int, ttl_free: bool) -> tuple[int, int] | None:
    """First and last of the entries ``i..j-1`` that may carry a header block, from the index
    alone (no read), or None.

    An uncompressed entry's ``aux`` is its record length, ``REC_SIZE + (8 if TTL) + subject +
    headers + data``, and its ``size`` nats-server's accounting, ``30 + subject + data + (4 +
    headers if any)``. So ``size - aux`` is -2 (no headers), 2 (headers), -10 (TTL, no headers)
    or -6 (TTL and headers): exact, whatever the lengths. A compressed entry's ``aux`` has the
    high bit set, far below all four, so it counts as a candidate and is read. ``ttl_free``:
    the store holds no record with a TTL."""
    size, aux = blk.size[i:j], blk.aux[i:j]
    if ttl_free and sum(size) - sum(aux) == (30 - rc.REC_SIZE) * (j - i):
        # Without TTL records every difference is -2 or 2 (or far below for a compressed
        # entry), so the sum is -2 per entry exactly when none has headers: two C sums.
        return None
    d = bytes(map(_NO_HEADERS, map(sub, size, aux)))
    a = d.find(0)
    if a < 0:
        return None
    return i + a, i + d.rfind(0)


_NO_HEADERS = (30 - rc.REC_SIZE, 30 - rc.REC_SIZE - 8).__contains__


def stored_headers(store: RawReadHost, start: int, last: int) -> Generator[tuple[int, int, bytes], None, int]:
    """``(seq, ts, header block)`` of the committed live records ``start <= seq <= last`` that
    have a header block. Returns the first sequence not covered: ``last + 1``, or a record too
    large for one scan read (the caller reads that one on its own). Stretches of the index
    with no record that has headers are skipped without reading the file (a stream of plain
    publishes costs no I/O); the others are read in runs, records without headers cost one
    fixed-size unpack each, and a record with headers is CRC-checked before its headers are
    used (a damaged one raises, as a read of it would)."""
    last = min(last, store.committed_seq)
    spans: list[tuple[int, int]] = []
    ttl_free = not store._ix.ttl
    for blk, i, j in store._ix.iter_live_runs(start, last):
        span = _may_have_headers(blk, i, j, ttl_free)
        if span is not None:
            spans.append((blk.seqs[span[0]], blk.seqs[span[1]]))
    for a, b in spans:
        big = yield from _scan_headers(store, a, b)
        if big <= b:
            return big
    return max(start, last + 1)


def _scan_headers(store: RawReadHost, start: int, last: int) -> Generator[tuple[int, int, bytes], None, int]:
    unpack = rc.REC.unpack_from
    rec_size, rf_ttl = rc.REC_SIZE, rc.RF_TTL
    nxt = start
    while nxt <= last:
        rr = read_runs(store, nxt, last + 1, HEADER_SCAN_BUDGET, 1 << 20)
        if rr.too_big:
            return rr.too_big
        for run in rr.runs:
            data, base = memoryview(run.data), run.pos_base
            positions = array("I")
            positions.frombytes(run.pos)
            for p in positions:
                off = p - base
                crc, seq, ts, slen, flags, _rsv, hlen, dlen = unpack(data, off)
                if not hlen:
                    continue
                h = off + rec_size + (8 if flags & rf_ttl else 0) + slen
                if crc32c(data[off + 4 : h + hlen + dlen]) != crc:
                    raise StorageError(f"record {seq}: crc mismatch while scanning headers")
                yield seq, ts, bytes(data[h : h + hlen])
        nxt = rr.next_seq  # read_runs always moves past what it returned (last + 1 at the end)
    return nxt


def bulk_reader(store: RawReadHost) -> Callable[[Block, int], StoredMsg]:
    """``FileStore``'s reader for one bulk pass (``iter_range``): committed, uncompressed
    records already in the chunk cache are cut straight out of it — same checks as
    ``read_record`` (record CRC, sequence, bounds) without its per-record call layers. Anything
    else, including every failed check, takes ``_read``, which loads the chunk or raises the
    precise error."""
    chunks = store._chunks
    names = store._ix.subjects.names
    committed = store._committed  # fixed for the pass: the pass runs without yielding the loop
    slow = store._read
    unpack = rc.REC.unpack_from
    rec_size = rc.REC_SIZE
    rf_ttl = rc.RF_TTL

    def read(blk: Block, i: int) -> StoredMsg:
        seq = blk.seqs[i]
        aux = blk.aux[i]
        if seq > committed or aux & COMPRESSED:
            return slow(blk, i)
        seg = blk.seg
        pos = blk.pos[i]
        c = pos // CHUNK
        off = pos - c * CHUNK
        buf = chunks.get((seg.base, seg.gen, c))
        if buf is None or off + aux > len(buf):
            return slow(blk, i)
        crc, rseq, ts, slen, flags, _rsv, hlen, dlen = unpack(buf, off)
        p = off + rec_size + (8 if flags & rf_ttl else 0)
        end = p + slen + hlen + dlen
        if rseq != seq or end > off + aux or crc32c(memoryview(buf)[off + 4 : end]) != crc:
            return slow(blk, i)
        h = p + slen
        return StoredMsg(seq, names[blk.sid[i]], buf[h : h + hlen], buf[h + hlen : end], ts)

    return read


RunReader = Callable[["Block", int, int, list[StoredMsg], int, int, int], int]
"""``read_run(blk, i, j, out, limit, max_bytes, used) -> used``: append the messages of the
live entries ``i <= t < j`` of ``blk`` to ``out`` until it holds ``limit`` messages or
``used`` (payload and header bytes, counted on from the argument) reaches ``max_bytes``."""


def run_reader(store: RawReadHost) -> RunReader:
    """``FileStore``'s reader of runs of live entries for one read-ahead pass (``load_ahead``):
    ``bulk_reader``'s checks with the per-record work of a whole run in one loop. The chunk of
    the previous record is kept while the run stays in it (one cache lookup per chunk, not per
    record) and messages are built as plain tuples of ``StoredMsg``'s layout (its generated
    ``__new__`` is a Python call). A consumer's read-ahead spends most of its time here:
    2.2 → ~0.9 µs per 128-byte message."""
    chunks = store._chunks
    names = store._ix.subjects.names
    committed = store._committed  # fixed for the pass: the pass runs without yielding the loop
    slow = store._read
    unpack = rc.REC.unpack_from
    rec_size = rc.REC_SIZE
    rf_ttl = rc.RF_TTL
    make = tuple.__new__
    msg = StoredMsg

    def read_run(
        blk: Block, i: int, j: int, out: list[StoredMsg], limit: int, max_bytes: int, used: int
    ) -> int:
        j = min(j, i + limit - len(out))  # no more entries than ``out`` has room for
        seg = blk.seg
        base, gen = seg.base, seg.gen
        have = -1  # the chunk number ``buf`` holds (-1: none looked up yet)
        buf = b""
        cols = zip(range(i, j), blk.seqs[i:j], blk.aux[i:j], blk.pos[i:j], blk.sid[i:j], strict=True)
        for t, seq, aux, pos, sid in cols:
            if seq <= committed and not aux & COMPRESSED:
                c = pos // CHUNK
                off = pos - c * CHUNK
                if c != have:
                    buf = chunks.get((base, gen, c)) or b""
                    have = c
                if off + aux <= len(buf):
                    crc, rseq, ts, slen, flags, _rsv, hlen, dlen = unpack(buf, off)
                    p = off + rec_size + (8 if flags & rf_ttl else 0)
                    end = p + slen + hlen + dlen
                    if rseq == seq and end <= off + aux and crc32c(buf[off + 4 : end]) == crc:
                        h = p + slen
                        out.append(make(msg, (seq, names[sid], buf[h : h + hlen], buf[h + hlen : end], ts)))
                        used += hlen + dlen
                        if used >= max_bytes:
                            break
                        continue
            # Anything the fast path cannot vouch for: ``_read`` loads the chunk (which may
            # replace the cached one) or raises the precise error.
            m = slow(blk, t)
            have = -1
            out.append(m)
            used += len(m.data) + len(m.hdr)
            if used >= max_bytes:
                break
        return used

    return read_run
