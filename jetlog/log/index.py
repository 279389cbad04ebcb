"""The in-memory message index shared by the file store and the memory store.

Per message (in ``Block``s of parallel ``array`` columns, never a Python object per message):
sequence, timestamp, subject id, accounted size, location (``pos``/``aux``, meaningful to the
file store only), liveness (a ``bytearray`` of 0/1 so counts and searches run in C).

A block holds at most ``BLOCK_MAX`` entries, in increasing sequence order, all from one file
segment. Entries are *records that exist* (skipped sequences have no entry); dead entries stay
until the block is pruned (``Index.prune``), which the file store only allows once a segment's
index file is written (until then the entries describe the file content).

Per subject (``Subjects``): a sorted ``array('Q')`` of live sequences with a head offset, so
first/last/count are O(1), removals at the front are O(1) amortised, and "first ≥ n" /
"last ≤ n" are bisections. Wildcard filters resolve to a set of subject ids, cached and kept up
to date incrementally through a ``Sublist`` of the cached filters.

The blocks of a whole segment at a time (built from its columns at recovery and compaction,
swapped, dropped, read back for its index file) are handled in ``segblocks.py``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import compress
from typing import Any

from jetlog.log.columns import own_columns
from jetlog.log.subject_index import Subjects

BLOCK_MAX = 8192


class Block:
    """Parallel columns for up to ``BLOCK_MAX`` consecutive entries of one segment."""

    __slots__ = (
        "aux",
        "keep_dead",
        "live",
        "live_bytes",
        "nlive",
        "payload",
        "pos",
        "seg",
        "seqs",
        "sid",
        "size",
        "ts",
    )

    def __init__(self, seg: Any = None, keep_dead: bool = False, payload: bool = False) -> None:
        self.seqs = array("Q")
        self.ts = array("q")
        self.sid = array("I")
        self.size = array("I")
        self.pos = array("I")
        self.aux = array("I")
        self.live = bytearray()
        self.nlive = 0
        self.live_bytes = 0
        self.seg = seg
        self.keep_dead = keep_dead
        # Memory store only: (hdr, data) per entry, None once dead.
        self.payload: list[tuple[bytes, bytes] | None] | None = [] if payload else None

    def find(self, seq: int) -> int:
        """Entry index of ``seq`` or -1."""
        seqs = self.seqs
        i = seq - seqs[0]
        if 0 <= i < len(seqs) and seqs[i] == seq:
            return i
        i = bisect_left(seqs, seq)
        if i < len(seqs) and seqs[i] == seq:
            return i
        return -1

    def own(self) -> None:
        """Make the columns arrays (copies of views of a mapped index file, see
        ``idxfile.map_idx``): for the block that appends may still go to."""
        own_columns(
            self, (("seqs", "Q"), ("ts", "q"), ("sid", "I"), ("size", "I"), ("pos", "I"), ("aux", "I"))
        )

    def compact(self) -> None:
        """Drop dead entries (C-speed filtering)."""
        live = self.live
        self.seqs = array("Q", compress(self.seqs, live))
        self.ts = array("q", compress(self.ts, live))
        self.sid = array("I", compress(self.sid, live))
        self.size = array("I", compress(self.size, live))
        self.pos = array("I", compress(self.pos, live))
        self.aux = array("I", compress(self.aux, live))
        if self.payload is not None:
            self.payload = list(compress(self.payload, live))
        self.live = bytearray(b"\x01") * len(self.seqs)


class Index:
    """Sequences, per-message columns, per-subject state and stream counters."""

    def __init__(self, first_seq: int = 1, *, payload: bool = False) -> None:
        self.subjects = Subjects()
        self.blocks: list[Block] = []
        self.firsts: list[int] = []  # first seq of each block (for bisection)
        self.msgs = 0
        self.bytes = 0
        self.last_seq = max(first_seq, 1) - 1
        self.last_ts = 0
        self.first = self.last_seq + 1  # first live seq, or last_seq + 1 when empty
        self.ttl: dict[int, int] = {}
        self.payload = payload
        # Bumped whenever entries stop being live (``kill``, ``remove_before``, ``remove_all``):
        # a reader that saw the same count on the same index knows nothing it read was removed.
        self.removals = 0
        self._dirty: set[int] = set()  # id()s of blocks that may be worth pruning
        self._dirty_blocks: list[Block] = []

    # ---- adding -----------------------------------------------------------------------------
    def new_block(self, seg: Any = None, keep_dead: bool = False) -> Block:
        blk = Block(seg, keep_dead, self.payload)
        self.blocks.append(blk)
        self.firsts.append(-1)  # set by the first add
        return blk

    def add(
        self,
        seq: int,
        ts: int,
        sid: int,
        size: int,
        pos: int,
        aux: int,
        seg: Any = None,
        keep_dead: bool = False,
    ) -> Block:
        """Append a live entry (``seq`` above every existing entry) and return its block."""
        blks = self.blocks
        blk = blks[-1] if blks else None
        if blk is None or blk.seg is not seg or len(blk.seqs) >= BLOCK_MAX:
            blk = self.new_block(seg, keep_dead)
        if not blk.seqs:
            self.firsts[-1] = seq
        blk.seqs.append(seq)
        blk.ts.append(ts)
        blk.sid.append(sid)
        blk.size.append(size)
        blk.pos.append(pos)
        blk.aux.append(aux)
        blk.live.append(1)
        blk.nlive += 1
        blk.live_bytes += size
        self.subjects.add(sid, seq)
        if not self.msgs:
            self.first = seq
        self.msgs += 1
        self.bytes += size
        if seg is not None:
            seg.nlive += 1
        return blk

    def add_run(
        self,
        seg: Any,
        first: int,
        ts: int,
        sid: list[int],
        size: list[int],
        pos: list[int],
        aux: list[int],
    ) -> None:
        """``add(..., keep_dead=True)`` (the file store's) for live entries ``first, first + 1,
        ...`` of one segment, all at ``ts``, column by column: one C ``extend`` per column and
        block instead of a Python step per entry (a socket read's worth of captured messages)."""
        n = len(sid)
        if n <= 1:
            if n:  # one message (a lone publish): cheaper one by one
                self.add(first, ts, sid[0], size[0], pos[0], aux[0], seg, True)
            return
        seqs = array("Q", range(first, first + n))
        sids = array("I", sid)
        blks = self.blocks
        i = 0
        while i < n:
            blk = blks[-1] if blks else None
            if blk is None or blk.seg is not seg or len(blk.seqs) >= BLOCK_MAX:
                blk = self.new_block(seg, True)
            if not blk.seqs:
                self.firsts[-1] = first + i
            e = min(n, i + BLOCK_MAX - len(blk.seqs))
            k = e - i
            blk.seqs.extend(seqs[i:e])
            blk.ts.extend(array("q", (ts,)) * k)
            blk.sid.extend(sids[i:e])
            blk.size.extend(size[i:e])
            blk.pos.extend(pos[i:e])
            blk.aux.extend(aux[i:e])
            blk.live.extend(b"\x01" * k)
            blk.nlive += k
            blk.live_bytes += sum(size[i:e])
            i = e
        self.subjects.add_many(seqs, sids)
        if not self.msgs:
            self.first = first
        self.msgs += n
        self.bytes += sum(size)
        if seg is not None:
            seg.nlive += n

    # ---- lookup -----------------------------------------------------------------------------
    def locate(self, seq: int) -> tuple[Block | None, int]:
        """``(block, entry index)`` of the entry for ``seq`` (dead or alive), or ``(None, -1)``."""
        k = bisect_right(self.firsts, seq) - 1
        if k < 0:
            return None, -1
        blk = self.blocks[k]
        i = blk.find(seq)
        return (blk, i) if i >= 0 else (None, -1)

    def live_entry(self, seq: int) -> tuple[Block | None, int]:
        """Like ``locate`` but only for a live message."""
        if seq < self.first or seq > self.last_seq:
            return None, -1
        blk, i = self.locate(seq)
        if blk is None or not blk.live[i]:
            return None, -1
        return blk, i

    def next_live(self, seq: int) -> int:
        """First live sequence ≥ ``seq`` (0 if none)."""
        if not self.msgs or seq > self.last_seq:
            return 0
        if seq <= self.first:
            return self.first
        firsts = self.firsts
        k = max(bisect_right(firsts, seq) - 1, 0)
        blocks = self.blocks
        blk = blocks[k]
        j = blk.live.find(1, bisect_left(blk.seqs, seq))
        if j >= 0:
            return blk.seqs[j]
        for blk in blocks[k + 1 :]:
            if blk.nlive:
                return blk.seqs[blk.live.find(1)]
        return 0

    def prev_live(self, seq: int) -> int:
        """Last live sequence ≤ ``seq`` (0 if none)."""
        if not self.msgs or seq < self.first:
            return 0
        k = bisect_right(self.firsts, seq) - 1
        blocks = self.blocks
        if k < 0:
            return 0
        blk = blocks[k]
        j = blk.live.rfind(1, 0, bisect_right(blk.seqs, seq))
        if j >= 0:
            return blk.seqs[j]
        for blk in reversed(blocks[:k]):
            if blk.nlive:
                return blk.seqs[blk.live.rfind(1)]
        return 0

    def count_live_from(self, start: int) -> int:
        """Live messages with sequence ≥ ``start``."""
        if start <= self.first:
            return self.msgs
        if start > self.last_seq:
            return 0
        k = max(bisect_right(self.firsts, start) - 1, 0)
        blocks = self.blocks
        blk = blocks[k]
        n = blk.live.count(1, bisect_left(blk.seqs, start))
        for blk in blocks[k + 1 :]:
            n += blk.nlive
        return n

    def iter_live_from(self, start: int, reverse: bool = False) -> Iterator[tuple[int, int]]:
        """``(seq, sid)`` of live entries from ``start`` forwards (or backwards from ``start``
        when ``reverse``). Mutating the index while iterating is not allowed."""
        blocks = self.blocks
        if not blocks:
            return
        if reverse:
            k = bisect_right(self.firsts, start) - 1
            if k < 0:
                return
            for kk in range(k, -1, -1):
                blk = blocks[kk]
                if not blk.nlive:
                    continue
                hi = bisect_right(blk.seqs, start) if kk == k else len(blk.seqs)
                live, seqs, sids = blk.live, blk.seqs, blk.sid
                j = live.rfind(1, 0, hi)
                while j >= 0:
                    yield seqs[j], sids[j]
                    j = live.rfind(1, 0, j)
        else:
            k = max(bisect_right(self.firsts, start) - 1, 0)
            for kk in range(k, len(blocks)):
                blk = blocks[kk]
                if not blk.nlive:
                    continue
                lo = bisect_left(blk.seqs, start) if kk == k else 0
                yield from zip(
                    compress(blk.seqs[lo:], blk.live[lo:]), compress(blk.sid[lo:], blk.live[lo:]), strict=True
                )

    def iter_live_entries(self, start: int, last: int) -> Iterator[tuple[Block, int]]:
        """``(block, index)`` of live entries with ``start <= seq <= last``, in order; one
        bisection per block (the bulk-read path). Mutating the index while iterating is not
        allowed."""
        for blk, i, j in self.iter_live_runs(start, last):
            for t in range(i, j):
                yield blk, t

    def iter_live_runs(self, start: int, last: int) -> Iterator[tuple[Block, int, int]]:
        """``(block, i, j)``: maximal runs of live entries ``i <= index < j`` of one block with
        ``start <= seq <= last``, in order (the raw bulk-read path). Same rules as
        :meth:`iter_live_entries`."""
        blocks = self.blocks
        start = max(start, self.first)
        if not blocks or start > last:
            return
        k = max(bisect_right(self.firsts, start) - 1, 0)
        for kk in range(k, len(blocks)):
            blk = blocks[kk]
            seqs = blk.seqs
            if not seqs or not blk.nlive:
                continue
            if seqs[0] > last:
                return
            live = blk.live
            i = bisect_left(seqs, start) if kk == k else 0
            n = len(seqs)
            while i < n:
                i = live.find(1, i)
                if i < 0:
                    break
                if seqs[i] > last:
                    return
                j = live.find(0, i)
                if j < 0:
                    j = n
                if seqs[j - 1] > last:
                    yield blk, i, bisect_right(seqs, last, i, j)
                    return
                yield blk, i, j
                i = j

    # ---- removal ----------------------------------------------------------------------------
    def kill(self, blk: Block, i: int) -> int:
        """Mark the live entry ``(blk, i)`` dead; update every counter. Returns its seq."""
        seq = blk.seqs[i]
        size = blk.size[i]
        self.removals += 1
        blk.live[i] = 0
        blk.nlive -= 1
        blk.live_bytes -= size
        if blk.payload is not None:
            blk.payload[i] = None
        if blk.seg is not None:
            blk.seg.nlive -= 1
        self.subjects.remove(blk.sid[i], seq)
        self.msgs -= 1
        self.bytes -= size
        if self.ttl:
            self.ttl.pop(seq, None)
        self._mark_dirty(blk)
        if seq == self.first:
            self.first = (self.next_live(seq + 1) or self.last_seq + 1) if self.msgs else self.last_seq + 1
        return seq

    def remove(self, seq: int) -> Block | None:
        """Remove a live message; its block, or None if it was not live."""
        blk, i = self.live_entry(seq)
        if blk is None:
            return None
        self.kill(blk, i)
        return blk

    def remove_before(self, cutoff: int) -> int:
        """Remove every live message with sequence < ``cutoff``; return how many."""
        if not self.msgs or cutoff <= self.first:
            return 0
        if cutoff > self.last_seq:
            return self.remove_all()
        self.removals += 1
        removed = 0
        subjects = self.subjects
        per_subject = self.count_live_from(self.first) - self.count_live_from(cutoff) > subjects.live
        for blk in self.blocks:
            if not blk.seqs or blk.seqs[0] >= cutoff:
                break
            if not blk.nlive:
                continue
            j = bisect_left(blk.seqs, cutoff)
            live = blk.live
            n = live.count(1, 0, j)
            if not n:
                continue
            mask = live[:j]
            gone = sum(compress(blk.size[:j], mask))
            if not per_subject:
                for seq, sid in zip(compress(blk.seqs[:j], mask), compress(blk.sid[:j], mask), strict=True):
                    subjects.remove(sid, seq)
            live[:j] = bytes(j)
            if blk.payload is not None:
                blk.payload[:j] = [None] * j
            blk.nlive -= n
            blk.live_bytes -= gone
            if blk.seg is not None:
                blk.seg.nlive -= n
            self.msgs -= n
            self.bytes -= gone
            removed += n
            self._mark_dirty(blk)
        if per_subject:
            subjects.drop_before(cutoff)
        if self.ttl:
            for s in [s for s in self.ttl if s < cutoff]:
                del self.ttl[s]
        self.first = (self.next_live(cutoff) or self.last_seq + 1) if self.msgs else self.last_seq + 1
        return removed

    def remove_all(self) -> int:
        """Remove every live message; return how many."""
        self.removals += 1
        removed = self.msgs
        for blk in self.blocks:
            if blk.nlive:
                if blk.seg is not None:
                    blk.seg.nlive -= blk.nlive
                blk.live[:] = bytes(len(blk.live))
                if blk.payload is not None:
                    blk.payload[:] = [None] * len(blk.payload)
                blk.nlive = 0
                blk.live_bytes = 0
                self._mark_dirty(blk)
        self.subjects.clear_counts()
        self.ttl.clear()
        self.msgs = 0
        self.bytes = 0
        self.first = self.last_seq + 1
        return removed

    def skip(self, count: int, ts: int) -> int:
        """Consume ``count`` sequences without entries; return the new last sequence."""
        self.last_seq += count
        self.last_ts = ts
        if not self.msgs:
            self.first = self.last_seq + 1
        return self.last_seq

    # ---- pruning ----------------------------------------------------------------------------
    def _mark_dirty(self, blk: Block) -> None:
        key = id(blk)
        if key not in self._dirty:
            self._dirty.add(key)
            self._dirty_blocks.append(blk)

    def prune(self) -> None:
        """Compact blocks whose dead entries are a majority, drop empty ones (never blocks
        marked ``keep_dead``). Called at the end of a mutation, never mid-iteration."""
        if not self._dirty_blocks:
            return
        todo = self._dirty_blocks
        self._dirty_blocks = []
        self._dirty.clear()
        drop = False
        for blk in todo:
            if blk.keep_dead:
                continue
            n = len(blk.seqs)
            if blk.nlive == 0:
                drop = True
            elif n >= 64 and blk.nlive * 2 < n:
                blk.compact()
                drop = True  # firsts may have changed
        if drop:
            self.rebuild_block_list()

    def release(self, blk: Block) -> None:
        """Allow pruning ``blk`` (its segment's index file is written) and prune it if worth it."""
        blk.keep_dead = False
        self._mark_dirty(blk)

    def rebuild_block_list(self) -> None:
        """Drop blocks with nothing live (unless they must keep dead entries); refresh
        ``firsts``."""
        self.blocks = [b for b in self.blocks if b.seqs and (b.nlive or b.keep_dead)]
        self.firsts = [b.seqs[0] for b in self.blocks]

    # ---- queries ----------------------------------------------------------------------------
    def seq_for_time(self, ts: int) -> int:
        """First live sequence with timestamp ≥ ``ts`` (``last_seq + 1`` if none)."""
        if not self.msgs:
            return self.last_seq + 1
        for blk in self.blocks:
            if not blk.nlive or blk.ts[-1] < ts:
                continue
            i = bisect_left(blk.ts, ts)
            j = blk.live.find(1, i)
            s = blk.seqs[j] if j >= 0 else self.next_live(blk.seqs[-1] + 1)
            return s or self.last_seq + 1
        return self.last_seq + 1

    def deleted_seqs(self) -> list[int]:
        """Dead sequences in ``[first, last_seq]`` (interior gaps and the trailing run)."""
        if not self.msgs:
            return []
        out: list[int] = []
        prev = self.first - 1
        for blk in self.blocks:
            if not blk.nlive:
                continue
            for s in compress(blk.seqs, blk.live):
                if s != prev + 1:
                    out.extend(range(prev + 1, s))
                prev = s
        out.extend(range(prev + 1, self.last_seq + 1))
        return out

    # ---- positions --------------------------------------------------------------------------
    def pos_ranges(self, first: int, last: int) -> Iterator[tuple[Any, int, int]]:
        """``(block, i, j)``: the slices ``block.pos[i:j]`` of the entries with sequence in
        ``[first, last]``, in order."""
        k = max(bisect_right(self.firsts, first) - 1, 0)
        for blk in self.blocks[k:]:
            seqs = blk.seqs
            if seqs[0] > last:
                break
            i = bisect_left(seqs, first)
            j = bisect_right(seqs, last)
            if j > i:
                yield blk, i, j

    def set_pos(self, first: int, last: int, pos: int) -> None:
        """Set ``pos`` of every entry with sequence in ``[first, last]`` (compressed batches get
        their file offset only once written)."""
        for blk, i, j in self.pos_ranges(first, last):
            blk.pos[i:j] = array("I", [pos]) * (j - i)
