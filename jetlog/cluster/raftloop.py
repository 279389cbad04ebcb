"""The event-loop side of ``MetaRaft`` (no pysyncobj here): events, waiters, the wedge watch.

``EventHub`` lives on the event loop. The tick thread hands it events only through
``loop.call_soon_threadsafe`` (``MetaRaft._post``), so it sees them in the order the tick thread
produced them, which for ``Applied`` is log order.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections.abc import Callable
from typing import Any

import msgspec

from jetlog.cluster.raftfiles import MetaRaftError

log = logging.getLogger("jetlog.cluster.raft")

WEDGE_SECONDS = 10.0
"""Committed-but-not-applied for this long counts as a wedged node."""


class MetaUnavailableError(MetaRaftError):
    """No result within the deadline. ``outcome_unknown``: an attempt may still be committed
    (re-proposing the same command later is safe only through ``propose``'s request id)."""

    retriable = True

    def __init__(self, message: str, *, outcome_unknown: bool) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class MetaNotLeaderError(MetaRaftError):
    """A leader-only operation was asked of a node that is not the metadata leader."""


class Applied(msgspec.Struct, frozen=True):
    """Entry ``index`` was applied and changed ``changed``; ``reset``: a snapshot replaced the
    whole state (``changed`` then names every stream before or after: re-derive them all)."""

    index: int
    changed: tuple[str, ...]
    reset: bool = False


class LeaderChanged(msgspec.Struct, frozen=True):
    """This node's view of the Raft leader (node name) or term changed."""

    leader: str | None
    is_leader: bool
    term: int


MetaEvent = Applied | LeaderChanged


class EventHub:
    """Fan-out of events to subscriber queues, plus waits on applied index and view changes."""

    def __init__(self) -> None:
        self._subscribers: list[asyncio.Queue[MetaEvent]] = []
        self._applied_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._view_event = asyncio.Event()  # set (and replaced) on every LeaderChanged
        self.applied = 0
        """Index of the last ``Applied`` event dispatched."""

    def subscribe(self) -> asyncio.Queue[MetaEvent]:
        """A new unbounded queue of events (the consumer must keep draining it)."""
        q: asyncio.Queue[MetaEvent] = asyncio.Queue()
        self._subscribers.append(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[MetaEvent]) -> None:
        """Stop feeding ``q``."""
        if q in self._subscribers:
            self._subscribers.remove(q)

    def dispatch(self, ev: MetaEvent) -> None:
        """Deliver ``ev`` (loop thread)."""
        if isinstance(ev, Applied):
            self.applied = max(self.applied, ev.index)
        for q in self._subscribers:
            q.put_nowait(ev)
        if isinstance(ev, LeaderChanged):
            self._view_event.set()
            self._view_event = asyncio.Event()
        elif self._applied_waiters:
            still = []
            for idx, fut in self._applied_waiters:
                if idx <= self.applied:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    still.append((idx, fut))
            self._applied_waiters = still

    async def wait_applied(self, index: int, timeout: float) -> None:
        """Wait until an ``Applied`` event with index >= ``index`` was dispatched."""
        if self.applied >= index:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (index, fut)
        self._applied_waiters.append(waiter)
        try:
            await asyncio.wait_for(fut, timeout)
        finally:
            if waiter in self._applied_waiters:
                self._applied_waiters.remove(waiter)

    async def view_change(self, timeout: float) -> None:
        """Wait (at most ``timeout``) for the next ``LeaderChanged``."""
        try:
            await asyncio.wait_for(self._view_event.wait(), max(0.0, timeout))
        except TimeoutError:
            pass


def hand_off(
    loop: asyncio.AbstractEventLoop, fut: asyncio.Future[tuple[Any, int]]
) -> Callable[[Any, int], None]:
    """A pysyncobj callback ``(result, code)`` that resolves ``fut`` on ``loop``.

    It runs on the tick thread and never raises: pysyncobj applies an entry a second time when
    a callback raises, and ``call_soon_threadsafe`` raises once the loop is closed.
    """

    def resolve(res: Any, err: int) -> None:
        if not fut.done():
            fut.set_result((res, err))

    def cb(res: Any, err: int) -> None:
        try:
            loop.call_soon_threadsafe(resolve, res, err)
        except RuntimeError:
            pass  # loop closed: nobody is waiting any more
        except Exception:
            log.exception("meta raft: result hand-off failed")

    return cb


async def await_answer(
    fut: asyncio.Future[tuple[Any, int]],
    deadline: float,
    view: Callable[[], Any],
    every: float,
    resubmit_after: float,
) -> tuple[Any, int]:
    """Wait for one submission's answer; TimeoutError means "submit it again".

    Submitting again while leader and term (``view()``) are unchanged would only add a duplicate
    entry (harmless thanks to the request id, but on a starved CPU a retry storm), so the same
    submission is awaited unless the view changed or it waited ``resubmit_after`` seconds (an
    answer can be lost with a dropped connection while the leader stays).
    """
    loop = asyncio.get_running_loop()
    start, seen = loop.time(), view()
    while True:
        wait = min(deadline - loop.time(), every)
        if wait <= 0:
            raise TimeoutError
        try:
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except TimeoutError:
            if view() != seen or loop.time() - start >= resubmit_after:
                raise


class LeaderContact:
    """When this node last had proof of a working Raft leader (tick thread writes, loop reads).

    As a follower: the last append from the node it takes as leader. As the leader: the time by
    which enough followers for a majority (with itself) had answered an append, counted from
    when it became leader.
    """

    def __init__(self, peers: list[str]) -> None:
        self._peers = list(peers)
        self._need = (len(peers) + 1) // 2  # followers needed besides this node for a majority
        self._heard_leader: float | None = None
        self._since = 0.0
        self._answers: dict[str, float] = {}

    def became_leader(self, now: float) -> None:
        """This node just won an election."""
        self._since, self._answers = now, {}

    def heard_leader(self, now: float) -> None:
        """An append arrived from the node this one takes as leader."""
        self._heard_leader = now

    def heard_follower(self, addr: str, now: float) -> None:
        """Follower ``addr`` answered an append of this (leading) node."""
        self._answers[addr] = now

    def age(self, leading: bool, now: float) -> float:
        """Seconds since the last proof (``inf`` before any)."""
        if leading:
            if self._need == 0:
                return 0.0
            seen = sorted((max(self._answers.get(a, 0.0), self._since) for a in self._peers), reverse=True)
            return max(0.0, now - seen[self._need - 1])
        last = self._heard_leader
        return math.inf if last is None else max(0.0, now - last)


async def watch_wedge(
    name: str,
    probe: Callable[[], tuple[bool, int, int] | None],
    flag: Callable[[bool], None],
    *,
    after: float = WEDGE_SECONDS,
    every: float = 1.0,
) -> None:
    """Log loudly while entries stay committed but unapplied for ``after`` seconds, or the tick
    thread is dead. ``probe()`` -> (tick thread alive, commit index, last applied), None when
    stopped; ``flag(wedged)`` publishes the verdict."""
    stuck_since: float | None = None
    last_applied = -1
    told = 0.0
    while True:
        await asyncio.sleep(every)
        p = probe()
        if p is None:
            return
        alive, commit, applied = p
        now = time.monotonic()
        if not alive:
            flag(True)
            if now - told > 60:
                log.error("meta raft %s: the Raft tick thread is dead", name)
                told = now
            continue
        if commit > applied and applied == last_applied:
            stuck_since = stuck_since or now
            if now - stuck_since >= after:
                flag(True)
                if now - told > 60:
                    log.error(
                        "meta raft %s WEDGED: commit index %d but applied stuck at %d for %.0fs "
                        "(damaged log entry or snapshot?) - rebuild this node: stop it, wipe its "
                        "raft/ directory and restart it with rejoin",
                        name,
                        commit,
                        applied,
                        now - stuck_since,
                    )
                    told = now
        else:
            stuck_since = None
            flag(False)
        last_applied = applied


_ROLES = {0: "follower", 1: "candidate", 2: "leader"}


def status_view(st: dict[str, Any], self_name: str, members: dict[str, str]) -> dict[str, Any]:
    """The Raft part of ``MetaRaft.status()`` from pysyncobj's ``getStatus()`` dict."""
    view: dict[str, dict[str, Any]] = {}
    for n, addr in sorted(members.items()):
        if n == self_name:
            view[n] = {"address": addr, "self": True}
        else:
            view[n] = {
                "address": addr,
                "connected": st.get("partner_node_status_server_" + addr) == 2,
                "match_index": st.get("match_idx_server_" + addr),
            }
    return {
        "role": _ROLES.get(st.get("state", -1), "unknown"),
        "term": st.get("raft_term"),
        "commit_index": st.get("commit_idx"),
        "applied_index": st.get("last_applied"),
        "log_len": st.get("log_len"),
        "has_quorum": st.get("has_quorum"),
        "members": view,
    }


def check_bind(addr: str) -> None:
    """Fail start-up clearly when the Raft port cannot be bound (pysyncobj would retry quietly)."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, int(port)))
    except OSError as e:
        raise MetaRaftError(f"cannot bind the Raft port {addr}: {e}") from e
    finally:
        s.close()
