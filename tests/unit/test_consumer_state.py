"""Consumer ack accounting against nats-server's documented behaviour (spec §3.2, §3.3, §5.3)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jetlog.consumer.state import ACK_ALL, ACK_EXPLICIT, ACK_NONE, ConsumerState


def info(s: ConsumerState) -> tuple[tuple[int, int], tuple[int, int], int, int]:
    return (s.dseq, s.sseq), (s.floor_dseq, s.floor_sseq), s.num_ack_pending, s.num_redelivered


def test_walkthrough_of_the_spec() -> None:
    s = ConsumerState(ACK_EXPLICIT)
    assert info(s) == ((0, 0), (0, 0), 0, 0)
    s.deliver(1, 10)
    assert info(s) == ((1, 1), (0, 0), 1, 0)
    s.deliver(2, 11)
    s.deliver(3, 11)
    assert info(s) == ((3, 3), (0, 0), 3, 0)
    assert s.ack(1, 1, 12) == (True, [1])
    assert s.ack(2, 2, 12) == (True, [2])
    assert s.nak(3, 3, 12, 0, 30) == "now"
    assert info(s) == ((3, 3), (2, 2), 1, 0)
    assert s.deliver(3, 13) == (4, 2)  # redelivery: new consumer seq, count 2, same stream seq
    assert info(s) == ((4, 3), (2, 2), 1, 1)
    assert s.ack(3, 4, 14) == (True, [3])
    assert info(s) == ((4, 3), (4, 3), 0, 0)


def test_floor_after_nak_redelivery_and_ack() -> None:
    # nats-server: ack 1, NAK 2 + redeliver (consumer seq 5) + ack, ack 3 with 4 pending -> (3, 3)
    s = ConsumerState(ACK_EXPLICIT)
    for q in (1, 2, 3, 4):
        s.deliver(q, 0)
    s.ack(1, 1, 0)
    assert s.nak(2, 2, 0, 0, 30) == "now"
    assert s.deliver(2, 1) == (5, 2)
    s.ack(2, 5, 1)
    assert (s.floor_dseq, s.floor_sseq) == (2, 2)
    s.ack(3, 3, 1)
    assert (s.floor_dseq, s.floor_sseq) == (3, 3)
    assert s.num_ack_pending == 1


def test_out_of_order_acks_keep_the_floor() -> None:
    s = ConsumerState(ACK_EXPLICIT)
    for q in (1, 2, 3):
        s.deliver(q, 0)
    s.ack(2, 2, 0)
    assert (s.floor_dseq, s.floor_sseq) == (0, 0)
    s.ack(1, 1, 0)
    assert (s.floor_dseq, s.floor_sseq) == (2, 2)
    assert s.lowest_pending() == 3


def test_ack_all_semantics() -> None:
    s = ConsumerState(ACK_ALL)
    for q in (1, 2, 3, 4):
        s.deliver(q, 0)
    assert s.ack(3, 3, 0) == (True, [1, 2, 3])
    assert info(s) == ((4, 4), (3, 3), 1, 0)
    assert s.ack(2, 2, 0) == (True, [])  # below the floor: no-op, still replied to
    assert s.nak(2, 2, 0, 0, 30) == ""


def test_ack_none_floor_follows_deliveries_and_acks_get_no_reply() -> None:
    s = ConsumerState(ACK_NONE)
    s.deliver(5, 0)
    assert info(s) == ((1, 5), (1, 5), 0, 0)
    assert s.ack(5, 1, 0) == (False, [])


def test_future_ack_gets_no_reply() -> None:
    s = ConsumerState(ACK_EXPLICIT)
    s.deliver(1, 0)
    assert s.ack(7, 7, 0) == (False, [])


def test_nak_with_delay_and_backoff_expiry() -> None:
    s = ConsumerState(ACK_EXPLICIT)
    s.deliver(1, 0)
    s.deliver(2, 0)
    assert s.nak(1, 1, 100, 50, ack_wait=1000) == "later"
    due, nxt = s.expired(120, lambda dc: 1000, set())
    assert due == [] and nxt == 30  # (100 - 1000 + 50) + 1000 - 120
    due, _ = s.expired(150, lambda dc: 1000, set())
    assert due == [1]
    backoff = [10, 40]
    wait = lambda dc: backoff[min(dc - 1, len(backoff) - 1)]  # noqa: E731
    s2 = ConsumerState(ACK_EXPLICIT)
    s2.deliver(9, 0)
    assert s2.expired(9, wait, set()) == ([], 1)
    assert s2.expired(10, wait, set())[0] == [9]
    s2.deliver(9, 10)  # second delivery: next wait is backoff[1]
    assert s2.expired(49, wait, set())[0] == []
    assert s2.expired(50, wait, set())[0] == [9]


def test_max_deliver_drop_keeps_floor_and_counts_redelivered() -> None:
    s = ConsumerState(ACK_EXPLICIT)
    s.deliver(1, 0)
    s.deliver(1, 1)
    s.deliver(1, 2)
    s.drop_max_delivered(1)
    assert info(s) == ((3, 1), (0, 0), 0, 1)
    s.deliver(2, 3)
    s.ack(2, 4, 3)
    assert (s.floor_dseq, s.floor_sseq) == (4, 2)


def test_purge_below_moves_positions() -> None:
    s = ConsumerState(ACK_EXPLICIT)
    for q in (1, 2, 3):
        s.deliver(q, 0)
    s.purge_below(10)
    assert info(s) == ((3, 9), (3, 9), 0, 0)


class _Model:
    """A direct restatement of nats-server's rules, for the property test."""

    def __init__(self) -> None:
        self.d = self.s = self.fd = self.fs = 0
        self.p: dict[int, int] = {}

    def deliver(self, q: int) -> None:
        self.d += 1
        self.s = max(self.s, q)
        self.p.setdefault(q, self.d)  # a redelivery keeps the original consumer sequence

    def ack(self, q: int) -> None:
        if q > self.s or q not in self.p:
            return
        dq = self.p.pop(q)
        if not self.p:
            self.fd, self.fs = self.d, self.s
        elif dq == self.fd + 1:
            self.fd, self.fs = dq, q
            for nxt in range(q + 1, self.s + 1):
                if nxt in self.p:
                    self.fd, self.fs = self.p[nxt] - 1, nxt - 1
                    break


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["new", "ack", "redeliver"]), st.integers(0, 30)), max_size=80))
def test_explicit_ack_floor_matches_model(ops: list[tuple[str, int]]) -> None:
    s = ConsumerState(ACK_EXPLICIT)
    m = _Model()
    nxt = 1
    for op, k in ops:
        if op == "new":
            s.deliver(nxt, 0)
            m.deliver(nxt)
            nxt += 1
        elif op == "ack" and nxt > 1:
            q = 1 + k % (nxt - 1)
            dq = s.pending[q].dseq if q in s.pending else 0
            s.ack(q, dq, 0)
            m.ack(q)
        elif op == "redeliver" and s.pending:
            q = sorted(s.pending)[k % len(s.pending)]
            s.deliver(q, 0)
            m.deliver(q)
        assert (s.dseq, s.sseq, s.floor_dseq, s.floor_sseq) == (m.d, m.s, m.fd, m.fs)
        assert set(s.pending) == set(m.p)
        if s.pending:
            assert s.lowest_pending() == min(s.pending)
