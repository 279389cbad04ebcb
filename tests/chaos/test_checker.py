"""The history checker on synthetic histories: a clean history passes, and each anomaly kind is
detected (and counted) when planted."""

from __future__ import annotations

import copy

import pytest

from jetlog.chaos.checker import KINDS, Anomaly, check, counts, summarize
from jetlog.chaos.history import (
    Ack,
    Confirm,
    Delivery,
    History,
    Stored,
    header_msg_id,
    msg_id,
    parse_msg_id,
    payload,
)


def stored(pid: int, i: int) -> Stored:
    return ("chaos.x", f"NATS/1.0\r\nNats-Msg-Id: {msg_id(pid, i)}\r\n\r\n".encode(), payload(pid, i))


def clean(n_per_pub: int = 5, pubs: int = 2) -> History:
    """Two publishers interleaved, three identical replicas, a consumer that received and
    confirmed everything once."""
    h = History(ack_wait=4.0)
    log: dict[int, Stored] = {}
    seq = 0
    t = 100.0
    for i in range(n_per_pub):
        for p in range(pubs):
            seq += 1
            t += 0.01
            log[seq] = stored(p, i)
            h.acks.append(Ack(p, i, seq, t))
    h.replicas = {n: dict(log) for n in ("n1", "n2", "n3")}
    h.hw = seq
    order = 0
    for s in sorted(log):
        mid = header_msg_id(log[s][1])
        assert mid is not None
        t += 0.01
        h.deliveries.append(Delivery(0, order, t, mid, s, 1))
        h.confirms.append(Confirm(0, order + 1, t + 0.001, mid, 0.0005, s))
        order += 2
    return h


def kinds_of(found: list[Anomaly]) -> dict[str, int]:
    return {k: v for k, v in counts(found).items() if v}


def test_clean_history_passes() -> None:
    h = clean()
    assert check(h) == []
    assert counts([]) == dict.fromkeys(KINDS, 0)


def test_msg_id_helpers() -> None:
    assert parse_msg_id(msg_id(3, 17)) == (3, 17)
    assert parse_msg_id("probe-1") is None
    assert header_msg_id(stored(1, 2)[1]) == "p1-2"
    assert header_msg_id(b"NATS/1.0\r\nnats-msg-id:  x \r\n\r\n") == "x"
    assert header_msg_id(b"") is None
    assert payload(1, 2) != payload(2, 1)


def test_lost_ack_missing_on_one_replica() -> None:
    h = clean()
    victim = h.acks[3]
    del h.replicas["n2"][victim.seq]
    found = check(h)
    assert kinds_of(found).get("lost") == 1
    lost = next(a for a in found if a.kind == "lost")
    assert victim.mid in lost.detail and "n2" in lost.detail


def test_lost_other_bytes_and_above_hw() -> None:
    h = clean()
    a = h.acks[0]
    subj, hdr, _ = h.replicas["n1"][a.seq]
    for n in h.replicas:
        h.replicas[n][a.seq] = (subj, hdr, b"corrupted")
    h.acks.append(Ack(0, 99, h.hw + 5, 200.0))  # acked beyond anything stored
    found = [x for x in check(h) if x.kind == "lost"]
    assert len(found) == 2
    assert any("other bytes" in x.detail for x in found)
    assert any("high-water mark" in x.detail and "no replica reaches" in x.detail for x in found)


def test_duplicated_msg_id() -> None:
    h = clean()
    dup = h.replicas["n1"][2]
    nxt = h.hw + 1
    for n in h.replicas:
        h.replicas[n][nxt] = dup
    h.hw = nxt
    for d in list(h.deliveries):
        if d.sseq == 2:
            h.deliveries.append(Delivery(0, 10_000, d.t + 50, d.mid, nxt, 1))
    found = kinds_of(check(h))
    assert found == {"duplicated": 1}


def test_reordered_in_stream_and_in_acks() -> None:
    h = clean()
    # Swap two messages of publisher 0 on every replica, and in the acks.
    a0, a1 = (a for a in h.acks if a.pid == 0 and a.i in (1, 2))
    for n in h.replicas:
        h.replicas[n][a0.seq], h.replicas[n][a1.seq] = h.replicas[n][a1.seq], h.replicas[n][a0.seq]
    a0.seq, a1.seq = a1.seq, a0.seq
    for d in h.deliveries:
        if d.mid in (a0.mid, a1.mid):
            d.sseq = a0.seq if d.mid == a0.mid else a1.seq
    found = kinds_of(check(h))
    # One for the acks, one per replica.
    assert found == {"reordered": 4}


def test_divergent_below_hw_only() -> None:
    h = clean()
    h.replicas["n3"][4] = stored(7, 7)
    h.replicas["n3"][h.hw + 1] = stored(8, 8)  # above the HW: not divergence
    found = check(h)
    kinds = kinds_of(found)
    assert kinds.get("divergent") == 1
    assert "seq 4" in next(a.detail for a in found if a.kind == "divergent")
    # The acked message at 4 is also gone from n3.
    assert kinds.get("lost") == 1


