"""The push side of a consumer (base class of ``consumer.Consumer``): a delivery pass to the
deliver subject while it has interest, in runs where it can (``ConsumerDelivery._run``), flow
control (spec §7.3), idle heartbeats, ``rate_limit_bps`` and ``replay_policy: original``."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from jetlog.consumer import delivery as D
from jetlog.consumer import frames as F
from jetlog.consumer.delivery import ConsumerDelivery
from jetlog.log.store import StoredMsg

FC_WINDOW_MAX = 32 * 1024 * 1024
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _rand4() -> str:
    return "".join(_B62[b % 62] for b in os.urandom(4))


class ConsumerPush(ConsumerDelivery):
    """Push delivery of one consumer (see module docstring)."""

    if TYPE_CHECKING:

        def _touch(self, now: int) -> None:
            """Note activity (``Consumer._touch``)."""

    def _has_push_interest(self) -> bool:
        leaf = self.host.leaf
        subj = self.p.deliver_subject
        if self.p.deliver_group:
            return self.p.deliver_group in leaf.queue_groups(subj)
        return bool(leaf.has_interest(subj))

    def _push_pass(self, now: int) -> bool:
        if not self.active:
            return False
        budget = D.PASS_BUDGET
        pending = -1
        p = self.p
        interest_seen = False  # interest cannot change during a pass: check it once, when needed
        fast = D.FAST_RUNS and self._runs_ok()
        while budget:
            if p.flow_control and self._fc_sent >= self._fc_window:
                return False  # stalled until the client answers the FC request
            ahead = self._ahead
            if fast and ahead and ahead[0].seq <= self.stream.committed_seq:
                if not interest_seen and not self._interest_now():
                    return False
                interest_seen = True
                if pending < 0:
                    pending = self.num_pending()
                sent, pending, _ = self._run(p.deliver_subject, now, budget, pending, 0)
                if sent:
                    budget -= sent
                    self._last_push_send = now
                    self._touch(now)
                    if p.flow_control:
                        self._ask_flow_control()
                    continue
            m, redelivery, _ = self._peek()
            if m is None:
                return False
            if p.replay_original and not redelivery and not self._replay_ok(m, now):
                return False
            if not interest_seen and not self._interest_now():
                return False
            interest_seen = True
            pending, ack, hdr, data, size = self._prepare_next(m, redelivery, pending)
            if self._too_large(m, hdr, data):
                return False
            if p.rate_limit_bps and not self._take_tokens(size):
                return False
            self._send(m, ack, hdr, data, p.deliver_subject, now, p.deliver_group)
            self._last_push_send = now
            self._touch(now)
            budget -= 1
            if p.flow_control:
                self._fc_sent += size
                self._ask_flow_control()
        return True

    def _interest_now(self) -> bool:
        """Whether the deliver subject has interest; without it the consumer goes inactive."""
        if not self._has_push_interest():
            self.active = False
            return False
        return True

    def _ask_flow_control(self) -> None:
        """Once half the flow-control window is out, ask the client to answer (one at a time)."""
        if not self._fc_pending and self._fc_sent >= self._fc_window // 2:
            self._fc_pending = f"$JS.FC.{self.stream.name}.{self.name}.{_rand4()}"
            self._send_status(self.p.deliver_subject, F.FLOW_CONTROL, reply=self._fc_pending)

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
