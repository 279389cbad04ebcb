"""Replication machinery shared by the file and memory stores (``store.ReplicaLog``).

- ``parse_batches``: the follower's check of what a leader sent, done completely *before*
  anything is applied (so a bad input leaves no partial state): header and body CRC of every
  batch, its layout (records, ops), subjects, and that it continues the log (``base_seq``
  equals the store's last sequence, then each batch's ``last_seq``). A null batch (no record,
  no op, no sequence consumed) is refused: it has no position, and a leader never ships one.
  It also produces the index columns of the records in one pass (the follower's hot path: per
  record one ``unpack`` and a few appends, then ``index_extend`` per segment). Record CRCs are
  not checked again: the body CRC covers them.
- ``apply_ops``: removal ops applied to the index the way recovery applies them. Recovery loads
  every record and then removes every op range; applying each batch's ops after its records is
  the same, because an op only targets sequences assigned before it (a later record always has
  a higher sequence than any op range before it).
- ``merge_op``: how a writer adds a removal range to the ops of the batch being filled.
- ``resolve``: the start/end checks every ``read_batches`` and ``truncate`` share.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Callable
from typing import Any, NamedTuple

from jetlog.log import index as _index
from jetlog.log.index import Index
from jetlog.log.positions import is_null
from jetlog.log.segment import AUX_MASK, COMPRESSED
from jetlog.log.store import BatchInputError, OutOfRangeError, Pos, PositionError, ReplicaRead
from jetlog.wire import records as rc
from jetlog.wire import recordscan as rs

_HDR = rc.HEADER_SIZE


class Parsed(NamedTuple):
    """One verified incoming batch: its header, its stored header and body (verbatim, what the
    store keeps), its records ``[i0, i1)`` in the reply's columns, and its ops."""

    h: rc.BatchHeader
    hdr: bytes
    body: bytes
    i0: int
    i1: int
    ops: list[tuple[int, int]]


class Reply(NamedTuple):
    """What ``parse_batches`` makes of an input: its batches and, for all their records in log
    order, the index columns the store adds."""

    batches: list[Parsed]
    seqs: array[int]
    ts: array[int]
    keys: list[bytes]  # the subject of each record (utf-8 checked: ``names``)
    sizes: array[int]  # accounted size (file or memory formula)
    pos: array[int]  # file: offset from the batch start (0 in a compressed batch)
    aux: array[int]  # file: record length, or ``COMPRESSED | offset`` in the raw body
    payloads: list[tuple[bytes, bytes] | None]  # memory: ``(hdr, data)`` per record
    ttl: list[tuple[int, int]]  # (seq, expiry)
    names: dict[bytes, str]


def parse_batches(
    data: bytes | bytearray | memoryview, last_seq: int, epoch: int, dctx: Any, file: bool
) -> Reply:
    """Verify ``data`` (whole batches continuing a log that ends at sequence ``last_seq``, whose
    latest epoch is ``epoch``) and decode what applying it needs: index columns for a file store
    (``file``) or a memory store, and the subjects. Raises ``BatchInputError``."""
    buf = bytes(data)
    res = rs.scan(buf, 0, complete_to=len(buf), verify=True)
    if res.status != rs.OK:
        raise BatchInputError(res.end, res.reason)
    out = Reply([], array("Q"), array("q"), [], array("I"), array("I"), array("I"), [], [], {})
    prev = last_seq
    for off, h in res.batches:
        if h.base_seq != prev:
            raise BatchInputError(off, f"batch starts after sequence {h.base_seq}, the log ends at {prev}")
        if is_null(h):
            raise BatchInputError(off, "empty batch (no record, op or sequence)")
        if h.epoch < epoch:
            raise BatchInputError(
                off, f"batch epoch {h.epoch} is below the log's epoch {epoch} (truncate first)"
            )
        stored = buf[off + _HDR : off + h.size]
        try:
            raw = rc.raw_body(h, stored, dctx, off)
        except rc.BatchError as exc:
            raise BatchInputError(off, exc.reason) from exc
        raw = raw if isinstance(raw, bytes) else bytes(raw)
        i0 = len(out.seqs)
        if h.n_records:
            # The columns, ``pos`` relative to the batch (the store adds where it lands).
            rc.walk_records(raw, h, out, file=file, base=0, fail=functools.partial(BatchInputError, off))
        ops: list[tuple[int, int]] = []
        if h.n_ops:
            ops = rc.decode_ops(raw, h)
            for a, b in ops:
                if not 0 < a <= b <= h.last_seq:
                    raise BatchInputError(off, f"op ({a}, {b}) outside the batch's sequences")
        out.batches.append(Parsed(h, buf[off : off + _HDR], stored, i0, len(out.seqs), ops))
        prev = h.last_seq
        epoch = h.epoch
    names = out.names
    for k in out.keys:
        if k not in names:
            try:
                names[k] = k.decode()
            except UnicodeDecodeError as exc:
                raise BatchInputError(0, f"subject {k!r} is not utf-8") from exc
    if not file:
        out.pos.frombytes(bytes(4 * len(out.seqs)))
    return out