def test_unknown_hw_falls_back_to_highest_ack() -> None:
    h = clean()
    h.hw = 0
    h.replicas["n2"][1] = stored(9, 9)
    assert kinds_of(check(h)).get("divergent") == 1
    # Replicated but never acknowledged (nor delivered): not known to be committed.
    nxt = max(h.replicas["n1"]) + 1
    for n in h.replicas:
        h.replicas[n][nxt] = stored(0, 50)
    h.replicas["n1"][nxt + 1] = stored(0, 51)
    h.replicas["n3"][nxt + 1] = stored(1, 51)
    assert kinds_of(check(h)) == {"divergent": 1, "lost": 1}
    # A delivery of the replicated, unacknowledged message is no phantom when the HW is unknown.
    h.deliveries.append(Delivery(1, 0, 900.0, msg_id(0, 50), nxt, 1))
    assert kinds_of(check(h)) == {"divergent": 1, "lost": 1}
    h.deliveries.append(Delivery(1, 1, 901.0, msg_id(0, 51), nxt + 1, 1))  # not on every replica
    assert kinds_of(check(h)) == {"divergent": 1, "lost": 1, "phantom": 1}
    # Without acks: the end every replica reaches.
    h.acks = []
    h.deliveries = []
    h.confirms = []
    h.consumer = False
    assert kinds_of(check(h)) == {"divergent": 1}


def test_redelivered_after_confirm_same_worker() -> None:
    h = clean()
    c = h.confirms[2]
    h.deliveries.append(Delivery(0, c.order + 1, c.t + 0.0001, c.mid, c.sseq, 2))
    found = check(h)
    assert kinds_of(found) == {"redelivered": 1}
    assert c.mid in found[0].detail


def test_redelivery_before_confirm_or_late_ack_is_not_judged() -> None:
    h = clean()
    c = h.confirms[2]
    # Arrived on the same connection before the confirmation: legitimate.
    h.deliveries.append(Delivery(0, c.order - 1, c.t - 0.0005, c.mid, c.sseq, 2))
    # A confirm whose ack went out after ack_wait/2: the server may have redelivered first.
    late = h.confirms[4]
    late.latency = 3.0
    h.deliveries.append(Delivery(0, late.order + 5, late.t + 1, late.mid, late.sseq, 2))
    assert check(h) == []


def test_redelivered_cross_worker_uses_grace() -> None:
    h = clean()
    c = h.confirms[1]
    h.deliveries.append(Delivery(1, 0, c.t + 0.05, c.mid, c.sseq, 2))  # within the grace
    assert check(h) == []
    h.deliveries.append(Delivery(1, 1, c.t + 1.0, c.mid, c.sseq, 3))
    assert kinds_of(check(h)) == {"redelivered": 1}


def with_tokens(h: History) -> History:
    """The clean history with ack-subject tokens, as one leader hands them out: consumer
    sequence = stream sequence (nothing redelivered), its stream ending at the HW."""
    for d in h.deliveries:
        d.cseq, d.pending, d.ts = d.sseq, h.hw - d.sseq, 1_000 + d.sseq
    return h


def test_redelivered_detail_shows_the_ack_subject_tokens() -> None:
    h = with_tokens(clean())
    c = h.confirms[2]
    h.wall_offset = 1_000_000.0
    h.deliveries.append(Delivery(0, c.order + 1, c.t + 0.5, c.mid, c.sseq, 2, h.hw + 1, 0, 1_000 + c.sseq))
    (found,) = check(h)
    assert found.kind == "redelivered"
    assert f"delivery 2, cseq {h.hw + 1}, pending 0, ts {1_000 + c.sseq}" in found.detail
    assert (
        f"the acknowledged delivery: delivery 1, cseq {c.sseq}, pending {h.hw - c.sseq} (sender's stream end {h.hw})"
        in found.detail
    )
    assert "received at " in found.detail
    assert "older consumer state" not in found.detail


def test_late_first_delivery_from_an_older_consumer_state_is_labelled_and_still_reported() -> None:
    """The open anomaly's shape: the new leader delivered seq s first (count 1) and the worker
    acked it; later, after deliveries with higher consumer sequences, a copy of s arrives with
    count 1 and a lower consumer sequence, from a deposed leader's state. Labelled, still
    counted: the history cannot tell whether that state made it before or after the ack."""
    h = with_tokens(clean())
    c = h.confirms[2]
    last = max(h.deliveries, key=lambda d: d.order)
    # The deposed leader's state had delivered up to c.sseq - 1; its stream ended at c.sseq + 1.
    h.deliveries.append(
        Delivery(0, last.order + 10, last.t + 1.0, c.mid, c.sseq, 1, c.sseq, 1, 1_000 + c.sseq)
    )
    (found,) = check(h)
    assert found.kind == "redelivered"
    assert f"older consumer state: cseq {c.sseq} below cseq {last.cseq} (seq {last.sseq})" in found.detail
    assert f"sender's stream end {c.sseq + 1}" in found.detail


