"""Server-side CPU of a benchmark target: user + system time of its processes and their
descendants (a jetlog node's fsync helper), read from ``/proc`` (Linux). The benchmark reports
CPU µs per operation for both targets, which is what the rates hide on a saturated machine."""

from __future__ import annotations

import os
from collections.abc import Iterable

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _own_seconds(pid: int) -> float:
    """utime + stime of one process (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return 0.0
    # The command name (field 2) may contain spaces: split after its closing parenthesis.
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def descendants(pids: Iterable[int]) -> list[int]:
    """``pids`` and every live descendant of theirs."""
    seen: dict[int, None] = {}
    todo = list(pids)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen[p] = None
        todo += _children(p)
    return list(seen)


def tree_seconds(pids: Iterable[int]) -> float:
    """CPU seconds used so far by ``pids`` and every live descendant."""
    return sum(_own_seconds(p) for p in descendants(pids))
