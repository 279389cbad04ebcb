"""Pull requests waiting on a consumer (``CONSUMER.MSG.NEXT``), spec §6.

A request wants up to ``batch`` messages (and ``max_bytes`` bytes) delivered to its ``reply``
inbox, until it is filled (no status), expires (``408 Request Timeout``), runs out with
``no_wait`` (``404 No Messages``), the consumer is deleted (``409 Consumer Deleted``), or its
inbox loses interest (dropped silently). Messages are spread round-robin over waiting requests.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

#: ns a request whose inbox the hub has not shown interest in yet is kept anyway (nats-server's
#: ``defaultGatewayRecentSubExpiration``, which applies when leafnodes are enabled).
YOUNG_REQUEST = 2_000_000_000


@dataclass(eq=False)
class Waiting:
    """One waiting pull request."""

    reply: str
    batch: int
    max_bytes: int = 0  # 0 = unlimited
    no_wait: bool = False
    expires: int = 0  # absolute deadline, ns since epoch (0 = never)
    heartbeat: int = 0  # idle heartbeat interval, ns (0 = none)
    arrived: int = 0
    delivered: int = 0  # messages sent to this request
    bytes_sent: int = 0
    last_send: int = 0  # last data or heartbeat sent, ns
    timers: list[asyncio.TimerHandle] = field(default_factory=list)
    done: bool = False
    seen_interest: bool = False  # the hub has shown interest in ``reply`` at some point

    @property
    def remaining(self) -> int:
        """Messages this request still wants."""
        return self.batch - self.delivered

    @property
    def bytes_left(self) -> int:
        """Byte budget left (0 when the request has no byte limit)."""
        return self.max_bytes - self.bytes_sent if self.max_bytes else 0

    def cancel_timers(self) -> None:
        """Stop the expiry and heartbeat timers."""
        for t in self.timers:
            t.cancel()
        self.timers.clear()


class WaitQueue:
    """FIFO of waiting requests served round-robin (the served request moves to the back)."""

    def __init__(self) -> None:
        self._q: deque[Waiting] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def __iter__(self) -> Iterator[Waiting]:
        return iter(list(self._q))

    def add(self, w: Waiting) -> None:
        """Queue a new request at the back."""
        self._q.append(w)

    def head(self) -> Waiting | None:
        """The request to serve next (finished requests are skipped and dropped)."""
        q = self._q
        while q and q[0].done:
            q.popleft()
        return q[0] if q else None

    def rotate(self, w: Waiting) -> None:
        """After serving ``w`` (the head): drop it if done, else move it to the back."""
        q = self._q
        if q and q[0] is w:
            q.popleft()
            if not w.done:
                q.append(w)

    def remove(self, w: Waiting) -> None:
        """Take ``w`` out (finished or abandoned)."""
        w.done = True
        w.cancel_timers()
        try:
            self._q.remove(w)
        except ValueError:
            pass

    def drain(self) -> list[Waiting]:
        """Remove and return every live request."""
        out = [w for w in self._q if not w.done]
        for w in out:
            w.done = True
            w.cancel_timers()
        self._q.clear()
        return out

    def prune_without_interest(self, has_interest: Callable[[str], bool], now: int) -> list[Waiting]:
        """Drop requests whose inbox has no interest; return them.

        A request arrives on the client link, the ``LS+`` of its inbox on the leaf link, and
        the request can come first: one whose inbox was never seen with interest is kept for
        :data:`YOUNG_REQUEST` after it arrived (the consumer re-checks it then)."""

        def alive(w: Waiting) -> bool:
            if has_interest(w.reply):
                w.seen_interest = True
                return True
            return not w.seen_interest and now - w.arrived < YOUNG_REQUEST

        return self.prune(alive)

    def prune(self, alive: Callable[[Waiting], bool]) -> list[Waiting]:
        """Drop requests for which ``alive(w)`` is false; return them."""
        dead = [w for w in self._q if not w.done and not alive(w)]
        for w in dead:
            self.remove(w)
        return dead
