"""Node liveness over NATS: every node publishes a heartbeat; every node tracks who is alive.

Liveness stays out of Raft (pysyncobj.md §5.2): heartbeats are frequent and only the controller's
*decisions* (new leader, smaller ISR) are committed. A heartbeat also says whether its sender
is in contact with the Raft group: a node cut off from Raft but still on NATS is treated as
gone, since it can no longer learn that it was deposed and stops leading by itself (fencing).

Times are the receiver's monotonic clock (no cross-node clock comparison).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec

from jetlog.errors import JetlogError
from jetlog.tasklog import failure_logger

log = logging.getLogger("jetlog.cluster.liveness")
_log_failure = failure_logger(log)


class Heartbeat(msgspec.Struct, forbid_unknown_fields=False):
    """What a node says about itself every interval."""

    node: str
    incarnation: int
    raft_ok: bool
    leads: int = 0
    links_ok: bool = True
    """Both upstream links up: a node whose leaf link is down can neither capture nor deliver,
    so it must not lead."""
    """Streams this node currently leads (placement balances on it)."""


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(Heartbeat)


class Liveness:
    """Publishes this node's heartbeat and tracks everyone's."""

    def __init__(
        self,
        client: Any,
        subject: str,
        node: str,
        members: list[str],
        *,
        interval: float = 0.2,
        timeout: float = 1.0,
        raft_ok: Callable[[], bool],
        leads: Callable[[], int] = lambda: 0,
        links_ok: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.subject = subject
        self.node = node
        self.members = list(members)
        self.interval = interval
        self.timeout = timeout
        self._raft_ok = raft_ok
        self._leads = leads
        self._links_ok = links_ok
        self._clock = clock
        self.incarnation = time.time_ns()
        now = clock()
        # Until a node is heard from, it gets one timeout of grace from our own start.
        self._seen: dict[str, float] = dict.fromkeys(members, now)
        self._ok: dict[str, bool] = dict.fromkeys(members, True)
        self._incarnations: dict[str, int] = {}
        self.load: dict[str, int] = dict.fromkeys(members, 0)
        self._alive: dict[str, bool] = dict.fromkeys(members, True)
        self.listeners: list[Callable[[str, bool], None]] = []
        self.restart_listeners: list[Callable[[str], None]] = []
        self._task: asyncio.Task[None] | None = None
        self._sid: int | None = None

    async def start(self) -> None:
        """Subscribe to heartbeats and start publishing ours."""
        self._sid = await self.client.subscribe_raw(self.subject, self._on_beat)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="liveness")
        self._task.add_done_callback(_log_failure)

    async def stop(self) -> None:
        """Stop publishing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._sid is not None:
            with contextlib.suppress(JetlogError):
                await self.client.unsubscribe(self._sid)

    def alive(self, node: str) -> bool:
        """Heard from within the timeout, and in contact with Raft."""
        if node == self.node:
            return self._raft_ok() and self._links_ok()
        return self._alive.get(node, False)

    def heard_recently(self, within: float | None = None) -> bool:
        """Some other member's heartbeat arrived within ``within`` (default 2.5 intervals):
        evidence that this node's own NATS link works right now."""
        return self._heard_within(within if within is not None else 2.5 * self.interval, grace=False)

    def hears_anyone(self) -> bool:
        """Some other member's heartbeat arrived within the timeout, whatever it said (a member
        not heard from yet counts as heard for one timeout after this node's start)."""
        return self._heard_within(self.timeout, grace=True)

    def _heard_within(self, limit: float, *, grace: bool) -> bool:
        """Another member heard within ``limit`` seconds; ``grace``: one not heard from yet
        counts from this node's start (its ``_seen`` entry), else only a real heartbeat."""
        now = self._clock()
        return any(
            now - t <= limit
            for m, t in self._seen.items()
            if m != self.node and (grace or m in self._incarnations)
        )

    def unconfirmed_loss(self, node: str, since: float) -> bool:
        """``node`` counts as gone only on what it said before ``since``: it is heard (within
        the timeout), but its latest heartbeat, received before ``since``, said it had lost the
        Raft group or an upstream link. A Raft leadership that began at ``since`` must not act
        on that yet: in an election every member loses Raft contact for a moment and says so,
        and the next heartbeat (one interval) tells whether it is back."""
        if node == self.node or self._ok.get(node, True):
            return False
        seen = self._seen.get(node)
        return seen is not None and seen < since and self._clock() - seen <= self.timeout

    def alive_nodes(self) -> list[str]:
        """Every member currently alive, in member order."""
        return [m for m in self.members if self.alive(m)]

    def _on_beat(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        try:
            hb = _dec.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if hb.node not in self._seen or hb.node == self.node:
            return
        self._seen[hb.node] = self._clock()
        self._ok[hb.node] = hb.raft_ok and hb.links_ok
        self.load[hb.node] = hb.leads
        prev = self._incarnations.get(hb.node)
        self._incarnations[hb.node] = hb.incarnation
        if prev is not None and prev != hb.incarnation:
            log.info("node %s restarted", hb.node)
            for fn in self.restart_listeners:
                fn(hb.node)
        self._evaluate(hb.node)

    def _evaluate(self, node: str) -> None:
        now = self._clock()
        alive = self._ok.get(node, False) and now - self._seen.get(node, 0.0) <= self.timeout
        if alive != self._alive.get(node):
            self._alive[node] = alive
            if alive:
                log.info("node %s is up", node)
            else:
                age = now - self._seen.get(node, 0.0)
                why = (
                    "lost the Raft group or an upstream link"
                    if age <= self.timeout
                    else f"silent for {age:.1f}s"
                )
                log.warning("node %s is gone (%s)", node, why)
            for fn in self.listeners:
                try:
                    fn(node, alive)
                except Exception:
                    log.exception("liveness listener failed")

    async def _run(self) -> None:
        # This loop must outlive anything one round does: if it stopped, this node would look
        # gone to the others for ever and never rejoin an ISR (chaos finding 9).
        while True:
            try:
                hb = Heartbeat(self.node, self.incarnation, self._raft_ok(), self._leads(), self._links_ok())
                with contextlib.suppress(JetlogError):
                    self.client.send(self.subject, _enc.encode(hb))
                for m in self.members:
                    if m != self.node:
                        self._evaluate(m)
            except Exception:
                log.exception("liveness round failed; next round in %.1fs", self.interval)
            await asyncio.sleep(self.interval)
