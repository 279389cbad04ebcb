"""The leader side of one replicated stream: serve follower fetches, keep the high-water mark,
manage the ISR, refuse publishes below ``min_insync``.

HW (docs/cluster.md §4) = the lowest *durable* position over the ISR, the leader's own included.
A fetch carries the follower's durable position, so every fetch is an acknowledgement; the HW is
recomputed on every fetch and every local group commit, and the stream's committed mark
(:meth:`Stream.advance`) follows it — PubAcks, consumer deliveries and committed reads are all
released by that one mark.

Each fetch is decided here (answered at once or parked); releasing parked fetches and building
the replies is :mod:`jetlog.cluster.leaderfetch`'s, and the periodic tick comes from
:mod:`jetlog.cluster.ticker`.

ISR changes are proposed through the metadata Raft group as compare-and-set commands on
(epoch, ISR version) and take effect only when applied (:meth:`update_assignment`); a leader
whose epoch is stale therefore cannot change the ISR, and cannot advance its HW past followers
that have left it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from jetlog.cluster.leaderfetch import NO_POS, FetchReplies, FollowerView, _Parked, caught_up_as_of
from jetlog.cluster.ticker import TICK, _Ticker
from jetlog.errors import ApiError, E, JetlogError
from jetlog.tasklog import failure_logger
from jetlog.wire import repl as R

log = logging.getLogger("jetlog.cluster.leader")
_log_failure = failure_logger(log)


class StreamLeader(FetchReplies):
    """Replication leader of one stream at one epoch (implements ``stream.Replication``)."""

    def __init__(
        self,
        stream: Any,
        *,
        node: str,
        epoch: int,
        replicas: list[str],
        isr: list[str],
        isr_version: int,
        min_insync: int,
        isr_lag_time: float,
        propose_isr: Callable[[str, int, int, list[str]], Awaitable[bool]],
        max_payload: Callable[[], int],
        fenced: Callable[[], bool],
        alone: Callable[[], bool] = lambda: False,
        alive: Callable[[str], bool] = lambda node: True,
        clock: Callable[[], float] = time.monotonic,
        hold_after: float = 1.0,
        on_quorum_lost: Callable[[], None] = lambda: None,
        prior_reply: float | None = None,
    ) -> None:
        self.stream = stream
        self.store = stream.store
        self.node = node
        self.epoch = epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.isr_version = isr_version
        self.min_insync = min_insync
        self.isr_lag_time = isr_lag_time
        self._propose_isr = propose_isr
        self._max_payload = max_payload
        self._fenced = fenced
        self._alone = alone
        self._alive = alive
        self._clock = clock
        self.hold_after = hold_after
        self._on_quorum_lost = on_quorum_lost
        self._quorum_lost = False
        self._held = False
        now = clock()
        # LEASE: no deliveries before this time. The previous leader of the stream goes on
        # delivering until ``hold_after`` has passed since the last reply one of its followers
        # got from it (its ``deliveries_held``); that includes this node, if it followed it.
        # Followers tell the rest with their first fetches (``left_ms``).
        self.fence_until = 0.0 if prior_reply is None else prior_reply + hold_after
        self._fence_held = now < self.fence_until
        # Followers get the benefit of the doubt for one lag period after a leadership start.
        self.followers: dict[str, FollowerView] = {
            r: FollowerView(last_fetch=now, replied=now, heard=now, last_caught_up=now)
            for r in self.replicas
            if r != node
        }
        self._parked: list[_Parked] = []
        self._wake_scheduled = False
        self._hw_timer: asyncio.TimerHandle | None = None
        self._ticker: _Ticker | None = None
        self._isr_change: asyncio.Task[None] | None = None
        self._consumer_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._closed = False
        self.hw_pos: R.Pos = NO_POS
        self._image: tuple[int, bytes] | None = None
        # Everything committed before this leadership is in this log up to here: a follower
        # that holds at least this much holds every committed message (Kafka: a follower
        # rejoins once past the start offset of the leader's epoch).
        self.epoch_start: R.Pos = stream.store.log_end()
        self._hw_waiters: list[asyncio.Future[None]] = []
        # The leader's log end sampled every tick over a little more than one lag period.
        # Kafka's caught-up rule alone (``leo_sent``) never holds for a follower that keeps
        # pace with a sustained flood: each reply is cut at ``max_payload`` while the log
        # grows, so the follower never reaches the end it was last told about, and healthy
        # followers left the ISR after ``isr_lag_time`` (publishes then got 503). A follower
        # is lagging only when it lacks what the leader had ``isr_lag_time`` ago.
        self._leo_history: deque[tuple[float, R.Pos]] = deque(maxlen=int(isr_lag_time / TICK) + 8)

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the ISR maintenance task; answer parked fetches as soon as messages arrive."""
        self._ticker = _Ticker.of(asyncio.get_running_loop())
        self._ticker.add(self)
        self.stream.add_stored_listener(self._on_stored)
        # Followers' fetch replies leave before an inline fsync (an R1 leader has none to wait).
        self.store.ship_first = bool(self.followers)
        self._hold_compaction()
        self._recompute()
        self._check_quorum()  # elected with too few in-sync replicas

    def _on_stored(self, seq: int, subject: str) -> None:
        self.wake()

    async def stop(self) -> None:
        """Stop serving: parked fetches are answered NOT_LEADER, waiters released."""
        self._closed = True
        self.stream.remove_stored_listener(self._on_stored)
        self.store.ship_first = False
        if self._hw_timer is not None:
            self._hw_timer.cancel()
            self._hw_timer = None
        if self._ticker is not None:
            self._ticker.remove(self)
        if self._isr_change is not None:
            self._isr_change.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._isr_change
        for p in self._parked:
            p.reply(R.encode(R.FetchReply(code=R.NOT_LEADER, epoch=self.epoch)))
        self._parked.clear()
        for _, fut in self._consumer_waiters:
            if not fut.done():
                fut.set_exception(JetlogError("no longer the stream leader"))
        self._consumer_waiters.clear()

    def update_assignment(self, replicas: list[str], isr: list[str], isr_version: int) -> None:
        """The metadata changed the replica set or the ISR (applied through Raft)."""
        self.replicas = list(replicas)
        now = self._clock()
        for r in self.replicas:
            if r != self.node and r not in self.followers:
                self.followers[r] = FollowerView(last_fetch=now, replied=now, heard=now, last_caught_up=now)
        for r in list(self.followers):
            if r not in self.replicas:
                del self.followers[r]
        if not self._closed:
            self.store.ship_first = bool(self.followers)
        if isr != self.isr:
            log.info("stream %s: ISR %s -> %s (epoch %d)", self.stream.name, self.isr, isr, self.epoch)
        self.isr = list(isr)
        self._check_quorum()
        self.isr_version = isr_version
        self._recompute()
        self._hold_compaction()

    def _hold_compaction(self) -> None:
        """Keep this log's compaction below what any replica may still fetch.

        POSITIONS: compaction regroups a segment's batches (a removed record and the op that
        removed it both go), so a position inside it no longer names the same batch. A
        follower fetching from such a position either resets (its copy is no prefix of ours)
        or, when the position happens to name the rewritten segment's last batch, is served
        what follows it and never sees the removal: the message it still holds is alive there
        and nowhere else. Followers already stay below the leader's ``replica_floor`` (sent in
        every reply); the leader's own store must too. 0 until every follower has fetched."""
        self.store.compact_floor = self.replica_floor()

    # ---- Replication seam (called by the Stream) ---------------------------------------------

    def on_durable(self, seq: int) -> None:
        """The local group commit advanced."""
        self._recompute()

    def publish_error(self) -> ApiError | None:
        """Refuse publishes at once when the ISR is below ``min_insync``."""
        if len(self.isr) < self.min_insync or self.node not in self.isr:
            return E.CLUSTER_NOT_AVAIL()
        return None

    def fenced(self) -> bool:
        """Lost the Raft group: stop acting as leader at once and answer nothing that another
        leader could contradict. Publishes wait for the fence to lift (``stream/held.py``):
        most fences are elections among live members, after which this node still leads."""
        return self._fenced()

    def unanswered_error(self) -> ApiError | None:
        """A held publish that cannot wait longer: answered "temporarily unavailable" when no
        other member is heard (nobody else can answer it), else dropped unanswered (another
        node may lead by now and answer it, or its client retries)."""
        return E.CLUSTER_NOT_AVAIL() if self._alone() else None

    def deliveries_held(self) -> bool:
        """Consumer deliveries wait while no in-sync follower has shown for ``hold_after``
        that it still follows this leader (a long poll returns every ``WAIT_MS``, so a healthy
        follower is never that quiet). That is the state of a leader that was paused or cut off
        and has not yet applied its deposition: its followers fetch from the new leader, which
        delivers and sees the acks; redelivering here, from state without those acks, hands
        consumers messages they have acknowledged (chaos finding 5). Without followers in the
        ISR there is no one to hear from, and nothing is held.

        The evidence is a fetch that answers a reply sent less than ``hold_after`` ago, not
        the arrival of any fetch: a fetch a follower sent before this leader was paused waits
        in the upstream server and arrives when it resumes, although that follower may have
        moved to the new leader meanwhile (a chaos run saw such a stale fetch resume a deposed
        leader's deliveries, and it redelivered an acknowledged message)."""
        return self.lease_until() is None

    def lease_until(self) -> float | None:
        """When (``clock``) the delivery lease ends: ``hold_after`` after the latest reply an
        in-sync follower proved it got (see ``deliveries_held``); None: deliveries are held
        now; inf: no in-sync follower to hear from. A delivery decided now must reach the
        upstream server before then: the leaf link drops it if still unwritten at that moment."""
        now = self._clock()
        if now < self.fence_until or self._lost_followers(now):
            return None
        heard = self._last_heard()
        return math.inf if heard is None else heard + self.hold_after

    def _last_heard(self) -> float | None:
        """The latest moment an in-sync follower proved it follows this leader (None: no
        in-sync follower to hear from)."""
        return max(
            (self.followers[r].heard for r in self.isr if r != self.node and r in self.followers),
            default=None,
        )

    def _lost_followers(self, now: float) -> bool:
        """Every in-sync follower quiet for more than ``hold_after``."""
        heard = self._last_heard()
        return heard is not None and now - heard > self.hold_after

    def _note_left(self, req: R.FetchRequest, f: FollowerView, now: float) -> None:
        """LEASE: a follower that left another leadership ``left_ms`` ago may have kept that
        leader delivering until ``hold_after`` after it; deliveries here wait as long. (The
        previous leader's own clock measures its lease; only durations cross nodes, and the
        transit of this fetch makes the estimate later, not earlier.)"""
        left = req.left_ms
        if left == R.LEFT_NONE or (left == R.LEFT_UNKNOWN and f.ever_fetched):
            return
        until = now - max(left, 0) / 1000.0 + self.hold_after
        if until <= self.fence_until:
            return
        self.fence_until = until
        if until > now:
            log.info(
                "stream %s: %s followed another leadership %.0f ms ago: consumer deliveries wait %.2fs",
                self.stream.name,
                req.replica,
                max(left, 0),
                until - now,
            )

    def _check_quorum(self) -> None:
        """Tell once (``on_quorum_lost``) when the stream stalls: fewer in-sync replicas than
        ``min_insync`` (publishes refused), or no in-sync follower heard from (deliveries held;
        two of three nodes down, when Raft cannot shrink the ISR either)."""
        lost = len(self.isr) < self.min_insync or self._held
        if lost and not self._quorum_lost:
            self._on_quorum_lost()
        self._quorum_lost = lost

    def _update_hold(self) -> None:
        now = self._clock()
        fence = now < self.fence_until
        held = self._lost_followers(now)
        if held == self._held and fence == self._fence_held:
            return
        was = self._held or self._fence_held
        self._fence_held = fence
        if held != self._held:
            self._held = held
            self._check_quorum()  # a lease being waited out is not a lost quorum
            if held:
                log.warning(
                    "stream %s: no fetch from an in-sync follower for %.1fs, holding consumer deliveries",
                    self.stream.name,
                    self.hold_after,
                )
            else:
                log.info("stream %s: followers fetching again", self.stream.name)
        if was and not (held or fence):
            log.info("stream %s: consumer deliveries resume", self.stream.name)
            cset = self.stream.consumers
            if cset is not None:
                cset.kick_all()

    # ---- high-water mark ---------------------------------------------------------------------

    def _recompute(self) -> None:
        if self._closed:
            return
        low = self.store.durable_end()
        for r in self.isr:
            if r == self.node:
                continue
            f = self.followers.get(r)
            if f is None or not f.ever_fetched:
                # A member that has not reported since this leadership began holds at least
                # what was committed before; it cannot advance the mark yet.
                return
            if f.pos < low:
                low = f.pos
        if len(self.isr) < self.min_insync:
            # Strict min ISR: nothing commits while too few replicas hold it.
            return
        if low > self.hw_pos:
            self.hw_pos = low
            self._hold_compaction()
            self.stream.advance(low[0])
            self.wake()
            waiters, self._hw_waiters = self._hw_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._release_consumer_waiters()

    async def sync(self, timeout: float = 5.0) -> None:
        """Wait until the ISR holds everything stored so far durably (removal ops included)."""
        target = self.store.seal()
        self.wake()
        # Local durability first: a batch of removal ops alone does not advance committed_seq,
        # so no commit listener would recompute the mark for it.
        await self.store.flush()
        self._recompute()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.hw_pos < target and not self._closed:
            if loop.time() >= deadline:
                raise JetlogError("not replicated to the in-sync replicas in time")
            fut: asyncio.Future[None] = loop.create_future()
            self._hw_waiters.append(fut)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, max(0.0, deadline - loop.time()))

    def lags(self) -> dict[str, int]:
        """Messages each follower is behind this leader's log end (all of it until it has
        fetched in this leadership)."""
        leo = self.store.log_end()[0]
        return {r: max(0, leo - f.pos[0]) if f.ever_fetched else leo for r, f in self.followers.items()}

    @property
    def hw(self) -> int:
        """The committed sequence (what the stream reports as ``committed_seq``)."""
        return int(self.stream.committed_seq)

    # ---- consumer-state replication ----------------------------------------------------------

    def _release_consumer_waiters(self) -> None:
        if not self._consumer_waiters:
            return
        done = self.consumer_replicated_idx()
        keep = []
        for idx, fut in self._consumer_waiters:
            if idx <= done:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((idx, fut))
        self._consumer_waiters = keep

    def consumer_replicated_idx(self) -> int:
        """Consumer-log records held durably by every ISR follower in this epoch's lineage."""
        low: int | None = None
        for r in self.isr:
            if r == self.node:
                continue
            f = self.followers.get(r)
            if f is None or f.cepoch != self.epoch:
                return -1
            low = f.cidx if low is None else min(low, f.cidx)
        return (1 << 62) if low is None else low

    async def consumers_replicated(self, idx: int, timeout: float = 5.0) -> None:
        """Wait until every ISR follower holds consumer-log records up to ``idx`` durably, and
        the previous leadership's lease has run out (``fence_until``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self.consumer_replicated_idx() < idx:
            fut = loop.create_future()
            self._consumer_waiters.append((idx, fut))
            self.wake()
            await asyncio.wait_for(fut, timeout)
        # LEASE: what waits here is the reply to an AckSync (or a consumer change). Confirmed
        # while the previous leader may still deliver from state without this ack, it could be
        # followed by that leader's redelivery of the message (chaos finding 11): the client
        # must not hear "acknowledged" before that leader has stopped.
        while (left := self.fence_until - self._clock()) > 0:
            if loop.time() + left > deadline:
                raise TimeoutError
            await asyncio.sleep(left)

    # ---- serving fetches ---------------------------------------------------------------------

    def handle_epoch_end(self, req: R.EpochEndRequest) -> bytes:
        """KIP-279: the largest epoch ≤ ``req.epoch`` and where it ends in this log."""
        if req.leader_epoch != self.epoch:
            return R.encode(R.EpochEndReply(code=R.NOT_LEADER, leader_epoch=self.epoch))
        e, end = self.store.epoch_end(req.epoch)
        return R.encode(R.EpochEndReply(code=R.OK, epoch=e, end=end, leader_epoch=self.epoch))

    def handle_hw(self, req: R.HwRequest) -> bytes:
        """A follower's reader waits for the committed mark: the HW now. Not a fetch: no
        position, no ISR or liveness bookkeeping."""
        if req.epoch != self.epoch:
            return R.encode(R.FetchReply(code=R.NOT_LEADER, epoch=self.epoch))
        return R.encode(R.FetchReply(code=R.OK, epoch=self.epoch, hw=self.hw))

    def committed_wanted(self) -> None:
        """The leader's committed mark is always current (it computes it)."""

    def fetched_within(self, replica: str, seconds: float) -> bool:
        """``replica`` has fetched from this leadership in the last ``seconds``: it is alive
        and following here, whatever the heartbeats say yet (a node just started hears its
        peers' first heartbeats a moment after their first fetches)."""
        f = self.followers.get(replica)
        return f is not None and f.ever_fetched and self._clock() - f.last_fetch <= seconds

    def handle_fetch(self, req: R.FetchRequest, reply: Callable[[bytes], None]) -> None:
        """Record the follower's position, then answer now or park the request."""
        if req.epoch != self.epoch:
            reply(R.encode(R.FetchReply(code=R.NOT_LEADER, epoch=self.epoch)))
            return
        f = self.followers.get(req.replica)
        if f is None:
            reply(R.encode(R.FetchReply(code=R.ERROR, epoch=self.epoch, error="not a replica")))
            return
        now = self._clock()
        f.last_fetch = now
        # This fetch was sent after the follower got our last reply (its loop asks again only
        # then), or after its request timed out: either way it heard from us no earlier.
        f.heard = f.replied
        pos: R.Pos = tuple(req.pos)  # type: ignore[assignment]
        if f.ever_fetched and pos < f.pos and req.replica in self.isr:
            # The follower lost data it had acknowledged (a wiped or repaired replica): it no
            # longer holds what the HW counted on, so it leaves the ISR now, not after a lag.
            log.warning(
                "stream %s: %s went back from %s to %s, leaving the ISR",
                self.stream.name,
                req.replica,
                f.pos,
                pos,
            )
            f.last_caught_up = 0.0
            if self._isr_change is None or self._isr_change.done():
                self._change_isr([r for r in self.isr if r != req.replica])
        f.pos = pos
        f.hw_known = req.hw
        # Records of a snapshot still in transfer are not durable on the follower yet.
        f.cepoch, f.cidx = (req.cepoch, req.cidx) if not req.csnap else (0, -1)
        self._note_left(req, f, now)
        f.ever_fetched = True
        self._update_hold()
        held = self._held
        leo = self.store.log_end()
        if f.pos >= f.leo_sent or f.pos >= leo:
            f.last_caught_up = now
        else:
            f.last_caught_up = max(f.last_caught_up, caught_up_as_of(self._leo_history, f.pos))
        self._recompute()
        self._hold_compaction()
        self._maybe_expand(req.replica, f)
        if not self._has_data(req, leo) and req.wait_ms > 0:
            # A message may wait in the open batch, its wake-up gone to nobody (no fetch was
            # parked when it was stored): seal it, or this fetch would sit until the next tick
            # and so would the PubAck waiting for it (200 ms stalls of a lone publish).
            leo = self.store.seal()
        lagging = req.hw < self.hw
        if self._has_data(req, leo) or req.wait_ms <= 0 or held or (lagging and req.eager_hw):
            # Held: answer at once, so that a follower that does follow this leader proves it
            # with its next fetch within a round trip instead of a long poll.
            reply(self._answer(req, f))
            return
        self._parked.append(_Parked(req, reply, now + req.wait_ms / 1000.0, now))
        if lagging:
            self._arm_hw()

    # ---- ISR maintenance ---------------------------------------------------------------------

    def tick(self) -> None:
        """Every ``TICK`` (the node's one :class:`_Ticker`): sample the log end, hold or resume
        deliveries, answer expired long polls, check the ISR."""
        if self._closed:
            return
        self._leo_history.append((self._clock(), self.store.log_end()))
        # Publishes held while fenced: handled once the fence lifts even if no new one comes
        # (``stream/held.py``); dropped when held too long.
        self.stream.release_held()
        self._update_hold()
        self._expire_parked()
        self._check_isr()
        if self._parked:
            # Removals (acks on a work queue, expiry) wake nobody by themselves: ship the
            # open batch to waiting followers at least every tick.
            self.wake()

    def _expire_parked(self) -> None:
        if not self._parked:
            return
        now = self._clock()
        if any(now >= p.deadline for p in self._parked):
            self._wake_now()

    def _check_isr(self) -> None:
        if self._isr_change is not None and not self._isr_change.done():
            return
        now = self._clock()
        lagging = [
            r
            for r in self.isr
            if r != self.node
            and (f := self.followers.get(r)) is not None
            and now - f.last_caught_up > self.isr_lag_time
        ]
        if lagging:
            new = [r for r in self.isr if r not in lagging]
            log.warning(
                "stream %s: %s not caught up for %.1fs, leaving the ISR",
                self.stream.name,
                ",".join(lagging),
                self.isr_lag_time,
            )
            self._change_isr(new)

    def _maybe_expand(self, replica: str, f: FollowerView) -> None:
        if replica in self.isr or replica not in self.replicas:
            return
        if not self._alive(replica):
            # The controller counts it gone (no heartbeat, or no contact with the Raft group):
            # re-adding it would only have the controller drop it again, round after round.
            return
        if self._isr_change is not None and not self._isr_change.done():
            return
        # Kafka's rule: back in once the follower durably holds everything committed. It
        # fetches at this epoch, so it has already truncated to this leader's lineage; and
        # everything committed is at or below this epoch's start (the HW position of this
        # epoch stays unknown while the ISR is below min_insync, which is when a follower
        # rejoining matters most).
        if f.pos >= self.hw_pos and f.pos >= self.epoch_start:
            log.info("stream %s: %s caught up, rejoining the ISR", self.stream.name, replica)
            self._change_isr([r for r in self.replicas if r in self.isr or r == replica])

    def _change_isr(self, isr: list[str]) -> None:
        async def run() -> None:
            try:
                await self._propose_isr(self.stream.name, self.epoch, self.isr_version, isr)
            except JetlogError as e:
                log.warning("stream %s: ISR change to %s failed: %s", self.stream.name, isr, e)

        self._isr_change = asyncio.get_running_loop().create_task(run(), name=f"isr:{self.stream.name}")
        self._isr_change.add_done_callback(_log_failure)
