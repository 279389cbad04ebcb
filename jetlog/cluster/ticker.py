"""One ticker task per event loop for every stream leader on it (:class:`_Ticker`).

Separate from ``leader.py`` because it serves every leader on a loop at once, not one stream;
it reaches them only through :class:`Ticked`, so this module does not import ``leader.py``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any, Protocol

from jetlog.tasklog import failure_logger

log = logging.getLogger("jetlog.cluster.leader")
_log_failure = failure_logger(log)

TICK = 0.2


class Ticked(Protocol):
    """What the ticker uses of a stream leader (``StreamLeader`` satisfies this structurally)."""

    stream: Any

    def tick(self) -> None: ...


class _Ticker:
    """One task per event loop that ticks every stream leader on it, instead of a timer task
    per stream: a node leading many idle streams wakes once per ``TICK``, not once per stream,
    and long polls that ran out in the same tick are answered together."""

    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Ticker] = weakref.WeakKeyDictionary()

    def __init__(self) -> None:
        self.leaders: dict[Ticked, None] = {}  # insertion-ordered set
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Ticker:
        """The ticker of ``loop`` (made on first use)."""
        t = cls._by_loop.get(loop)
        if t is None:
            t = cls._by_loop[loop] = cls()
        return t

    def add(self, leader: Ticked) -> None:
        """Tick ``leader`` from now on (starts the task when it is the first)."""
        self.leaders[leader] = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="leader-ticker")
            self._task.add_done_callback(_log_failure)

    def remove(self, leader: Ticked) -> None:
        """Stop ticking ``leader``; the task ends with the last one."""
        self.leaders.pop(leader, None)
        if not self.leaders and self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while self.leaders:
            await asyncio.sleep(TICK)
            for leader in list(self.leaders):
                try:
                    leader.tick()
                except Exception:  # one stream's fault must not stop the others' ISR upkeep
                    log.exception("stream %s: leader tick failed", leader.stream.name)
