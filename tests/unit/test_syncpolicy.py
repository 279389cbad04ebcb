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
    for expected in (2, 4, 8):
        while not g.observe(0.0, 0.01):
            pass
        assert g.backoff == expected * sp.INLINE_BACKOFF and g.avg == 0.0
    assert not g.observe(0.0, 0.0001)
    assert g.backoff == sp.INLINE_BACKOFF
    for _ in range(200):
        while not g.observe(0.0, 1.0):
            pass
    assert g.backoff == sp.INLINE_BACKOFF_MAX


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
