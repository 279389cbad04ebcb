"""Per-subject state of a store: interned subjects and their live sequences.

Subjects are interned to small integer ids (``sid``, 0 is reserved for "no subject"). Ids are
never reused while the store is open (a subject whose messages are all gone keeps its id; a
restart only re-interns subjects still present in the log).

Per subject, the live sequences are a sorted ``array('Q')`` plus a head offset: count, first
and last are O(1); a removal at the front is O(1) amortised (the dead prefix is cut once it
is more than half the array), a removal in the middle is a bisection and a memmove.

On a restart, a subject's sequences can first be *views*: a run of a mapped index file's
sequence column that is all the subject's (a single-subject segment). They are copied into
the array only when the subject is first read or removed from (``_settle``): a stream's
subjects are mostly not asked about before it serves, and copying 10M sequences was a sixth
of a restart. Invariant: while ``_lazy[sid]`` exists, ``head[sid]`` is 0 and the subject's
live sequences are the views, in order, followed by ``seqs[sid]`` (appends still go there).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from itertools import compress
from typing import cast

from jetlog.log.columns import extend_col, one_value
from jetlog.wire.subjects import Sublist, is_literal, matches, subject_bytes

_FILTER_CACHE_MAX = 64
FEW_SUBJECTS = 16
"""Up to this many subjects in one ``add_many``, sequences are filed per subject in C."""


class Subjects:
    """The subject table and per-subject live sequences."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str] = [""]
        self.raw: list[bytes] = [b""]
        self.seqs: list[array[int]] = [array("Q")]
        self.head: list[int] = [0]
        self.live = 0  # subjects with at least one live message
        self._lazy: dict[int, list[memoryview]] = {}  # see the module docstring
        self._filters: dict[str, set[int]] = {}
        self._sub: Sublist[str] = Sublist()

    def intern(self, subject: str) -> int:
        """The id of ``subject``, creating it if needed."""
        sid = self.ids.get(subject)
        if sid is not None:
            return sid
        sid = len(self.names)
        self.ids[subject] = sid
        self.names.append(subject)
        self.raw.append(subject_bytes(subject))
        self.seqs.append(array("Q"))
        self.head.append(0)
        if self._filters:
            for f in self._sub.match(subject):
                self._filters[f].add(sid)
        return sid

    # ---- per-subject sequences --------------------------------------------------------------
    def _settle(self, sid: int) -> array[int]:
        """The subject's sequence array, with any views still ahead of it copied in."""
        views = self._lazy.pop(sid)
        arr = array("Q")
        for v in views:
            extend_col(arr, cast("array[int]", v))
        arr.extend(self.seqs[sid])
        self.seqs[sid] = arr
        return arr

    def _arr(self, sid: int) -> array[int]:
        if self._lazy and sid in self._lazy:
            return self._settle(sid)
        return self.seqs[sid]

    def add(self, sid: int, seq: int) -> None:
        """Record a new live message (``seq`` above every live one of the subject)."""
        arr = self.seqs[sid]
        if not arr and sid not in self._lazy:
            self.live += 1
        arr.append(seq)

    def extend(self, sid: int, seqs: array[int]) -> None:
        """Record new live messages of one subject (ascending, above every live one). A
        read-only view (a mapped index column) is kept as it is until the subject is read,
        when nothing is in the array yet."""
        if not seqs:
            return
        arr = self.seqs[sid]
        if not arr:
            if sid not in self._lazy:
                self.live += 1
            if isinstance(seqs, memoryview):
                self._lazy.setdefault(sid, []).append(seqs)
                return
        extend_col(arr, seqs)

    def add_many(self, seqs: array[int], sids: array[int]) -> None:
        """Record new live messages (``seqs`` ascending, above every live one, ``sids`` their
        subjects). Runs of stored messages usually hold one or a few subjects: one filtered C
        pass per subject then, instead of a Python step per message (recovery of 10M messages,
        a follower's appends)."""
        if not seqs:
            return
        first = sids[0]
        if one_value(sids):  # one subject throughout
            self.extend(first, seqs)
            return
        distinct = set(sids)
        if len(distinct) <= FEW_SUBJECTS:
            for x in sorted(distinct):
                self.extend(x, array("Q", compress(seqs, map(x.__eq__, sids))))
            return
        for s, i in zip(seqs, sids, strict=True):
            self.add(i, s)

    def remove(self, sid: int, seq: int) -> None:
        """Forget a live message of subject ``sid``."""
        arr = self._arr(sid)
        h = self.head[sid]
        if arr[h] == seq:
            h += 1
            if h == len(arr):
                self.seqs[sid] = array("Q")
                self.head[sid] = 0
                self.live -= 1
                return
            if h > 32 and h * 2 > len(arr):
                del arr[:h]
                h = 0
            self.head[sid] = h
        elif arr[-1] == seq:
            arr.pop()
        else:
            i = bisect_left(arr, seq, h)
            if i < len(arr) and arr[i] == seq:
                del arr[i]

    def has_live(self, sid: int) -> bool:
        """The subject has at least one live message."""
        return bool(self.seqs[sid]) or sid in self._lazy

    def count(self, sid: int) -> int:
        return len(self._arr(sid)) - self.head[sid]

    def first(self, sid: int) -> int:
        return self._arr(sid)[self.head[sid]]

    def last(self, sid: int) -> int:
        return self._arr(sid)[-1]

    def next_at(self, sid: int, start: int) -> int:
        """First live sequence ≥ ``start`` of the subject (0 if none)."""
        arr = self._arr(sid)
        if not arr:
            return 0
        h = self.head[sid]
        if arr[h] >= start:
            return arr[h]
        i = bisect_left(arr, start, h)
        return arr[i] if i < len(arr) else 0

    def seqs_from(self, sid: int, start: int, bound: int, limit: int) -> array[int]:
        """Up to ``limit`` live sequences of the subject in ``[start, bound]``, ascending."""
        arr = self._arr(sid)
        if not arr:
            return array("Q")
        i = bisect_left(arr, start, self.head[sid])
        out = arr[i : i + limit]
        if out and out[-1] > bound:
            del out[bisect_right(out, bound) :]
        return out

    def prev_at(self, sid: int, bound: int) -> int:
        """Last live sequence ≤ ``bound`` of the subject (0 if none)."""
        arr = self._arr(sid)
        if not arr:
            return 0
        if arr[-1] <= bound:
            return arr[-1]
        h = self.head[sid]
        i = bisect_left(arr, bound + 1, h) - 1
        return arr[i] if i >= h else 0

    def count_from(self, sid: int, start: int) -> int:
        """Live messages of the subject with sequence ≥ ``start``."""
        arr = self._arr(sid)
        h = self.head[sid]
        if not arr or arr[h] >= start:
            return len(arr) - h
        return len(arr) - bisect_left(arr, start, h)

    def live_seqs(self, sid: int) -> array[int]:
        """A copy of the live sequences of the subject."""
        return self._arr(sid)[self.head[sid] :]

    def drop_before(self, cutoff: int) -> None:
        """Forget every live sequence < ``cutoff`` (bulk purge)."""
        for sid in list(self._lazy):
            self._settle(sid)
        seqs, head = self.seqs, self.head
        for sid in range(1, len(seqs)):
            arr = seqs[sid]
            if not arr or arr[head[sid]] >= cutoff:
                continue
            h = bisect_left(arr, cutoff, head[sid])
            if h == len(arr):
                seqs[sid] = array("Q")
                head[sid] = 0
                self.live -= 1
            else:
                del arr[:h]
                head[sid] = 0

    def clear_counts(self) -> None:
        """Forget every live sequence (purge of everything)."""
        self._lazy.clear()
        for sid in range(1, len(self.seqs)):
            if self.seqs[sid]:
                self.seqs[sid] = array("Q")
                self.head[sid] = 0
        self.live = 0

    # ---- filters ----------------------------------------------------------------------------
    def resolve(self, filt: str | None) -> set[int] | None:
        """Subject ids matching ``filt`` (live or not); None when every subject matches.

        The returned set may be a cached object: callers must not mutate it.
        """
        if not filt or filt == ">":
            return None
        if is_literal(filt):
            sid = self.ids.get(filt)
            return {sid} if sid else set()
        cached = self._filters.get(filt)
        if cached is None:
            if len(self._filters) >= _FILTER_CACHE_MAX:
                self._filters.clear()
                self._sub = Sublist()
            cached = {sid for sid, name in enumerate(self.names) if sid and matches(filt, name)}
            self._filters[filt] = cached
            self._sub.insert(filt, filt)
        if len(cached) == len(self.names) - 1:
            return None
        return cached

    def live_sids(self, sids: set[int] | None = None) -> list[int]:
        """Ids with at least one live message (restricted to ``sids`` when given)."""
        seqs, lazy = self.seqs, self._lazy
        if sids is None:
            return [sid for sid in range(1, len(seqs)) if seqs[sid] or sid in lazy]
        return [sid for sid in sids if seqs[sid] or sid in lazy]
