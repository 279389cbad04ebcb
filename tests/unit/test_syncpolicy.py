"""Where syncs run (``jetlog.log.syncpolicy``): the moving-average guard, the kernel check for
``syncfs`` and the grouping of a pass's syncs by filesystem."""

from __future__ import annotations

import pytest

from jetlog.log import syncpolicy as sp


def test_a_guard_trips_on_a_slow_average_not_on_one_spike() -> None:
    g = sp.SlowGuard("test syncs", 0.002)
    t = 100.0
    for dt in (0.0002, 0.0002, 0.008, 0.0002):
        assert not g.observe(t, dt)
    assert g.allowed(t) and g.backoff == sp.INLINE_BACKOFF
    trips = [g.observe(t, 0.005) for _ in range(4)]
    assert trips == [False, False, True, False]  # the average passes 2 ms at the third; then afresh
    assert not g.allowed(t + sp.INLINE_BACKOFF - 0.1) and g.allowed(t + sp.INLINE_BACKOFF + 0.1)
    assert g.backoff == 2 * sp.INLINE_BACKOFF


def test_a_guard_backs_off_longer_while_slow_and_resets_once_fast() -> None:
    g = sp.SlowGuard("test syncs", 0.002)
    t = 0.0
    for expected in (2, 4, 8):
        while not g.observe(t, 0.01):
            t += 0.01
        t += 0.01
        assert g.backoff == expected * sp.INLINE_BACKOFF and g.avg == 0.0
    assert not g.observe(t, 0.0001)
    assert g.backoff == sp.INLINE_BACKOFF
    for _ in range(200):
        while not g.observe(t, 1.0):
            t += 1.0
        t += 1.0
    assert g.backoff == sp.INLINE_BACKOFF_MAX


def test_syncs_in_flight_across_a_trip_trip_it_once() -> None:
    """Shared syncs queued behind one slow ``syncfs`` (a neighbour's burst of dirty pages) are
    answered together, each as slow: counted, they doubled the backoff once each."""
    g = sp.SlowGuard("shared syncs (syncfs)", sp.SYNCFS_SLOW, backoff=sp.SYNCFS_BACKOFF)
    sent = [10.0, 10.001, 10.002]
    assert g.observe(sent[0], 0.416)  # one 416 ms syncfs trips it (average 52 ms)
    assert g.off_until == pytest.approx(10.416 + sp.SYNCFS_BACKOFF) and g.backoff == 2 * sp.SYNCFS_BACKOFF
    assert not g.observe(sent[1], 0.4155) and not g.observe(sent[2], 0.415)  # sent before the trip
    assert g.backoff == 2 * sp.SYNCFS_BACKOFF and g.avg == 0.0
    assert not g.allowed(10.8) and g.allowed(10.417 + sp.SYNCFS_BACKOFF)
    assert not g.observe(11.0, 0.003)  # after the backoff: measured afresh, fast again
    assert g.backoff == sp.SYNCFS_BACKOFF
    assert g.observe(12.0, 0.5) and g.backoff == 2 * sp.SYNCFS_BACKOFF  # sent after it: counted


def test_shared_syncs_back_off_briefly_the_loops_syncs_long() -> None:
    import asyncio

    from jetlog.log.syncer import Syncer

    loop = asyncio.new_event_loop()
    try:
        s = Syncer(loop)  # the guards only: a helper starts at the first acquire
        assert (s.shared.first, s.bulk.first, s.inline.first) == (
            sp.SYNCFS_BACKOFF,
            sp.INLINE_BACKOFF,
            sp.INLINE_BACKOFF,
        )
        assert sp.SYNCFS_BACKOFF < sp.INLINE_BACKOFF
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("release", "platform", "ok"),
    [
        ("5.8.0", "linux", True),
        ("5.7.19", "linux", False),
        ("6.18.44-fc-v669", "linux", True),
        ("4.19.0-25-amd64", "linux", False),
        ("5.10.0+", "linux", True),
        ("5", "linux", False),
        ("x.y", "linux", False),
        ("23.1.0", "darwin", False),
    ],
)
def test_syncfs_is_trusted_from_linux_5_8_on(release: str, platform: str, ok: bool) -> None:
    assert sp.syncfs_reports_errors(release, platform) is ok


def test_a_pass_is_grouped_by_filesystem_keeping_request_order() -> None:
    devs = {11: 1, 12: 2, 13: 1, 14: 1, 15: 2, 16: 3}
    assert sp.shared_groups(devs) == [[11, 13, 14]]
    devs.update({17: 2})
    assert sp.shared_groups(devs) == [[11, 13, 14], [12, 15, 17]]
    assert sp.shared_groups({}) == []
