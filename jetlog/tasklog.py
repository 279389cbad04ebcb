"""The done callback that reports a background task's failure where its owner logs (asyncio
hygiene: an owned task's exception is logged when it ends, not left for the loop's "exception
was never retrieved" at garbage collection), and the timer callback that times a request's
future out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any


def failure_logger(logger: logging.Logger, what: str = "task") -> Callable[[asyncio.Task[Any]], None]:
    """A done callback logging ``"<what> <task name> failed"`` with the traceback on
    ``logger`` when the task raised (not when it was cancelled or returned)."""

    def log_failure(task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("%s %s failed", what, task.get_name(), exc_info=task.exception())

    return log_failure


def expire(fut: asyncio.Future[Any]) -> None:
    """``loop.call_later(timeout, expire, fut)``: fail ``fut`` with ``TimeoutError`` unless it
    is done by then (a request awaiting its reply)."""
    if not fut.done():
        fut.set_exception(TimeoutError())


def retrieve(fut: asyncio.Future[Any]) -> None:
    """Done callback of a future nobody awaits any more: mark its outcome as seen, so that a
    failure reported elsewhere is not logged again as "exception was never retrieved"."""
    if not fut.cancelled():
        fut.exception()
