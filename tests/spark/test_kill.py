"""Exactly-once when the whole query process tree (driver, JVM, Python workers) is SIGKILLed in
the middle of a micro-batch, then restarted from its checkpoint."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark import sparkutil
from tests.spark.conftest import Backend, read_stream, run_available_now

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def _batches(d: Path) -> set[int]:
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def _uncommitted(ck: Path) -> int | None:
    """A batch whose offsets are logged but not its commit, once at least two are committed."""
    logged, committed = _batches(ck / "offsets"), _batches(ck / "commits")
    pending = sorted(logged - committed)
    if len(committed) >= 2 and pending:
        return pending[-1]
    return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigkill_mid_batch_then_restart(spark: Any, jetlog: Backend, tmp_path: Path) -> None:
    s = jetlog.name("KILL")
    jetlog.add_stream(s, [f"{s.lower()}.>"])
    total = 4000  # ten batches of 400: the kill lands in the third or so, the replay runs the rest
    jetlog.fill(f"{s.lower()}.x", total)
    out, ck = tmp_path / "out", tmp_path / "ck"
    log = open(tmp_path / "child.log", "wb")  # noqa: SIM115 - closed in finally
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.query_child", jetlog.url, s, str(out), str(ck), "400"],
        cwd=sparkutil.REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the JVM and workers die with it
    )
    killed_at = None
    try:
        # The child's JVM start and first batches take well over a minute on the loaded 2-core
        # machine (one full-suite run used up 150 s here): the wait is generous, the asserts not.
        deadline = time.monotonic() + 300
        while killed_at is None:
            if child.poll() is not None:
                raise AssertionError("query child exited:\n" + (tmp_path / "child.log").read_text()[-3000:])
            if time.monotonic() > deadline:
                raise AssertionError(
                    "no batch in flight seen:\n" + (tmp_path / "child.log").read_text()[-3000:]
                )
            killed_at = _uncommitted(ck)
            if killed_at is None:
                time.sleep(0.002)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
        end = time.monotonic() + 30
        while _group_alive(child.pid) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _group_alive(child.pid), "processes of the killed query survived"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        log.close()
    # the batch in flight at the kill is logged in offsets/ but was never committed
    assert killed_at in _batches(ck / "offsets") and killed_at not in _batches(ck / "commits")
    done_before = sum(1 for _ in _batches(ck / "commits"))
    assert done_before < total // 400

    q = run_available_now(read_stream(spark, jetlog.url, s), str(out), str(ck))
    replayed = [p for p in q.recentProgress if p["batchId"] == killed_at]
    assert replayed and replayed[0]["numInputRows"] == 400  # same range as logged before the kill
    r = spark.read.parquet(str(out)).selectExpr(
        "count(*) c", "count(distinct seq) d", "min(seq) lo", "max(seq) hi"
    )
    row = r.first()
    assert (row.c, row.d, row.lo, row.hi) == (total, total, 1, total)
