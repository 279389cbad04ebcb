"""The controller: runs on the Raft leader and turns node liveness into metadata decisions.

It is active only after a barrier committed in its own term (its view of the metadata is then
current) and stops at any leadership change. Each pass looks at every stream:

* its leader is gone (or there is none) → elect a live ISR member at epoch + 1, with the gone
  members dropped from the ISR (``ElectLeader``, CAS on the epoch);
* a follower in the ISR is gone → drop it from the ISR (``AlterIsr``, CAS on epoch and ISR
  version), so the leader's high-water mark stops waiting for it.

Unclean election (a replica outside the ISR) is never done: a stream whose ISR has no live
member stays leaderless and says so, rather than losing acknowledged messages.

Placement of new streams and leader stepdowns are pure functions here, used by whichever node
handles the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from jetlog.cluster import meta as M
from jetlog.errors import JetlogError
from jetlog.tasklog import failure_logger

log = logging.getLogger("jetlog.cluster.controller")
_log_failure = failure_logger(log)

PASS_INTERVAL = 0.1


def place(
    replicas: int, members: list[str], alive: Callable[[str], bool], assignments: Iterable[Any]
) -> list[str]:
    """Choose ``replicas`` live members for a new stream, leader first: the fewest replicas
    held first, the fewest streams led for the leader; ties broken by member order."""
    held = dict.fromkeys(members, 0)
    led = dict.fromkeys(members, 0)
    for a in assignments:
        for r in a.replicas:
            if r in held:
                held[r] += 1
        if a.leader in led:
            led[a.leader] += 1
    live = [m for m in members if alive(m)]
    if len(live) < replicas:
        return []
    order = {m: i for i, m in enumerate(members)}
    chosen = sorted(live, key=lambda m: (held[m], led[m], order[m]))[:replicas]
    leader = min(chosen, key=lambda m: (led[m], held[m], order[m]))
    return [leader] + [m for m in chosen if m != leader]


def pick_leader(a: Any, alive: Callable[[str], bool], exclude: str = "", preferred: str = "") -> str:
    """A live ISR member to lead ``a`` (not ``exclude``), ``preferred`` when eligible."""
    cands = [r for r in a.replicas if r in a.isr and r != exclude and alive(r)]
    if preferred and preferred in cands:
        return preferred
    return cands[0] if cands else ""


class Controller:
    """Liveness-driven leader election and ISR pruning (active on the Raft leader only)."""

    def __init__(
        self,
        raft: Any,
        state: Any,
        alive: Callable[[str], bool],
        isolated: Callable[[], bool] = lambda: False,
        fresh: Callable[[], bool] = lambda: True,
        unconfirmed: Callable[[str, float], bool] = lambda node, since: False,
        in_contact: Callable[[], bool] = lambda: True,
    ) -> None:
        self.raft = raft
        self.state = state
        self._alive = alive
        self.isolated = isolated
        self.fresh = fresh
        self._unconfirmed = unconfirmed
        self.in_contact = in_contact
        self._since = 0.0  # when this controller last became active (``time.monotonic``)
        self.active = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[str] = set()
        self._warned: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start the controller loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")
        self._task.add_done_callback(_log_failure)

    async def stop(self) -> None:
        """Stop the loop and any proposal in flight."""
        for t in [self._task, *self._tasks]:
            if t is not None:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t

    def alive(self, node: str) -> bool:
        """Alive for this controller's decisions: alive, or gone only on word it gave before
        this controller became active (Liveness.unconfirmed_loss). After an election every
        member has just said it lost Raft; moving streams off them on that would move every
        stream of a healthy cluster (and open a window of "no responders" for each)."""
        return self._alive(node) or self._unconfirmed(node, self._since)

    def poke(self) -> None:
        """Something changed (liveness, metadata, leadership): run a pass soon."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), PASS_INTERVAL)
            self._wake.clear()
            if not self.raft.is_leader:
                if self.active:
                    log.info("controller inactive (no longer the Raft leader)")
                self.active = False
                continue
            if not self.active:
                try:
                    await self.raft.barrier()
                except JetlogError as e:
                    log.debug("controller barrier failed: %s", e)
                    continue
                if not self.raft.is_leader:
                    continue
                self.active = True
                self._since = time.monotonic()  # the clock of Liveness.unconfirmed_loss
                log.info("controller active (Raft leader, term %s)", self.raft.term)
            if self.isolated():
                # Raft works but NATS shows nobody: this node cannot tell who is alive (it is
                # the one cut off), so it must not be the one deciding. Hand Raft leadership
                # to a member that sees the others.
                await self._resign()
                continue
            if not self.in_contact():
                # Our own Raft majority has been quiet for a while: the whole group may be
                # losing contact (an outage, an election), and every member then says it lost
                # Raft. A decision taken on that now cannot commit, but may be kept and commit
                # after the group heals: a stale election that moved a healthy stream's leader.
                continue
            if not self.fresh():
                # No heartbeat from anyone just now: our own NATS link may be the one going
                # silent (members are then declared gone one by one, and acting on the first
                # would drop a healthy replica). Decide only on fresh evidence.
                continue
            self._pass()

    def _pass(self) -> None:
        for name, a in list(self.state.streams.items()):
            if name in self._inflight:
                continue
            if not a.leader or not self.alive(a.leader):
                self._elect(name, a)
                continue
            self._warned.discard(name)
            gone = [r for r in a.isr if r != a.leader and not self.alive(r)]
            if gone:
                isr = [r for r in a.isr if r not in gone]
                log.info("stream %s: %s gone, ISR %s -> %s", name, ",".join(gone), a.isr, isr)
                self._propose(
                    name,
                    M.AlterIsr(name=name, leader_epoch=a.epoch, expect_isr_version=a.isr_version, isr=isr),
                )

    async def _resign(self) -> None:
        log.warning("controller: no other member heard on NATS, handing Raft leadership over")
        self.active = False
        try:
            await self.raft.transfer_leadership(None)
        except JetlogError as e:
            log.warning("controller: Raft leadership handover failed: %s", e)
            await asyncio.sleep(0.5)

    def _elect(self, name: str, a: Any) -> None:
        leader = pick_leader(a, self.alive, exclude=a.leader)
        if not leader:
            if name not in self._warned:
                self._warned.add(name)
                log.error(
                    "stream %s: leader %s is gone and no other in-sync replica is alive (ISR %s): "
                    "the stream is unavailable until one returns",
                    name,
                    a.leader or "-",
                    a.isr,
                )
            return
        isr = [r for r in a.isr if r == leader or (r != a.leader and self.alive(r))]
        log.info("stream %s: electing %s (epoch %d -> %d, ISR %s)", name, leader, a.epoch, a.epoch + 1, isr)
        self._propose(name, M.ElectLeader(name=name, leader=leader, isr=isr, expect_epoch=a.epoch))

    def _propose(self, name: str, cmd: Any) -> None:
        self._inflight.add(name)

        async def run() -> None:
            try:
                res = await self.raft.propose(cmd, timeout=2.0)
                if not res.ok:
                    log.info("stream %s: %s rejected: %s", name, type(cmd).__name__, res.error)
            except JetlogError as e:
                log.warning("stream %s: %s failed: %s", name, type(cmd).__name__, e)
            finally:
                self._inflight.discard(name)
                self._wake.set()

        t = asyncio.get_running_loop().create_task(run(), name=f"controller:{name}")
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
