"""One consumer: picks messages (redeliveries first), sends them over the leaf link with
``$JS.ACK…@<stream subject>`` replies, and processes acks, timers, heartbeats and flow control.

Delivery runs in passes scheduled with ``call_soon`` (coalesced): a pass serves up to
``PASS_BUDGET`` messages, then yields to the loop. Targets: the waiting pull requests, served
round-robin (spec §6.4), or the push deliver subject while it has interest (§7.1). Only
committed (durable) stream messages are delivered.

Ordering (spec §0.3): every frame for one inbox — data, heartbeats, statuses, flow control —
leaves on the leaf link, so they arrive in the order sent.
"""

from __future__ import annotations

import heapq
import logging
import math
from typing import Any

from jetlog.consumer import delivery as D
from jetlog.consumer import frames as F
from jetlog.consumer.delivery import FULL_QUEUE_PRUNE_EVERY
from jetlog.consumer.policy import ConsumerPolicy
from jetlog.consumer.pull import YOUNG_REQUEST, Waiting
from jetlog.consumer.push import ConsumerPush
from jetlog.consumer.state import ACK_NONE
from jetlog.wire.subjects import matches

log = logging.getLogger("jetlog.consumer")


class Consumer(ConsumerPush):
    """A consumer of one stream (see module docstring); its state and delivery mechanics are in
    :class:`~jetlog.consumer.delivery.ConsumerDelivery`."""

    # ---- lifecycle -------------------------------------------------------------------------

    def position_new(self) -> None:
        """Choose where a new consumer starts, from its deliver policy (spec §3.2)."""
        c, store, st = self.config, self.store, self.state
        policy = self.p.deliver_policy
        first = max(store.first_seq, 1)
        last = store.last_seq
        if policy == "all":
            start = first
        elif policy == "last":
            m = self._last_matching(last)
            start = m if m else last + 1
        elif policy == "new":
            start = last + 1
        elif policy == "by_start_sequence":
            start = int(c.opt_start_seq or 1)
        elif policy == "by_start_time":
            from jetlog.wire.timefmt import parse_time

            start = store.seq_for_time(parse_time(c.opt_start_time)) if c.opt_start_time else first
        elif policy == "last_per_subject":
            seqs: set[int] = set()
            for f in self.p.filters or (">",):
                for ss in store.subjects_state(None if f == ">" else f).values():
                    seqs.add(ss.last)
            self._skip = sorted(seqs)
            self._resume = last + 1
            start = self._skip[0] if self._skip else last + 1
        else:
            start = first
        st.start_at(start)

    def _last_matching(self, upto: int) -> int:
        if not self.p.filters:
            m = self.store.load_last(None, upto)
            return m.seq if m else 0
        best = 0
        for f in self.p.filters:
            m = self.store.load_last(f, upto)
            if m is not None and m.seq > best:
                best = m.seq
        return best

    def start(self) -> None:
        """Begin serving (after creation or recovery)."""
        if self.p.push:
            self.active = self._has_push_interest()
            if self.p.idle_heartbeat:
                self._schedule_push_hb()
        self._arm_inactivity()
        if self.paused_until > self._now():
            self._arm_pause()
        if self.state.pending:
            self._arm_ack_timer(0)
        self.kick()

    def close(self, deleted: bool) -> None:
        """Stop timers; a deleted consumer tells waiting pull requests ``409 Consumer Deleted``."""
        if self.closed:
            return
        self.closed = True
        for t in (self._ack_timer, self._hb_timer, self._inactive_timer, self._pause_timer):
            if t is not None:
                t.cancel()
        for w in self.waiting.drain():
            if deleted:
                self._send_status(w.reply, F.CONSUMER_DELETED)

    def update(self, config: Any) -> None:
        """Apply a validated new configuration."""
        old = self.p
        self.config = config
        self.p = ConsumerPolicy.of(config)
        if old.deliver_subject != self.p.deliver_subject and self.state.pending:
            # A new deliver subject: everything pending is redelivered there.
            for s in sorted(self.state.pending):
                self._queue_redelivery(s)
        if self.p.push:
            self.active = self._has_push_interest()
        self._arm_inactivity()
        self._arm_ack_timer(0)
        self.kick()

    # ---- scheduling ------------------------------------------------------------------------

    def kick(self) -> None:
        """Schedule a delivery pass (coalesced)."""
        if not self._scheduled and not self.closed:
            self._scheduled = True
            self._loop().call_soon(self._pass)

    def _has_demand(self) -> bool:
        if self.p.push:
            return self.active
        return bool(self.waiting)

    def _pass(self) -> None:
        self._scheduled = False
        if self.closed:
            return
        now = self._now()
        if self.paused_until > now:
            if not self.p.push:
                # nats-server ends no_wait requests whenever nothing can be delivered, a
                # pause included.
                self._end_no_wait(nothing_deliverable=True)
            return
        if not self.host.leaf.connected:
            # Deliveries wait for the leaf link (the consumer set kicks every consumer when it
            # is back) instead of filling its disconnected buffer with frames that may be lost.
            return
        lease = self.host.stream.delivery_lease()
        if lease is None:
            # A leader that may have been deposed (paused, cut off) must not redeliver from
            # its stale state what the real leader has seen acknowledged; the replication
            # side kicks every consumer when the hold lifts.
            return
        try:
            more = self._push_pass(now) if self.p.push else self._pull_pass(now)
        except Exception:  # a bug must not kill the loop; log and stop this pass
            log.exception("consumer %s > %s: delivery pass failed", self.stream.name, self.name)
            return
        finally:
            if lease != math.inf:
                # The process may stall anywhere in this pass, after the check above: frames
                # still unwritten when the lease ends are dropped (they stay pending).
                self.host.leaf.deliveries_valid_until(lease)
        if more:
            self.kick()

    # ---- pull ------------------------------------------------------------------------------

    def _pull_pass(self, now: int) -> bool:
        budget = D.PASS_BUDGET
        pending = -1
        fast = D.FAST_RUNS and self._runs_ok()
        while budget:
            w = self.waiting.head()
            if w is None:
                break
            ahead = self._ahead
            # Runs only for a lone request: with several, each message goes to the next one
            # in turn (spec §6.4).
            if fast and ahead and len(self.waiting) == 1 and ahead[0].seq <= self.stream.committed_seq:
                if pending < 0:
                    pending = self.num_pending()
                sent, pending, used = self._run(w.reply, now, min(budget, w.remaining), pending, w.bytes_left)
                if sent:
                    w.delivered += sent
                    w.bytes_sent += used
                    budget -= sent
                    self._served(w, now)
                    continue
            m, redelivery, _blocked = self._peek()
            if m is None:
                break
            pending, ack, hdr, data, size = self._prepare_next(m, redelivery, pending)
            if self._too_large(m, hdr, data):
                self.waiting.remove(w)
                self._send_status(
                    w.reply,
                    F.pending_status(409, "Message Size Exceeds Max Payload", w.remaining, w.bytes_left),
                )
                if not redelivery:
                    pending += 1
                continue
            if w.max_bytes and size > w.bytes_left:
                # The next message does not fit: end the request; the message stays.
                self.waiting.remove(w)
                self._send_status(
                    w.reply, F.pending_status(409, "Message Size Exceeds MaxBytes", w.remaining, w.bytes_left)
                )
                if not redelivery:
                    pending += 1
                continue
            self._send(m, ack, hdr, data, w.reply, now, "")
            w.delivered += 1
            w.bytes_sent += size
            budget -= 1
            self._served(w, now)
        if budget == 0:
            return True
        self._end_no_wait()
        return False

    def _served(self, w: Waiting, now: int) -> None:
        """After sending to ``w``: end it when it got all it asked for, else move it back."""
        w.last_send = now
        self._touch(now)
        if w.remaining <= 0 or (w.max_bytes and w.bytes_left <= 0):
            left = w.bytes_left
            self.waiting.remove(w)
            if w.max_bytes and left > 0 and w.remaining <= 0:
                self._send_status(w.reply, F.pending_status(409, "Batch Completed", 0, left))
        else:
            self.waiting.rotate(w)

    def _end_no_wait(self, nothing_deliverable: bool = False) -> None:
        """``no_wait`` requests that can get nothing more end with ``404 No Messages`` (or
        linger until their expiry if they got nothing yet and have one, spec §6.2)."""
        if not any(w.no_wait for w in self.waiting):
            return
        if not nothing_deliverable:
            m, _, blocked = self._peek()
            if m is not None or blocked:
                return
        for w in self.waiting:
            if w.no_wait and (w.delivered > 0 or not w.expires):
                self.waiting.remove(w)
                self._send_status(w.reply, F.NO_MESSAGES)

    def add_request(self, w: Waiting) -> None:
        """Queue a validated pull request and serve it."""
        loop = self._loop()
        now = self._now()
        w.arrived = w.last_send = now
        self._touch(now)
        if w.expires:
            w.timers.append(loop.call_later(max(0.0, (w.expires - now) / 1e9), self._expire, w))
        if w.heartbeat:
            w.timers.append(loop.call_later(w.heartbeat / 1e9, self._pull_heartbeat, w))
        w.seen_interest = bool(self.host.leaf.has_interest(w.reply))
        if not w.seen_interest:
            w.timers.append(loop.call_later(YOUNG_REQUEST / 1e9, self._recheck_interest, w))
        self.waiting.add(w)
        self.host.wants_commits(self)
        if w.no_wait and not w.expires and not self._rdq and not self.num_pending():
            # nats-server: nothing left to deliver or redeliver answers at once, even while
            # max_ack_pending holds the consumer (a request that could get something waits).
            self.waiting.remove(w)
            self._send_status(w.reply, F.NO_MESSAGES)
            return
        self.kick()

    def _expire(self, w: Waiting) -> None:
        if w.done or self.closed:
            return
        self.waiting.remove(w)
        self._send_status(w.reply, F.request_timeout(w.remaining, w.bytes_left))

    def _pull_heartbeat(self, w: Waiting) -> None:
        if w.done or self.closed:
            return
        now = self._now()
        due = w.last_send + w.heartbeat
        # Clients declare a request dead after two missed beats; a timer that fires a little
        # early (loop clock granularity) must still send rather than wait a whole interval.
        if now >= due - w.heartbeat // 20:
            self._send_status(w.reply, F.heartbeat(self.state.dseq, self.state.sseq))
            w.last_send = now
            due = now + w.heartbeat
        w.timers.append(self._loop().call_later(max(0.0, (due - now) / 1e9), self._pull_heartbeat, w))

    def note_max_waiting(self) -> None:
        """A pull request was refused (``409 Exceeded MaxWaiting``): say so, at most every
        10 s, with how many (clients that re-pull at once can send thousands)."""
        self._refused_full += 1
        now = self._now()
        if now - self._refused_logged >= 10_000_000_000:
            log.warning(
                "consumer %s > %s: %d pull requests refused, %d waiting (max_waiting %d)",
                self.stream.name,
                self.name,
                self._refused_full,
                len(self.waiting),
                self.p.max_waiting,
            )
            self._refused_full = 0
            self._refused_logged = now

    def make_room(self) -> None:
        """The waiting queue is full: drop requests nobody listens to any more, at most once
        per :data:`FULL_QUEUE_PRUNE_EVERY`. A prune costs one interest match per waiting
        request, clients answered ``409 Exceeded MaxWaiting`` pull again at once, and pruning
        for each of those pulls kept a stream leader's loop busy for good (chaos finding 7:
        its heartbeats and fetch replies went out a second late, its followers left the ISR).
        Requests also leave by their own expiry timers and on every interest change."""
        now = self._now()
        if now - self._room_pruned < FULL_QUEUE_PRUNE_EVERY:
            return
        self._room_pruned = now
        self.drop_requests_without_interest()

    def drop_requests_without_interest(self, removed: str | None = None) -> None:
        """The hub withdrew interest: requests whose inbox nobody listens to any more go.

        With ``removed`` (the subscription the hub just dropped) only requests whose inbox it
        matched are checked, so an unrelated change never drops a request; and a request whose
        inbox was never seen with interest is kept for a moment (see
        ``WaitQueue.prune_without_interest``: its ``LS+`` can arrive on the leaf link after the
        request arrived on the client link)."""
        if not self.waiting:
            return
        leaf = self.host.leaf
        now = self._now()

        def has_interest(reply: str) -> bool:
            return (removed is not None and not matches(removed, reply)) or leaf.has_interest(reply)

        self.waiting.prune_without_interest(has_interest, now)

    def _recheck_interest(self, w: Waiting) -> None:
        if not w.done and not self.closed and not self.host.leaf.has_interest(w.reply):
            self.waiting.remove(w)

    # ---- push ------------------------------------------------------------------------------

    def on_interest_change(self, event: str = "", subject: str = "") -> None:
        """Re-evaluate push activity, or pull inboxes after the hub dropped ``subject`` (an
        ``LS-``, ``event`` "-"; an added subscription cannot end a pull request)."""
        if self.p.push:
            was = self.active
            self.active = self._has_push_interest()
            if self.active and not was:
                self.kick()
            self._arm_inactivity()
        elif event == "-":
            self.drop_requests_without_interest(subject)

    # ---- acks ------------------------------------------------------------------------------

    def on_acks(self, acks: list[tuple[int, int]]) -> None:
        """Plain ``+ACK``s without a reply subject, ``(stream seq, consumer seq)`` in arrival
        order (one socket read's, see ``ConsumerService._on_ack_run``): ``on_ack`` for each,
        with their consumer-log records appended in one call. Where an ack releases messages
        (work-queue or interest retention), the records so far are appended before the
        release, as one by one."""
        now = self._now()
        self._touch(now)
        st, p = self.state, self.p
        if p.ack_policy == ACK_NONE:
            return  # no reply subject: nothing to answer
        cap = p.max_ack_pending
        pol = self.stream.policy
        releases = pol.workqueue or pol.interest
        logged: list[tuple[int, int]] = []
        for sseq, dseq in acks:
            full = cap and len(st.pending) >= cap
            ok, removed = st.ack(sseq, dseq, now)
            if ok:
                self.acks += 1
                logged.append((sseq, dseq))
            if not removed:
                continue
            self._unqueue(removed)
            if releases:
                self._log_acks(logged)
                logged = []
                self.host.on_acked(self, removed)
            if full:
                self.kick()
        self._log_acks(logged)

    def _unqueue(self, removed: list[int]) -> None:
        """Drop acknowledged messages from the redelivery queue."""
        for s in removed:
            if s in self._rdq_set:
                self._rdq_set.discard(s)
                self._rdq = [x for x in self._rdq if x != s]
                heapq.heapify(self._rdq)

    def on_ack(self, sseq: int, dseq: int, kind: str, arg: Any, reply: str | None) -> None:
        """Process one ack-subject message (already parsed; see ``jetlog.consumer.wire``)."""
        now = self._now()
        self._touch(now)
        st, p = self.state, self.p
        if p.ack_policy == ACK_NONE and kind != "next":
            if reply:
                # The real server has no ack subscription for ack-none consumers.
                self._send_status(reply, F.no_responders(self.host.ack_prefix(self.name).decode()))
            return
        if kind in ("ack", "term"):
            full = p.max_ack_pending and len(st.pending) >= p.max_ack_pending
            # Counted before the ack forgets the message (the terminated advisory reports it).
            deliveries = st.delivery_count(sseq) if kind == "term" else 0
            ok, removed = st.ack(sseq, dseq, now)
            if ok:
                self.acks += 1
                self._log("ack", sseq, dseq)
            self._unqueue(removed)
            if removed:
                self.host.on_acked(self, removed)
            if kind == "term":
                self.host.advisory_terminated(self, sseq, dseq, deliveries, str(arg or ""))
            if reply and ok:
                self.host.reply_after_sync(self, reply)
            if removed and full:
                self.kick()
            return
        if kind == "nak":
            r = st.nak(sseq, dseq, now, int(arg or 0), p.ack_wait)
            if r:
                self.host.advisory_nak(self, sseq, dseq, st.delivery_count(sseq))
            if r == "now":
                self._queue_redelivery(sseq)
                self.kick()
            elif r == "later":
                self._arm_ack_timer(0)
            if reply:
                self.host.reply_after_sync(self, reply)
            return
        if kind == "wpi":
            st.progress(sseq, now)
            if reply:
                self.host.reply_after_sync(self, reply)
            return
        if kind == "next":
            if p.ack_policy != ACK_NONE:
                ok, removed = st.ack(sseq, dseq, now)
                if ok:
                    self._log("ack", sseq, dseq)
                if removed:
                    self.host.on_acked(self, removed)
            if reply:
                self.host.pull_request(self, reply, arg if isinstance(arg, bytes) else b"", b"")
            return
        if reply:
            self.host.reply_after_sync(self, reply)

    # ---- inactivity, pause -------------------------------------------------------------------

    def _touch(self, now: int) -> None:
        self._last_activity = now

    def _arm_inactivity(self) -> None:
        thr = self.p.inactive_threshold
        if self._inactive_timer is not None:
            self._inactive_timer.cancel()
            self._inactive_timer = None
        if not thr or self.closed:
            return
        self._inactive_timer = self._loop().call_later(thr / 1e9, self._check_inactive)

    def _check_inactive(self) -> None:
        self._inactive_timer = None
        if self.closed:
            return
        thr = self.p.inactive_threshold
        now = self._now()
        if self.p.push:
            idle = not self.active and now - self._last_activity >= thr
            if self.active:
                self._touch(now)
        else:
            idle = not self.waiting and now - self._last_activity >= thr
        if idle:
            log.info("consumer %s > %s: inactive for %.1fs, deleting", self.stream.name, self.name, thr / 1e9)
            self.host.delete_inactive(self)
            return
        wait = max(thr - (now - self._last_activity), thr // 10, 100_000_000)
        self._inactive_timer = self._loop().call_later(wait / 1e9, self._check_inactive)

    def set_pause(self, until: int) -> None:
        """Pause deliveries until ``until`` (ns; 0 or past = resume now)."""
        self.paused_until = until if until > self._now() else 0
        self._log("pause", self.paused_until)
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        if self.paused_until:
            self._arm_pause()
        else:
            self.kick()

    def _arm_pause(self) -> None:
        delay = max(0.0, (self.paused_until - self._now()) / 1e9)
        self._pause_timer = self._loop().call_later(delay, self._unpause)

    def _unpause(self) -> None:
        self._pause_timer = None
        self.paused_until = 0
        self.host.advisory_pause(self)
        self.kick()

    def on_purge(self, first_seq: int) -> None:
        """The stream was purged: nothing below ``first_seq`` remains."""
        self.state.purge_below(first_seq)
        if self.cid and self.host.clog is not None:
            self.host.clog.purge(self.cid, first_seq)
        self._rdq = [s for s in self._rdq if s >= first_seq]
        heapq.heapify(self._rdq)
        self._rdq_set = set(self._rdq)
        self._skip = [s for s in self._skip if s >= first_seq]
        self.kick()
