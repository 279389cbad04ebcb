"""``failure_logger``: a background task's failure is logged with its name and traceback when it
ends; a cancelled or finished task logs nothing."""

from __future__ import annotations

import asyncio
import logging

import pytest

from jetlog.tasklog import failure_logger


async def _fail() -> None:
    raise RuntimeError("boom")


async def _wait() -> None:
    await asyncio.sleep(3600)


async def _done() -> int:
    return 1


async def test_a_failed_task_is_logged_once_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("jetlog.test.tasklog")
    caplog.set_level(logging.ERROR, logger="jetlog.test.tasklog")
    failed = asyncio.get_running_loop().create_task(_fail(), name="t-fail")
    failed.add_done_callback(failure_logger(logger, "scrub"))
    cancelled = asyncio.get_running_loop().create_task(_wait(), name="t-cancel")
    cancelled.add_done_callback(failure_logger(logger))
    finished = asyncio.get_running_loop().create_task(_done(), name="t-done")
    finished.add_done_callback(failure_logger(logger))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.gather(failed, cancelled, finished, return_exceptions=True)
    await asyncio.sleep(0)  # done callbacks run on the loop
    records = [r for r in caplog.records if r.name == "jetlog.test.tasklog"]
    assert [r.getMessage() for r in records] == ["scrub t-fail failed"]
    assert records[0].exc_info is not None and isinstance(records[0].exc_info[1], RuntimeError)
