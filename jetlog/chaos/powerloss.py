"""Simulated power loss: drop every write a killed node had not fsynced, then restart it.

The nodes run with ``$JETLOG_SYNC_LEDGER`` set (``jetlog.log.syncledger``): each process
records, per file written through the fsync service (segment files, consumer state), its size
when registered and the size covered by each completed sync. After ``kill -9`` the page cache
still holds the unsynced tail — a real power loss would not. :func:`drop_unsynced` replays the
ledgers and truncates each file under the node's data directory back to its durable size, so
the restarted node sees what a machine that lost power would have on disk.

Segment files are preallocated past their data (``jetlog.log.commit``): there a power loss leaves
the file's size and zeros where the lost writes were, and pages of the unsynced tail may have
reached the disk out of order. With an ``rng``, :func:`drop_unsynced` keeps a random subset of
the 4 KiB pages of that tail (zeros, then data: what recovery must cut as torn); without one,
only zeros.

Not simulated (documented in docs/chaos.md): metadata written with ``write + fsync + rename``
(epoch checkpoints, consumer-state rewrites) is atomic and left as is; a truncation or unlink
that was not yet synced is not undone; the Raft journal (its own fsyncs) is not rolled back.
"""

from __future__ import annotations

import glob
import os
import random
import re
from dataclasses import dataclass

from jetlog.log.syncledger import ENV as LEDGER_ENV

__all__ = ["LEDGER_ENV", "Dropped", "drop_unsynced", "durable_sizes"]


@dataclass(frozen=True)
class Dropped:
    """One file cut back: ``path`` from ``size`` to ``durable`` bytes."""

    path: str
    size: int
    durable: int


def durable_sizes(ledger_dir: str, under: str) -> dict[str, int]:
    """path -> durable size, for every ledgered file below ``under``, replaying every process's
    ledger in time order (a registration resets a file's size; a sync raises it)."""
    prefix = os.path.abspath(under).rstrip("/") + "/"
    events: list[tuple[int, str, int, str]] = []
    for ledger in glob.glob(os.path.join(ledger_dir, "*.ledger")):
        with open(ledger, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split(" ", 3)
                if len(parts) != 4 or not parts[3].startswith(prefix):
                    continue  # another node's file, or a torn last line
                try:
                    events.append((int(parts[0]), parts[1], int(parts[2]), parts[3]))
                except ValueError:
                    continue
    events.sort()
    sizes: dict[str, int] = {}
    for _, kind, size, path in events:
        if kind == "R":
            sizes[path] = size
        else:
            sizes[path] = max(sizes.get(path, 0), size)
    return sizes


PAGE = 4096
_SEGMENT = re.compile(r"\d{20}\.log")


def drop_unsynced(ledger_dir: str, data_dir: str, rng: random.Random | None = None) -> list[Dropped]:
    """Drop every unsynced write of ``data_dir``'s ledgered files (see the module docstring):
    cut each back to its durable size, except a segment, which keeps its (preallocated) size
    with zeros past it, and with ``rng`` some pages of its unsynced tail. Call only while the
    node is not running. Returns what was lost (``size``: the end of the data it had)."""
    out = []
    for path, durable in sorted(durable_sizes(ledger_dir, data_dir).items()):
        try:
            with open(path, "rb") as f:
                f.seek(durable)
                tail = f.read()
        except OSError:
            continue  # deleted since (retention, compaction, a replaced consumer file)
        # Never extend: a file shorter than its durable size was truncated on purpose.
        data = len(tail.rstrip(b"\0"))
        if not data:
            continue  # nothing unsynced (a segment's preallocated zeros only)
        size = durable + len(tail)
        os.truncate(path, durable)
        if _SEGMENT.fullmatch(os.path.basename(path)):
            os.truncate(path, size)  # the allocated blocks stay, reading as zeros
            if rng is not None:
                _keep_pages(path, durable, tail, rng)
        out.append(Dropped(path, durable + data, durable))
    return out


def _keep_pages(path: str, durable: int, tail: bytes, rng: random.Random) -> None:
    """Write back a random subset of the pages of ``tail`` (which starts at ``durable``): the
    page write-back of an unsynced tail in any order."""
    end = durable + len(tail)
    with open(path, "r+b") as f:
        for page in range(durable // PAGE * PAGE, end, PAGE):
            if rng.random() < 0.5:
                lo = max(page, durable)
                f.seek(lo)
                f.write(tail[lo - durable : min(page + PAGE, end) - durable])
