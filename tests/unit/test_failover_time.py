"""The failover measure shared by the chaos checker and the cluster tests: from the fault to the
first acknowledgement after the longest silence that began after it (acks already in flight, or
a cut-off leader acknowledging until it fences itself, are not the failover)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jetlog.chaos.runner import failover_time


def test_in_flight_acks_after_the_fault_are_not_the_failover() -> None:
    acks = [9.9, 10.02, 10.05, 10.3, 11.1, 11.12, 11.15]  # fault at 10.0; new leader at 11.1
    assert failover_time(10.0, 20.0, acks) == 11.1 - 10.0


def test_no_silence_no_failover_and_the_window_bounds_it() -> None:
    assert failover_time(10.0, 20.0, [10.1, 10.2, 10.3]) is None  # never silent for 0.2 s
    assert failover_time(10.0, 11.0, [10.1, 11.5]) is None  # resumed only after the window
    assert failover_time(10.0, 20.0, []) is None


@given(st.lists(st.floats(0.0, 30.0), max_size=60), st.floats(0.0, 10.0), st.floats(0.0, 20.0))
def test_it_ends_at_an_ack_after_the_longest_silence(acks: list[float], t0: float, span: float) -> None:
    acks = sorted(acks)
    got = failover_time(t0, t0 + span, acks)
    inside = [t for t in acks if t0 < t < t0 + span]
    gaps = [b - a for a, b in zip([t0, *inside], inside, strict=False)]
    if not gaps or max(gaps) < 0.2:
        assert got is None
        return
    assert got is not None
    ends = [k for k, t in enumerate(inside) if abs(t - (t0 + got)) < 1e-9]
    assert ends, "it ends at an ack"
    assert any(abs(gaps[k] - max(gaps)) < 1e-9 for k in ends)
