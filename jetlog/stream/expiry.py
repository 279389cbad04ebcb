"""Expiry of a stream's messages: ``max_age``, per-message TTLs (``Nats-TTL``) and the subject
delete markers left when the last message of a subject expires (``subject_delete_marker_ttl``).

A writing replica runs one expiry task (``Stream._start_writer``) that sleeps until the next
deadline: the first message's age limit or the earliest TTL in ``_ttl_heap``. A publish with an
earlier deadline wakes it (``_add_ttl``). :class:`StreamExpiry` is a base class of
``jetlog.stream.stream.Stream``; the stream state it uses is declared on it and set by
``Stream.__init__``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from jetlog.wire import headers as H
from jetlog.wire.timefmt import format_duration

if TYPE_CHECKING:
    from jetlog.log.store import MsgStore, StoredMsg
    from jetlog.stream.policy import StreamPolicy


class StreamExpiry:
    """Expiry (max_age, per-message TTL, subject delete markers) of a stream."""

    # The stream's state used here (set by ``Stream.__init__``).
    policy: StreamPolicy
    store: MsgStore
    clock: Callable[[], int]
    closed: bool
    _ttl_heap: list[tuple[int, int]]
    _expiry_wake: asyncio.Event
    _expiry_task: asyncio.Task[None] | None
    _expiry_idle: bool
    _last_ts: int
    _stored_listeners: list[Callable[[int, str], None]]

    async def _stop_expiry(self) -> None:
        task, self._expiry_task = self._expiry_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._ttl_heap.clear()

    def _add_ttl(self, expires: int, seq: int) -> None:
        heapq.heappush(self._ttl_heap, (expires, seq))
        if self._ttl_heap[0][1] == seq:
            self._expiry_wake.set()

    def _next_deadline(self) -> int | None:
        deadlines = []
        if self.policy.max_age > 0 and self.store.msgs:
            first = self.store.load_next(self.store.first_seq)
            if first is not None:
                deadlines.append(first.ts + self.policy.max_age)
        if self._ttl_heap:
            deadlines.append(self._ttl_heap[0][0])
        return min(deadlines) if deadlines else None

    async def _expiry_loop(self) -> None:
        while not self.closed:
            deadline = self._next_deadline()
            timeout = None if deadline is None else max(0.0, (deadline - self.clock()) / 1e9)
            self._expiry_idle = deadline is None
            self._expiry_wake.clear()
            if timeout is None or timeout > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._expiry_wake.wait(), timeout)
                continue
            now = self.clock()
            self._expire_age(now)
            self._expire_ttls(now)
            # Granularity: the server checks about once a second; we wake exactly at the
            # deadline but yield so a flood of expiries cannot starve the loop.
            await asyncio.sleep(0)

    def _expire_age(self, now: int) -> None:
        max_age = self.policy.max_age
        if max_age <= 0:
            return
        cutoff = now - max_age
        store = self.store
        seq = store.first_seq
        while store.msgs:
            m = store.load_next(seq)
            if m is None or m.ts > cutoff:
                break
            seq = m.seq + 1
            if m.hdr and (v := H.get(m.hdr, H.TTL)) is not None and v.lower() == "never":
                continue
            self._remove_expired(m, "MaxAge")

    def _expire_ttls(self, now: int) -> None:
        heap = self._ttl_heap
        while heap and heap[0][0] <= now:
            _, seq = heapq.heappop(heap)
            m = self.store.load(seq)
            if m is not None:
                self._remove_expired(m, "MaxAge")

    def _remove_expired(self, m: StoredMsg, reason: str) -> None:
        marker_ttl = self.policy.marker_ttl
        is_marker = bool(m.hdr) and H.get(m.hdr, H.MARKER_REASON) is not None
        last_of_subject = False
        if marker_ttl > 0 and not is_marker:
            ss = self.store.subject_state(m.subject)
            last_of_subject = ss is not None and ss.msgs == 1
        self.store.remove(m.seq)
        if last_of_subject:
            # Leave a delete marker so KV watchers learn the key went away (ADR-48).
            hdr = H.encode(
                [
                    (H.MARKER_REASON, reason),
                    (H.TTL, format_duration(marker_ttl)),
                    (H.ROLLUP, "sub"),
                ]
            )
            now = self.clock()
            ts = now if now > self._last_ts else self._last_ts
            self._last_ts = ts
            seq = self.store.append(m.subject, hdr, b"", ts, marker_ttl)
            self._add_ttl(ts + marker_ttl, seq)
            for listener in self._stored_listeners:
                listener(seq, m.subject)
