"""When a stream leader answers a follower's fetch: at once when there is a message to ship (even
one still in the open batch), after at most ``HW_LINGER`` when only the high-water mark moved
(and sooner, with the next message, when one comes), never in a loop when nothing moved, and
when its long poll runs out (one ticker task for every leader of the node).

A real ``Stream`` on a real ``FileStore``, a real ``StreamLeader``; the followers are fetch
requests handed to it directly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from jetlog.api.models import StreamConfigRequest
from jetlog.cluster import leaderfetch as fetch_mod
from jetlog.cluster.follower import StreamFollower
from jetlog.cluster.leader import StreamLeader
from jetlog.cluster.leaderfetch import HW_LINGER
from jetlog.cluster.ticker import _Ticker
from jetlog.log import FileStore
from jetlog.stream.config import normalize_stream_config, validate_stream_config
from jetlog.stream.stream import FOLLOWER, Stream
from jetlog.wire import repl as R
from tests.unit.test_stream_demote import Out


class Follower:
    """One follower's side of the exchange: its fetches and the replies they got."""

    def __init__(self, leader: StreamLeader, name: str) -> None:
        self.leader = leader
        self.name = name
        self.replies: list[tuple[R.FetchReply, bytes]] = []
        self.refused: list[int] = []
        self.pos: R.Pos = leader.store.log_end()
        self.hw = 0

    def fetch(self, wait_ms: int = 5000, eager_hw: bool = False, left_ms: int = R.LEFT_NONE) -> None:
        req = R.FetchRequest(
            stream="S",
            replica=self.name,
            epoch=1,
            pos=self.pos,
            hw=self.hw,
            max_bytes=1 << 20,
            wait_ms=wait_ms,
            eager_hw=eager_hw,
            left_ms=left_ms,
        )
        self.leader.handle_fetch(req, self._got)

    def _got(self, raw: bytes) -> None:
        head, body = R.decode_fetch_reply(raw)
        if head.code != R.OK:
            self.refused.append(head.code)  # NOT_LEADER when the leader stops
            return
        self.replies.append((head, body))
        # What the real follower reports next: everything it was sent (durable at once here).
        if body:
            self.pos = tuple(head.leo)  # type: ignore[assignment]
        self.hw = max(self.hw, head.hw)


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _until(cond, timeout: float = 2.0) -> float:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.001)
    return time.monotonic() - t0


async def _setup(
    tmp_path: Path,
    clock: Callable[[], float] = time.monotonic,
    prior_reply: float | None = None,
    on_quorum_lost: Callable[[], None] = lambda: None,
    segment_bytes: int | None = None,
) -> tuple[Stream, StreamLeader, Follower, Follower]:
    kw = {"segment_bytes": segment_bytes} if segment_bytes else {}
    store = await FileStore.open(str(tmp_path), auto_compact=False, **kw)
    cfg = validate_stream_config(normalize_stream_config(StreamConfigRequest(name="S", subjects=["s.>"])))
    stream = Stream(cfg, store, 0, Out())
    await stream.start(FOLLOWER)

    async def propose(*_: object) -> bool:
        return True

    leader = StreamLeader(
        stream,
        node="n1",
        epoch=1,
        replicas=["n1", "n2", "n3"],
        isr=["n1", "n2", "n3"],
        isr_version=1,
        min_insync=2,
        isr_lag_time=30.0,
        propose_isr=propose,
        max_payload=lambda: 1 << 20,
        fenced=lambda: False,
        clock=clock,
        prior_reply=prior_reply,
        on_quorum_lost=on_quorum_lost,
    )
    await stream.promote(1, leader)
    leader.start()
    return stream, leader, Follower(leader, "n2"), Follower(leader, "n3")


async def _close(stream: Stream, leader: StreamLeader) -> None:
    await leader.stop()
    await stream.close()


async def _shipped_once(stream: Stream, a: Follower, b: Follower) -> None:
    """Both followers caught up on m1 and in flight (fetched, answered, not asking again)."""
    a.fetch()
    b.fetch()
    await _turns()
    assert not a.replies and not b.replies, "nothing to ship: the fetches wait"
    stream.process("s.x", "", b"", b"m1")
    await _until(lambda: a.replies and b.replies)
    assert a.replies[-1][1] and b.replies[-1][1], "m1 shipped to both"


