"""Metadata a node could not apply is applied again on the next pass, not only at the next
change: chaos seed 20261391 had a node named stream leader lose its leaf link while it started
capturing, log "cannot apply the cluster metadata" and never lead, its followers waiting for
good ("replicas not current 20s after healing")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from jetlog.api.models import StreamConfigRequest
from jetlog.cluster import meta as M
from jetlog.cluster import reconcile as R
from jetlog.cluster.reconcile import Reconciler
from jetlog.errors import TransportError
from jetlog.log import FileStore
from jetlog.stream.config import normalize_stream_config, validate_stream_config
from jetlog.stream.stream import FOLLOWER, LEADER, Stream
from tests.unit.test_stream_demote import Out


class _Leader:
    def __init__(self) -> None:
        self.started = 0
        self.stopped = 0

    def start(self) -> None:
        self.started += 1

    async def stop(self) -> None:
        self.stopped += 1

    def update_assignment(self, *_: Any) -> None:
        return None


class _Streams:
    """The stream manager's part the reconciler uses, around one real stream."""

    def __init__(self, stream: Stream, capture_failures: int) -> None:
        self.stream = stream
        self.capture_failures = capture_failures
        self.capturing: set[str] = set()
        self.attached = 0
        self.detached = 0
        self.offline: dict[str, str] = {}

    def get(self, name: str) -> Stream | None:
        return self.stream if name == self.stream.name else None

    def local_names(self) -> list[str]:
        return [self.stream.name]

    async def capture_on(self, stream: Stream) -> None:
        self.capturing.add(stream.name)
        if self.capture_failures:
            self.capture_failures -= 1
            raise TransportError("leaf link connection lost")

    def capture_off(self, name: str) -> None:
        self.capturing.discard(name)

    async def attach(self, stream: Stream) -> None:
        self.attached += 1

    async def detach(self, stream: Stream) -> None:
        self.detached += 1


class _Follower(_Leader):
    async def start(self) -> None:  # type: ignore[override]
        self.started += 1


class _Raft:
    """Commits an election at once into the assignment, as the metadata FSM would."""

    def __init__(self, a: Any) -> None:
        self.a = a
        self.proposed: list[Any] = []

    async def propose(self, cmd: Any, timeout: float = 3.0) -> Any:
        self.proposed.append(cmd)
        assert isinstance(cmd, M.ElectLeader) and cmd.expect_epoch == self.a.epoch
        self.a.leader, self.a.isr, self.a.epoch = cmd.leader, list(cmd.isr), self.a.epoch + 1
        return SimpleNamespace(ok=True, error="")


async def _setup(
    tmp_path: Path,
    failures: int,
    clock: Any = None,
    alive: Any = lambda _n: True,
) -> tuple[Reconciler, _Streams, list[_Leader], Stream]:
    store = await FileStore.open(str(tmp_path), auto_compact=False)
    cfg = validate_stream_config(normalize_stream_config(StreamConfigRequest(name="S", subjects=["s.>"])))
    stream = Stream(cfg, store, 0, Out())
    await stream.start(FOLLOWER)
    streams = _Streams(stream, failures)
    a = SimpleNamespace(
        replicas=["n1", "n2", "n3"],
        leader="n1",
        epoch=4,
        isr=["n1", "n2", "n3"],
        isr_version=1,
        config=b"{}",
        created=stream.created,
    )
    leaders: list[_Leader] = []

    def make_leader(_stream: Any, _a: Any) -> _Leader:
        leaders.append(_Leader())
        return leaders[-1]

    rec = Reconciler(
        "n1",
        SimpleNamespace(streams={"S": a}),
        streams,
        raft=_Raft(a),
        alive=alive,
        decode_config=lambda _b: cfg,
        make_leader=make_leader,
        make_follower=lambda *_: _Follower(),
        **({"clock": clock} if clock is not None else {}),
    )
    return rec, streams, leaders, stream


async def test_a_leader_that_failed_to_start_is_started_on_the_next_pass(tmp_path: Path) -> None:
    rec, streams, leaders, stream = await _setup(tmp_path, failures=2)
    try:
        await rec.reconcile("S")  # the link drops while capture starts
        assert rec.pending() == ["S"] and "S" not in rec.roles and rec.unapplied("S")
        assert streams.capturing == set() and leaders[-1].started == 0  # nothing half started
        await rec.reconcile("S")  # still down
        assert rec.pending() == ["S"] and "S" not in rec.roles
        await rec.reconcile("S")  # back: what service._periodic does every second
        assert rec.pending() == [] and rec.roles["S"].kind == "leader" and rec.roles["S"].epoch == 4
        assert not rec.unapplied("S")
        assert streams.capturing == {"S"} and leaders[-1].started == 1 and len(leaders) == 3
        assert stream.role == LEADER and stream.repl is leaders[-1]
        # The epoch was begun once, where the first attempt began it.
        assert [e for e, _ in stream.store.epochs()] == [4]
    finally:
        await stream.close()


async def test_promoting_again_at_the_same_epoch_does_not_begin_it_twice(tmp_path: Path) -> None:
    _rec, _streams, _leaders, stream = await _setup(tmp_path, failures=0)
    try:
        first, second = _Leader(), _Leader()
        await stream.promote(4, first)  # type: ignore[arg-type]
        start = stream.store.epochs()
        await stream.promote(4, second)  # type: ignore[arg-type]
        assert stream.store.epochs() == start and stream.repl is second
        await stream.promote(5, first)  # type: ignore[arg-type]  # a new epoch is begun as before
        assert stream.store.epochs()[-1][0] == 5
    finally:
        await stream.close()


async def test_a_leader_that_cannot_start_for_long_hands_the_stream_over(tmp_path: Path) -> None:
    """Alive but unable to lead one stream (a lasting failure): after ``HAND_OVER_AFTER``
    another live in-sync replica is elected and this node leaves the ISR, so the stream is
    served again; the node then follows."""
    now = [100.0]
    rec, streams, leaders, stream = await _setup(tmp_path, failures=10**6, clock=lambda: now[0])
    raft = rec.raft
    try:
        for _ in range(5):  # one try a second (service._periodic), every one failing
            await rec.reconcile("S")
            now[0] += 1.0
        assert raft.proposed == [] and rec.pending() == ["S"]  # 4 s in: still trying
        await rec.reconcile("S")  # 5 s after the first failure
        assert raft.proposed == [M.ElectLeader(name="S", leader="n2", isr=["n2", "n3"], expect_epoch=4)]
        assert streams.capturing == set() and all(ldr.started == 0 for ldr in leaders)
        await rec.reconcile("S")  # the election applied: this node follows n2 at epoch 5
        role = rec.roles["S"]
        assert (role.kind, role.leader, role.epoch) == ("follower", "n2", 5) and role.obj.started == 1
        assert rec.pending() == [] and stream.role == FOLLOWER and len(raft.proposed) == 1
    finally:
        await stream.close()


async def test_with_no_other_live_in_sync_replica_the_leader_keeps_trying(tmp_path: Path) -> None:
    now = [0.0]
    rec, _streams, _leaders, stream = await _setup(
        tmp_path, failures=10**6, clock=lambda: now[0], alive=lambda n: n == "n1"
    )
    try:
        for _ in range(3 * int(R.HAND_OVER_AFTER)):
            await rec.reconcile("S")
            now[0] += 1.0
        assert rec.raft.proposed == [] and rec.pending() == ["S"] and rec.state.streams["S"].leader == "n1"
    finally:
        await stream.close()