@pytest.mark.parametrize(
    "dcount, cseq, why",
    [
        (2, 3, "a redelivery (count 2): the sender's state knew of the acknowledged delivery"),
        (1, 999, "a first delivery numbered after everything received: the current state"),
        (1, 0, "no consumer sequence recorded (older history)"),
    ],
)
def test_redelivered_without_evidence_of_an_older_state_is_not_labelled(
    dcount: int, cseq: int, why: str
) -> None:
    h = with_tokens(clean())
    c = h.confirms[2]
    last = max(h.deliveries, key=lambda d: d.order)
    h.deliveries.append(Delivery(0, last.order + 10, last.t + 1.0, c.mid, c.sseq, dcount, cseq, 1))
    (found,) = check(h)
    assert found.kind == "redelivered", why
    assert "older consumer state" not in found.detail, why


def test_older_state_needs_a_higher_cseq_received_before_on_the_same_connection() -> None:
    h = with_tokens(clean())
    c = h.confirms[2]
    last = max(h.deliveries, key=lambda d: d.order)
    # Another worker received higher consumer sequences: no evidence about this connection.
    h.deliveries = [
        d if d.order <= c.order else Delivery(1, d.order, d.t, d.mid, d.sseq, 1, d.cseq) for d in h.deliveries
    ]
    h.confirms = [x for x in h.confirms if x.order <= c.order]
    h.deliveries.append(Delivery(0, last.order + 10, last.t + 1.0, c.mid, c.sseq, 1, c.sseq, 1))
    (found,) = check(h)
    assert found.kind == "redelivered"
    assert "older consumer state" not in found.detail


def test_undelivered() -> None:
    h = clean()
    gone = h.deliveries.pop(5)
    h.confirms = [c for c in h.confirms if c.mid != gone.mid]
    found = check(h)
    assert kinds_of(found) == {"undelivered": 1}
    assert gone.mid in found[0].detail


def test_phantom_delivery() -> None:
    h = clean()
    h.deliveries.append(Delivery(1, 0, 500.0, "p5-5", h.hw + 3, 1))  # above the HW
    h.deliveries.append(Delivery(1, 1, 501.0, "p5-6", 2, 1))  # not what seq 2 holds
    assert kinds_of(check(h)) == {"phantom": 2}


def test_consumer_checks_off_without_consumer() -> None:
    h = clean()
    h.deliveries = []
    h.confirms = []
    h.consumer = False
    assert check(h) == []


@pytest.mark.parametrize(
    "change, n",
    [
        (lambda h: setattr(h, "probe_s", None), 1),
        (lambda h: setattr(h, "consumer_drained", False), 1),
        (lambda h: h.stuck.append("replicas not current"), 1),
    ],
)
def test_stuck(change, n) -> None:
    h = clean()
    change(h)
    assert kinds_of(check(h)) == {"stuck": n}


def test_every_kind_at_once_and_summary() -> None:
    h = clean(n_per_pub=8)
    base = copy.deepcopy(h)
    del h.replicas["n1"][h.acks[0].seq]  # lost
    h.replicas["n2"][h.hw + 1] = h.replicas["n2"][3]  # duplicated (above HW: no divergence)
    h.acks.append(Ack(1, 100, h.acks[1].seq - 1, 300.0))  # reordered (acked below an earlier one)
    h.replicas["n3"][6] = stored(9, 9)  # divergent (and lost on n3)
    c = h.confirms[9]
    h.deliveries.append(Delivery(0, c.order + 1, c.t + 0.01, c.mid, c.sseq, 2))  # redelivered
    gone = h.deliveries.pop(12)  # undelivered
    h.confirms = [x for x in h.confirms if x.mid != gone.mid]
    h.deliveries.append(Delivery(1, 0, 400.0, "p0-1", 9, 1))  # phantom
    h.probe_s = None  # stuck
    found = check(h)
    got = kinds_of(found)
    assert set(got) == set(KINDS), got
    lines = summarize(found, limit=1)
    assert any(line.startswith("lost: ") for line in lines)
    assert check(base) == []


def test_ack_subject_tokens() -> None:
    from jetlog.chaos.workload import ack_subject_tokens

    assert ack_subject_tokens("$JS.ACK.CHAOS.C.1.1414.1414.1795723992000000000.1") == (
        1,
        1414,
        1414,
        1795723992000000000,
        1,
    )
    assert ack_subject_tokens("$JS.ACK.hub.ACCHASH.CHAOS.C.2.7.9.123.0.rand") == (2, 7, 9, 123, 0)
    assert ack_subject_tokens("$JS.ACK.CHAOS.C.1.2") is None
    assert ack_subject_tokens("$JS.ACK.CHAOS.C.x.1.2.3.4") is None