def subject_ids(ix: Index, names: dict[bytes, str]) -> dict[bytes, int]:
    """The index's subject id of every subject of ``parse_batches`` (interning new ones)."""
    subj = ix.subjects
    ids = subj.ids
    out = {}
    for k, name in names.items():
        sid = ids.get(name)
        out[k] = sid if sid is not None else subj.intern(name)
    return out


def pending_record(hdr: bytes, body: bytes, pos: int, aux: int, dctx: Any) -> rc.Record:
    """A record of a replicated batch not written yet, from its stored header and body and its
    index entry (relative ``pos``/``aux``, see ``Parsed``)."""
    if aux & COMPRESSED:
        raw = rc.raw_body(rc.decode_header(hdr), body, dctx)
        return rc.decode_record(raw, aux & AUX_MASK)[0]
    return rc.decode_record(body, pos - _HDR)[0]


def apply_reply(
    ix: Index,
    r: Reply,
    add: Callable[[Any, int, int, array[int]], None],
    segs: list[Any] | None = None,
) -> bool:
    """Apply a verified reply to an index: every record (``add(seg, i0, i1, sids)`` for each run
    of records going to one segment, ``segs[n]`` being batch ``n``'s), then every op, in log
    order. Records first is what recovery does, and equivalent: an op only targets sequences
    up to its batch's ``last_seq``, below every later record. Returns whether any batch
    carried ops (removals)."""
    sidof = subject_ids(ix, r.names)
    sids = array("I", [sidof[k] for k in r.keys])
    last = r.batches[-1].h
    ix.last_seq = last.last_seq
    ix.last_ts = last.last_ts
    n = len(r.seqs)
    if n:
        if segs is None:
            add(None, 0, n, sids)
        else:
            cur = segs[0]
            i0 = 0
            for seg, p in zip(segs, r.batches, strict=True):
                if seg is not cur:  # a roll: the records so far go to the previous segment
                    if p.i0 > i0:
                        add(cur, i0, p.i0, sids)
                    cur, i0 = seg, p.i0
            if n > i0:
                add(cur, i0, n, sids)
        for s, e in r.ttl:
            ix.ttl[s] = e
    removed = False
    for p in r.batches:
        if p.ops:
            apply_ops(ix, p.ops)
            removed = True
    if not ix.msgs:
        ix.first = ix.last_seq + 1
    return removed


def index_extend(
    ix: Index,
    seg: Any,
    seqs: array[int],
    ts: array[int],
    sid: array[int],
    size: array[int],
    pos: array[int],
    aux: array[int],
    keep_dead: bool = False,
    payloads: list[tuple[bytes, bytes] | None] | None = None,
) -> None:
    """``Index.add`` for many live entries at once (sequences ascending, above every existing
    entry): the columns are appended to the last block while it has room. ``payloads``: the
    memory store's ``(hdr, data)`` per entry."""
    n = len(seqs)
    bmax = _index.BLOCK_MAX  # looked up now: tests shrink it
    i = 0
    while i < n:
        blks = ix.blocks
        blk = blks[-1] if blks else None
        if blk is None or blk.seg is not seg or len(blk.seqs) >= bmax:
            blk = ix.new_block(seg, keep_dead)
        if not blk.seqs:
            ix.firsts[-1] = seqs[i]
        j = min(n, i + bmax - len(blk.seqs))
        blk.seqs.extend(seqs[i:j])
        blk.ts.extend(ts[i:j])
        blk.sid.extend(sid[i:j])
        blk.size.extend(size[i:j])
        blk.pos.extend(pos[i:j])
        blk.aux.extend(aux[i:j])
        blk.live.extend(b"\x01" * (j - i))
        if payloads is not None:
            blk.payload.extend(payloads[i:j])  # type: ignore[union-attr]
        blk.nlive += j - i
        blk.live_bytes += sum(size[i:j])
        i = j
    if not n:
        return
    ix.subjects.add_many(seqs, sid)
    if not ix.msgs:
        ix.first = seqs[0]
    ix.msgs += n
    ix.bytes += sum(size)
    if seg is not None:
        seg.nlive += n


