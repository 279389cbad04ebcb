"""The delivery mechanics of a consumer (base class of ``consumer.Consumer``, which drives
them): its state, choosing the next message (redeliveries first, then new messages up to the
stream's committed sequence), preparing and sending a delivery, the ack-wait timer that queues
redeliveries, and logging state changes to the consumer-state log.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from jetlog.consumer import frames as F
from jetlog.consumer.policy import ConsumerPolicy
from jetlog.consumer.pull import WaitQueue
from jetlog.consumer.state import ACK_NONE, ConsumerState
from jetlog.log.store import StoredMsg
from jetlog.wire.leaf import DELIVERY_LINE_SLACK, delivery_frame, encode_delivery

if TYPE_CHECKING:
    from jetlog.consumer.host import ConsumerHost

log = logging.getLogger("jetlog.consumer")

FULL_QUEUE_PRUNE_EVERY = 100_000_000
"""ns between two prunes of a full waiting queue (see ``Consumer.make_room``)."""

FC_WINDOW_START = 2 * 1024 * 1024

PASS_BUDGET = 256
"""Messages one delivery pass serves before it yields to the loop."""
FAST_RUNS = True
"""Deliver new messages in runs (``ConsumerDelivery._run``); tests turn it off to compare."""

AHEAD_MSGS = 256
AHEAD_BYTES = 256 * 1024
"""New messages read ahead per consumer in one store pass (the first always, then up to these
limits): one bulk read instead of a lookup and a read per delivery. The byte bound is what
limits a lagging consumer's memory (256 messages of 128 B hold ~70 KB with their objects); 256
rather than 64 messages took ~10 % off the node's CPU per delivery of small messages (fetch,
3 alternating rounds), each refill's set-up shared by four times as many."""