async def test_a_message_in_the_open_batch_is_shipped_to_a_fetch_that_arrives_after_it(
    tmp_path: Path,
) -> None:
    stream, leader, a, b = await _setup(tmp_path)
    try:
        await _shipped_once(stream, a, b)
        # m2 is stored while no fetch is parked (its wake-up reaches nobody), and the next
        # fetch arrives before anything sealed the batch: it must still get m2 at once.
        stream.process("s.x", "", b"", b"m2")
        before = len(a.replies)
        a.fetch()
        assert len(a.replies) == before + 1, "the fetch was parked with m2 waiting in the open batch"
        head, body = a.replies[-1]
        assert body and head.last[0] == 2, (head, len(body))
    finally:
        await _close(stream, leader)


async def test_a_moved_high_water_mark_alone_waits_for_the_linger(tmp_path: Path) -> None:
    stream, leader, a, b = await _setup(tmp_path)
    try:
        await _shipped_once(stream, a, b)
        await stream.store.flush()
        n = len(a.replies), len(b.replies)
        a.fetch()  # acknowledges m1
        b.fetch()  # acknowledges m1 too: the HW moves to 1
        assert leader.hw == 1
        await _turns()
        assert (len(a.replies), len(b.replies)) == n, "an HW move alone answered at once"
        took = await _until(lambda: len(a.replies) > n[0] and len(b.replies) > n[1])
        assert took < HW_LINGER + 1.0
        for f in (a, b):
            head, body = f.replies[-1]
            assert head.hw == 1 and not body
    finally:
        await _close(stream, leader)


