"""The benchmark's server CPU meter counts a process and its descendants (a node's fsync helper),
from /proc, with real processes burning CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from jetlog.bench.cpu import tree_seconds

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\ntime.sleep(30)\n"


def test_counts_children_and_grandchildren() -> None:
    # A parent that starts a child burning 0.4 s of CPU, then burns 0.2 s itself.
    code = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {BURN.format(s=0.4)!r}])\n" + BURN.format(s=0.2)
    )
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        seen = 0.0
        while time.monotonic() < deadline:
            seen = tree_seconds([p.pid])
            if seen >= 0.55:
                break
            time.sleep(0.05)
        assert 0.55 <= seen < 5.0, seen
        assert tree_seconds([999_999_999]) == 0.0  # a pid that is gone counts nothing
    finally:
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            children = [int(c) for c in f.read().split()]
        for c in children:
            os.kill(c, signal.SIGKILL)
        p.kill()
        p.wait()
