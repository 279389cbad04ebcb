"""Fault schedules: seeded random plans (pure) and the injector that carries them out on a
:class:`~jetlog.devcluster.LocalCluster`.

A schedule is a list of steps. Each step applies one fault, or two at once on different nodes
(a combination), holds them for a bounded time, heals them in reverse order and waits a bounded
gap before the next step, so every fault is healed before the next one starts and the run
ends healed. Fault kinds:

* ``kill`` — ``kill -9``, restarted at heal.
* ``powerloss`` — ``kill -9``; at heal every write the node had not fsynced is dropped
  (``powerloss.py``) before it restarts.
* ``stop`` — ``SIGSTOP``, ``SIGCONT`` at heal (a frozen process: its sockets stay open).
* ``nats`` — the node's client and leafnode links go through ``FaultProxy``s; ``block`` flavor:
  silent (nothing forwarded, no FIN), healed by forwarding again and resetting the connections;
  ``reset`` flavor: connections reset and new ones refused, healed by accepting again.
* ``raft`` — a silent Raft partition of the node (test-only fault control, both directions).

Targets: ``leader`` (the stream leader when the step starts), ``follower`` (a replica that is
not the leader) or ``random``. Schedule ``k`` of seed ``s`` depends on ``(s, k)`` only, so
``jetlog chaos --seed s --first k --schedules 1`` replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import shutil
import signal
from dataclasses import dataclass, field

import msgspec
import nats
import nats.errors

from jetlog.chaos.powerloss import drop_unsynced
from jetlog.chaos.proxy import FaultProxy
from jetlog.devcluster import LocalCluster

log = logging.getLogger("jetlog.chaos")

KINDS = ("kill", "powerloss", "stop", "nats", "raft")
WEIGHTS = {"kill": 3, "powerloss": 2, "stop": 2, "nats": 2, "raft": 2}
TARGETS = (("leader", 5), ("follower", 3), ("random", 2))
HOLD = (0.5, 3.0)  # seconds a step's faults are held
GAP = (0.5, 2.0)  # seconds between healing a step and the next one
COMBO_P = 0.25  # chance that a step combines two faults
# Heal order within a combination is the reverse of apply order; apply Raft partitions first
# and process faults last, so healing restarts/resumes a node before its links are reopened
# and the fault control (a NATS request to each node) can reach every node when it heals.
_APPLY_ORDER = {"raft": 0, "nats": 1, "stop": 2, "kill": 3, "powerloss": 3}


@dataclass(frozen=True)
class Fault:
    """One fault of a step: ``kind`` (``KINDS``), ``target`` role, ``flavor`` (``nats`` only)."""

    kind: str
    target: str
    flavor: str = ""

    def label(self) -> str:
        return f"{self.kind}{'/' + self.flavor if self.flavor else ''}({self.target})"


@dataclass(frozen=True)
class Step:
    """Faults applied together, held ``hold`` seconds, then healed; then ``gap`` seconds."""

    faults: tuple[Fault, ...]
    hold: float
    gap: float


@dataclass(frozen=True)
class Schedule:
    """Schedule ``index`` of ``seed``: ``warmup`` seconds of load, then ``steps``."""

    seed: int
    index: int
    warmup: float
    steps: tuple[Step, ...]

    def describe(self) -> str:
        return (
            " ; ".join("+".join(f.label() for f in s.faults) + f" {s.hold:.1f}s" for s in self.steps)
            or "(no faults)"
        )


def make_schedule(
    seed: int, index: int, duration: float, kinds: tuple[str, ...] = KINDS, combos: bool = True
) -> Schedule:
    """A random schedule whose steps fit in ``duration`` seconds (see the module docstring);
    ``combos=False``: one fault per step."""
    rng = random.Random(f"jetlog-chaos:{seed}:{index}")
    weights = [WEIGHTS[k] for k in kinds]
    warmup = 1.0
    t = warmup
    steps: list[Step] = []
    while True:
        hold = round(rng.uniform(*HOLD), 2)
        gap = round(rng.uniform(*GAP), 2)
        if steps and t + hold > duration:
            break
        n = 2 if rng.random() < COMBO_P and combos else 1
        faults = []
        for _ in range(n):
            kind = rng.choices(kinds, weights)[0]
            target = rng.choices([t_ for t_, _ in TARGETS], [w for _, w in TARGETS])[0]
            flavor = rng.choice(("block", "reset")) if kind == "nats" else ""
            faults.append(Fault(kind, target, flavor))
        faults.sort(key=lambda f: _APPLY_ORDER[f.kind])
        steps.append(Step(tuple(faults), hold, gap))
        t += hold + gap
        if t >= duration:
            break
    return Schedule(seed, index, warmup, tuple(steps))


@dataclass
class Applied:
    """A fault carried out: on which node, when (monotonic), whether it hit the stream leader."""

    fault: Fault
    node: str
    t_apply: float = 0.0
    t_heal: float = 0.0
    was_leader: bool = False
    dropped_bytes: int = 0  # power loss: bytes of unsynced writes dropped


@dataclass
class Injector:
    """Carries out faults on a running cluster. ``proxies[node]``: the (client, leafnode)
    proxies in front of that node's links; ``control``: a connection to the upstream for the
    fault-control requests; ``ledger_dir``: the sync-ledger directory (power loss)."""

    cluster: LocalCluster
    proxies: dict[str, tuple[FaultProxy, FaultProxy]]
    control: nats.NATS
    ledger_dir: str
    rng: random.Random
    errors: list[str] = field(default_factory=list)
    _frozen: int = 0  # consumer-log copies taken of stopped nodes (see heal)

    def pick(self, target: str, leader: str | None, taken: set[str]) -> str:
        """The node a fault targets (never one already faulted in this step)."""
        names = [n for n in self.cluster.members if n not in taken]
        if target == "leader" and leader in names:
            return leader
        if target == "follower":
            followers = [n for n in names if n != leader]
            if followers:
                return self.rng.choice(followers)
        return self.rng.choice(names)

    async def apply(self, f: Fault, node: str) -> None:
        """Start fault ``f`` on ``node``."""
        if f.kind in ("kill", "powerloss"):
            await self.cluster.kill(node)
        elif f.kind == "stop":
            self.cluster.signal(node, signal.SIGSTOP)
        elif f.kind == "nats":
            for p in self.proxies[node]:
                if f.flavor == "block":
                    p.block()
                else:
                    p.refuse(True)
                    p.cut()
        elif f.kind == "raft":
            others = [n for n in self.cluster.members if n != node]
            await self._raft_drop(node, others)
            for o in others:
                await self._raft_drop(o, [node])

    async def heal(self, f: Fault, node: str) -> int:
        """End fault ``f`` on ``node``; returns the bytes a power loss dropped."""
        dropped = 0
        if f.kind in ("kill", "powerloss"):
            if f.kind == "powerloss":
                cut = drop_unsynced(self.ledger_dir, self.cluster.members[node].data_dir, self.rng)
                dropped = sum(d.size - d.durable for d in cut)
            await self.cluster.start_node(node, timeout=60)
        elif f.kind == "stop":
            self._keep_frozen_consumer_logs(node)
            self.cluster.signal(node, signal.SIGCONT)
        elif f.kind == "nats":
            for p in self.proxies[node]:
                p.heal()
                if f.flavor == "block":
                    p.cut()  # the silent connections may be half-dead by now: start over
        elif f.kind == "raft":
            for n in self.cluster.members:
                await self._raft_drop(n, [], must=True)
        return dropped

    def _keep_frozen_consumer_logs(self, node: str) -> None:
        """Evidence, before a stopped node resumes: a copy of each of its consumer-state logs
        (``frozen/<node>-<k>-<stream>.consumers.log`` beside the ledger directory). A record in
        it was written before the freeze, so a delivery it records was made before the freeze
        (records still in the process's buffers are missing: absence proves nothing)."""
        streams = os.path.join(self.cluster.members[node].data_dir, "streams")
        out = os.path.join(os.path.dirname(self.ledger_dir), "frozen")
        self._frozen += 1
        try:
            for stream in sorted(os.listdir(streams)):
                src = os.path.join(streams, stream, "consumers", "consumers.log")
                if os.path.isfile(src):
                    os.makedirs(out, exist_ok=True)
                    shutil.copyfile(src, os.path.join(out, f"{node}-{self._frozen}-{stream}.consumers.log"))
        except OSError as e:  # evidence only: never fail a heal for it
            log.warning("could not copy the consumer logs of frozen %s: %s", node, e)

    async def _raft_drop(self, node: str, drop: list[str], must: bool = False) -> None:
        """Set ``node``'s Raft drop list (fault control). A node that is down or cut off cannot
        be told; when healing (``must``) retry for a while, then record an injector error."""
        if not self.cluster.members[node].running:
            return
        subject = f"$JETLOG.{self.cluster.cluster_name}.FAULT.{node}"
        body = msgspec.json.encode({"raft_drop": drop})
        deadline = asyncio.get_running_loop().time() + (10.0 if must else 1.0)
        while True:
            try:
                await self.control.request(subject, body, timeout=1.0)
                return
            except (TimeoutError, nats.errors.Error) as e:
                if asyncio.get_running_loop().time() > deadline:
                    if must:
                        self.errors.append(f"could not reset the Raft partition of {node}: {e!r}")
                    return
                await asyncio.sleep(0.1)

    async def heal_all(self) -> None:
        """Safety net: resume, reconnect and un-partition everything (idempotent)."""
        for n in self.cluster.members:
            self.cluster.signal(n, signal.SIGCONT)
            for p in self.proxies.get(n, ()):
                p.heal()
        for n in self.cluster.members:
            if not self.cluster.members[n].running:
                with contextlib.suppress(RuntimeError):
                    await self.cluster.start_node(n, timeout=60)
        for n in self.cluster.members:
            await self._raft_drop(n, [], must=True)