class ConsumerDelivery:
    """State and delivery mechanics of one consumer (see module docstring)."""

    def __init__(
        self,
        host: ConsumerHost,
        name: str,
        config: Any,
        created: int,
        state: ConsumerState,
        cid: int = 0,
        paused_until: int = 0,
    ) -> None:
        self.host = host
        self.name = name
        self.config = config
        self.created = created
        self.state = state
        self.cid = cid  # id in the stream's consumer-state log (0: not persisted)
        self.paused_until = paused_until
        self.p = ConsumerPolicy.of(config)
        self.closed = False
        self.acks = 0  # acks and terms that settled a pending message (metrics)
        self.waiting = WaitQueue()
        self._rdq: list[int] = []  # redelivery queue (heap of stream seqs)
        # Read-ahead of new messages (see _next_new): every live matching message of the store
        # from _ahead_from up to the last one held, for filter _ahead_filter.
        self._ahead: deque[StoredMsg] = deque()
        self._ahead_from = 0
        self._ahead_filter: str | None = None
        self._ahead_store: Any = None
        self._ahead_mark: Any = None  # the store's removal mark when the read-ahead was filled
        self._rdq_set: set[int] = set()
        self._skip: list[int] = []  # last_per_subject start: sequences to deliver first
        self._resume = 0  # after the skip list, continue from here
        self._too_large_seq = 0  # last message logged as too large to deliver
        self._scheduled = False
        self._room_pruned = -FULL_QUEUE_PRUNE_EVERY  # when a full waiting queue was last pruned
        self._refused_full = 0  # pull requests refused for a full queue since the last log line
        self._refused_logged = -10_000_000_000
        self._ack_timer: asyncio.TimerHandle | None = None
        self._ack_deadline = 0
        self._hb_timer: asyncio.TimerHandle | None = None
        self._inactive_timer: asyncio.TimerHandle | None = None
        self._pause_timer: asyncio.TimerHandle | None = None
        self._last_activity = time.time_ns()
        self._last_push_send = 0
        self._active = False  # push: the deliver subject has interest
        # Flow control (push): bytes sent since the last FC request, window, outstanding FC.
        self._fc_window = FC_WINDOW_START
        self._fc_sent = 0
        self._fc_pending = ""
        # Rate limit (push): token bucket in bytes.
        self._tokens = 0.0
        self._tokens_at = time.monotonic()
        self._replay_last_ts = 0
        self._replay_until = 0
        self.max_deliveries_notified: set[int] = set()

    if TYPE_CHECKING:

        def kick(self) -> None:
            """Schedule a delivery pass (``Consumer.kick``)."""

    # ---- identity / helpers ----------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Push: the deliver subject has interest."""
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        if value and not self._active:
            self.host.wants_commits(self)
        self._active = value

    @property
    def stream(self) -> Any:
        return self.host.stream

    @property
    def store(self) -> Any:
        return self.host.stream.store

    def _now(self) -> int:
        return time.time_ns()

    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    # ---- choosing messages ------------------------------------------------------------------

    def _new_start(self) -> int:
        return max(self.state.sseq + 1, self._resume) if not self._skip else self._skip[0]

    def _peek(self) -> tuple[StoredMsg | None, bool, bool]:
        """The next message to deliver: ``(msg, is_redelivery, blocked_by_ack_pending)``."""
        store = self.store
        while self._rdq:
            s = self._rdq[0]
            if s not in self.state.pending:
                self._pop_rdq()
                continue
            dc = self.state.delivery_count(s) + 1
            if self.p.max_deliver and dc > self.p.max_deliver:
                self._pop_rdq()
                self._max_delivered(s, dc - 1)
                continue
            m = store.load(s)
            if m is None:
                # Removed from the stream while pending (limits, delete, purge).
                self._pop_rdq()
                self.state.forget(s)
                self._log("forget", s)
                continue
            return m, True, False
        st = self.state
        if (
            self.p.ack_policy != ACK_NONE
            and self.p.max_ack_pending
            and len(st.pending) >= self.p.max_ack_pending
        ):
            return None, False, True
        committed = self.stream.committed_seq
        if self._skip:
            while self._skip:
                s = self._skip[0]
                if s > committed:
                    return None, False, False
                m = store.load(s)
                if m is not None:
                    return m, False, False
                self._skip.pop(0)
            return self._peek()
        start = max(st.sseq + 1, self._resume)
        if start > committed:
            return None, False, False
        fs = self.p.filters
        if not fs:
            return self._next_new(store, start, None, committed), False, False
        if len(fs) == 1:
            return self._next_new(store, start, fs[0], committed), False, False
        best = 0
        for f in fs:
            q = store.next_seq(start, f, committed)
            if q and (not best or q < best):
                best = q
        return (store.load(best) if best else None), False, False

    def _next_new(self, store: Any, start: int, f: str | None, committed: int) -> StoredMsg | None:
        """``store.load_next(start, f, committed)``, served from the read-ahead.

        The read-ahead holds every live message matching ``f`` from ``_ahead_from`` up to its
        last one, as they were when read. New messages only ever get higher sequences, so for
        any ``start >= _ahead_from`` its first message at or after ``start`` is still the
        answer unless that message was removed since (checked: one index lookup, skipped while
        the store's removal mark is what it was at the fill), or lies above the committed mark
        (which drops when a replica changes role). Anything else (a start before the
        read-ahead, another filter or store) reads afresh."""
        ahead = self._ahead
        if ahead:
            if start < self._ahead_from or f != self._ahead_filter or store is not self._ahead_store:
                ahead.clear()
            else:
                while ahead and ahead[0].seq < start:
                    ahead.popleft()
                self._ahead_from = start
                if ahead:
                    m = ahead[0]
                    if m.seq <= committed and (
                        store.removal_mark() == self._ahead_mark or store.is_live(m.seq)
                    ):
                        return m
                    ahead.clear()
        mark = store.removal_mark()
        batch = store.load_ahead(start, f, committed, AHEAD_MSGS, AHEAD_BYTES)
        if not batch:
            return None
        ahead.extend(batch)
        self._ahead_from, self._ahead_filter, self._ahead_store = start, f, store
        self._ahead_mark = mark
        return batch[0]

    def _runs_ok(self) -> bool:
        """Whether this consumer's configuration allows ``_run``: no replay at the original
        rate, rate limit, headers-only, deliver group or several filters, on a limits stream
        (where a delivery never removes a message)."""
        p, pol = self.p, self.stream.policy
        return not (
            p.replay_original
            or p.rate_limit_bps
            or p.headers_only
            or p.deliver_group
            or len(p.filters) > 1
            or pol.interest
            or pol.workqueue
        )

    def _run(self, target: str, now: int, budget: int, pending: int, bytes_left: int) -> tuple[int, int, int]:
        """Deliver up to ``budget`` new messages to ``target`` straight from the read-ahead, in
        one loop: what ``_peek``, ``_prepare`` and ``_send`` do per message, for the common
        case only. Returns ``(sent, pending, bytes)`` (bytes as a pull request counts them);
        0 sent when the case is not common (the caller's one-by-one path then handles it).
        Stops early where that path has something to decide: a message past the committed
        mark, max_ack_pending reached, a message over ``bytes_left`` (when not 0), the
        flow-control window full (or half of it, for the caller to ask the client), a frame
        the link cannot take as encoded.

        The caller checked ``_runs_ok`` (and push interest). Here: nothing to redeliver or
        skip, the read-ahead is the one ``_next_new`` would use and nothing was removed since
        it was read."""
        ahead = self._ahead
        store = self.store
        p = self.p
        f = p.filters[0] if p.filters else None
        if (
            self._rdq
            or self._skip
            or not ahead
            or f != self._ahead_filter
            or store is not self._ahead_store
            or store.removal_mark() != self._ahead_mark
        ):
            return 0, pending, 0
        st = self.state
        start = max(st.sseq + 1, self._resume)
        if start < self._ahead_from:
            return 0, pending, 0
        committed = self.stream.committed_seq
        ack_none = p.ack_policy == ACK_NONE
        cap = 0 if ack_none else p.max_ack_pending
        unacked = st.pending
        host = self.host
        leaf = host.leaf
        limit = leaf.max_payload
        prefix = host.ack_prefix(self.name)
        t = target.encode("utf-8", "surrogateescape")
        # Control-line room for the stored subject: ``wire.encode_delivery``'s bound with the
        # ack subject at its longest (five numbers of up to 20 digits); a subject too long for
        # that takes the one-by-one path, which decides with the exact length.
        room = leaf.max_control_line - DELIVERY_LINE_SLACK - len(t) - len(prefix) - 104
        subjects: dict[str, bytes] = {}  # this run's stored subjects, encoded once
        cid = self.cid
        lg = host.clog if cid else None
        logged: list[int] = []  # the pass's deliveries: their log records are appended at once
        frames: list[bytes] = []  # queued on the link at once, in order, by the finally below
        fc = p.flow_control
        sent = used = payload = 0
        try:
            while sent < budget and ahead:
                m = ahead[0]
                s = m.seq
                if s < start:
                    ahead.popleft()
                    continue
                if (
                    s > committed
                    or (cap and len(unacked) >= cap)
                    or (fc and self._fc_sent >= self._fc_window)
                ):
                    break
                hdr, data = m.hdr, m.data
                n = len(hdr) + len(data)
                if limit and n > limit:
                    break  # the one-by-one path logs it and waits (or ends the request)
                subject = m.subject
                sb = subjects.get(subject)
                if sb is None:
                    sb = subjects[subject] = subject.encode("utf-8", "surrogateescape")
                if len(sb) > room:
                    break
                left = pending - 1 if pending > 0 else 0
                # A new message: delivery count 1 (the ack subject's layout is ``_prepare``'s).
                ack = b"%b1.%d.%d.%d.%d" % (prefix, s, st.dseq + 1, m.ts, left)
                size = len(subject) + len(ack) + n
                if bytes_left and used + size > bytes_left:
                    break  # the one-by-one path ends the request (it does not fit)
                # Parts checked above or where they came from (the target, the ack prefix of
                # valid names, a stored subject).
                frames.append(delivery_frame(t, ack, sb, hdr, data))
                pending = left
                st.deliver(s, now)
                if lg is not None:
                    logged.append(s)
                ahead.popleft()
                start = s + 1
                sent += 1
                used += size
                payload += n
                if fc:
                    self._fc_sent += size
                    if not self._fc_pending and self._fc_sent >= self._fc_window // 2:
                        break  # the caller sends the flow-control request now
        finally:
            # Queued and logged even when the pass stopped on an error: the state already
            # counts these deliveries, and the log must hold every one it counts.
            try:
                if logged:
                    assert lg is not None
                    lg.deliver_many(cid, logged, now)
            finally:
                if frames:
                    leaf.publish_frames(frames, payload)
        if sent:
            self._ahead_from = start
            if not ack_none and self._ack_timer is None:
                self._arm_ack_timer(0)
        return sent, pending, used

    def _pop_rdq(self) -> None:
        s = heapq.heappop(self._rdq)
        self._rdq_set.discard(s)

    def _queue_redelivery(self, s: int) -> None:
        if s not in self._rdq_set:
            self._rdq_set.add(s)
            heapq.heappush(self._rdq, s)

    def num_pending(self) -> int:
        """Messages matching the filter that were never delivered (spec §3.2)."""
        store = self.store
        n = 0
        if self._skip:
            n += len(self._skip)
            start = self._resume
        else:
            start = max(self.state.sseq + 1, self._resume)
        if start > store.last_seq:
            return n
        fs = self.p.filters
        if not fs:
            return n + store.num_pending(start, None)
        return n + sum(store.num_pending(start, f) for f in fs)

    # ---- sending ---------------------------------------------------------------------------

    def _prepare(self, m: StoredMsg, redelivery: bool, pending: int) -> tuple[bytes, bytes, bytes, int]:
        """The frame a delivery of ``m`` would send now: (ack subject, header block, payload,
        accounted size = subject + ack subject + headers + payload, spec §6.5)."""
        st = self.state
        dc = st.delivery_count(m.seq) + 1 if redelivery else 1
        ack = self.host.ack_prefix(self.name) + b"%d.%d.%d.%d.%d" % (dc, m.seq, st.dseq + 1, m.ts, pending)
        hdr, data = m.hdr, m.data
        if self.p.headers_only:
            hdr = F.with_msg_size(hdr, len(data))
            data = b""
        return ack, hdr, data, len(m.subject) + len(ack) + len(hdr) + len(data)

    def _prepare_next(
        self, m: StoredMsg, redelivery: bool, pending: int
    ) -> tuple[int, bytes, bytes, bytes, int]:
        """``_prepare`` within a pass, which counts the messages never delivered once (computed
        on first use, ``pending`` < 0) and one less per new message; returns that count first."""
        if pending < 0:
            pending = self.num_pending()
        if not redelivery:
            pending = max(pending - 1, 0)
        return (pending, *self._prepare(m, redelivery, pending))

    def _too_large(self, m: StoredMsg, hdr: bytes, data: bytes) -> bool:
        """True when the delivery of ``m`` exceeds the hub's max_payload (the hub would close the
        leaf link for it). nats-server delivers such a message (its deliveries are internal);
        jetlog cannot, so the message stays where it is: a pull request ends with
        ``409 Message Size Exceeds Max Payload`` (as ``Message Size Exceeds MaxBytes`` ends one
        for max_bytes), a push consumer waits. Only reachable when max_payload shrank after the
        message was stored, or a ``headers_only`` header pushes a header-heavy message over."""
        limit = self.host.leaf.max_payload
        if not limit or len(hdr) + len(data) <= limit:
            return False
        if self._too_large_seq != m.seq:
            self._too_large_seq = m.seq
            log.warning(
                "consumer %s > %s: message %d (%d bytes) exceeds the upstream max_payload %d; "
                "it cannot be delivered until max_payload is raised or the message is removed",
                self.stream.name,
                self.name,
                m.seq,
                len(hdr) + len(data),
                limit,
            )
        return True

    def _send(
        self, m: StoredMsg, ack: bytes, hdr: bytes, data: bytes, target: str, now: int, queue: str
    ) -> None:
        """Record the delivery prepared by ``_prepare`` and send it."""
        st = self.state
        if self._skip and m.seq == self._skip[0]:
            self._skip.pop(0)
        st.deliver(m.seq, now)
        self._log("deliver", m.seq, now)
        if self._rdq and self._rdq[0] == m.seq:
            self._pop_rdq()
        # The hub delivers with the stream subject after '@' (spec §0.2).
        leaf = self.host.leaf
        frame = None if queue else encode_delivery(target, ack, m.subject, hdr, data, leaf.max_control_line)
        if frame is not None:
            leaf.publish_frame(frame, len(hdr) + len(data))
        else:
            reply = ack.decode() + "@" + m.subject
            leaf.publish(target, data, reply=reply, hdr=hdr, queues=(queue,) if queue else ())
        if self.p.ack_policy == ACK_NONE:
            self.host.on_delivered_none(self, m.seq)
        elif self._ack_timer is None:
            self._arm_ack_timer(0)

    def _send_status(self, subject: str, hdr: bytes, reply: str | None = None) -> None:
        self.host.leaf.publish(subject, b"", reply=reply, hdr=hdr)

    # ---- ack wait ---------------------------------------------------------------------------

    def _arm_ack_timer(self, delay_ns: int) -> None:
        if self.closed or self.p.ack_policy == ACK_NONE:
            return
        if not self.state.pending:
            if self._ack_timer is not None:
                self._ack_timer.cancel()
                self._ack_timer = None
            return
        if delay_ns <= 0:
            delay_ns = (
                min(
                    p.ts + self.p.wait_for(self.state.delivery_count(s))
                    for s, p in self.state.pending.items()
                )
                - self._now()
            )
        deadline = self._now() + max(delay_ns, 0) + 1_000_000  # 1 ms slack, as the server
        if self._ack_timer is not None:
            if deadline >= self._ack_deadline:
                return
            self._ack_timer.cancel()
        self._ack_deadline = deadline
        self._ack_timer = self._loop().call_later(
            max(0.0, (deadline - self._now()) / 1e9), self._check_pending
        )

    def _check_pending(self) -> None:
        self._ack_timer = None
        if self.closed:
            return
        st = self.state
        first = self.store.first_seq
        for s in [s for s in st.pending if s < first]:
            st.forget(s)
            self._log("forget", s)
        due, nxt = st.expired(self._now(), self.p.wait_for, self._rdq_set)
        for s in due:
            self._queue_redelivery(s)
        if due:
            self.kick()
        if st.pending:
            self._arm_ack_timer(nxt if nxt > 0 else self.p.ack_wait)

    def _max_delivered(self, s: int, deliveries: int) -> None:
        self.state.drop_max_delivered(s)
        self._log("drop", s)
        if s not in self.max_deliveries_notified:
            self.max_deliveries_notified.add(s)
            self.host.advisory_max_deliveries(self, s, deliveries)

    # ---- persistence -----------------------------------------------------------------------

    def _log_acks(self, acks: list[tuple[int, int]]) -> None:
        """``_log("ack", sseq, dseq)`` for each of ``acks``, appended in one call."""
        lg = self.host.clog
        if acks and lg is not None and self.cid:
            lg.ack_many(self.cid, acks)

    def _log(self, what: str, a: int, b: int = 0) -> None:
        lg = self.host.clog
        if lg is None or not self.cid:
            return
        cid = self.cid
        if what == "deliver":
            lg.deliver(cid, a, b)
        elif what == "ack":
            lg.ack(cid, a, b)
        elif what == "drop":
            lg.drop(cid, a)
        elif what == "forget":
            lg.forget(cid, a)
        elif what == "pause":
            lg.pause(cid, a)
