"""Publishes a fenced stream leader holds instead of dropping, for a few seconds.

A stream leader that has lost contact with the Raft group for the node timeout is *fenced*
(``Replication.fenced``): another node may lead the stream by now, so it must not answer
anything it could contradict. It used to drop what it captured then, without an answer. But a
fence is most often a Raft election among members that are all alive (a node starved of CPU
for a second is enough to start one), and then no other node leads the stream: nobody answered
those publishes at all. Sync publishers timed out; nats-py's ``publish_async`` futures, which
have no timeout, never resolved (a benchmark stalled on it: docs/internals.md, nineteenth pass).

Now the leader holds what it captures while fenced, in arrival order, and when the fence lifts
it handles the held messages first, as if they had just arrived. That is exactly as safe as
handling a publish that arrives right after the fence lifts (which the node did before, too): a
leader that was deposed meanwhile can append them but never commit them (its followers fetch
from the new leader), so no PubAck goes out, and the demotion drops them with the other
unconfirmed acks. A demotion also drops whatever is still held.

Bounded: a message held longer than ``HOLD_MAX`` is not stored (its client has timed out, or is
about to: storing it later would only turn its retry into a duplicate for publishers without
``Nats-Msg-Id``), and neither is one that would take the held bytes of a stream past
``HOLD_BYTES``, or those of the whole node past its ``HoldBudget`` (``NODE_HOLD_BYTES``: a Raft
outage fences every stream a node leads at once, and a thousand streams each holding their own
limit would be gigabytes). Such a message is answered "JetStream system temporarily
unavailable" (10008) when no other member is heard (nobody else can answer it: the whole
cluster lost Raft), and dropped unanswered otherwise (another node may lead and answer it); see
``Replication.unanswered_error``. Before the hold, that error went out at once.
"""

from __future__ import annotations

from collections import deque

HOLD_MAX = 3.0
"""Seconds a capture may wait for the fence to lift: below the 5 s default publish timeout of
the nats.py, nats.js and nats.go JetStream clients, with room to replicate it afterwards."""

HOLD_BYTES = 8 << 20
"""Header and payload bytes a stream holds at most while fenced."""

NODE_HOLD_BYTES = 64 << 20
"""Header and payload bytes all the streams of one node hold at most while fenced."""

Held = tuple[float, str, "str | None", bytes, bytes]
"""``(when held (monotonic seconds), subject, reply, header block, payload)``."""


class HoldBudget:
    """The bytes every stream of a node holds together (one per ``StreamManager``)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int = NODE_HOLD_BYTES) -> None:
        self.limit = limit
        self.used = 0


class HeldCaptures:
    """The captures one stream holds while fenced, oldest first (pure: times are passed in).

    ``budget``: the node's, shared with its other streams (a budget of its own if None)."""

    __slots__ = ("_budget", "_bytes", "_q", "dropped", "held")

    def __init__(self, budget: HoldBudget | None = None) -> None:
        self._q: deque[Held] = deque()
        self._bytes = 0
        self._budget = budget if budget is not None else HoldBudget()
        self.held = 0
        """Captures held so far (a counter; each is later handled or dropped)."""
        self.dropped = 0
        """Captures dropped unanswered: held too long, over ``HOLD_BYTES``, or at a demotion."""

    def __bool__(self) -> bool:
        return bool(self._q)

    def __len__(self) -> int:
        return len(self._q)

    def hold(self, now: float, subject: str, reply: str | None, hdr: bytes, data: bytes) -> bool:
        """Keep one capture; False (counted as dropped) when the stream, or the node, holds
        too many bytes."""
        size = len(hdr) + len(data)
        b = self._budget
        if self._bytes + size > HOLD_BYTES or b.used + size > b.limit:
            self.dropped += 1
            return False
        self._q.append((now, subject, reply, hdr, data))
        self._bytes += size
        b.used += size
        self.held += 1
        return True

    def _release(self, size: int) -> None:
        self._bytes -= size
        self._budget.used -= size

    def expire(self, now: float) -> list[Held]:
        """Remove the captures held longer than ``HOLD_MAX`` (counted as dropped); them."""
        q = self._q
        out: list[Held] = []
        while q and now - q[0][0] > HOLD_MAX:
            h = q.popleft()
            self._release(len(h[3]) + len(h[4]))
            out.append(h)
        self.dropped += len(out)
        return out

    def take(self) -> list[Held]:
        """Everything held, oldest first (expire first); the hold is empty after."""
        out = list(self._q)
        self._q.clear()
        self._release(self._bytes)
        return out

    def clear(self) -> int:
        """Drop everything held (a demotion); how many."""
        n = len(self._q)
        self._q.clear()
        self._release(self._bytes)
        self.dropped += n
        return n
