"""The follower side of one replicated stream: truncate to the leader's lineage, then fetch.

1. **Truncation (KIP-101/KIP-279)**: ask the leader where the follower's latest epoch ends in
   the leader's log; truncate to ``min(that end, own end of the epoch the leader answered)``;
   repeat until the follower's latest epoch is one the leader agrees on. Never truncate to a
   high-water mark: a HW can be stale (KIP-101 scenario 1) or cover divergent entries (scenario 2).
2. **Fetch loop**: ask for what follows the last *durable* batch; append the reply's batches
   verbatim; make them durable; only then ask again — the next request's position is the
   acknowledgement the leader's HW waits for. Consumer-log records ride along and are made
   durable before their index is reported.

The follower's committed mark is ``min(leader HW, own durable end)`` (a follower never claims
more than it holds, nor more than the leader committed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jetlog.errors import ApiError, JetlogError, TransportError
from jetlog.tasklog import failure_logger
from jetlog.wire import repl as R

log = logging.getLogger("jetlog.cluster.follower")
_log_failure = failure_logger(log)

Requester = Callable[[str, bytes, float], Awaitable[bytes]]
WAIT_MS = 500
CATCHUP_REPORT_MIN = 10_000
"""Messages behind the leader from which catching up is reported in the log."""
PROGRESS_EVERY = 5.0
MAX_TRUNCATE_ROUNDS = 64
EAGER_HW_FOR = 5.0
"""Seconds after a reader last waited for this follower's committed mark during which its
fetches ask the leader for HW moves at once (``FetchRequest.eager_hw``)."""


class _Retry(Exception):
    """Back off and try again (leader not reachable or not leading yet)."""


class StreamFollower:
    """Replication follower of one stream toward ``leader`` at ``epoch`` (implements
    ``stream.Replication``)."""

    def __init__(
        self,
        stream: Any,
        *,
        node: str,
        leader: str,
        epoch: int,
        subject: str,
        request: Requester,
        max_payload: Callable[[], int],
        consumer_dir: str | None,
        prior_reply: float | None = None,
        on_reply: Callable[[], None] = lambda: None,
    ) -> None:
        self.stream = stream
        self.store = stream.store
        self.node = node
        self.leader = leader
        self.epoch = epoch
        self.subject = subject
        self._request = request
        self._max_payload = max_payload
        self._cdir = consumer_dir
        self.clog: Any = None
        self.leader_hw = 0
        self.cepoch = 0
        self.cidx = 0
        self._partial = bytearray()
        self._snap = bytearray()
        self._truncated = False
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.last_ok = 0.0
        self.fetches = 0
        self._catchup: tuple[float, int, float] | None = None  # (since, from seq, last said)
        self._fetch_started = 0.0
        self._hw_task: asyncio.Task[None] | None = None
        self._reader_waited = -EAGER_HW_FOR
        # When (``time.monotonic``) this node last got a fetch reply from the stream's previous
        # leadership, until this leader answers: sent as ``left_ms`` (see ``R.FetchRequest``).
        self._prior_reply = prior_reply
        self._on_reply = on_reply

    # ---- Replication seam ----------------------------------------------------------------------

    def on_durable(self, seq: int) -> None:
        """The local group commit advanced: the committed mark may move."""
        self.stream.advance(min(self.leader_hw, seq))

    def publish_error(self) -> ApiError | None:
        """Followers drop captures before asking (see ``Stream.process``)."""
        return None

    def fenced(self) -> bool:
        """A follower never writes on its own."""
        return False

    def unanswered_error(self) -> ApiError | None:
        """A follower holds no publishes."""
        return None

    def lease_until(self) -> float | None:
        """A follower runs no consumers: no lease to keep."""
        return math.inf

    async def sync(self) -> None:
        """A follower has nothing of its own to replicate: its local durability only."""
        await self.store.flush()

    def committed_wanted(self) -> None:
        """A read here waits for the committed mark: ask the leader for its HW now (HW-only
        moves reach a caught-up follower up to ``HW_LINGER`` late). One query at a time;
        readers arriving meanwhile share it."""
        loop = asyncio.get_running_loop()
        self._reader_waited = loop.time()
        if self._stopped or (self._hw_task is not None and not self._hw_task.done()):
            return
        self._hw_task = loop.create_task(self._query_hw(), name=f"hw:{self.stream.name}<-{self.leader}")
        self._hw_task.add_done_callback(_log_failure)

    async def _query_hw(self) -> None:
        req = R.HwRequest(stream=self.stream.name, replica=self.node, epoch=self.epoch)
        try:
            head, _ = R.decode_fetch_reply(await self._call(req, 1.0))
        except (_Retry, TimeoutError, TransportError, R.ReplError) as e:
            log.debug("stream %s: HW query to %s failed: %s", self.stream.name, self.leader, e)
            return
        if head.code != R.OK or head.epoch != self.epoch:
            return  # another leadership by now, or a leader too old to answer: readers wait
        self.leader_hw = max(self.leader_hw, head.hw)
        # Never more than this replica holds durably (as for every fetch reply).
        self.stream.advance(min(self.leader_hw, self.store.durable_end()[0]))

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the consumer log (file streams) and start following."""
        if self._cdir is not None:
            from jetlog.consumer.store import ConsumerLog

            self.clog = await ConsumerLog.open(self._cdir)
            self.clog.recovered = {}
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"follow:{self.stream.name}<-{self.leader}"
        )
        self._task.add_done_callback(_log_failure)

    async def stop(self) -> None:
        """Stop following; close the consumer log."""
        self._stopped = True
        if self._hw_task is not None:
            self._hw_task.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.clog is not None:
            await self.clog.close()
            self.clog = None

    # ---- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = 0.02
        while not self._stopped:
            try:
                if not self._truncated:
                    await self._truncate()
                    self._truncated = True
                await self._fetch_once()
                backoff = 0.02
            except (_Retry, TimeoutError, TransportError) as e:
                log.debug("stream %s: follower of %s: %s", self.stream.name, self.leader, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)
            except JetlogError as e:
                log.warning("stream %s: replication from %s failed: %s", self.stream.name, self.leader, e)
                await asyncio.sleep(0.5)

    async def _call(self, req: R.Request, timeout: float) -> bytes:
        try:
            return await self._request(self.subject, R.encode(req), timeout)
        except (TimeoutError, TransportError):
            raise
        except Exception as e:  # nats-py's no-responders / connection errors
            raise _Retry(f"{type(e).__name__}: {e}") from e

    async def _truncate(self) -> None:
        """KIP-279: agree with the leader on the epoch lineage, truncating what diverges."""
        store = self.store
        trail: list[str] = []
        for _ in range(MAX_TRUNCATE_ROUNDS):
            epochs = store.epochs()
            if not epochs:
                return
            mine = epochs[-1][0]
            raw = await self._call(
                R.EpochEndRequest(
                    stream=self.stream.name, replica=self.node, epoch=mine, leader_epoch=self.epoch
                ),
                2.0,
            )
            rep = R.decode_epoch_reply(raw)
            if rep.code != R.OK:
                raise _Retry(f"epoch-end answered {rep.code} {rep.error}")
            if rep.epoch < 0:
                # The leader knows no epoch this old: nothing we hold is of its lineage.
                level = logging.WARNING if store.last_seq else logging.DEBUG
                log.log(level, "stream %s: no common epoch with %s, resetting", self.stream.name, self.leader)
                await store.reset(self.stream.config.first_seq or 1)
                self.stream.clamp_committed()
                return
            _, my_end = store.epoch_end(rep.epoch)
            target = min(tuple(rep.end), tuple(my_end))
            if len(trail) < 4:
                trail.append(f"mine {epochs} leader ({rep.epoch}, {tuple(rep.end)}) my end {tuple(my_end)}")
            # Also when nothing is beyond ``target``: an epoch this replica began as leader but
            # never wrote to is still in its checkpoint, and must go (or the rounds never meet).
            stale_epoch = any(e > rep.epoch and start >= target for e, start in epochs)
            if target < store.log_end() or stale_epoch:
                log.info(
                    "stream %s: truncating %s -> %s (leader %s ends epoch %d at %s)",
                    self.stream.name,
                    store.log_end(),
                    target,
                    self.leader,
                    rep.epoch,
                    tuple(rep.end),
                )
                await store.truncate(target)
                self.stream.clamp_committed()
            if store.epochs() and store.epochs()[-1][0] == rep.epoch:
                return
            if rep.epoch == mine:
                return
        raise JetlogError(f"stream {self.stream.name}: epoch truncation did not converge: {'; '.join(trail)}")

    async def _fetch_once(self) -> None:
        store = self.store
        pos = store.durable_end()
        self._fetch_started = now = asyncio.get_running_loop().time()
        budget = max(4096, self._max_payload() - 8192)
        req = R.FetchRequest(
            stream=self.stream.name,
            replica=self.node,
            epoch=self.epoch,
            pos=pos,
            chunk=len(self._partial),
            hw=self.leader_hw,
            cepoch=self.cepoch,
            cidx=self.cidx,
            csnap=len(self._snap),
            max_bytes=budget,
            wait_ms=WAIT_MS,
            eager_hw=now - self._reader_waited < EAGER_HW_FOR,
            left_ms=R.LEFT_NONE
            if self._prior_reply is None
            else int((time.monotonic() - self._prior_reply) * 1000),
        )
        raw = await self._call(req, WAIT_MS / 1000 + 3.0)
        head, body = R.decode_fetch_reply(raw)
        self.fetches += 1
        if head.code == R.NOT_LEADER or head.code == R.NO_STREAM:
            raise _Retry(f"{self.leader} does not lead {self.stream.name} at epoch {self.epoch}")
        if head.code == R.OUT_OF_RANGE:
            log.warning(
                "stream %s: position %s is below %s's first batch %s: resetting the replica",
                self.stream.name,
                pos,
                self.leader,
                tuple(head.start),
            )
            await store.reset(head.first_seq)
            self.stream.clamp_committed()
            self._partial.clear()
            return
        if head.code == R.UNKNOWN_POS:
            self._truncated = False
            self._partial.clear()
            return
        if head.code != R.OK:
            raise JetlogError(f"fetch failed: {head.error}")
        self._prior_reply = None  # this leader answered: it has been told when we left the last
        self._on_reply()
        wrote = False
        if head.partial:
            if req.chunk == 0:
                self._partial.clear()
            self._partial += body
            if len(self._partial) >= head.partial:
                self.stream.append_verbatim(bytes(self._partial))
                self._partial.clear()
                wrote = True
        elif body:
            self._partial.clear()
            self.stream.append_verbatim(body)
            wrote = True
        synced_c = await self._consumer_records(head)
        if wrote:
            await store.flush()
        if synced_c and self.clog is not None:
            await self.clog.sync()
        self.leader_hw = max(self.leader_hw, head.hw)
        self.stream.advance(min(self.leader_hw, store.durable_end()[0]))
        self._progress(pos[0], store.durable_end()[0], head.leo[0] if head.leo else 0)
        if hasattr(store, "compact_floor"):
            store.compact_floor = head.floor
        self.last_ok = asyncio.get_running_loop().time()

    def _progress(self, before: int, mine: int, leader_end: int) -> None:
        """Catch-up progress in the log, every ``PROGRESS_EVERY`` s while far behind (a replica
        restored or restarted after a long absence), and once when caught up. ``before``: where
        this fetch started (one reply may carry a large part of the gap)."""
        now = asyncio.get_running_loop().time()
        behind = leader_end - mine
        if self._catchup is None:
            if leader_end - before < CATCHUP_REPORT_MIN:
                return
            self._catchup = (self._fetch_started, before, now)
            log.info(
                "stream %s: catching up from %s: %d messages behind",
                self.stream.name,
                self.leader,
                leader_end - before,
            )
        t0, start, said = self._catchup
        if behind <= 0:
            rate = (mine - start) / max(1e-3, now - t0)
            log.info(
                "stream %s: caught up with %s: %d messages in %.1fs (%.0f msgs/s)",
                self.stream.name, self.leader, mine - start, now - t0, rate,
            )  # fmt: skip
            self._catchup = None
            return
        if now - said >= PROGRESS_EVERY:
            done = mine - start
            rate = done / max(1e-3, now - t0)
            eta = f", ~{behind / rate:.0f}s left" if rate > 0 else ""
            log.info(
                "stream %s: catching up from %s: %d of %d messages (%.0f%%), %.0f msgs/s%s",
                self.stream.name, self.leader, done, done + behind, 100 * done / max(1, done + behind), rate, eta,
            )  # fmt: skip
            self._catchup = (t0, start, now)

    async def _consumer_records(self, head: R.FetchReply) -> bool:
        """Apply consumer-log records or snapshot chunks; True when something was written."""
        clog = self.clog
        if clog is None or not head.cepoch:
            return False
        if not head.crecs and not head.csnap:
            if head.cepoch == self.cepoch and not self._snap:
                return False  # nothing new in this lineage
            # An empty image: the leader answers a new lineage (or a transfer it cannot
            # continue) with its whole consumer state, and it holds no durable consumer.
            # Adopting it matters twice: consumers deleted meanwhile go here too, and until
            # this follower reports the leader's lineage every fetch of it looks like news
            # to the leader, which then answers at once, round after round (a busy loop
            # on an idle stream with no consumers).
            self._snap.clear()
            await clog.replica_replace(b"")
            self.cepoch, self.cidx = head.cepoch, head.cidx
            return True
        if head.csnap:
            if head.coff != len(self._snap):
                self._snap.clear()
                if head.coff:
                    return False
            self._snap += head.crecs
            if len(self._snap) < head.csnap:
                self.cepoch, self.cidx = head.cepoch, head.cidx
                return False
            await clog.replica_replace(bytes(self._snap))
            self._snap.clear()
        else:
            clog.replica_append(head.crecs)
        self.cepoch, self.cidx = head.cepoch, head.cidx
        if clog.size > (16 << 20):
            await clog.compact_replica()
        return True


def consumer_dir(stream: Any, root: str) -> str | None:
    """Where a file stream keeps its consumer log (memory streams keep none)."""
    if stream.config.storage == "memory":
        return None
    return os.path.join(root, stream.name, "consumers")
