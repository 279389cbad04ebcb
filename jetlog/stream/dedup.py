"""The ``Nats-Msg-Id`` duplicate window of a stream.

A message id seen within ``duplicate_window`` makes a later publish with the same id a duplicate:
it is acknowledged with the original sequence and ``"duplicate": true`` and nothing is stored.
Entries expire by store timestamp, oldest first, so a deque ordered by time plus a dict is
enough (timestamps are non-decreasing per stream).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable
from weakref import WeakKeyDictionary

from jetlog.errors import StorageError

log = logging.getLogger("jetlog.stream.dedup")

Scan = Callable[[int, int], Iterable[tuple[int, int, str]]]
"""``scan(first, last)``: ``(seq, ts, msg_id)`` of the stored messages in that range that carry
an id, in sequence order."""

REBUILD_STEP = 4096
"""Sequences read back per step of a background rebuild (a few ms on the event loop)."""


class DedupWindow:
    """Message ids seen within a sliding time window."""

    __slots__ = ("_ids", "_last", "_next", "_order", "_scan", "window")

    def __init__(self, window_ns: int) -> None:
        self.window = window_ns
        self._ids: dict[str, int] = {}
        self._order: deque[tuple[int, str, int]] = deque()
        self._scan: Scan | None = None
        self._next = 0
        self._last = 0

    def __len__(self) -> int:
        self._complete()
        return len(self._ids)

    # ---- rebuild from the log -------------------------------------------------------------
    # After a restart or a leadership change the window is read back from the stored messages
    # (nats-server rebuilds it too, on first use). Reading 10M messages takes seconds, so it is
    # not done before the stream serves: a background task reads it in steps, and the first
    # lookup or insert before that is finished reads the rest at once. Every message appended
    # meanwhile has a sequence above ``last``, and no id is inserted before the read is
    # complete, so the deque stays in time order.

    def begin_rebuild(self, first: int, last: int, scan: Scan) -> None:
        """Forget every id and read back those stored at ``first..last`` before the next use."""
        self.clear()
        if self.window > 0 and 0 < first <= last:
            self._scan, self._next, self._last = scan, first, last

    @property
    def rebuilding(self) -> bool:
        """Whether part of the stored window is still to be read back."""
        return self._scan is not None

    def rebuild_step(self, max_seqs: int | None = None) -> bool:
        """Read back up to ``max_seqs`` (default ``REBUILD_STEP``) more sequences; True once
        nothing is left."""
        scan = self._scan
        if scan is None:
            return True
        if max_seqs is None:
            max_seqs = REBUILD_STEP
        upto = min(self._last, self._next + max_seqs - 1)
        ids, order = self._ids, self._order
        try:
            for seq, ts, mid in scan(self._next, upto):
                ids[mid] = seq
                order.append((ts, mid, seq))
        except StorageError as exc:
            # Stored records in the window are unreadable (damage a lazy open has not read
            # yet: the scrub reports it, the next start quarantines it). Their ids cannot be
            # known; the window keeps those read so far instead of failing every publish
            # that carries an id.
            log.error("duplicate window read back only up to seq %d: %s", self._next - 1, exc)
            self._scan = None
            return True
        self._next = upto + 1
        if self._next > self._last:
            self._scan = None
            return True
        return False

    def _complete(self) -> None:
        if self._scan is not None:
            self.rebuild_step(self._last - self._next + 1)

    # ---- use --------------------------------------------------------------------------------

    def seq_of(self, msg_id: str, now: int) -> int:
        """Sequence stored under ``msg_id`` if it is still inside the window, else 0."""
        self._complete()
        if not self._ids:
            return 0
        self.expire(now)
        return self._ids.get(msg_id, 0)

    def add(self, msg_id: str, seq: int, ts: int) -> None:
        """Remember ``msg_id`` as stored at ``seq`` at time ``ts``."""
        if self.window <= 0:
            return
        self._complete()
        self._ids[msg_id] = seq
        self._order.append((ts, msg_id, seq))

    def expire(self, now: int) -> None:
        """Forget ids older than the window."""
        cutoff = now - self.window
        order, ids = self._order, self._ids
        while order and order[0][0] <= cutoff:
            _, mid, seq = order.popleft()
            # Only drop the entry if it is still the current one for this id (an id can be
            # re-added once it expired, and then a newer entry sits further back).
            if ids.get(mid) == seq:
                del ids[mid]

    def set_window(self, window_ns: int) -> None:
        """Change the window (stream update); shrinking takes effect at the next expiry."""
        self.window = window_ns
        if window_ns <= 0:
            self.clear()

    def clear(self) -> None:
        """Forget every id (and any read-back still to do)."""
        self._scan = None
        self._ids.clear()
        self._order.clear()


_warmup_locks: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = WeakKeyDictionary()


def _warmup_lock() -> asyncio.Lock:
    """The running loop's lock that takes read-back steps in turn."""
    loop = asyncio.get_running_loop()
    lock = _warmup_locks.get(loop)
    if lock is None:
        lock = _warmup_locks[loop] = asyncio.Lock()
    return lock


async def warm_up(current: Callable[[], DedupWindow]) -> None:
    """Read ``current()``'s window back a step at a time, yielding to the loop between steps
    (a lookup or insert before the end reads the rest at once); stops once ``current()`` is
    another window. One stream's step at a time: after a restart every stream warms up at
    once, and a step each per loop pass would hold requests up for all of them."""
    dedup = current()
    lock = _warmup_lock()
    while dedup is current() and dedup.rebuilding:
        async with lock:
            if dedup is current():
                dedup.rebuild_step()
        await asyncio.sleep(0)
