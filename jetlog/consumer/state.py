"""Consumer delivery and acknowledgement accounting, without I/O.

The state JetStream reports in ``ConsumerInfo`` and that decides redeliveries, with
nats-server's semantics (``consumer.go``: ``processAckMsg``, ``moveAckFloor``, ``processNak``,
``checkPending``, ``getNextMsg``):

* ``dseq`` / ``sseq``: the last consumer sequence handed out and the last stream sequence the
  consumer advanced past (``delivered``). Every delivery, redeliveries included, takes the next
  consumer sequence; redeliveries do not move ``sseq``.
* ``floor_dseq`` / ``floor_sseq``: the ack floor. It moves only when the acknowledged delivery's
  consumer sequence is exactly ``floor_dseq + 1``: then to that delivery, and further to just
  below the next pending message. With nothing pending it catches up with ``delivered``.
* ``pending``: stream seq → :class:`Pending` (consumer seq of its first delivery, and the time
  the ack timer was armed), for ack policies explicit and all.
* ``redelivered``: stream seq → delivery count, for messages delivered more than once; a message
  that reached max_deliver stays here until it leaves the stream (``num_redelivered``).

Every mutation is a method a persistent log can record and replay, so the same code rebuilds
the state after a restart (``jetlog.consumer.store``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

ACK_NONE = "none"
ACK_ALL = "all"
ACK_EXPLICIT = "explicit"


@dataclass(slots=True)
class Pending:
    """One delivered, not yet acknowledged message."""

    dseq: int  # consumer sequence of its first delivery (kept on redelivery)
    ts: int  # when its ack timer was (re)armed, ns


@dataclass(slots=True)
class ConsumerState:
    """Delivery/ack accounting of one consumer (see module docstring)."""

    ack_policy: str
    dseq: int = 0
    sseq: int = 0
    floor_dseq: int = 0
    floor_sseq: int = 0
    pending: dict[int, Pending] = field(default_factory=dict)
    redelivered: dict[int, int] = field(default_factory=dict)
    last_delivered_ts: int = 0
    last_ack_ts: int = 0
    # Pending stream sequences in ascending order, with lazily skipped removals: new deliveries
    # always have a higher stream sequence than anything before, so appending keeps it sorted.
    _order: list[int] = field(default_factory=list)
    _head: int = 0

    # ---- queries ---------------------------------------------------------------------------

    @property
    def num_ack_pending(self) -> int:
        """Messages delivered and awaiting an ack (including those queued for redelivery)."""
        return len(self.pending)

    @property
    def num_redelivered(self) -> int:
        """Distinct stream sequences currently tracked with more than one delivery."""
        return len(self.redelivered)

    def delivery_count(self, sseq: int) -> int:
        """Deliveries of ``sseq`` so far (1 if delivered once, 0 if not tracked)."""
        n = self.redelivered.get(sseq)
        if n is not None:
            return n
        return 1 if sseq in self.pending else 0

    def lowest_pending(self) -> int:
        """The lowest pending stream sequence (0 if none)."""
        order, pending = self._order, self.pending
        h = self._head
        while h < len(order) and order[h] not in pending:
            h += 1
        self._head = h
        if h > 1024 and h * 2 > len(order):
            del order[:h]
            self._head = 0
            h = 0
        return order[h] if h < len(order) else 0

    def _pending_after(self, sseq: int) -> int:
        """The lowest pending stream sequence above ``sseq`` (0 if none)."""
        order, pending = self._order, self.pending
        i = max(bisect_right(order, sseq), self._head)
        while i < len(order):
            s = order[i]
            if s in pending:
                return s
            i += 1
        return 0

    # ---- deliveries ------------------------------------------------------------------------

    def start_at(self, sseq: int) -> None:
        """Position a new consumer so that ``sseq`` is the next stream sequence it considers
        (nats-server reports ``delivered.stream_seq = ack_floor.stream_seq = start - 1``)."""
        self.sseq = self.floor_sseq = max(sseq - 1, 0)

    def deliver(self, sseq: int, now: int) -> tuple[int, int]:
        """Record a delivery of ``sseq``; return ``(consumer seq, delivery count)``.

        A sequence above ``self.sseq`` is a new message and advances the stream position; one
        at or below it is a redelivery.
        """
        self.dseq += 1
        dseq = self.dseq
        self.last_delivered_ts = now
        if sseq > self.sseq:
            self.sseq = sseq
            count = 1
        else:
            count = self.delivery_count(sseq) + 1
            self.redelivered[sseq] = count
        if self.ack_policy == ACK_NONE:
            # No pending tracking: the floor follows deliveries.
            self.floor_dseq, self.floor_sseq = dseq, self.sseq
            return dseq, count
        p = self.pending.get(sseq)
        if p is None:
            self.pending[sseq] = Pending(dseq, now)
            if not self._order or sseq > self._order[-1]:
                self._order.append(sseq)
            else:  # re-tracked after a rollback: keep the order sorted
                i = bisect_right(self._order, sseq)
                if i == 0 or self._order[i - 1] != sseq:
                    self._order.insert(i, sseq)
        else:
            # A redelivery re-arms the timer but keeps the *original* consumer sequence of the
            # pending entry (nats-server trackPending): the ack floor logic keys on it.
            p.ts = now
        return dseq, count

    # ---- acknowledgements ------------------------------------------------------------------

    def ack(self, sseq: int, dseq: int, now: int) -> tuple[bool, list[int]]:
        """``+ACK`` (and ``+TERM``) of ``sseq`` delivered as ``dseq`` (from the ack subject).

        Returns ``(reply, removed)``: whether an ack with a reply subject gets its empty reply
        (not for an ack "from the future" or on an ack-none consumer), and the stream sequences
        that stopped being pending (work-queue / interest retention removes them).
        """
        if sseq > self.sseq or self.ack_policy == ACK_NONE:
            return False, []
        self.last_ack_ts = now
        if self.ack_policy == ACK_ALL:
            if dseq <= self.floor_dseq or sseq <= self.floor_sseq:
                return True, []
            self.floor_dseq, self.floor_sseq = dseq, sseq
            removed = [s for s in self.pending if s <= sseq]
            for s in removed:
                del self.pending[s]
                self.redelivered.pop(s, None)
            removed.sort()
            return True, removed
        p = self.pending.pop(sseq, None)
        # An ack always clears the redelivery count (also of a message past max_deliver).
        self.redelivered.pop(sseq, None)
        if p is None:
            return True, []
        self._move_floor(p.dseq, sseq)
        return True, [sseq]

    def _move_floor(self, dseq: int, sseq: int) -> None:
        if not self.pending:
            self.floor_dseq, self.floor_sseq = self.dseq, self.sseq
        elif dseq == self.floor_dseq + 1:
            self.floor_dseq, self.floor_sseq = dseq, sseq
            nxt = self._pending_after(sseq)
            if nxt:
                self.floor_dseq, self.floor_sseq = self.pending[nxt].dseq - 1, nxt - 1

    def nak(self, sseq: int, dseq: int, now: int, delay: int, ack_wait: int) -> str:
        """``-NAK``: returns ``"now"`` (redeliver at once), ``"later"`` (timer re-armed for
        ``delay``) or ``""`` (ignored: not pending, or a delivery outside (floor, delivered])."""
        if dseq <= self.floor_dseq or dseq > self.dseq:
            return ""
        p = self.pending.get(sseq)
        if p is None:
            return ""
        if delay > 0:
            # nats-server: timestamp = now - ack_wait + delay (so it is due after ``delay``).
            p.ts = now - ack_wait + delay
            return "later"
        return "now"

    def progress(self, sseq: int, now: int) -> bool:
        """``+WPI``: re-arm the ack timer of ``sseq`` from now."""
        p = self.pending.get(sseq)
        if p is None:
            return False
        p.ts = now
        return True

    def drop_max_delivered(self, sseq: int) -> None:
        """``sseq`` reached max_deliver: stop tracking it as pending. It keeps counting in
        ``redelivered`` (if it was redelivered) until it leaves the stream; the reported ack
        floor does not move for it (observed on nats-server)."""
        self.pending.pop(sseq, None)

    def forget(self, sseq: int) -> None:
        """``sseq`` left the stream (limits, delete, purge): drop every trace of it."""
        p = self.pending.pop(sseq, None)
        self.redelivered.pop(sseq, None)
        if p is not None:
            self._move_floor(p.dseq, sseq)

    def purge_below(self, seq: int) -> None:
        """The stream was purged below ``seq``: nothing below it can be delivered or acked."""
        for s in [s for s in self.pending if s < seq]:
            del self.pending[s]
        for s in [s for s in self.redelivered if s < seq]:
            del self.redelivered[s]
        if self.sseq < seq - 1:
            self.sseq = seq - 1
        if self.floor_sseq < seq - 1:
            if self.pending:
                low = self.lowest_pending()
                self.floor_sseq = min(seq - 1, low - 1)
            else:
                self.floor_dseq, self.floor_sseq = self.dseq, self.sseq

    # ---- redelivery timers -----------------------------------------------------------------

    def expired(self, now: int, wait: Callable[[int], int], skip: set[int]) -> tuple[list[int], int]:
        """Pending sequences whose ack wait elapsed (ascending, excluding ``skip``), and the
        delay in ns until the next one is due (0 when nothing else is pending).

        ``wait(delivery_count)`` gives the ack wait after that many deliveries (backoff aware).
        """
        due: list[int] = []
        nxt = 0
        for s, p in self.pending.items():
            if s in skip:
                continue
            left = p.ts + wait(self.delivery_count(s)) - now
            if left <= 0:
                due.append(s)
            elif nxt == 0 or left < nxt:
                nxt = left
        due.sort()
        return due, nxt
