"""Turns the replicated metadata into this node's local state.

For every stream the metadata lists, this node holds a replica when it is among the stream's
replicas, and plays the role the assignment gives it: leader at the assignment's epoch, or
follower of the assignment's leader at that epoch. Every metadata change for a stream (applied
through Raft, delivered in log order) re-runs :meth:`Reconciler.reconcile` for it; runs for one
stream are serialised.

Two rules protect acknowledged data:

* A node never resumes leadership at an epoch it held before a restart. When it finds itself
  the leader in the metadata at start, it asks for a new election instead (another live
  in-sync replica if there is one, else itself at epoch + 1, and never itself when its replica
  was lost from disk).
* Local data is only deleted when the metadata deleted the stream or moved its replica away —
  never because the metadata does not (yet) know a directory found on disk.

Metadata that cannot be applied (a link lost while capture starts, a disk error) is applied
again every pass (``pending``). A stream this node should lead that has not started for
``HAND_OVER_AFTER`` seconds is handed to another live in-sync replica: the controller only sees
whether a node is alive, not whether it leads what it was given, and without this a node alive
but unable to lead one stream would leave that stream without a leader for good.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jetlog.cluster import meta as M
from jetlog.cluster.controller import pick_leader
from jetlog.errors import JetlogError
from jetlog.stream.stream import FOLLOWER

log = logging.getLogger("jetlog.cluster.reconcile")

HAND_OVER_AFTER = 5.0
"""Seconds a stream this node should lead may fail to start (tried again every second) before
this node hands its leadership to another live in-sync replica. Longer than a leaf link's
reconnect (a node that is about to lead again keeps the stream), far shorter than an outage."""


@dataclass
class Role:
    """What this node does for one stream right now."""

    kind: str  # "leader" | "follower"
    epoch: int
    leader: str
    obj: Any  # StreamLeader | StreamFollower
    config: bytes


class Reconciler:
    """Applies metadata to the local stream manager."""

    def __init__(
        self,
        node: str,
        state: Any,
        streams: Any,
        raft: Any,
        *,
        alive: Callable[[str], bool],
        decode_config: Callable[[bytes], Any],
        make_leader: Callable[[Any, Any], Any],
        make_follower: Callable[[Any, Any], Any],
        on_role_change: Callable[[str], None] = lambda name: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.state = state
        self.streams = streams
        self.raft = raft
        self.alive = alive
        self.decode_config = decode_config
        self.make_leader = make_leader
        self.make_follower = make_follower
        self.on_role_change = on_role_change
        self.roles: dict[str, Role] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._fresh: set[str] = set()
        """Streams whose leadership this process has not yet re-established since start."""
        self._retry: set[str] = set()
        """Streams whose metadata could not be applied (a link lost meanwhile, a disk error):
        tried again every pass of ``service._periodic``, not only at the next change."""
        self._failing: dict[str, float] = {}
        """Streams this node should lead and could not start: when (``clock``) that began."""
        self._clock = clock
        self._intact: dict[str, bool] = {}
        self._damaged: set[str] = set()
        """Replicas to rebuild from the leader before following (corruption found at open)."""

    def pending(self) -> list[str]:
        """Streams to reconcile again: post-restart re-elections not through yet, and metadata
        that could not be applied."""
        return sorted(self._fresh | self._retry)

    def unapplied(self, name: str) -> bool:
        """Whether this node could not apply ``name``'s metadata at its last try (a role not
        started; tried again every second)."""
        return name in self._retry

    def leads(self) -> int:
        """How many streams this node leads."""
        return sum(1 for r in self.roles.values() if r.kind == "leader")

    async def start(self) -> None:
        """First pass, once the metadata is current: every stream this node holds."""
        on_disk = set(self.streams.local_names())
        for name, a in sorted(self.state.streams.items()):
            if self.node in a.replicas:
                self._intact[name] = name in on_disk
                if a.leader == self.node:
                    self._fresh.add(name)
        for name in sorted(on_disk - set(self.state.streams)):
            log.warning(
                "stream %s is on disk but not in the cluster metadata: left untouched (offline)", name
            )
            self.streams.offline[name] = "not in the cluster metadata"
        for name in sorted(self.state.streams):
            await self.reconcile(name)

    async def stop(self) -> None:
        """Stop every leader and follower (streams are closed by the stream manager)."""
        for name in list(self.roles):
            await self._stop_role(name)

    async def reconcile(self, name: str) -> None:
        """Bring the local replica of ``name`` in line with the metadata."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            try:
                await self._reconcile(name)
            except JetlogError as e:
                # STUCK otherwise: nothing else reconciles a stream until its metadata changes,
                # and a leader that never started leaves its followers waiting for good.
                if name not in self._retry:
                    log.error("stream %s: cannot apply the cluster metadata (trying again): %s", name, e)
                self._retry.add(name)
                a = self.state.streams.get(name)
                if a is None or a.leader != self.node:
                    self._failing.pop(name, None)
                    return
                since = self._failing.setdefault(name, self._clock())
                if self._clock() - since >= HAND_OVER_AFTER:
                    await self._hand_over(name, a, e)
                return
            self._failing.pop(name, None)
            if name in self._retry:
                self._retry.discard(name)
                log.info("stream %s: cluster metadata applied", name)

    async def _reconcile(self, name: str) -> None:
        a = self.state.streams.get(name)
        stream = self.streams.get(name)
        if a is None or self.node not in a.replicas:
            if name in self.roles:
                await self._stop_role(name)
            if stream is not None:
                log.info(
                    "stream %s: %s, removing the local replica",
                    name,
                    "deleted" if a is None else "moved away",
                )
                await self.streams.delete(name)
                self.on_role_change(name)
            self._locks.pop(name, None)
            return
        config = self.decode_config(a.config)
        if stream is not None and stream.created != a.created:
            # Deleted and created again (the delete was not reconciled yet): the local replica
            # belongs to the old incarnation and must not leak into the new one.
            log.info("stream %s: re-created, dropping the replica of the previous incarnation", name)
            if name in self.roles:
                await self._stop_role(name)
            await self.streams.delete(name)
            stream = None
        if stream is None:
            stream, had = await self.streams.open_replica(config, a.created, role=FOLLOWER)
            lost = stream.store.state().lost_seqs
            if lost:
                # Recovery quarantined corrupt data: this replica can neither lead nor count
                # as in sync. Start it over from the leader (a replica repairs from the leader).
                log.error(
                    "stream %s: the local replica lost %d messages to corruption; it will be "
                    "rebuilt from the leader",
                    name,
                    len(lost),
                )
                self._damaged.add(name)
            self._intact.setdefault(name, had and not lost)
        role = self.roles.get(name)
        if role is not None and role.config != a.config:
            await self.streams.update_replica(stream, config)
            role.config = a.config
        if a.leader == self.node:
            if name in self._fresh:
                await self._reelect(name, a)
                return
            if role is not None and role.kind == "leader" and role.epoch == a.epoch:
                role.obj.update_assignment(a.replicas, a.isr, a.isr_version)
                return
            await self._become_leader(name, stream, a)
        else:
            self._fresh.discard(name)
            if (
                role is not None
                and role.kind == "follower"
                and role.leader == a.leader
                and role.epoch == a.epoch
            ):
                return
            if role is None and not a.leader and stream.role == FOLLOWER:
                return
            await self._become_follower(name, stream, a)

    async def _reelect(self, name: str, a: Any) -> None:
        """Found ourselves leader after a restart: never lead again at the old epoch."""
        self._fresh.discard(name)
        intact = self._intact.get(name, False)
        other = pick_leader(a, self.alive, exclude=self.node)
        leader = other or (self.node if intact else "")
        if not leader:
            log.error(
                "stream %s: this node led it but its replica is gone from disk and no other "
                "in-sync replica is alive: not taking leadership (acknowledged data would be lost)",
                name,
            )
            return
        isr = a.isr if intact else [r for r in a.isr if r != self.node]
        if leader not in isr:
            isr = [leader, *isr]
        log.info("stream %s: restarted leader, handing over to %s at epoch %d", name, leader, a.epoch + 1)
        if not await self._elect(name, a, leader, isr, "re-election"):
            self._fresh.add(name)  # try again at the next change or pass
        # The commit (or someone else's) triggers another reconcile through the metadata events.

    async def _elect(self, name: str, a: Any, leader: str, isr: list[str], what: str) -> bool:
        """Propose ``leader`` and ``isr`` for ``name`` at epoch + 1 (CAS on ``a.epoch``). False
        when the proposal itself failed; a rejected one (someone moved first) is logged only."""
        try:
            res = await self.raft.propose(
                M.ElectLeader(name=name, leader=leader, isr=isr, expect_epoch=a.epoch)
            )
        except JetlogError as e:
            log.warning("stream %s: %s failed: %s", name, what, e)
            return False
        if not res.ok:
            log.info("stream %s: %s not applied: %s", name, what, res.error)
        return True

    async def _hand_over(self, name: str, a: Any, why: JetlogError) -> None:
        """This node has not managed to lead ``name`` for ``HAND_OVER_AFTER`` seconds: elect
        another live in-sync replica at epoch + 1 and leave the ISR. Safe for acknowledged
        data: the new leader is in the ISR, so it holds everything committed, and this node,
        which never started at this epoch, captured nothing in it. It comes back into the ISR
        as any follower does, by catching up; with no other live in-sync replica it keeps
        trying to lead (the stream cannot be served by anyone else)."""
        other = pick_leader(a, self.alive, exclude=self.node)
        if not other:
            return
        self._failing.pop(name, None)  # one hand-over per run of failures; a later one waits again
        isr = [r for r in a.isr if r != self.node]
        log.warning(
            "stream %s: could not start as its leader for %.0f s (%s): handing over to %s at epoch %d",
            name,
            HAND_OVER_AFTER,
            why,
            other,
            a.epoch + 1,
        )
        await self._elect(name, a, other, isr, "hand-over")
        # Applied, the metadata change reconciles this stream again, as a follower.

    async def _become_leader(self, name: str, stream: Any, a: Any) -> None:
        await self._stop_role(name)
        leader = self.make_leader(stream, a)
        await stream.promote(a.epoch, leader)
        try:
            # Capture once the stream writes as this leader (a publish taken earlier would be
            # dropped as a follower's), and before the leadership is announced to readers.
            await self.streams.capture_on(stream)
            await self.streams.attach(stream)
        except BaseException:
            # RETRY (``reconcile``): nothing half started stays behind. The stream stays
            # promoted at this epoch, capturing nothing, until the next attempt starts it.
            self.streams.capture_off(name)
            await self.streams.detach(stream)
            raise
        cset = stream.consumers
        if cset is not None and cset.clog is not None:
            cset.clog.enable_feed()
            cset.clog.on_append = leader.wake
            cset.clog.replicated = leader.consumers_replicated
        leader.start()
        self.roles[name] = Role("leader", a.epoch, self.node, leader, a.config)
        log.info("stream %s: leader at epoch %d (ISR %s)", name, a.epoch, a.isr)
        self.on_role_change(name)

    async def _become_follower(self, name: str, stream: Any, a: Any) -> None:
        await self._stop_role(name)
        if not a.leader:
            # Leaderless (its ISR is gone): hold the replica, follow nobody until an election.
            await stream.demote(None)
            return
        follower = self.make_follower(stream, a)
        await stream.demote(follower)
        if name in self._damaged:
            self._damaged.discard(name)
            await stream.store.reset(stream.config.first_seq or 1)
            stream.clamp_committed()
        try:
            await follower.start()
        except BaseException:
            await follower.stop()  # RETRY (``reconcile``): no half-started follower behind
            raise
        self.roles[name] = Role("follower", a.epoch, a.leader, follower, a.config)
        log.info("stream %s: following %s at epoch %d", name, a.leader or "-", a.epoch)
        self.on_role_change(name)

    async def _stop_role(self, name: str) -> None:
        role = self.roles.pop(name, None)
        if role is None:
            return
        if role.kind == "leader":
            # Stop capturing first: what arrives from here on would only be dropped.
            self.streams.capture_off(name)
        await role.obj.stop()
        if role.kind == "leader":
            stream = self.streams.get(name)
            if stream is not None:
                await self.streams.detach(stream)
                await stream.demote(None)

    def role_of(self, name: str) -> Role | None:
        """This node's current role for ``name``."""
        return self.roles.get(name)
