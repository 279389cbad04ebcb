"""A controller does not act on what members said before it became active, nor while its own
Raft majority is quiet. In an election (or a Raft outage) every member says "lost Raft" for a
moment; a new controller that took that as "gone" moved the leader of every stream of a healthy
cluster after the outage, and one that decided during the outage had its stale decision commit
after the heal (tests/cluster/test_fence_hold.py; docs/internals.md, nineteenth pass)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import msgspec

from jetlog.cluster import meta as M
from jetlog.cluster.controller import Controller
from jetlog.cluster.liveness import Heartbeat, Liveness


class Quiet:
    async def subscribe_raw(self, subject: str, cb: Any, queue: str = "") -> int:
        return 1

    def send(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        return None


def _beat(lv: Liveness, node: str, raft_ok: bool) -> None:
    hb = Heartbeat(node, 7, raft_ok)
    lv._on_beat("hb", None, b"", msgspec.msgpack.encode(hb))


def test_a_loss_said_before_since_is_unconfirmed_until_the_next_heartbeat() -> None:
    now = [10.0]
    lv = Liveness(Quiet(), "hb", "n1", ["n1", "n2"], timeout=1.0, raft_ok=lambda: True, clock=lambda: now[0])
    _beat(lv, "n2", True)
    assert lv.alive("n2") and not lv.unconfirmed_loss("n2", 10.0)
    now[0] = 10.2
    _beat(lv, "n2", False)  # n2 lost Raft (an election)
    assert not lv.alive("n2")
    assert lv.unconfirmed_loss("n2", 10.5)  # said before a leadership that began at 10.5
    assert not lv.unconfirmed_loss("n2", 10.1)  # said after: it counts
    now[0] = 10.6
    _beat(lv, "n2", False)  # said again after 10.5: confirmed
    assert not lv.unconfirmed_loss("n2", 10.5)
    now[0] = 10.7
    _beat(lv, "n2", True)
    assert lv.alive("n2") and not lv.unconfirmed_loss("n2", 10.5)
    assert lv.hears_anyone()  # heard, whatever it said
    now[0] = 12.0  # silent past the timeout: gone, and not "unconfirmed"
    assert not lv.unconfirmed_loss("n2", 11.9)
    assert not lv.unconfirmed_loss("n1", 99.0)  # never about itself
    assert not lv.hears_anyone()


def test_a_member_not_heard_yet_counts_as_heard_for_one_timeout_after_start() -> None:
    # A node that just started must not take itself for cut off before anyone could beat.
    now = [5.0]
    lv = Liveness(
        Quiet(), "hb", "n1", ["n1", "n2", "n3"], timeout=1.0, raft_ok=lambda: True, clock=lambda: now[0]
    )
    now[0] = 5.9
    assert lv.hears_anyone()
    assert not lv.heard_recently(within=10.0)  # evidence of a working link: real heartbeats only
    now[0] = 6.1
    assert not lv.hears_anyone()
    _beat(lv, "n3", False)  # heard, whatever it said
    assert lv.hears_anyone() and lv.heard_recently()
    now[0] = 6.1 + 2.5 * lv.interval + 0.01
    assert not lv.heard_recently() and lv.heard_recently(within=1.0) and lv.hears_anyone()


class Raft:
    """Commits every proposal at once into ``state`` (as the metadata FSM would)."""

    is_leader = True
    term = 3

    def __init__(self, state: Any) -> None:
        self.state = state
        self.proposed: list[Any] = []

    async def barrier(self) -> int:
        return 1

    async def propose(self, cmd: Any, timeout: float = 3.0) -> Any:
        self.proposed.append(cmd)
        a = self.state.streams[cmd.name]
        if isinstance(cmd, M.ElectLeader):
            a.leader, a.isr, a.epoch = cmd.leader, list(cmd.isr), a.epoch + 1
        else:
            a.isr, a.isr_version = list(cmd.isr), a.isr_version + 1
        return SimpleNamespace(ok=True, error="")


def _state() -> Any:
    a = SimpleNamespace(
        leader="n1", replicas=["n1", "n2", "n3"], isr=["n1", "n2", "n3"], epoch=1, isr_version=1
    )
    return SimpleNamespace(streams={"S": a})


async def _run(ctl: Controller, seconds: float) -> None:
    ctl.start()
    await asyncio.sleep(seconds)
    await ctl.stop()


async def test_a_new_controller_waits_for_word_given_after_it_became_active() -> None:
    state = _state()
    raft = Raft(state)
    lost_before = {"n1"}  # n1's last heartbeat, from before activation, said "lost Raft"
    ctl = Controller(
        raft,
        state,
        alive=lambda n: n not in lost_before,
        unconfirmed=lambda n, since: n in lost_before,
    )
    await _run(ctl, 0.35)
    assert ctl.active and raft.proposed == []
    # The same verdict given after activation is acted on: n1 loses the stream.
    ctl2 = Controller(raft, state, alive=lambda n: n != "n1", unconfirmed=lambda n, since: False)
    await _run(ctl2, 0.35)
    assert [type(c) for c in raft.proposed] == [M.ElectLeader]
    assert raft.proposed[0].leader == "n2" and raft.proposed[0].expect_epoch == 1


async def test_no_decision_while_the_controllers_own_majority_is_quiet() -> None:
    state = _state()
    raft = Raft(state)
    contact = [False]
    ctl = Controller(raft, state, alive=lambda n: n != "n2", in_contact=lambda: contact[0])
    ctl.start()
    try:
        await asyncio.sleep(0.35)
        assert ctl.active and raft.proposed == []
        contact[0] = True
        ctl.poke()
        for _ in range(50):
            if raft.proposed:
                break
            await asyncio.sleep(0.02)
        assert [type(c) for c in raft.proposed] == [M.AlterIsr]
        assert raft.proposed[0].isr == ["n1", "n3"]
    finally:
        await ctl.stop()
