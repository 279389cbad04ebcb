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

import asyncio
import heapq
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from jetlog.consumer import frames as F
from jetlog.consumer.policy import ConsumerPolicy
from jetlog.consumer.pull import Waiting, WaitQueue
from jetlog.consumer.state import ACK_NONE, ConsumerState
from jetlog.log.store import StoredMsg

if TYPE_CHECKING:
    from jetlog.consumer.manager import ConsumerSet

log = logging.getLogger("jetlog.consumer")

PASS_BUDGET = 256
FC_WINDOW_START = 2 * 1024 * 1024
FC_WINDOW_MAX = 32 * 1024 * 1024
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _rand4() -> str:
    return "".join(_B62[b % 62] for b in os.urandom(4))


class Consumer:
    """A consumer of one stream (see module docstring)."""

    def __init__(
        self,
        host: ConsumerSet,
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
        self.waiting = WaitQueue()
        self._rdq: list[int] = []  # redelivery queue (heap of stream seqs)
        self._rdq_set: set[int] = set()
        self._skip: list[int] = []  # last_per_subject start: sequences to deliver first
        self._resume = 0  # after the skip list, continue from here
        self._scheduled = False
        self._ack_timer: asyncio.TimerHandle | None = None
        self._ack_deadline = 0
        self._hb_timer: asyncio.TimerHandle | None = None
        self._inactive_timer: asyncio.TimerHandle | None = None
        self._pause_timer: asyncio.TimerHandle | None = None
        self._last_activity = time.time_ns()
        self._last_push_send = 0
        self.active = False  # push: the deliver subject has interest
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

    # ---- identity / helpers ----------------------------------------------------------------

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
            return
        try:
            more = self._push_pass(now) if self.p.push else self._pull_pass(now)
        except Exception:  # a bug must not kill the loop; log and stop this pass
            log.exception("consumer %s > %s: delivery pass failed", self.stream.name, self.name)
            return
        if more:
            self.kick()

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
        committed = store.committed_seq
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
            return store.load_next(start, None, committed), False, False
        if len(fs) == 1:
            return store.load_next(start, fs[0], committed), False, False
        best = 0
        for f in fs:
            q = store.next_seq(start, f, committed)
            if q and (not best or q < best):
                best = q
        return (store.load(best) if best else None), False, False

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
        reply = ack.decode() + "@" + m.subject
        self.host.leaf.publish(target, data, reply=reply, hdr=hdr, queues=(queue,) if queue else ())
        if self.p.ack_policy == ACK_NONE:
            self.host.on_delivered_none(self, m.seq)
        elif self._ack_timer is None:
            self._arm_ack_timer(0)

    def _send_status(self, subject: str, hdr: bytes, reply: str | None = None) -> None:
        self.host.leaf.publish(subject, b"", reply=reply, hdr=hdr)

    # ---- pull ------------------------------------------------------------------------------

    def _pull_pass(self, now: int) -> bool:
        budget = PASS_BUDGET
        pending = -1
        while budget:
            w = self.waiting.head()
            if w is None:
                break
            m, redelivery, _blocked = self._peek()
            if m is None:
                break
            if pending < 0:
                pending = self.num_pending()
            if not redelivery:
                pending = max(pending - 1, 0)
            ack, hdr, data, size = self._prepare(m, redelivery, pending)
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
            w.last_send = now
            self._touch(now)
            budget -= 1
            if w.remaining <= 0 or (w.max_bytes and w.bytes_left <= 0):
                left = w.bytes_left
                self.waiting.remove(w)
                if w.max_bytes and left > 0 and w.remaining <= 0:
                    self._send_status(w.reply, F.pending_status(409, "Batch Completed", 0, left))
            else:
                self.waiting.rotate(w)
        if budget == 0:
            return True
        self._end_no_wait()
        return False

    def _end_no_wait(self) -> None:
        """``no_wait`` requests that can get nothing more end with ``404 No Messages`` (or
        linger until their expiry if they got nothing yet and have one, spec §6.2)."""
        if not any(w.no_wait for w in self.waiting):
            return
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
        self.waiting.add(w)
        if w.no_wait:
            # Nothing deliverable at all: answer at once rather than on the next pass.
            m, _, blocked = self._peek()
            if m is None and not blocked and not w.expires:
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

    def drop_requests_without_interest(self) -> None:
        """The hub withdrew interest: requests whose inbox nobody listens to any more go."""
        leaf = self.host.leaf
        if self.waiting:
            self.waiting.prune(lambda w: leaf.has_interest(w.reply))

    # ---- push ------------------------------------------------------------------------------

    def _has_push_interest(self) -> bool:
        leaf = self.host.leaf
        subj = self.p.deliver_subject
        if self.p.deliver_group:
            return self.p.deliver_group in leaf.queue_groups(subj)
        return bool(leaf.has_interest(subj))

    def on_interest_change(self) -> None:
        """Re-evaluate push activity / pull inboxes after an LS+/LS- from the hub."""
        if self.p.push:
            was = self.active
            self.active = self._has_push_interest()
            if self.active and not was:
                self.kick()
            self._arm_inactivity()
        else:
            self.drop_requests_without_interest()

    def _push_pass(self, now: int) -> bool:
        if not self.active:
            return False
        budget = PASS_BUDGET
        pending = -1
        p = self.p
        while budget:
            if p.flow_control and self._fc_sent >= self._fc_window:
                return False  # stalled until the client answers the FC request
            m, redelivery, _ = self._peek()
            if m is None:
                return False
            if p.replay_original and not redelivery and not self._replay_ok(m, now):
                return False
            if not self._has_push_interest():
                self.active = False
                return False
            if pending < 0:
                pending = self.num_pending()
            if not redelivery:
                pending = max(pending - 1, 0)
            ack, hdr, data, size = self._prepare(m, redelivery, pending)
            if p.rate_limit_bps and not self._take_tokens(size):
                return False
            self._send(m, ack, hdr, data, p.deliver_subject, now, p.deliver_group)
            self._last_push_send = now
            self._touch(now)
            budget -= 1
            if p.flow_control:
                self._fc_sent += size
                if not self._fc_pending and self._fc_sent >= self._fc_window // 2:
                    self._fc_pending = f"$JS.FC.{self.stream.name}.{self.name}.{_rand4()}"
                    self._send_status(p.deliver_subject, F.FLOW_CONTROL, reply=self._fc_pending)
        return True

    def on_flow_control_reply(self, subject: str) -> None:
        """The client answered our FC request: release the window (stale answers ignored)."""
        if subject != self._fc_pending:
            return
        self._fc_pending = ""
        self._fc_sent = 0
        self._fc_window = min(self._fc_window * 2, FC_WINDOW_MAX)
        self.kick()

    def _schedule_push_hb(self) -> None:
        hb = self.p.idle_heartbeat
        self._hb_timer = self._loop().call_later(hb / 1e9, self._push_heartbeat)

    def _push_heartbeat(self) -> None:
        if self.closed:
            return
        now = self._now()
        hb = self.p.idle_heartbeat
        if not hb:
            return
        if self.active and now - self._last_push_send >= hb - hb // 20:
            self._send_status(
                self.p.deliver_subject, F.heartbeat(self.state.dseq, self.state.sseq, self._fc_pending)
            )
            self._last_push_send = now
        elif not self.active:
            self.active = self._has_push_interest()
            if self.active:
                self.kick()
        self._schedule_push_hb()

    def _take_tokens(self, n: int) -> bool:
        rate = self.p.rate_limit_bps / 8.0
        now = time.monotonic()
        burst = max(float(self.stream.config.max_msg_size or 0), 1024.0 * 1024.0)
        self._tokens = min(burst, self._tokens + (now - self._tokens_at) * rate)
        self._tokens_at = now
        if self._tokens >= n or self._tokens >= burst:
            self._tokens -= n
            return True
        self._loop().call_later((n - self._tokens) / rate, self.kick)
        return False

    def _replay_ok(self, m: StoredMsg, now: int) -> bool:
        """``replay_policy: original``: keep the gaps between stored timestamps."""
        if self._replay_last_ts == 0:
            self._replay_last_ts, self._replay_until = m.ts, now
            return True
        due = self._replay_until + (m.ts - self._replay_last_ts)
        if now >= due:
            self._replay_last_ts, self._replay_until = m.ts, now
            return True
        self._loop().call_later((due - now) / 1e9, self.kick)
        return False

    # ---- acks ------------------------------------------------------------------------------

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
            ok, removed = st.ack(sseq, dseq, now)
            if ok:
                self._log("ack", sseq, dseq)
            for s in removed:
                if s in self._rdq_set:
                    self._rdq_set.discard(s)
                    self._rdq = [x for x in self._rdq if x != s]
                    heapq.heapify(self._rdq)
            if removed:
                self.host.on_acked(self, removed)
            if kind == "term":
                self.host.advisory_terminated(self, sseq, dseq, st.delivery_count(sseq), str(arg or ""))
            if reply and ok:
                self.host.reply_after_sync(self, reply)
            if removed and full:
                self.kick()
            return
        if kind == "nak":
            r = st.nak(sseq, dseq, now, int(arg or 0), p.ack_wait)
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

    # ---- inactivity, pause, persistence -------------------------------------------------------

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