async def test_the_linger_counts_from_when_each_fetch_was_parked(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A fetch parked just before the linger timer fires (armed by an earlier lagging fetch)
    is not answered with the HW alone by that timer: under a synchronous publisher each fetch
    waits one publish and the next message carries the HW."""
    linger = 0.4
    monkeypatch.setattr(fetch_mod, "HW_LINGER", linger)
    stream, leader, a, b = await _setup(tmp_path)
    try:
        await _shipped_once(stream, a, b)
        await stream.store.flush()
        a.fetch()
        b.fetch()  # both acknowledge m1: the HW moves, both parked lagging; the timer is armed
        assert leader.hw == 1
        await asyncio.sleep(linger / 2)
        n = len(a.replies), len(b.replies)
        stream.process("s.x", "", b"", b"m2")  # answers both with m2 (and HW 1)
        await _until(lambda: len(a.replies) > n[0] and len(b.replies) > n[1])
        await stream.store.flush()
        n = len(a.replies), len(b.replies)
        a.fetch()
        b.fetch()  # acknowledge m2: the HW moves to 2, both parked lagging again
        parked = time.monotonic()
        assert leader.hw == 2
        took = await _until(lambda: len(a.replies) > n[0] and len(b.replies) > n[1], timeout=5)
        # Not by the first timer (due linger/2 after the second park), but a linger after it.
        assert time.monotonic() - parked >= linger - 0.05, took
        for f in (a, b):
            head, body = f.replies[-1]
            assert head.hw == 2 and not body
    finally:
        await _close(stream, leader)


async def test_the_next_message_carries_the_moved_high_water_mark(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # A long linger: whatever the machine's load, the message comes first.
    monkeypatch.setattr(fetch_mod, "HW_LINGER", 30.0)
    stream, leader, a, b = await _setup(tmp_path)
    try:
        await _shipped_once(stream, a, b)
        await stream.store.flush()
        n = len(a.replies), len(b.replies)
        a.fetch()
        b.fetch()
        assert leader.hw == 1
        stream.process("s.x", "", b"", b"m2")  # before the linger runs out
        await _until(lambda: len(a.replies) > n[0] and len(b.replies) > n[1])
        for f in (a, b):
            head, body = f.replies[-1]
            assert head.hw == 1 and body and head.last[0] == 2, (head, len(body))
            assert len(f.replies) == n[0] + 1, "one reply for the HW and the message together"
    finally:
        await _close(stream, leader)


def _ticker_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "leader-ticker" and not t.done()]


async def test_one_ticker_task_runs_out_the_long_polls_of_every_leader(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    s1, l1, a1, _ = await _setup(tmp_path / "one")
    s2, l2, a2, _ = await _setup(tmp_path / "two")
    try:
        assert set(_Ticker.of(asyncio.get_running_loop()).leaders) == {l1, l2}
        assert len(_ticker_tasks()) == 1, "one task ticks every leader"

        def broken() -> None:
            raise RuntimeError("tick failed")

        monkeypatch.setattr(l1, "tick", broken)
        a1.fetch(wait_ms=50)
        a2.fetch(wait_ms=50)
        # Nothing to ship: the long polls end empty at a tick after their wait ran out, and a
        # leader whose tick fails does not stop the others'.
        await _until(lambda: bool(a2.replies), timeout=5)
        head, body = a2.replies[-1]
        assert not body and head.hw == 0
        assert not a1.replies
        await _close(s1, l1)
        assert a1.refused == [R.NOT_LEADER], "a stopped leader answers what it held"
        assert len(_ticker_tasks()) == 1, "the ticker runs while a leader is left"
    finally:
        await _close(s2, l2)
    await _turns()
    assert _ticker_tasks() == [], "the ticker task ends with the last leader"


async def test_a_follower_that_serves_reads_gets_hw_moves_at_once(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(fetch_mod, "HW_LINGER", 30.0)  # only eagerness can answer in time
    stream, leader, a, b = await _setup(tmp_path)
    try:
        await _shipped_once(stream, a, b)
        await stream.store.flush()
        n = len(a.replies), len(b.replies)
        a.fetch(eager_hw=True)  # parked: the HW has not moved yet
        await _turns()
        assert len(a.replies) == n[0]
        b.fetch()  # completes the commit: the eager follower hears of it at once, b does not
        await _until(lambda: len(a.replies) > n[0])
        assert a.replies[-1][0].hw == 1 and not a.replies[-1][1]
        await _turns()
        assert len(b.replies) == n[1]
        # A fetch that arrives eager with the HW already ahead of it is answered at once too.
        a.hw = 0
        a.fetch(eager_hw=True)
        assert a.replies[-1][0].hw == 1
    finally:
        await _close(stream, leader)


async def test_a_read_on_a_follower_asks_the_leader_for_the_high_water_mark(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(fetch_mod, "HW_LINGER", 30.0)
    stream, leader, a, b = await _setup(tmp_path / "leader")
    fstream = None
    try:
        await _shipped_once(stream, a, b)
        await stream.store.flush()
        a.fetch()
        b.fetch()
        assert leader.hw == 1  # committed on the leader; the followers have not heard
        # A follower replica holding m1 durably, its committed mark not yet moved.
        store = await FileStore.open(str(tmp_path / "follower"), auto_compact=False)
        cfg = validate_stream_config(normalize_stream_config(StreamConfigRequest(name="S", subjects=["s.>"])))
        fstream = Stream(cfg, store, 0, Out())
        asked: list[R.Request] = []

        async def request(subject: str, data: bytes, timeout: float) -> bytes:
            req, _ = R.decode_request(data)
            asked.append(req)
            assert isinstance(req, R.HwRequest)
            return leader.handle_hw(req)

        follower = StreamFollower(
            fstream,
            node="n2",
            leader="n1",
            epoch=1,
            subject="repl",
            request=request,
            max_payload=lambda: 1 << 20,
            consumer_dir=None,
        )
        await fstream.start(FOLLOWER, follower)
        fstream.append_verbatim(a.replies[0][1])
        await store.flush()
        assert fstream.committed_seq == 0 and store.last_seq == 1
        # A read waits for the committed mark: the follower asks, the leader answers, and the
        # read goes on long before the (30 s) linger would have told the follower.
        await asyncio.wait_for(fstream.wait_committed(timeout=10.0), 5.0)
        assert fstream.committed_seq == 1
        assert [type(r) for r in asked] == [R.HwRequest]
        await follower.stop()
        # A follower of another leadership is told so, not given this leader's mark.
        head, _ = R.decode_fetch_reply(leader.handle_hw(R.HwRequest(stream="S", replica="n2", epoch=2)))
        assert head.code == R.NOT_LEADER and head.hw == 0
    finally:
        if fstream is not None:
            await fstream.close()
        await _close(stream, leader)


def test_hw_requests_round_trip_and_a_stale_epoch_is_refused() -> None:
    req = R.HwRequest(stream="S", replica="n2", epoch=3)
    back, body = R.decode_request(R.encode(req))
    assert back == req and body == b""
    # An old leader decodes the new fetch field as unknown and ignores it; a new one reads it.
    f = R.FetchRequest(stream="S", replica="n2", epoch=3, pos=(1, 0), eager_hw=True)
    got, _ = R.decode_request(R.encode(f))
    assert isinstance(got, R.FetchRequest) and got.eager_hw is True


async def test_a_fetch_sent_before_a_pause_does_not_resume_deliveries(tmp_path: Path) -> None:
    now = [1000.0]
    stream, leader, a, b = await _setup(tmp_path, clock=lambda: now[0])
    try:
        await _shipped_once(stream, a, b)  # both followers answered at t=1000
        assert not leader.deliveries_held()
        assert leader.lease_until() == 1000.0 + leader.hold_after
        # The leader is frozen for 2 s (SIGSTOP): its followers move to a new leader. A fetch
        # one of them sent before that waited in the upstream server and arrives now.
        now[0] += 2.0
        assert leader.deliveries_held() and leader.lease_until() is None
        stream.process("s.x", "", b"", b"m2")
        a.fetch()  # stale: it answers the reply of t=1000
        assert a.replies[-1][1], "the stale fetch is answered (with m2)"
        assert leader.deliveries_held(), "a fetch sent before the pause resumed deliveries"
        # A follower that does still follow this leader answers that reply: evidence now.
        now[0] += 0.01
        a.fetch()
        assert not leader.deliveries_held()
        # The lease runs from the reply the fetch answers (sent at t=1002), not from the fetch.
        assert leader.lease_until() == 1002.0 + leader.hold_after
    finally:
        await _close(stream, leader)


async def test_a_new_leadership_waits_out_the_lease_of_the_previous_one(tmp_path: Path) -> None:
    """The previous leader delivers until ``hold_after`` (1 s here) after the last reply one of
    its followers got from it. This node followed it until t=999.5, so no delivery before 1000.5;
    follower n3 left it 300 ms before its first fetch here at t=1000.4, so none before 1001.1.
    Waiting out a lease is not a lost quorum, and fetches are still parked (no busy polling)."""
    now = [1000.0]
    lost: list[int] = []
    stream, leader, a, b = await _setup(
        tmp_path, clock=lambda: now[0], prior_reply=999.5, on_quorum_lost=lambda: lost.append(1)
    )
    try:
        assert leader.deliveries_held()
        a.fetch(left_ms=R.LEFT_NONE)  # n2 followed nobody else: no lease to wait for
        assert leader.fence_until == 1000.5
        now[0] = 1000.4
        b.fetch(left_ms=300)
        assert abs(leader.fence_until - 1001.1) < 1e-9
        await _turns()
        assert not a.replies and not b.replies, "held by a lease, fetches still wait"
        now[0] = 1001.0
        leader.tick()
        assert leader.deliveries_held() and not lost
        kicked: list[int] = []

        class Consumers:  # what the leader calls on the stream's consumer set
            def kick_all(self) -> None:
                kicked.append(1)

        now[0] = 1001.05
        stream.process("s.x", "", b"", b"m1")  # both answered, both fetch again: heard now
        await _until(lambda: a.replies and b.replies)
        a.fetch()
        b.fetch()
        assert leader.deliveries_held()
        stream.consumers = Consumers()  # type: ignore[assignment]
        now[0] = 1001.11
        leader.tick()
        assert not leader.deliveries_held()
        assert kicked == [1], "consumers are kicked when the lease runs out"
        assert not lost
    finally:
        stream.consumers = None
        await _close(stream, leader)


async def test_a_follower_that_does_not_say_when_it_left_counts_as_just_now(tmp_path: Path) -> None:
    """A follower from before ``left_ms`` existed: its first fetch at this leadership may come
    straight from the previous leader, so deliveries wait ``hold_after`` from it; its later
    fetches (it follows this leader by then) extend nothing."""
    now = [1000.0]
    stream, leader, a, b = await _setup(tmp_path, clock=lambda: now[0])
    try:
        assert not leader.deliveries_held(), "no previous leadership on record"
        a.fetch(left_ms=R.LEFT_UNKNOWN)
        assert leader.fence_until == 1001.0 and leader.deliveries_held()
        now[0] = 1000.5
        a.replies.clear()
        stream.process("s.x", "", b"", b"m1")
        await _until(lambda: a.replies)
        a.fetch(left_ms=R.LEFT_UNKNOWN)
        assert leader.fence_until == 1001.0
        now[0] = 1001.01
        b.fetch(left_ms=R.LEFT_NONE)
        assert not leader.deliveries_held()
    finally:
        await _close(stream, leader)


def test_left_ms_round_trips_and_defaults_to_unknown() -> None:
    req = R.FetchRequest(stream="S", replica="n2", epoch=3, pos=(1, 0), left_ms=250)
    got, _ = R.decode_request(R.encode(req))
    assert isinstance(got, R.FetchRequest) and got.left_ms == 250

    class OldFetch(msgspec.Struct, tag="fetch"):  # what a follower from before the field sends
        stream: str
        replica: str
        epoch: int
        pos: tuple[int, int]

    got, _ = R.decode_request(R.encode(OldFetch("S", "n2", 3, (1, 0))))
    assert isinstance(got, R.FetchRequest) and got.left_ms == R.LEFT_UNKNOWN


async def test_ack_confirmations_wait_out_the_previous_leaderships_lease(tmp_path: Path) -> None:
    """An AckSync reply (consumer-log records replicated) is not sent before the lease runs out:
    the previous leader may still redeliver the message from state without the ack."""
    t0 = time.monotonic()
    # hold_after 1.0: the lease runs until t0 + 0.8, which leaves the set-up (a store, a stream,
    # a promotion) 0.8 s even on a loaded machine (0.2 s was not always enough in make test).
    stream, leader, _a, _b = await _setup(tmp_path, prior_reply=t0 - 0.2)
    try:
        assert leader.deliveries_held()
        await leader.consumers_replicated(-1)  # replicated already: only the lease is left
        waited = time.monotonic() - t0
        assert 0.78 <= waited < 1.6, waited
        assert not leader.deliveries_held()
        t1 = time.monotonic()
        await leader.consumers_replicated(-1)
        assert time.monotonic() - t1 < 0.05, "no lease: no wait"
    finally:
        await _close(stream, leader)


async def test_a_leader_has_its_store_ship_before_an_inline_sync(tmp_path: Path) -> None:
    stream, leader, _, _ = await _setup(tmp_path)
    try:
        assert stream.store.ship_first
        leader.update_assignment(["n1"], ["n1"], 2)  # down to R1: no follower to wait for
        assert not stream.store.ship_first
        leader.update_assignment(["n1", "n2"], ["n1"], 3)
        assert stream.store.ship_first
    finally:
        await _close(stream, leader)
    assert not stream.store.ship_first


async def test_the_leader_compacts_nothing_a_follower_may_still_fetch(tmp_path: Path) -> None:
    """Compaction regroups a segment's batches, so a lagging follower's position inside it
    would no longer name the batch the follower holds (it could even name the rewritten
    segment's last batch and be served past a removal it never saw). The leader's store keeps
    compaction below every follower's position and the HW; once they have all moved past the
    dead records, compaction proceeds."""
    stream, leader, a, b = await _setup(tmp_path, segment_bytes=4096)
    store = leader.store
    try:
        assert store.compact_floor == 0, "no follower has fetched yet: nothing may be rewritten"
        a.fetch()
        b.fetch()
        stream.process("s.x", "", b"", b"m1" + bytes(3000))
        await _until(lambda: a.replies and b.replies)
        b.fetch()  # the leader now sees b at m1; b asks nothing more for a while
        for i in range(2, 8):
            stream.process("s.x", "", b"", b"m%d" % i + bytes(3000))  # a segment each
        leo = store.log_end()

        async def a_caught_up() -> None:
            while a.pos < leo:
                a.fetch()
                await _turns()

        await asyncio.wait_for(a_caught_up(), 5.0)
        a.fetch()  # reports it holds everything (parked: nothing new)
        assert len(store.segments) >= 6
        stream.delete_msg(3, False)
        stream.delete_msg(4, False)
        await store.flush()
        assert store.compact_floor == 1, "b reported m1: nothing from m2 on may be rewritten"
        await store.compact()
        assert not [s.base for s in store.segments if s.rewritten]

        async def b_caught_up() -> None:
            while b.pos < store.log_end() or leader.hw < 7:
                b.fetch()
                a.fetch()
                await _turns()

        await asyncio.wait_for(b_caught_up(), 5.0)
        assert store.compact_floor >= 5
        await store.compact()
        rewritten = [s.base for s in store.segments if s.rewritten]
        assert (
            rewritten and min(rewritten) <= 3 and max(s.last_seq for s in store.segments if s.rewritten) < 5
        )
    finally:
        await _close(stream, leader)


async def test_a_follower_counts_as_alive_while_it_fetches(tmp_path: Path) -> None:
    # A stepdown right after a start may come before the peers' heartbeats were heard; a
    # follower fetching from this leadership is alive all the same (``ClusterApi``'s stepdown
    # asks ``fetched_within`` beside the heartbeats).
    now = [500.0]
    stream, leader, a, _b = await _setup(tmp_path, clock=lambda: now[0])
    try:
        assert not leader.fetched_within("n2", 1.0), "made at the start of the leadership, not fetched"
        a.fetch()
        now[0] += 0.5
        assert leader.fetched_within("n2", 1.0)
        assert not leader.fetched_within("n3", 1.0)
        assert not leader.fetched_within("n4", 1.0)  # not a replica
        now[0] += 0.6
        assert not leader.fetched_within("n2", 1.0), "quiet for longer than the window"
    finally:
        await _close(stream, leader)
