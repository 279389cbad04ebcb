"""A fenced stream leader holds the publishes it captures (``stream/held.py``): in arrival
order, for at most ``HOLD_MAX`` seconds and ``HOLD_BYTES``; handled first, as if just arrived,
once the fence lifts (on the next capture or the leader's tick); dropped at a demotion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetlog.api.models import StreamConfigRequest
from jetlog.errors import ApiError, E
from jetlog.log import FileStore
from jetlog.stream import stream as stream_mod
from jetlog.stream.config import normalize_stream_config, validate_stream_config
from jetlog.stream.held import HOLD_BYTES, HOLD_MAX, NODE_HOLD_BYTES, HeldCaptures, HoldBudget
from jetlog.stream.stream import LEADER, Stream
from jetlog.wire import leaf as wire
from tests.unit.test_stream_demote import NoQuorum, Out

# ---- the hold itself (pure) -----------------------------------------------------------------


def test_held_captures_keep_order_and_count() -> None:
    h = HeldCaptures()
    assert not h and len(h) == 0
    for i in range(3):
        assert h.hold(10.0 + i * 0.1, f"s.{i}", f"_INBOX.{i}", b"", b"m%d" % i)
    assert len(h) == 3 and h.held == 3 and h.dropped == 0
    assert h.expire(10.5) == []
    got = h.take()
    assert [(s, r, d) for _, s, r, _, d in got] == [(f"s.{i}", f"_INBOX.{i}", b"m%d" % i) for i in range(3)]
    assert not h and h.held == 3 and h.dropped == 0


def test_held_captures_expire_after_hold_max() -> None:
    h = HeldCaptures()
    h.hold(0.0, "s.a", None, b"", b"old")
    h.hold(1.0, "s.a", None, b"", b"newer")
    assert h.expire(HOLD_MAX) == []  # exactly HOLD_MAX old: still kept
    assert [d for *_, d in h.expire(HOLD_MAX + 0.5)] == [b"old"]
    assert [d for *_, d in h.take()] == [b"newer"]
    assert h.dropped == 1 and h.held == 2
    h.hold(0.0, "s.a", None, b"", b"x")
    assert len(h.expire(HOLD_MAX + 1.0)) == 1 and h.take() == [] and h.dropped == 2


def test_held_captures_refuse_past_the_byte_bound_and_clear() -> None:
    h = HeldCaptures()
    big = b"x" * (HOLD_BYTES // 2)
    assert h.hold(0.0, "s.a", None, b"", big)
    assert h.hold(0.0, "s.a", None, b"", big)
    assert not h.hold(0.0, "s.a", None, b"h", b"")  # one byte over
    assert len(h) == 2 and h.dropped == 1
    assert h.clear() == 2 and not h and h.dropped == 3
    assert h.hold(0.0, "s.a", None, b"", big)  # the bytes were given back


def test_the_streams_of_a_node_share_one_byte_budget() -> None:
    budget = HoldBudget(limit=100)
    a, b = HeldCaptures(budget), HeldCaptures(budget)
    assert a.hold(0.0, "a.x", None, b"", b"x" * 60)
    assert not b.hold(0.0, "b.x", None, b"", b"y" * 41)  # each under its own bound, the node over
    assert b.hold(0.0, "b.x", None, b"", b"y" * 40) and budget.used == 100
    assert a.clear() == 1 and budget.used == 40  # a demotion gives its bytes back
    assert b.hold(0.0, "b.x", None, b"h", b"y" * 59) and budget.used == 100
    assert len(b.expire(HOLD_MAX + 1.0)) == 2 and budget.used == 0
    assert HeldCaptures()._budget.limit == NODE_HOLD_BYTES  # alone: a budget of its own


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2), st.sampled_from(["hold", "expire", "take", "clear"]), st.integers(0, 50)
        ),
        max_size=60,
    )
)
def test_the_node_budget_is_always_what_its_streams_hold(ops: list[tuple[int, str, int]]) -> None:
    budget = HoldBudget(limit=120)
    streams = [HeldCaptures(budget) for _ in range(3)]
    t = 0.0
    for i, op, size in ops:
        h = streams[i]
        t += 1.0
        if op == "hold":
            node_before, stream_before = budget.used, h._bytes
            kept = h.hold(t, "s.x", None, b"", b"x" * size)
            assert kept == (node_before + size <= 120 and stream_before + size <= HOLD_BYTES)
        elif op == "expire":
            h.expire(t)
        elif op == "take":
            h.take()
        else:
            h.clear()
        assert budget.used == sum(x._bytes for x in streams) <= 120
        assert all(x._bytes == sum(len(d) for *_, d in x._q) for x in streams)


@given(st.lists(st.tuples(st.floats(0, 2.0), st.binary(max_size=8)), max_size=40), st.floats(0, 10.0))
def test_expire_then_take_split_the_held_in_order(steps: list[tuple[float, bytes]], later: float) -> None:
    h = HeldCaptures()
    t = 0.0
    gone: list[bytes] = []
    for dt, data in steps:
        t += dt
        gone += [d for *_, d in h.expire(t)]  # as ``Stream._hold`` does before each hold
        assert h.hold(t, "s.a", None, b"", data)
    now = t + later
    gone += [d for *_, d in h.expire(now)]
    kept = [d for *_, d in h.take()]
    assert gone + kept == [d for _, d in steps]  # nothing lost, nothing reordered
    assert h.held == len(steps) and h.dropped == len(gone)


# ---- a stream leader --------------------------------------------------------------------------


class Fence(NoQuorum):
    """A leader's replication side whose followers confirm at once; fenced at will, and
    ``alone`` (no other member heard) at will."""

    def __init__(self, stream: Stream) -> None:
        super().__init__()
        self.stream = stream
        self.is_fenced = False
        self.alone = False

    def unanswered_error(self) -> ApiError | None:
        return E.CLUSTER_NOT_AVAIL() if self.alone else None

    def on_durable(self, seq: int) -> None:
        self.stream.advance(seq)

    def fenced(self) -> bool:
        return self.is_fenced


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(stream_mod, "monotonic", lambda: now[0])
    return now


async def _leader(tmp_path: Path) -> tuple[Stream, Fence, Out]:
    store = await FileStore.open(str(tmp_path), syncer="thread", auto_compact=False)
    out = Out()
    cfg = validate_stream_config(normalize_stream_config(StreamConfigRequest(name="S", subjects=["s.>"])))
    stream = Stream(cfg, store, 0, out, clock=lambda: 5_000)
    await stream.start()
    fence = Fence(stream)
    stream.role, stream.repl = LEADER, fence
    return stream, fence, out


async def _acked(stream: Stream, out: Out, n: int) -> list[tuple[str, int]]:
    await stream.store.flush()
    assert len(out.sent) == n, out.sent
    return [(subject, msgspec.json.decode(body)["seq"]) for subject, body in out.sent]


def _ev(i: int) -> Any:
    return (wire.MSG, "s.a", f"_INBOX.{i}", b"", b"m%d" % i, ())


async def test_a_fenced_leader_holds_then_handles_in_arrival_order(
    tmp_path: Path, clock: list[float]
) -> None:
    stream, fence, out = await _leader(tmp_path)
    stream.process("s.a", "_INBOX.0", b"", b"m0")
    fence.is_fenced = True
    stream.process("s.a", "_INBOX.1", b"", b"m1")
    stream.process_run([_ev(2), _ev(3)])
    assert stream.store.last_seq == 1 and len(stream.held) == 3 and stream.held.held == 3
    fence.is_fenced = False
    # The next capture (a run here) goes behind the held ones.
    stream.process_run([_ev(4), _ev(5)])
    assert not stream.held
    acks = await _acked(stream, out, 6)
    assert acks == [(f"_INBOX.{i}", i + 1) for i in range(6)]
    assert [stream.store.load(s).data for s in range(1, 7)] == [b"m%d" % i for i in range(6)]
    assert stream.stats.received == 6 and stream.held.dropped == 0
    stream.repl = None
    await stream.close()


async def test_the_tick_releases_held_publishes_without_a_new_capture(
    tmp_path: Path, clock: list[float]
) -> None:
    stream, fence, out = await _leader(tmp_path)
    fence.is_fenced = True
    stream.process("s.a", "_INBOX.0", b"", b"m0")
    stream.release_held()  # still fenced: nothing happens
    assert len(stream.held) == 1 and stream.store.last_seq == 0
    fence.is_fenced = False
    clock[0] += HOLD_MAX - 0.1
    stream.release_held()
    assert await _acked(stream, out, 1) == [("_INBOX.0", 1)]
    stream.repl = None
    await stream.close()


async def test_held_too_long_is_dropped_unanswered(tmp_path: Path, clock: list[float]) -> None:
    stream, fence, out = await _leader(tmp_path)
    fence.is_fenced = True
    stream.process("s.a", "_INBOX.0", b"", b"old")
    clock[0] += HOLD_MAX / 2
    stream.process("s.a", "_INBOX.1", b"", b"newer")
    clock[0] += HOLD_MAX / 2 + 0.1
    stream.release_held()  # a tick while fenced: only drops the one held too long
    assert len(stream.held) == 1 and stream.held.dropped == 1
    fence.is_fenced = False
    stream.process("s.a", "_INBOX.2", b"", b"now")
    assert await _acked(stream, out, 2) == [("_INBOX.1", 1), ("_INBOX.2", 2)]
    stream.repl = None
    await stream.close()


async def test_held_too_long_is_refused_when_no_other_member_is_heard(
    tmp_path: Path, clock: list[float]
) -> None:
    # The whole cluster lost Raft: nobody else can answer, so a publish that cannot wait any
    # longer gets "temporarily unavailable" (what it got at once before the hold).
    stream, fence, out = await _leader(tmp_path)
    fence.is_fenced = fence.alone = True
    stream.process("s.a", "_INBOX.0", b"", b"old")
    stream.process("s.a", None, b"", b"no reply")
    clock[0] += HOLD_MAX + 0.1
    stream.process("s.a", "_INBOX.2", b"", b"newer")  # expires the two before it
    assert [s for s, _ in out.sent] == ["_INBOX.0"]
    assert msgspec.json.decode(out.sent[0][1])["error"]["err_code"] == 10008
    assert len(stream.held) == 1 and stream.held.dropped == 2
    assert stream.stats.rejected == 2 and stream.stats.received == 2
    fence.is_fenced = False
    stream.release_held()
    assert (await _acked(stream, out, 2))[1] == ("_INBOX.2", 1)
    stream.repl = None
    await stream.close()


async def test_past_the_byte_bound_a_publish_is_not_held(tmp_path: Path, clock: list[float]) -> None:
    stream, fence, out = await _leader(tmp_path)
    fence.is_fenced = fence.alone = True
    big = b"x" * (HOLD_BYTES // 2)
    for i in range(3):
        stream.process("s.a", f"_INBOX.{i}", b"", big)
    assert len(stream.held) == 2 and [s for s, _ in out.sent] == ["_INBOX.2"]
    stream.repl = None
    await stream.close()


async def test_a_demotion_drops_what_is_held(tmp_path: Path, clock: list[float]) -> None:
    stream, fence, out = await _leader(tmp_path)
    fence.is_fenced = True
    for i in range(3):
        stream.process("s.a", f"_INBOX.{i}", b"", b"m")
    await stream.demote(None)
    assert not stream.held and stream.held.dropped == 3
    stream.release_held()
    await stream.store.flush()
    assert out.sent == [] and stream.store.last_seq == 0
    await stream.close()
