"""The Spark bench's CPU account (``_spark_cpu``): this process and its descendants, without
the server trees it is told to leave out."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jetlog.spark.bench import _spark_cpu

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(60)\n"


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_descendants_count_and_excluded_trees_do_not() -> None:
    kids = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        while min(_cpu(k.pid) for k in kids) < 0.3:
            assert time.monotonic() < deadline, "the children did not burn their CPU in time"
            time.sleep(0.05)
        spent = {k.pid: _cpu(k.pid) for k in kids}
        both = _spark_cpu(set())
        one = _spark_cpu({kids[1].pid})
        assert both - one == pytest.approx(spent[kids[1].pid], abs=0.05)
        assert one >= spent[kids[0].pid]
    finally:
        for k in kids:
            k.kill()
            k.wait()
