"""The replicated log of a ``MemStore(replicated=True)`` (contract: ``store.ReplicaLog``).

The memory store keeps, next to its index, the list of its batches encoded exactly as a file
store stores them (``jetlog.wire.records``, never compressed), so a memory stream replicates
with the same bytes and positions as a file stream. As a writer it fills an open batch like the
file store does (records encoded at ``append``, removal ranges merged into ops, cut at
``max_batch_bytes``) and seals it at its "group commit": the loop iteration after a mutation,
when the commit listeners run (``MemStore._do_notify``), or at ``seal()``.

Retention: a prefix of batches in which nothing is live any more (every batch before the first
live sequence) is dropped once it is large (``TRIM_BYTES``, or half the log and at least
``TRIM_MIN``; the batch holding the log end always stays); its ops only target records inside it. Readers below the new start get ``OutOfRangeError``. Batches after the
first live message are kept whole (no compaction): memory grows with the history since then.

``truncate`` rebuilds the index by replaying the kept batches (the definition of the state at a
position); ``reset`` starts over.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Any

import zstandard

from jetlog.log.epochs import EpochCache
from jetlog.log.index import Index
from jetlog.log.positions import PosTable
from jetlog.log.replica import (
    Reply,
    apply_reply,
    index_extend,
    merge_op,
    parse_batches,
    resolve,
    whole_or_chunk,
)
from jetlog.log.store import Pos, PositionError, ReplicaError, ReplicaRead
from jetlog.wire import records as rc

TRIM_BYTES = 1 << 20
"""A dead prefix is dropped once it holds this many bytes..."""
TRIM_MIN = 64 << 10
"""... or half the log, and at least this many."""


class MemLog:
    """The batches of a replicated memory store and its open batch (loop side)."""

    def __init__(self, base: int) -> None:
        self.start: Pos = (base, -1)
        self.end: Pos = self.start
        self.bufs: list[bytes] = []
        self.table = PosTable()  # ``off``: unused; ``size``, ``last`` per batch
        self.nbytes = 0
        self.epochs = EpochCache([])
        self.epoch = 0
        self.max_body = rc.SPLIT_BODY
        self._dctx = zstandard.ZstdDecompressor()
        self._open(base)

    def _open(self, base: int) -> None:
        self.base = base
        self.parts: list[bytes] = []
        self.body = 0
        self.nrec = 0
        self.ops: list[tuple[int, int]] = []

    @property
    def first(self) -> Pos | None:
        """Position of the first batch (None when there is none)."""
        return self.table.pos(0) if len(self.table) else None

    @property
    def pending(self) -> bool:
        """The open batch holds records or ops (a skip shows as ``ix.last_seq != base``)."""
        return bool(self.nrec or self.ops)

    # ---- writer -------------------------------------------------------------------------
    def record(self, ix: Index, rec: bytes) -> None:
        """Add an encoded record (before the index moves to its sequence)."""
        if self.body + len(rec) + rc.OP_SIZE * len(self.ops) > self.max_body and (self.nrec or self.ops):
            self.close(ix)
        self.parts.append(rec)
        self.body += len(rec)
        self.nrec += 1

    def removed(self, ix: Index, ranges: list[tuple[int, int]]) -> None:
        """Removal ranges (after the index removed them)."""
        for a, b in ranges:
            if merge_op(self.ops, a, b, ix.next_live):
                continue
            if self.body + rc.OP_SIZE * (len(self.ops) + 1) > self.max_body and (self.nrec or self.ops):
                self.close(ix)
            self.ops.append((a, b))

    def close(self, ix: Index) -> None:
        """Seal the open batch (nothing when it is empty and no sequence was consumed)."""
        if not (self.nrec or self.ops or ix.last_seq != self.base):
            return
        raw = b"".join(self.parts) + rc.encode_ops(self.ops)
        hdr, body = rc.seal_batch(
            raw,
            n_records=self.nrec,
            n_ops=len(self.ops),
            epoch=self.epoch,
            base_seq=self.base,
            last_seq=ix.last_seq,
            last_ts=ix.last_ts,
        )
        if self.epoch > self.epochs.latest:
            self.epochs.observe(self.epoch, self.end)
        self._push(hdr + body, ix.last_seq)
        self._open(ix.last_seq)
        self.trim(ix.first)

    def _push(self, buf: bytes, last: int) -> None:
        k = self.end[1] + 1 if last == self.end[0] else 0
        self.bufs.append(buf)
        self.table.add(0, len(buf), last)
        self.nbytes += len(buf)
        self.end = (last, k)

    def trim(self, first_live: int) -> None:
        """Drop the dead prefix once it is worth it (see the module docstring)."""
        t = self.table
        if not len(t) or t.last[0] >= first_live:
            return
        j = bisect_left(t.last, first_live)  # batches before ``j`` end below the first live sequence
        if j == len(t):
            j -= 1  # keep the last batch: it holds the log end
            while j and t.last[j - 1] == t.last[j]:
                j -= 1
        dead = sum(t.size[:j])
        if not j or (dead < TRIM_BYTES and (dead < TRIM_MIN or 2 * dead < self.nbytes)):
            return
        self.start = (t.last[j - 1], -1)
        del self.bufs[:j]
        for col in (t.off, t.size, t.last):
            del col[:j]
        self.nbytes -= dead

    # ---- replication --------------------------------------------------------------------
    def read(self, after: Pos, max_bytes: int, offset: int) -> ReplicaRead:
        """See ``ReplicaLog.read_batches``."""
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        t = self.table
        j = self._after(after)
        if j >= len(t):
            return ReplicaRead(b"", 0, after)
        if whole_or_chunk(t.size[j], max_bytes, offset):
            return ReplicaRead(self.bufs[j][offset : offset + max_bytes], 0, t.pos(j), offset, t.size[j])
        e = j
        used = 0
        while e < len(t) and used + t.size[e] <= max_bytes:
            used += t.size[e]
            e += 1
        return ReplicaRead(b"".join(self.bufs[j:e]), e - j, t.pos(e - 1))

    def _after(self, pos: Pos) -> int:
        """Index of the first batch after ``pos``."""
        t = self.table
        if resolve(pos, self.start, self.end, self.first):
            return 0
        j = t.find(pos)
        if j < 0:
            raise PositionError(pos, self.end, "no batch ends there")
        return j + 1

    def append(self, ix: Index, data: bytes | bytearray | memoryview) -> Pos:
        """See ``ReplicaLog.append_batches``."""
        if self.pending or ix.last_seq != self.base:
            raise ReplicaError("the store has writes in an open batch: seal() before appending batches")
        r = parse_batches(data, ix.last_seq, self.epochs.latest, self._dctx, False)
        if r.batches:
            self._take(ix, r)
            self.trim(ix.first)
        return self.end

    def _take(self, ix: Index, r: Reply) -> None:
        apply(ix, r)
        for p in r.batches:
            prev = self.end
            self._push(p.hdr + p.body, p.h.last_seq)
            self.epochs.observe(p.h.epoch, prev)
        self._open(ix.last_seq)

    def truncate(self, ix: Index, to: Pos) -> Index:
        """The index of the log cut after ``to`` (the caller sealed and swaps it in)."""
        j = self._after(to)
        self.epochs.clip(to)
        if j == len(self.table):
            return ix
        keep = b"".join(self.bufs[:j])
        entries = self.epochs.entries
        self.bufs = []
        self.table = PosTable()
        self.nbytes = 0
        self.end = self.start
        new = Index(self.start[0] + 1, payload=True)
        if keep:
            self._take(new, parse_batches(keep, new.last_seq, -1, self._dctx, False))
        self.epochs.entries = entries  # replaying re-observed them; the clipped ones stay
        self._open(new.last_seq)
        return new

    def begin_epoch(self, ix: Index, epoch: int) -> None:
        """See ``ReplicaLog.begin_epoch`` (nothing to persist)."""
        self.close(ix)
        self.epochs.begin(epoch, self.end)
        self.epoch = epoch


def apply(ix: Index, r: Reply) -> None:
    """Apply a verified reply to a memory store's index (payloads in the index blocks)."""

    def add(_seg: Any, i0: int, i1: int, sids: array[int]) -> None:
        index_extend(ix, None, r.seqs, r.ts, sids, r.sizes, r.pos, r.pos, False, r.payloads)

    apply_reply(ix, r, add)
