"""The example pipeline (``spark/orders_pipeline.py``) end to end, as a user runs it: against
``jetlog dev`` in its own process, the pipeline in its own process (its own JVM), twice on the same
checkpoint — the second run reads only what was published since, and the per-minute Parquet
totals count every order exactly once."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.spark.sparkutil import REPO, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def dev_url(tmp_path: Path) -> Iterator[str]:
    """``jetlog dev`` (nats-server from the wheel + one node) on a free port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jetlog", "dev", "--port", str(port), "--data-dir", str(tmp_path / "dev")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()  # the contract: first stdout line, once serving
        assert line.startswith("ready nats://"), line
        yield line.split(" ", 1)[1]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _run_pipeline(url: str, tmp_path: Path, publish: int, seed: int) -> str:
    env = {**os.environ, "PYTHONPATH": REPO}
    out = subprocess.run(
        [
            sys.executable,
            "spark/orders_pipeline.py",
            "--servers",
            url,
            "--publish",
            str(publish),
            "--seed",
            str(seed),
            "--max-per-trigger",
            "1500",
            "--out",
            str(tmp_path / "out"),
            "--checkpoint",
            str(tmp_path / "ck"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out.stdout


def test_orders_pipeline_end_to_end(dev_url: str, tmp_path: Path) -> None:
    first = _run_pipeline(dev_url, tmp_path, 3000, seed=1)
    assert "published 3000 orders" in first
    # maxOffsetsPerTrigger 1500 under Trigger.AvailableNow: two full batches.
    assert re.findall(r"batch (\d+): (\d+) rows", first) == [("0", "1500"), ("1", "1500")]
    assert "total 3000 orders" in first

    second = _run_pipeline(dev_url, tmp_path, 1000, seed=2)
    batches = re.findall(r"batch (\d+): (\d+) rows", second)
    assert batches == [("2", "1000")], second  # resumed from the checkpoint: only the new orders
    assert "total 4000 orders" in second

    # The Parquet output itself: every stream sequence 1..4000 counted exactly once.
    files = glob.glob(str(tmp_path / "out" / "agg" / "batch_id=*" / "*.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert sum(r["orders"] for r in rows) == 4000
    per_batch: dict[str, tuple[int, int]] = {}
    for f in files:
        bid = Path(f).parent.name
        t = pq.read_table(f).to_pylist()
        if t:
            lo, hi = min(r["first_seq"] for r in t), max(r["last_seq"] for r in t)
            old = per_batch.get(bid)
            per_batch[bid] = (min(lo, old[0]), max(hi, old[1])) if old else (lo, hi)
    assert sorted(per_batch.values()) == [(1, 1500), (1501, 3000), (3001, 4000)]
    assert {r["subject"] for r in rows} == {"orders.eu", "orders.us", "orders.apac"}
