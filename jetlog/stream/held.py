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
``HOLD_BYTES``. Such a message is answered "JetStream system temporarily unavailable" (10008)
when no other member is heard (nobody else can answer it: the whole cluster lost Raft), and
dropped unanswered otherwise (another node may lead and answer it); see
``Replication.unanswered_error``. Before the hold, that error went out at once.
"""

from __future__ import annotations

from collections import deque

HOLD_MAX = 3.0
"""Seconds a capture may wait for the fence to lift: below the 5 s default publish timeout of
the nats.py, nats.js and nats.go JetStream clients, with room to replicate it afterwards."""

HOLD_BYTES = 8 << 20
"""Header and payload bytes a stream holds at most while fenced."""

Held = tuple[float, str, "str | None", bytes, bytes]
"""``(when held (monotonic seconds), subject, reply, header block, payload)``."""


class HeldCaptures:
    """The captures one stream holds while fenced, oldest first (pure: times are passed in)."""

    __slots__ = ("_bytes", "_q", "dropped", "held")

    def __init__(self) -> None:
        self._q: deque[Held] = deque()
        self._bytes = 0
        self.held = 0
        """Captures held so far (a counter; each is later handled or dropped)."""
        self.dropped = 0
        """Captures dropped unanswered: held too long, over ``HOLD_BYTES``, or at a demotion."""

    def __bool__(self) -> bool:
        return bool(self._q)

    def __len__(self) -> int:
        return len(self._q)

    def hold(self, now: float, subject: str, reply: str | None, hdr: bytes, data: bytes) -> bool:
        """Keep one capture; False (counted as dropped) when the stream holds too many bytes."""
        size = len(hdr) + len(data)
        if self._bytes + size > HOLD_BYTES:
            self.dropped += 1
            return False
        self._q.append((now, subject, reply, hdr, data))
        self._bytes += size
        self.held += 1
        return True

    def expire(self, now: float) -> list[Held]:
        """Remove the captures held longer than ``HOLD_MAX`` (counted as dropped); them."""
        q = self._q
        out: list[Held] = []
        while q and now - q[0][0] > HOLD_MAX:
            h = q.popleft()
            self._bytes -= len(h[3]) + len(h[4])
            out.append(h)
        self.dropped += len(out)
        return out

    def take(self) -> list[Held]:
        """Everything held, oldest first (expire first); the hold is empty after."""
        out = list(self._q)
        self._q.clear()
        self._bytes = 0
        return out

    def clear(self) -> int:
        """Drop everything held (a demotion); how many."""
        n = len(self._q)
        self._q.clear()
        self._bytes = 0
        self.dropped += n
        return n
