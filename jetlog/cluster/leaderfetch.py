"""The follower-facing side of a stream leader (:class:`~jetlog.cluster.leader.StreamLeader`):
what it knows of each follower from its fetches, and how it answers them.

A follower that is caught up is parked (long poll) until the leader's log moves, its
``wait_ms`` runs out, or (at most ``HW_LINGER`` later) the HW moved. Replies never exceed the
upstream ``max_payload`` (the caller passes the budget; a batch bigger than that travels in
chunks).

Separate from ``leader.py`` because answering is a role of its own: when a parked fetch is
released and what its reply carries (records, a chunk, consumer-log records or the consumer
image). ``leader.py`` decides on each fetch (ISR, lease, HW bookkeeping) and inherits
:class:`FetchReplies`; this module does not import it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jetlog.errors import JetlogError
from jetlog.log.store import OutOfRangeError, PositionError
from jetlog.wire import repl as R

NO_POS: R.Pos = (0, -1)
HW_LINGER = 0.02
"""How long a caught-up follower's parked fetch may wait when only the high-water mark moved.

The fetch that completes a commit is itself caught up, so answering HW moves at once costs
every committed message a second reply and a second request per follower, all relayed by the
upstream server and each waking a Python process. Held back, the HW rides on the next
message's reply (a synchronous publisher sends it right after its PubAck); a quiet stream
still tells its followers within this delay. Only a follower's committed mark waits: what
PubAcks, deliveries and leader reads wait for is the leader's HW, computed from the fetches
themselves. Reads served by a follower do wait for its committed mark: one that finds
messages beyond it asks for the HW at once (:meth:`StreamLeader.handle_hw`), and a follower
that served such reads lately asks for HW moves eagerly (``FetchRequest.eager_hw``), so a read
right after a write does not wait for the linger."""


@dataclass
class FollowerView:
    """What the leader knows about one follower (from its fetches)."""

    pos: R.Pos = NO_POS
    hw_known: int = 0
    cepoch: int = 0
    cidx: int = 0
    last_fetch: float = 0.0
    replied: float = 0.0
    """When this leader last sent the follower a reply."""
    heard: float = 0.0
    """When the reply that the follower's latest fetch answers was sent: the follower was
    alive and following this leader at some moment after that (see ``deliveries_held``)."""
    last_caught_up: float = 0.0
    ever_fetched: bool = False
    leo_sent: R.Pos = NO_POS
    """The leader's log end when it last answered this follower (Kafka's caught-up rule: a
    fetch from at least that position means the follower had everything the leader had)."""


def caught_up_as_of(history: Iterable[tuple[float, R.Pos]], pos: R.Pos) -> float:
    """The latest time in ``history`` (``(time, leader log end)`` samples, oldest first) at
    which the leader's log ended at or below ``pos``: a follower holding ``pos`` had
    everything the leader had then. 0.0 when it is behind every sample."""
    best = 0.0
    for t, leo in history:
        if leo <= pos:
            best = t
        else:
            break
    return best


@dataclass
class _Parked:
    req: R.FetchRequest
    reply: Callable[[bytes], None]
    deadline: float
    since: float  # when it was parked (``HW_LINGER`` counts from here)


class FetchReplies:
    """Releasing parked fetches and building their replies; a base of ``StreamLeader``, whose
    ``__init__`` sets every attribute below."""

    stream: Any
    store: Any
    epoch: int
    followers: dict[str, FollowerView]
    hw_pos: R.Pos
    _clock: Callable[[], float]
    _max_payload: Callable[[], int]
    _closed: bool
    _parked: list[_Parked]
    _hw_timer: asyncio.TimerHandle | None
    _wake_scheduled: bool
    _image: tuple[int, bytes] | None

    if TYPE_CHECKING:

        @property
        def hw(self) -> int: ...

    def _has_data(self, req: R.FetchRequest, leo: R.Pos) -> bool:
        """Something to ship at once: messages, a chunk or snapshot in transfer, or consumer-log
        records (consumer acks wait for followers to hold them). An HW move alone is not."""
        if req.chunk or req.csnap:
            return True
        if tuple(req.pos) < leo:
            return True
        if self._consumer_feed() is None:
            return False  # a memory stream replicates no consumer state (cepoch stays 0)
        return req.cepoch != self.epoch or req.cidx < self._consumer_idx()

    def _arm_hw(self) -> None:
        """Tell parked followers of an HW move within ``HW_LINGER`` if no message does first."""
        if self._hw_timer is None and not self._closed:
            self._hw_timer = asyncio.get_running_loop().call_later(HW_LINGER, self._hw_due)

    def _hw_due(self) -> None:
        self._hw_timer = None
        if self._closed or not self._parked:
            return
        hw = self.hw
        now = self._clock()
        # Only fetches that have lagged for a whole linger: under a synchronous publisher each
        # fetch is parked for one publish (~1.5 ms) and the next message carries the HW; a
        # timer answering whatever lags when it fires sent both followers an HW-only reply
        # every HW_LINGER all the same (4 % of the fetches).
        # (Less 2 ms: uvloop's timers count whole milliseconds and may fire a little early.)
        keep = self._release(lambda p: p.req.hw < hw and now - p.since >= HW_LINGER - 0.002)
        waiting = [p.since for p in keep if p.req.hw < hw]
        if waiting:
            delay = max(0.0, min(waiting) + HW_LINGER - now)
            self._hw_timer = asyncio.get_running_loop().call_later(delay, self._hw_due)

    def _release(self, due: Callable[[_Parked], bool]) -> list[_Parked]:
        """Answer the parked fetches ``due`` picks; returns those still parked."""
        keep = []
        for p in self._parked:
            f = self.followers.get(p.req.replica)
            if f is None:
                continue
            if due(p):
                p.reply(self._answer(p.req, f))
            else:
                keep.append(p)
        self._parked = keep
        return keep

    def _consumer_idx(self) -> int:
        feed = self._consumer_feed()
        return feed.appended if feed is not None else 0

    def _consumer_feed(self) -> Any:
        cset = self.stream.consumers
        return None if cset is None else cset.clog

    def _answer(self, req: R.FetchRequest, f: FollowerView) -> bytes:
        f.replied = self._clock()
        budget = max(4096, min(req.max_bytes, self._max_payload() - 8192))
        leo = self.store.log_end()
        f.leo_sent = leo
        head = R.FetchReply(code=R.OK, epoch=self.epoch, hw=self.hw, leo=leo)
        head.floor = self.replica_floor()
        pos = tuple(req.pos)
        try:
            rr = self.store.read_batches(pos, budget, offset=req.chunk)
        except JetlogError as e:
            return self._read_error(e, head)
        body = rr.data
        head.last = rr.last
        head.partial = rr.size
        budget -= len(body)
        self._add_consumer_records(req, head, budget)
        return R.encode(head, body)

    def _read_error(self, e: JetlogError, head: R.FetchReply) -> bytes:
        if isinstance(e, OutOfRangeError):
            head.code = R.OUT_OF_RANGE
            head.start = e.start
            head.first_seq = e.start[0] + 1
        elif isinstance(e, PositionError):
            head.code = R.UNKNOWN_POS
        else:
            head.code = R.ERROR
        head.error = str(e)[:300]
        return R.encode(head)

    def _add_consumer_records(self, req: R.FetchRequest, head: R.FetchReply, budget: int) -> None:
        feed = self._consumer_feed()
        if feed is None:
            return
        head.cepoch = self.epoch
        budget = max(budget, 4096)
        if req.csnap and req.cepoch == self.epoch and self._image is not None and self._image[0] == req.cidx:
            # Continue a snapshot transfer from where the follower is.
            idx, image = self._image
            head.crecs, head.cidx, head.csnap = image[req.csnap : req.csnap + budget], idx, len(image)
            head.coff = req.csnap
            return
        if req.cepoch == self.epoch and not req.csnap:
            recs = feed.records_after(req.cidx, budget)
            if recs is not None:
                head.crecs, head.cidx = recs
                return
        # Another lineage or too far behind: send the full image of every durable consumer
        # (in chunks when it is large); the follower replaces its consumer log with it.
        image, idx = self.stream.consumers.image()
        self._image = (idx, image)
        head.crecs, head.cidx, head.csnap = image[:budget], idx, len(image)
        head.coff = 0

    def replica_floor(self) -> int:
        """The lowest sequence any replica may still fetch from (compaction stays below it)."""
        low = self.hw_pos[0]
        for f in self.followers.values():
            if not f.ever_fetched:
                return 0
            low = min(low, f.pos[0])
        return low

    def wake(self) -> None:
        """The log, the HW or the consumer feed moved: answer parked fetches that have news (once
        per loop iteration; HW-only news waits for ``HW_LINGER``)."""
        if self._parked and not self._wake_scheduled and not self._closed:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake_now)

    def _wake_now(self) -> None:
        self._wake_scheduled = False
        if not self._parked:
            return
        # Parked followers are waiting for exactly this: ship the open batch now rather than
        # when the flusher takes it (one loop iteration, but followers are idle meanwhile).
        leo = self.store.seal()
        now = self._clock()
        hw = self.hw
        keep = self._release(
            lambda p: self._has_data(p.req, leo) or now >= p.deadline or (p.req.hw < hw and p.req.eager_hw)
        )
        if any(p.req.hw < hw for p in keep):
            self._arm_hw()
