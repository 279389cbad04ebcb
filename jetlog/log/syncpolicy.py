"""Where the ``Syncer`` runs a sync, and how it measures that: pure bookkeeping, no I/O.

Three choices, each measured on the 2-core test VM (docs/internals.md, twelfth pass):

* **On the loop** (``Syncer.try_inline_fdatasync``): a lone small commit always (a synchronous
  publisher waits for it and nothing else runs), and a bulk job of pipelined publishes while the
  disk is fast (``SlowGuard`` over ``INLINE_BULK_SLOW``). The helper's round trip (three thread
  wake-ups in two processes) cost more than the sync it overlapped.
* **In the helper, one file at a time**: everything else.
* **In the helper, one ``syncfs`` for many files**: when the syncs of ``SYNCFS_MIN`` or more files
  of one filesystem are asked for in the same loop pass (many streams committing at once, one
  socket read holding a message for each). 200 files with 800 new bytes each: 28 ms one after
  the other, 11 ms side by side in 32 threads, 2.7 ms in one ``syncfs``. ``syncfs`` writes back
  *every* dirty page of the filesystem, also other programs' (a data directory on a volume of
  its own keeps that cheap), so it has its own ``SlowGuard`` (``SYNCFS_SLOW``). It reports
  write-back errors only on Linux 5.8 and later (``syncfs_reports_errors``): elsewhere it is
  never used, since a failed write-back would otherwise pass for a durable commit.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import sys

log = logging.getLogger("jetlog.log.syncer")

INLINE_SLOW = 0.01
"""Seconds: an inline sync slower than this (a stalling disk, not an ordinary spike) turns
inline syncs off for ``INLINE_BACKOFF``, doubled after each further slow one (at most
``INLINE_BACKOFF_MAX``); one under half of it resets that (a ``SlowGuard`` of one sample)."""
INLINE_BACKOFF = 5.0
INLINE_BACKOFF_MAX = 300.0

INLINE_BULK_SLOW = 0.002
"""Seconds: when the moving average of bulk inline syncs (jobs of pipelined publishes,
``pipeline.INLINE_BULK_MAX_BYTES``) rises above this, bulk syncs go to the helper for
``INLINE_BACKOFF`` (doubling while the disk stays slow): on such a disk the loop would lose more
time waiting than the helper's round trip costs, and overlapping the sync with the next job
pays. An average, not one sync: single 2-3 ms syncs come every few seconds on the test VM.
Lone small commits stay inline (``INLINE_SLOW``)."""
SLOW_ALPHA = 0.125
"""Weight of the newest sample in a ``SlowGuard``'s moving average (a disk that is slow
throughout trips it within four samples)."""

SYNCFS_MIN = 3
"""Files of one filesystem whose syncs, asked for in one loop pass, go as one ``syncfs``. Two
files cost the same either way here (0.23-0.25 ms); from four on ``syncfs`` was faster."""
SYNCFS_SLOW = 0.025
"""Seconds: a moving average of shared syncs (request to answer) above this sends those files
back to one sync each for ``SYNCFS_BACKOFF`` (doubling while it stays slow): other programs'
dirty data on the same filesystem would make every batch wait for its write-back."""
SYNCFS_BACKOFF = 0.5
"""Seconds: the first backoff of shared syncs. Short, unlike the loop's: what usually trips it
is a one-off, another program's burst of dirty pages that the first slow ``syncfs`` has written
back (1.5 GB left dirty by a neighbour: one 416 ms ``syncfs``, the next ones fast again), and a
slow ``syncfs`` holds only the commits of one batch, never the loop. Five seconds of one sync per
file instead cost 200 streams 16 µs of helper CPU per message and a third of their rate
(docs/internals.md, twenty-second pass). A filesystem that stays slow still backs off to
``INLINE_BACKOFF_MAX``, doubling."""


class SlowGuard:
    """A moving average of one kind of sync and the backoff it trips: ``allowed`` until the
    average passes ``slow``, then not for ``backoff`` seconds (``INLINE_BACKOFF`` unless given),
    doubling (up to ``INLINE_BACKOFF_MAX``) while it trips again; a fast sample with a low
    average resets the backoff. After a trip the average starts afresh, so the next period
    measures the disk as it is then, and a sample that started before the trip is not counted:
    it waited for the same slow disk (syncs answered together after one stall must trip the
    guard once, not double its backoff once each)."""

    __slots__ = ("alpha", "avg", "backoff", "first", "name", "off_until", "slow", "tripped")

    def __init__(
        self, name: str, slow: float, alpha: float = SLOW_ALPHA, backoff: float = INLINE_BACKOFF
    ) -> None:
        self.name = name
        self.slow = slow
        self.alpha = alpha  # 1.0: no average, every sample decides on its own
        self.avg = 0.0
        self.off_until = 0.0  # monotonic seconds
        self.first = backoff
        self.backoff = backoff
        self.tripped = -math.inf  # monotonic seconds of the last trip

    def allowed(self, now: float) -> bool:
        """True unless a trip's backoff runs at ``now``."""
        return now >= self.off_until

    def observe(self, t0: float, dt: float) -> bool:
        """Account one sample that started at ``t0`` and took ``dt`` seconds; True if it tripped."""
        if t0 < self.tripped:
            return False  # in flight across the last trip: see the class docstring
        avg = self.avg = self.avg + (dt - self.avg) * self.alpha
        if avg > self.slow:
            self.tripped = t0 + dt
            self.off_until = t0 + dt + self.backoff
            log.info(
                "%s average %.1f ms; not used for %.1f s",
                self.name,
                avg * 1e3,
                self.backoff,
            )
            self.backoff = min(self.backoff * 2, INLINE_BACKOFF_MAX)
            self.avg = 0.0
            return True
        if dt <= self.slow and avg < self.slow / 2:
            self.backoff = self.first  # fast again: a later trip starts short
        return False


def syncfs_reports_errors(release: str | None = None, platform: str = sys.platform) -> bool:
    """Whether ``syncfs(2)`` reports write-back errors here: Linux 5.8 or later (earlier kernels
    return 0 even when pages failed to reach the disk)."""
    if not platform.startswith("linux"):
        return False
    if release is None:
        release = os.uname().release
    parts = release.split(".")
    try:
        major = int(parts[0])
        minor = int("".join(ch for ch in parts[1] if ch.isdigit()) or "0") if len(parts) > 1 else 0
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


def shared_groups(devs: dict[int, int]) -> list[list[int]]:
    """The handles of ``devs`` (handle -> filesystem, in request order) grouped by filesystem:
    the groups of at least ``SYNCFS_MIN`` handles, each in request order."""
    by: dict[int, list[int]] = {}
    for handle, dev in devs.items():
        by.setdefault(dev, []).append(handle)
    return [hs for hs in by.values() if len(hs) >= SYNCFS_MIN]


class SyncLatency:
    """Cumulative histogram of file-data sync latencies (request to answer), read by the
    metrics collector at scrape time. Bounds in seconds."""

    BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

    def __init__(self) -> None:
        self.counts = [0] * (len(self.BOUNDS) + 1)  # the last one: above every bound
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        """Count one sync that took ``seconds``."""
        self.total += seconds
        self.counts[bisect.bisect_left(self.BOUNDS, seconds)] += 1
