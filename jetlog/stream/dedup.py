"""The ``Nats-Msg-Id`` duplicate window of a stream.

A message id seen within ``duplicate_window`` makes a later publish with the same id a duplicate:
it is acknowledged with the original sequence and ``"duplicate": true`` and nothing is stored.
Entries expire by store timestamp, oldest first, so a deque ordered by time plus a dict is
enough (timestamps are non-decreasing per stream).
"""

from __future__ import annotations

from collections import deque


class DedupWindow:
    """Message ids seen within a sliding time window."""

    __slots__ = ("_ids", "_order", "window")

    def __init__(self, window_ns: int) -> None:
        self.window = window_ns
        self._ids: dict[str, int] = {}
        self._order: deque[tuple[int, str, int]] = deque()

    def __len__(self) -> int:
        return len(self._ids)

    def seq_of(self, msg_id: str, now: int) -> int:
        """Sequence stored under ``msg_id`` if it is still inside the window, else 0."""
        if not self._ids:
            return 0
        self.expire(now)
        return self._ids.get(msg_id, 0)

    def add(self, msg_id: str, seq: int, ts: int) -> None:
        """Remember ``msg_id`` as stored at ``seq`` at time ``ts``."""
        if self.window <= 0:
            return
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
        """Forget every id."""
        self._ids.clear()
        self._order.clear()