def shift_pos(ix: Index, first: int, last: int, delta: int) -> None:
    """Add ``delta`` to ``pos`` of every entry with sequence in ``[first, last]`` (replicated
    batches: positions relative to the batch become file offsets once it is written)."""
    for blk, i, j in ix.pos_ranges(first, last):
        blk.pos[i:j] = array("I", [p + delta for p in blk.pos[i:j]])


def apply_ops(ix: Index, ops: list[tuple[int, int]]) -> None:
    """Remove every live message inside the op ranges (see the module docstring)."""
    for a, b in ops:
        if not ix.msgs:
            return
        if a <= ix.first:
            ix.remove_before(b + 1)
            continue
        victims = list(ix.iter_live_entries(a, b))
        for blk, i in victims:
            ix.kill(blk, i)


def merge_op(ops: list[tuple[int, int]], a: int, b: int, next_live: Callable[[int], int]) -> bool:
    """Fold the removal range ``[a, b]`` into the last op of ``ops`` when it touches it, or
    when nothing live lies between them (bridging dead or never-stored sequences keeps ops
    few). True if merged; the caller appends ``(a, b)`` otherwise."""
    if not ops:
        return False
    pa, pb = ops[-1]
    if pa <= a <= pb + 1:
        ops[-1] = (pa, max(pb, b))
        return True
    if a > pb:
        nl = next_live(pb + 1)
        if nl == 0 or nl > b:
            ops[-1] = (pa, b)
            return True
    return False


def resolve(pos: Pos, start: Pos, end: Pos, first: Pos | None) -> bool:
    """Check ``pos`` against a log that starts at ``start``, ends at ``end`` and whose first
    batch is at ``first`` (None: no batch). True when ``pos`` is the start (everything
    follows it); False when it must be looked up among the batches. Raises
    ``PositionError`` beyond the end and ``OutOfRangeError`` below the first batch (a
    position retention deleted: it cannot be told apart from a different history there, so
    the reader must reset) or for another log's start ``(s, -1)``: a reader whose own prefix
    was deleted holds the *current* state of everything up to ``s``, which no position of this
    log is known to match (resetting to this log's start is always right)."""
    if pos == start:
        return True
    if pos > end:
        raise PositionError(pos, end, "beyond the end of the log")
    if pos[1] < 0 or pos < start or first is None or pos < first:
        raise OutOfRangeError(pos, start)
    return False


def check_max_batch(value: int) -> int:
    """Validate a ``max_batch_bytes`` setting."""
    if not 1024 <= value <= rc.MAX_BODY:
        raise ValueError(f"max_batch_bytes must be between 1 KiB and {rc.MAX_BODY} bytes, not {value}")
    return value


def cap_raw(after: Pos, r: ReplicaRead, max_raw: int) -> ReplicaRead:
    """``r`` (whole batches following ``after``) cut to the batches whose decompressed size
    fits in ``max_raw`` (at least one)."""
    if max_raw <= 0 or r.partial or r.nbatches < 2:
        return r
    data = r.data
    off = used = n = 0
    last = after
    while off < len(data):
        h = rc.decode_header(data, off)
        used += _HDR + h.raw_len
        if n and used > max_raw:
            return ReplicaRead(data[:off], n, last)
        last = (h.last_seq, last[1] + 1 if h.last_seq == last[0] else 0)
        n += 1
        off += h.size
    return r


def whole_or_chunk(size: int, max_bytes: int, offset: int) -> bool:
    """True when the batch after the requested position (``size`` bytes) must be returned as a
    chunk (``ReplicaRead``)."""
    if offset < 0 or (offset and offset >= size):
        raise ValueError(f"chunk offset {offset} outside a batch of {size} bytes")
    return offset > 0 or size > max_bytes
