"""Behaviour shared by ``FileStore`` and ``MemStore``: every read, purge and state query runs on
the shared ``Index``, so both stores have identical observable semantics by construction.

Subclasses provide ``append``, durability (``flush``/commit listeners), ``_read`` (payload of a
live entry), ``_log_removal`` (the file store records removal ops) and ``_check_writable``.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from itertools import compress, islice, repeat
from typing import TYPE_CHECKING

from jetlog.log.index import Block, Index
from jetlog.log.store import CommitListener, StoredHeaders, StoredMsg, StoreState, SubjectState

if TYPE_CHECKING:
    from jetlog.log.rawread import RunReader

log = logging.getLogger("jetlog.log")

# Multi-subject lookups scan the message columns for at most this many entries (or 3x the
# number of matching subjects) before switching to one bisection per matching subject.
_SCAN_MIN = 256


class IndexedStore:
    """Common implementation of the ``MsgStore`` reads, removals and state."""

    def __init__(self, index: Index) -> None:
        self._ix = index
        self._listeners: list[CommitListener] = []
        self._lost_seqs: tuple[int, ...] = ()
        self._lost_bytes = 0
        # Set by a replicated stream's leader: before a sync stalls the loop (the file store's
        # inline sync), let the work already scheduled run (its followers' fetch replies).
        self.ship_first = False

    # ---- hooks ------------------------------------------------------------------------------
    def _read(self, blk: Block, i: int) -> StoredMsg:  # pragma: no cover - abstract
        raise NotImplementedError

    def _bulk_reader(self) -> Callable[[Block, int], StoredMsg]:
        """The reader ``iter_range`` uses for one pass (stores may return a faster one)."""
        return self._read

    def _run_reader(self) -> RunReader:
        """The reader ``load_ahead`` uses for runs of live entries in one pass (stores may
        return a faster one; see ``rawread.RunReader`` for its contract)."""
        read = self._bulk_reader()

        def read_run(
            blk: Block, i: int, j: int, out: list[StoredMsg], limit: int, max_bytes: int, used: int
        ) -> int:
            return _read_entries(read, zip(repeat(blk), range(i, j)), out, limit, max_bytes, used)

        return read_run

    def _log_removal(self, ranges: list[tuple[int, int]], erase: bool) -> None:
        """Record removed sequence ranges (inclusive) for durability. Default: nothing."""

    def _check_writable(self) -> None:
        """Raise ``StreamUnavailableError`` when mutations are refused."""

    def _mutated(self) -> None:
        """Called after every mutation (prune index blocks, wake background work)."""
        self._ix.prune()

    def _removed(self, blk: Block) -> None:
        """Called after one message of index block ``blk`` was removed (``remove``)."""
        self._mutated()

    # ---- identity and state -----------------------------------------------------------------
    @property
    def last_seq(self) -> int:
        return self._ix.last_seq

    @property
    def first_seq(self) -> int:
        return self._ix.first

    @property
    def msgs(self) -> int:
        return self._ix.msgs

    @property
    def bytes(self) -> int:
        return self._ix.bytes

    def state(self) -> StoreState:
        ix = self._ix
        first_ts = 0
        deleted = 0
        if ix.msgs:
            blk, i = ix.locate(ix.first)
            first_ts = blk.ts[i] if blk is not None else 0
            deleted = (ix.last_seq - ix.first + 1) - ix.msgs
        return StoreState(
            messages=ix.msgs,
            bytes=ix.bytes,
            first_seq=ix.first,
            first_ts=first_ts,
            last_seq=ix.last_seq,
            last_ts=ix.last_ts,
            num_subjects=ix.subjects.live,
            num_deleted=deleted,
            lost_seqs=self._lost_seqs,
            lost_bytes=self._lost_bytes,
        )

    def add_commit_listener(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    def _notify(self, seq: int) -> None:
        for fn in list(self._listeners):
            try:
                fn(seq)
            except Exception:  # a listener bug must not stop commits for everyone else
                log.exception("commit listener %r failed", fn)

    # ---- removals ---------------------------------------------------------------------------
    def skip(self, count: int = 1, ts: int = 0) -> int:
        """Consume ``count`` sequences. ``ts`` (ns) becomes ``last_ts``; 0 means now (as
        nats-server stamps skipped sequences with the wall clock)."""
        self._check_writable()
        if count < 1:
            return self._ix.last_seq
        last = self._ix.skip(count, ts or time.time_ns())
        self._skipped()
        return last

    def _skipped(self) -> None:
        """Hook: a skip happened (the file store must write the new last sequence)."""

    def remove(self, seq: int, erase: bool = False) -> bool:
        self._check_writable()
        blk = self._ix.remove(seq)
        if blk is None:
            return False
        self._log_removal([(seq, seq)], erase)
        self._removed(blk)
        return True

    def purge(self, subject: str | None = None, seq: int = 0, keep: int = 0) -> int:
        self._check_writable()
        ix = self._ix
        if not ix.msgs:
            return 0
        sids = ix.subjects.resolve(subject)
        if sids is None:
            first = ix.first
            if seq > 0:
                n = ix.remove_before(seq)
                ranges = [(first, min(seq - 1, ix.last_seq))] if n else []
            elif keep > 0:
                if ix.msgs <= keep:
                    return 0
                cutoff = self._nth_live(ix.msgs - keep)
                n = ix.remove_before(cutoff)
                ranges = [(first, cutoff - 1)] if n else []
            else:
                last = ix.last_seq
                n = ix.remove_all()
                ranges = [(first, last)] if n else []
        else:
            subj = ix.subjects
            targets: list[int] = []
            for sid in subj.live_sids(sids):
                arr = subj.live_seqs(sid)
                if seq > 0:
                    arr = arr[: subj.count(sid) - subj.count_from(sid, seq)]
                targets.extend(arr)
            targets.sort()
            if keep > 0:
                targets = targets[: max(len(targets) - keep, 0)]
            for s in targets:
                ix.remove(s)
            n = len(targets)
            ranges = self._coalesce(targets)
        if n:
            self._log_removal(ranges, False)
            self._mutated()
        return n

    def _nth_live(self, n: int) -> int:
        """The sequence of the ``n``-th live message (0-based) in sequence order."""
        for blk in self._ix.blocks:
            if n < blk.nlive:
                return next(islice(compress(blk.seqs, blk.live), n, None))
            n -= blk.nlive
        return self._ix.last_seq + 1

    def _coalesce(self, seqs: list[int]) -> list[tuple[int, int]]:
        """Ranges covering the removed (now dead) ``seqs``; a range may bridge a gap that holds
        no live message (dead or never stored sequences), which keeps ops few."""
        out: list[tuple[int, int]] = []
        if not seqs:
            return out
        next_live = self._ix.next_live
        a = b = seqs[0]
        for s in seqs[1:]:
            if s == b + 1:
                b = s
                continue
            nl = next_live(b + 1)
            if nl == 0 or nl > s:
                b = s
            else:
                out.append((a, b))
                a = b = s
        out.append((a, b))
        return out

    # ---- reads ------------------------------------------------------------------------------
    def load(self, seq: int) -> StoredMsg | None:
        blk, i = self._ix.live_entry(seq)
        if blk is None:
            return None
        return self._read(blk, i)

    def load_next(self, start: int, subject: str | None = None, max_seq: int = 0) -> StoredMsg | None:
        s = self.next_seq(start, subject, max_seq)
        return self.load(s) if s else None

    def load_ahead(
        self, start: int, subject: str | None, max_seq: int, limit: int, max_bytes: int
    ) -> list[StoredMsg]:
        """Up to ``limit`` of the messages ``load_next`` would return one after the other from
        ``start`` (``subject`` None or one that resolves to a single subject; otherwise just
        the next one), read in one pass until ``limit`` messages or ``max_bytes`` of payload
        and headers (at least one): what a consumer delivers next."""
        ix = self._ix
        bound = min(max_seq, ix.last_seq) if max_seq > 0 else ix.last_seq
        start = max(start, ix.first)
        if start > bound or not ix.msgs or limit <= 0:
            return []
        sids = ix.subjects.resolve(subject)
        if sids is None or (len(sids) == 1 and ix.subjects.count(next(iter(sids))) == ix.msgs):
            # Every live message qualifies (no filter, or the only subject there is): walk the
            # index in runs instead of one lookup per sequence of the subject's list.
            out: list[StoredMsg] = []
            read_run = self._run_reader()
            used = 0
            for run_blk, i, j in ix.iter_live_runs(start, bound):
                used = read_run(run_blk, i, j, out, limit, max_bytes, used)
                if len(out) >= limit or used >= max_bytes:
                    break
            return out
        entries: Iterable[tuple[Block | None, int]]
        if len(sids) == 1:
            entries = map(ix.live_entry, ix.subjects.seqs_from(next(iter(sids)), start, bound, limit))
        else:
            one = self.load_next(start, subject, max_seq)
            return [one] if one is not None else []
        out = []
        _read_entries(self._bulk_reader(), entries, out, limit, max_bytes, 0)
        return out

    def removal_mark(self) -> tuple[object, int]:
        return self._ix, self._ix.removals

    def is_live(self, seq: int) -> bool:
        """Whether ``seq`` holds a message (not removed, not truncated)."""
        return self._ix.live_entry(seq)[0] is not None

    def iter_range(self, start: int, last: int) -> Iterator[StoredMsg]:
        read = self._bulk_reader()
        for blk, i in self._ix.iter_live_entries(start, last):
            yield read(blk, i)

    def iter_headers(self, start: int, last: int) -> Iterator[StoredHeaders]:
        for m in self.iter_range(start, last):
            if m.hdr:
                yield m.seq, m.ts, m.hdr

    def load_last(self, subject: str | None = None, max_seq: int = 0) -> StoredMsg | None:
        ix = self._ix
        bound = min(max_seq, ix.last_seq) if max_seq > 0 else ix.last_seq
        sids = ix.subjects.resolve(subject)
        if sids is None:
            s = ix.prev_live(bound)
        elif not sids:
            s = 0
        elif len(sids) == 1:
            s = ix.subjects.prev_at(next(iter(sids)), bound)
        else:
            s = self._prev_multi(bound, sids)
        return self.load(s) if s else None

    def next_seq(self, start: int, subject: str | None = None, max_seq: int = 0) -> int:
        ix = self._ix
        bound = min(max_seq, ix.last_seq) if max_seq > 0 else ix.last_seq
        start = max(start, ix.first)
        if start > bound or not ix.msgs:
            return 0
        sids = ix.subjects.resolve(subject)
        if sids is None:
            s = ix.next_live(start)
        elif not sids:
            return 0
        elif len(sids) == 1:
            s = ix.subjects.next_at(next(iter(sids)), start)
        else:
            s = self._next_multi(start, sids, bound)
        return s if s and s <= bound else 0

    def _next_multi(self, start: int, sids: set[int], bound: int) -> int:
        limit = max(_SCAN_MIN, 3 * len(sids))
        for n, (seq, sid) in enumerate(self._ix.iter_live_from(start)):
            if seq > bound:
                return 0
            if sid in sids:
                return seq
            if n >= limit:
                break
        else:
            return 0
        subj = self._ix.subjects
        best = 0
        for sid in subj.live_sids(sids):
            s = subj.next_at(sid, start)
            if s and (not best or s < best):
                best = s
        return best

    def _prev_multi(self, bound: int, sids: set[int]) -> int:
        limit = max(_SCAN_MIN, 3 * len(sids))
        for n, (seq, sid) in enumerate(self._ix.iter_live_from(bound, reverse=True)):
            if sid in sids:
                return seq
            if n >= limit:
                break
        else:
            return 0
        subj = self._ix.subjects
        return max((subj.prev_at(sid, bound) for sid in subj.live_sids(sids)), default=0)

    def seq_for_time(self, ts: int) -> int:
        return self._ix.seq_for_time(ts)

    def subjects_state(self, subject: str | None = None) -> dict[str, SubjectState]:
        subj = self._ix.subjects
        names = subj.names
        return {
            names[sid]: SubjectState(subj.count(sid), subj.first(sid), subj.last(sid))
            for sid in subj.live_sids(subj.resolve(subject))
        }

    def subject_state(self, subject: str) -> SubjectState | None:
        subj = self._ix.subjects
        sid = subj.ids.get(subject)
        if sid is None or not subj.has_live(sid):
            return None
        return SubjectState(subj.count(sid), subj.first(sid), subj.last(sid))

    def num_pending(self, start: int, subject: str | None = None, last_per_subject: bool = False) -> int:
        ix = self._ix
        subj = ix.subjects
        sids = subj.resolve(subject)
        if last_per_subject:
            seqs = subj.seqs
            return sum(1 for sid in subj.live_sids(sids) if seqs[sid][-1] >= start)
        if sids is None:
            return ix.count_live_from(start)
        if len(sids) <= 64 or 8 * len(sids) < ix.count_live_from(start):
            return sum(subj.count_from(sid, start) for sid in subj.live_sids(sids))
        n = 0
        for blk in ix.blocks:
            if not blk.nlive or blk.seqs[-1] < start:
                continue
            lo = bisect_left(blk.seqs, start) if blk.seqs[0] < start else 0
            n += sum(1 for s in compress(blk.sid[lo:], blk.live[lo:]) if s in sids)
        return n

    def msg_size(self, seq: int) -> int:
        blk, i = self._ix.live_entry(seq)
        return blk.size[i] if blk is not None else 0

    def deleted_seqs(self) -> list[int]:
        return self._ix.deleted_seqs()

    def ttl_entries(self) -> Iterable[tuple[int, int]]:
        return list(self._ix.ttl.items())


def _read_entries(
    read: Callable[[Block, int], StoredMsg],
    entries: Iterable[tuple[Block | None, int]],
    out: list[StoredMsg],
    limit: int,
    max_bytes: int,
    used: int,
) -> int:
    """Append ``read`` of each ``(block, index)`` entry (those without a block skipped) to
    ``out`` until it holds ``limit`` messages or ``used`` reaches ``max_bytes``; returns
    ``used`` (payload and header bytes, counted on from the argument)."""
    for blk, i in entries:
        if blk is None:
            continue
        m = read(blk, i)
        out.append(m)
        used += len(m.data) + len(m.hdr)
        if len(out) >= limit or used >= max_bytes:
            break
    return used
