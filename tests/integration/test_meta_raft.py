"""MetaRaft in one process: three real pysyncobj members on free loopback ports, real files.

Election, commits from any member, events, failover, restarts from journal and snapshot,
snapshot install to a wiped member, secret mismatch, partitions, leadership transfer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jetlog.cluster.journal import RaftJournal
from jetlog.cluster.meta import Barrier, CreateStream, ElectLeader, MetaState, encode_envelope
from jetlog.cluster.raft import (
    Applied,
    LeaderChanged,
    MetaEvent,
    MetaNotLeaderError,
    MetaRaft,
    MetaRaftError,
    MetaUnavailableError,
)
from jetlog.cluster.raftfiles import MetaIdentityError
from jetlog.config import Cluster, NodeConfig

NAMES = ["n1", "n2", "n3"]
FORKS = [0]
os.register_at_fork(before=lambda: FORKS.__setitem__(0, FORKS[0] + 1))


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Trio:
    """Three members; ``start``/``stop`` individually; every wait is bounded."""

    def __init__(self, root: str, secret: str = "s3cret") -> None:
        self.root = root
        self.members = {n: f"127.0.0.1:{p}" for n, p in zip(NAMES, free_ports(3), strict=True)}
        self.secret = secret
        self.nodes: dict[str, MetaRaft] = {}
        self.queues: dict[str, asyncio.Queue[MetaEvent]] = {}

    def dir(self, name: str) -> str:
        return os.path.join(self.root, name)

    async def start(self, name: str, secret: str | None = None, **kw: Any) -> MetaRaft:
        m = MetaRaft(
            name,
            self.members,
            self.members[name],
            self.secret if secret is None else secret,
            self.dir(name),
            MetaState(),
            **kw,
        )
        self.queues[name] = m.subscribe()
        await m.start()
        self.nodes[name] = m
        return m

    async def start_all(self) -> None:
        await asyncio.gather(*(self.start(n) for n in NAMES))

    async def stop(self, name: str) -> None:
        await self.nodes.pop(name).stop()

    async def stop_all(self) -> None:
        await asyncio.gather(*(m.stop() for m in self.nodes.values()))
        self.nodes.clear()

    async def agreed_leader(
        self, timeout: float = 5.0, among: list[str] | None = None, exclude: str | None = None
    ) -> str:
        """Wait until the running members (or ``among``) agree on a leader (not ``exclude``)."""
        names = among or list(self.nodes)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen = {self.nodes[n].leader() for n in names}
            if len(seen) == 1:
                ld = seen.pop()
                if ld is not None and ld != exclude and ld in self.nodes and self.nodes[ld].is_leader:
                    return ld
            await asyncio.sleep(0.01)
        raise AssertionError(f"no agreed leader: {[self.nodes[n].status() for n in names]}")

    def hashes(self) -> set[str]:
        return {m.state.state_hash() for m in self.nodes.values()}

    async def converged(self, timeout: float = 5.0) -> str:
        """Barrier on every member, then one state hash everywhere."""
        await asyncio.gather(*(m.barrier(timeout) for m in self.nodes.values()))
        deadline = time.monotonic() + timeout
        while len(self.hashes()) != 1:
            assert time.monotonic() < deadline, "states did not converge"
            await asyncio.sleep(0.01)
        return self.hashes().pop()


def tick_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if "_autoTickThread" in t.name]


@pytest.fixture
async def trio(tmp_path) -> AsyncIterator[Trio]:  # type: ignore[no-untyped-def]
    t = Trio(str(tmp_path))
    try:
        yield t
    finally:
        await t.stop_all()
    assert tick_threads() == [], "a stopped MetaRaft left its tick thread running"


def cs(name: str, leader: str = "n1") -> CreateStream:
    return CreateStream(name=name, config=b"{}", created=1, replicas=NAMES, leader=leader)


def drain(q: asyncio.Queue[MetaEvent]) -> list[MetaEvent]:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


# ------------------------------------------------------------------------------ tests
@pytest.mark.timeout(60)
async def test_election_commit_from_a_follower_and_events(trio: Trio) -> None:
    await trio.start_all()
    leader = await trio.agreed_leader()
    await asyncio.gather(*(m.wait_ready(5) for m in trio.nodes.values()))
    follower = next(n for n in NAMES if n != leader)
    res = await trio.nodes[follower].propose(cs("S", leader=follower))
    assert res.ok and res.epoch == 1 and res.index > 1
    for m in trio.nodes.values():
        await m.wait_applied(res.index)
        sa = m.state.get("S")
        assert sa is not None and (sa.leader, sa.isr) == (follower, NAMES)
    await trio.converged()
    for name, q in trio.queues.items():
        events = drain(q)
        applied = [e for e in events if isinstance(e, Applied)]
        assert Applied(res.index, ("S",)) in applied, name
        assert [e.index for e in applied] == sorted(e.index for e in applied), "not in log order"
        changes = [e for e in events if isinstance(e, LeaderChanged)]
        assert changes and changes[-1].leader == leader and changes[-1].is_leader == (name == leader)
    st = trio.nodes[leader].status()
    assert st["role"] == "leader" and st["leader"] == leader and st["has_quorum"] is True
    assert all(v.get("connected", True) for v in st["members"].values())
    assert st["commit_index"] >= res.index and st["applied_index"] >= res.index
    for m in trio.nodes.values():
        assert m.seconds_since_leader_contact() < 1.0
        assert m.term == trio.nodes[leader].term


@pytest.mark.timeout(60)
async def test_same_request_id_is_applied_once(trio: Trio) -> None:
    await trio.start_all()
    leader = await trio.agreed_leader()
    m = trio.nodes[leader]
    assert (await m.propose(cs("S"))).ok
    raw = encode_envelope(ElectLeader(name="S", leader="n2", isr=NAMES, expect_epoch=1), "req-1", 0)
    first = await m._propose_raw(raw, 3.0)
    again = await trio.nodes[next(n for n in NAMES if n != leader)]._propose_raw(raw, 3.0)
    assert first.ok and again == first
    assert m.state.get("S").epoch == 2  # type: ignore[union-attr]


@pytest.mark.timeout(60)
async def test_leader_stop_failover_and_restart_catches_up(trio: Trio) -> None:
    await trio.start_all()
    old = await trio.agreed_leader()
    assert (await trio.nodes[old].propose(cs("A"))).ok
    t0 = time.monotonic()
    await trio.stop(old)
    new = await trio.agreed_leader(timeout=5)
    failover = time.monotonic() - t0
    assert new != old and failover < 3.0
    res = await trio.nodes[next(iter(trio.nodes))].propose(cs("B"))
    assert res.ok
    back = await trio.start(old)
    await back.wait_ready(5)
    assert sorted(back.state.streams) == ["A", "B"]
    await trio.converged()


@pytest.mark.timeout(90)
async def test_restart_all_from_journal_and_snapshot(trio: Trio) -> None:
    forks = FORKS[0]
    await trio.start_all()
    leader = await trio.agreed_leader()
    for i in range(30):
        assert (await trio.nodes[NAMES[i % 3]].propose(cs(f"s{i:02d}"))).ok
    await trio.converged()
    for m in trio.nodes.values():
        m.force_compaction()
    deadline = time.monotonic() + 10
    while not all(os.path.exists(os.path.join(trio.dir(n), "raft", "dump")) for n in NAMES):
        assert time.monotonic() < deadline, "no snapshot written"
        await asyncio.sleep(0.02)
    for i in range(30, 45):
        assert (await trio.nodes[leader].propose(cs(f"s{i:02d}"))).ok
    h = await trio.converged()
    streams = dict(trio.nodes[leader].state.streams)
    await trio.stop_all()
    await trio.start_all()
    await trio.agreed_leader()
    await asyncio.gather(*(m.wait_ready(5) for m in trio.nodes.values()))
    for name, m in trio.nodes.items():
        assert m.state.streams == streams, name
        events = drain(trio.queues[name])
        resets = [e for e in events if isinstance(e, Applied) and e.reset]
        assert resets and "s00" in resets[0].changed, f"{name} did not load its snapshot"
    assert await trio.converged() != h  # the barriers moved applied_index; content is equal above
    assert FORKS[0] == forks, "pysyncobj forked (the custom serializer must run in-process)"


@pytest.mark.timeout(90)
async def test_wiped_follower_needs_rejoin_and_gets_a_snapshot(trio: Trio) -> None:
    await trio.start_all()
    leader = await trio.agreed_leader()
    for i in range(20):
        assert (await trio.nodes[leader].propose(cs(f"s{i:02d}"))).ok
    await trio.converged()
    for m in trio.nodes.values():
        m.force_compaction()
    victim = next(n for n in NAMES if n != leader)
    deadline = time.monotonic() + 10
    while not os.path.exists(os.path.join(trio.dir(leader), "raft", "dump")):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)  # the compaction cuts the leader's log on the tick after the dump
    await trio.stop(victim)
    shutil.rmtree(os.path.join(trio.dir(victim), "raft"))
    with pytest.raises(MetaIdentityError, match="rejoin"):
        await trio.start(victim)
    m = await trio.start(victim, rejoin=True)
    await m.wait_ready(10)
    assert len(m.state.streams) == 20
    assert any(isinstance(e, Applied) and e.reset for e in drain(trio.queues[victim]))
    await trio.converged()


@pytest.mark.timeout(60)
async def test_torn_journal_tail_on_a_member_is_harmless(trio: Trio) -> None:
    await trio.start_all()
    leader = await trio.agreed_leader()
    for i in range(10):
        assert (await trio.nodes[leader].propose(cs(f"s{i}"))).ok
    await trio.converged()
    victim = next(n for n in NAMES if n != leader)
    await trio.stop(victim)
    path = os.path.join(trio.dir(victim), "raft", "journal")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 7)  # an append cut by a crash
    m = await trio.start(victim)
    await m.wait_ready(10)
    await trio.converged()
    assert len(m.state.streams) == 10 and m.status()["wedged"] is False


@pytest.mark.timeout(60)
async def test_secret_mismatch_is_refused(trio: Trio) -> None:
    await trio.start("n1")
    await trio.start("n2")
    intruder = await trio.start("n3", secret="wrong")
    leader = await trio.agreed_leader(among=["n1", "n2"])
    assert (await trio.nodes[leader].propose(cs("S"))).ok
    with pytest.raises(MetaUnavailableError):
        await intruder.propose(Barrier(), timeout=1.0)
    assert intruder.leader() is None and not intruder.state.streams
    st = intruder.status()
    assert st["has_quorum"] is False
    assert not any(v.get("connected") for n, v in st["members"].items() if n != "n3")
    assert trio.nodes[leader].status()["members"]["n3"]["connected"] is False


async def test_settings_are_checked_before_anything_starts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    members = {"n1": "127.0.0.1:1", "n2": "127.0.0.1:2"}
    with pytest.raises(MetaRaftError, match="secret is required"):
        MetaRaft("n1", members, "127.0.0.1:1", "", str(tmp_path), MetaState())
    with pytest.raises(MetaRaftError, match="not among"):
        MetaRaft("n9", members, "127.0.0.1:1", "x", str(tmp_path), MetaState())
    with pytest.raises(MetaRaftError, match="invalid metadata Raft settings"):
        MetaRaft("n1", members, "127.0.0.1:1", "x", str(tmp_path), MetaState(), conf={"raftMinTimeout": 0.01})
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    addr = f"127.0.0.1:{busy.getsockname()[1]}"
    try:
        m = MetaRaft("n1", {"n1": addr}, addr, "", str(tmp_path / "b"), MetaState())
        with pytest.raises(MetaRaftError, match="cannot bind"):
            await m.start()
    finally:
        busy.close()
    # A failed first start leaves no IDENTITY behind (else the next start would look like a
    # member that lost its Raft state and be refused).
    assert not (tmp_path / "b" / "IDENTITY").exists()


@pytest.mark.timeout(60)
async def test_single_member_needs_no_secret_and_leads_itself(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (port,) = free_ports(1)
    addr = f"127.0.0.1:{port}"
    m = MetaRaft("solo", {"solo": addr}, addr, "", str(tmp_path), MetaState())
    await m.start()
    try:
        await m.wait_ready(5)
        assert m.is_leader and m.leader() == "solo" and m.seconds_since_leader_contact() == 0.0
        assert (
            await m.propose(CreateStream(name="S", config=b"{}", created=1, replicas=["solo"], leader="solo"))
        ).ok
    finally:
        await m.stop()
    assert tick_threads() == []


@pytest.mark.timeout(60)
async def test_concurrent_proposals_from_every_member(trio: Trio, caplog: pytest.LogCaptureFixture) -> None:
    await trio.start_all()
    await trio.agreed_leader()
    caplog.set_level(logging.WARNING, logger="pysyncobj")
    # A generous deadline: this checks correctness under concurrency, not speed on a busy box.
    results = await asyncio.gather(
        *(trio.nodes[NAMES[i % 3]].propose(cs(f"c{i:03d}"), timeout=20) for i in range(240))
    )
    assert all(r.ok for r in results)
    assert len({r.index for r in results}) == 240
    await trio.converged()
    assert len(trio.nodes["n1"].state.streams) == 240
    # Late acks must not make the leader re-send, and followers truncate, acknowledged entries.
    assert not [r for r in caplog.records if "truncating" in r.getMessage()]


@pytest.mark.timeout(60)
async def test_transfer_leadership_to_a_named_member(trio: Trio) -> None:
    await trio.start_all()
    leader = await trio.agreed_leader()
    await trio.converged()
    target = next(n for n in NAMES if n != leader)
    with pytest.raises(MetaNotLeaderError):
        await trio.nodes[target].transfer_leadership(None)
    assert await trio.nodes[leader].transfer_leadership(target) == target
    assert await trio.agreed_leader() == target
    assert (await trio.nodes[leader].propose(cs("after"))).ok


@pytest.mark.timeout(60)
async def test_silently_partitioned_leader_fences_itself(trio: Trio) -> None:
    await trio.start_all()
    old = await trio.agreed_leader()
    assert (await trio.nodes[old].propose(cs("S"))).ok
    others = [n for n in NAMES if n != old]
    trio.nodes[old]._drop.update(trio.members[n] for n in others)
    t0 = time.monotonic()
    new = await trio.agreed_leader(among=others, timeout=5, exclude=old)
    elected = time.monotonic() - t0
    # The cut-off leader must learn it may no longer act within the node timeout (1 s) or so.
    deadline = time.monotonic() + 5
    while trio.nodes[old].seconds_since_leader_contact() < 1.0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    with pytest.raises(MetaUnavailableError):
        await trio.nodes[old].propose(cs("lost"), timeout=1.0)
    assert (await trio.nodes[new].propose(cs("T"))).ok
    trio.nodes[old]._drop.clear()
    await trio.agreed_leader(timeout=5)
    await trio.converged()
    assert "lost" not in trio.nodes[new].state.streams and elected < 3.0


@pytest.mark.timeout(60)
async def test_wedge_detector_fires_on_an_unappliable_committed_entry(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    (port,) = free_ports(1)
    addr = f"127.0.0.1:{port}"
    m = MetaRaft("solo", {"solo": addr}, addr, "", str(tmp_path), MetaState())
    await m.start()
    await m.wait_ready(5)
    await m.stop()
    # A checksum-valid entry pysyncobj cannot decode (what a bug or a foreign writer could leave):
    # every tick raises on it, nothing after it is ever applied.
    j = RaftJournal(os.path.join(str(tmp_path), "raft", "journal"))
    _, idx, term = j[-1]
    j.add(b"\x00not a pickle", idx + 1, term)
    j._destroy()
    m = MetaRaft("solo", {"solo": addr}, addr, "", str(tmp_path), MetaState())
    m._wedge_after, m._wedge_every = 0.3, 0.05
    caplog.set_level(logging.ERROR, logger="jetlog.cluster.raft")
    await m.start()
    try:
        deadline = time.monotonic() + 10
        while not m.status()["wedged"]:
            assert time.monotonic() < deadline, "wedge not detected"
            await asyncio.sleep(0.05)
        assert any("WEDGED" in r.getMessage() for r in caplog.records)
        with pytest.raises(MetaUnavailableError):
            await m.propose(Barrier(), timeout=0.5)
    finally:
        await m.stop()
    assert tick_threads() == []


@pytest.mark.timeout(60)
async def test_from_config(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    (port,) = free_ports(1)
    monkeypatch.setenv("JETLOG_CLUSTER_SECRET", "from-env")
    cfg = NodeConfig(
        name="a", data_dir=str(tmp_path), cluster=Cluster(name="prod", peers=[f"a@127.0.0.1:{port}"])
    )
    m = MetaRaft.from_config(cfg, MetaState())
    assert (m.name, m.cluster, m._secret, m._bind) == ("a", "prod", "from-env", f"127.0.0.1:{port}")
    await m.start()
    try:
        await m.wait_ready(5)
        assert m.leader() == "a"
    finally:
        await m.stop()
    assert b'"cluster":"prod"' in (tmp_path / "IDENTITY").read_bytes()
