"""``MetaRaft``: the cluster metadata Raft group (pysyncobj 0.3.17), seen from asyncio.

With ``raftglue`` (its pysyncobj subclasses), the only module that imports pysyncobj. It
follows ``shared/notes/pysyncobj.md`` §5 (read it before changing anything here); the hazards
it wraps, each reproduced there:

- **one replicated entry point** ``raftglue.RaftNode._apply(raw: bytes)``: method ids come from
  the sorted names of all ``@replicated`` methods, so a second one would renumber journal entries.
  The bytes are a ``jetlog.cluster.meta`` envelope; ``MetaState.apply`` is total, so an entry
  never raises on the tick thread (a raise re-applies it forever on every node).
- **callbacks never raise** either (a raising callback applies the entry a second time), and
  they reach asyncio through ``call_soon_threadsafe`` guarded against a closed loop.
- **snapshots**: custom serializer/deserializer (msgspec; no pickle of our state, no fork), and
  the deserializer returns pysyncobj's entries as *tuples* (lists silently truncate the log).
- **password** = the cluster secret, mandatory with more than one member (without it every
  frame is unpickled before any authentication, and the admin port is open).
- ``appendEntriesUseBatch=False`` (1-2 ms commits instead of ~100 ms), ``commandsWaitLeader=False``
  (fail fast instead of "zombie" commands applied much later), short timeouts
  (``DEFAULT_CONF``), and a transport that sends a keepalive on every link so idle
  follower-follower links are not dropped on the first vote request.
- **durable log**: ``jetlog.cluster.journal.RaftJournal`` (checksummed, fsynced) instead of
  pysyncobj's unsynced mmap journal.

Threads: pysyncobj's autoTick thread runs Raft, applies entries, calls the serializer and our
tick hook. The event loop only submits commands (a locked queue), reads atomically updated
values, and asks the tick thread to run anything that touches Raft internals
(``_call_on_tick``).

Events: ``subscribe()`` returns an ``asyncio.Queue`` that receives, in log order,
``Applied(index, changed, reset)`` for every applied command (``reset``: a snapshot replaced the
whole state; re-derive every stream in ``changed``) and ``LeaderChanged(leader, is_leader,
term)``. Events before ``ready`` are replayed history: act on them only after
``wait_ready()``.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec
from pysyncobj import FAIL_REASON, SyncObjConf
from pysyncobj.node import TCPNode

from jetlog.cluster.journal import RaftJournal
from jetlog.cluster.meta import Barrier, Command, MetaState, Result, encode_envelope, new_req_id
from jetlog.cluster.raftfiles import (
    MetaRaftError,
    check_identity,
    raft_paths,
    read_dump,
    write_dump,
    write_identity,
)
from jetlog.cluster.raftglue import JournalHandle, RaftNode
from jetlog.cluster.raftloop import (
    WEDGE_SECONDS,
    Applied,
    EventHub,
    LeaderChanged,
    LeaderContact,
    MetaEvent,
    MetaNotLeaderError,
    MetaUnavailableError,
    await_answer,
    check_bind,
    hand_off,
    status_view,
    watch_wedge,
)
from jetlog.config import NodeConfig

log = logging.getLogger("jetlog.cluster.raft")

DEFAULT_CONF: dict[str, Any] = {
    "autoTick": True,
    "autoTickPeriod": 0.01,
    "appendEntriesUseBatch": False,
    "appendEntriesPeriod": 0.05,
    "raftMinTimeout": 0.3,
    "raftMaxTimeout": 0.8,
    "connectionTimeout": 1.5,
    "connectionRetryTime": 0.5,
    "leaderFallbackTimeout": 1.5,
    "commandsWaitLeader": False,
    "logCompactionMinEntries": 2000,
    "logCompactionMinTime": 300,
    "dynamicMembershipChange": False,
    "useFork": False,
    # pysyncobj caches peer DNS answers for 10 min (failures for 30 s): a member recreated with
    # a new address (a Kubernetes pod rescheduled, a compose container recreated) stayed shut
    # out that long, since only the higher-sorting member of a pair dials. Resolve again often.
    "dnsCacheTime": 2.0,
    "dnsFailCacheTime": 1.0,
}
"""pysyncobj settings (notes §5.1); ``conf`` overrides any of them. Measured with 3 processes on
the 2-core dev VM (``tests/integration/meta_raft_measure.py``, 7 runs each): leader agreed
0.38 s (p50) after the last member started; new leader 0.42 s p50 / 0.66 s max after SIGKILL of
the leader, 0.35 / 0.62 s after SIGSTOP; 0.44 / 0.64 and 0.41 / 0.59 s with two busy-loop
processes competing for the CPUs."""

_ATTEMPT_TIMEOUT = 0.5  # how often a waiting submission checks whether leader/term changed
_RESUBMIT_AFTER = 2.0  # re-submit a pending command even without a leader change after this
_UNKNOWN = {FAIL_REASON.LEADER_CHANGED, FAIL_REASON.UNKNOWN_OUTCOME}
_CODE_NAMES = {v: k for k, v in vars(FAIL_REASON).items() if not k.startswith("_")}


# ------------------------------------------------------------------------ MetaRaft
class MetaRaft:
    """One member of the metadata Raft group. See the module docstring.

    ``members`` maps every node name (this one included) to its advertised ``host:port``;
    ``bind`` is the address the Raft port listens on. ``data_dir`` is the node's data directory
    (IDENTITY and ``raft/`` go there). ``rejoin``: start with lost Raft state anyway (see
    ``raftfiles``). ``durable_journal=False`` only for measuring the cost of fsync.
    """

    def __init__(
        self,
        name: str,
        members: dict[str, str],
        bind: str,
        secret: str,
        data_dir: str,
        state: MetaState,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        cluster: str = "jetlog",
        conf: dict[str, Any] | None = None,
        rejoin: bool = False,
        durable_journal: bool = True,
    ) -> None:
        if name not in members:
            raise MetaRaftError(f"node {name!r} is not among the members {sorted(members)}")
        if len(set(members.values())) != len(members):
            raise MetaRaftError("two members share one Raft address")
        if len(members) > 1 and not secret:
            raise MetaRaftError(
                "a cluster secret is required with more than one member: without it the Raft "
                "port unpickles unauthenticated frames (remote code execution)"
            )
        self.name = name
        self.cluster = cluster
        self.state = state
        self._members = dict(members)
        self._addr_to_name = {a: n for n, a in members.items()}
        self._bind = bind
        self._secret = secret
        self._data_dir = data_dir
        self._loop = loop
        self._settings = {**DEFAULT_CONF, **(conf or {})}
        self._rejoin = rejoin
        self._durable = durable_journal
        self._keepalive_period = float(self._settings["connectionTimeout"]) / 4
        try:
            SyncObjConf(**self._settings).validate()
        except (AssertionError, TypeError) as e:
            raise MetaRaftError(f"invalid metadata Raft settings {conf!r}: {e!r}") from e
        self._node: RaftNode | None = None
        self._drop: set[str] = set()  # tests: Raft addresses whose traffic is silently lost
        self._hub = EventHub()
        self._pending: set[asyncio.Future[Any]] = set()
        self._tick_calls: collections.deque[Callable[[], None]] = collections.deque()
        self._wedge_task: asyncio.Task[None] | None = None
        self._stopped = False
        self._ready = False
        self._fatal = ""
        self._wedged = False
        self._wedge_after, self._wedge_every = WEDGE_SECONDS, 1.0  # tests shorten these
        # Written by the tick thread, read by the loop (plain floats/tuples: atomic under the GIL).
        self._view: tuple[str | None, bool, int] = (None, False, 0)
        self._contact = LeaderContact([a for n, a in sorted(members.items()) if n != name])

    @classmethod
    def from_config(cls, cfg: NodeConfig, state: MetaState, **kw: Any) -> MetaRaft:
        """A ``MetaRaft`` for ``cfg``'s ``[cluster]`` settings (``kw``: ``rejoin``, ``conf``...)."""
        cl = cfg.cluster
        members = cl.members()
        bind = cl.raft_bind or members[cfg.name]
        return cls(cfg.name, members, bind, cl.secret(), cfg.data_dir, state, cluster=cl.name, **kw)

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Check identity and files, bind the Raft port and start the tick thread. Does not wait
        for a leader (a node alone has none): use ``wait_ready``."""
        if self._node is not None:
            raise MetaRaftError("already started")
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self._build)
        except MetaRaftError:
            raise
        except (OSError, ValueError, msgspec.MsgspecError) as e:  # unreadable files, bad address
            raise MetaRaftError(f"metadata Raft of {self.name} cannot start: {e}") from e
        self._wedge_task = self._loop.create_task(
            watch_wedge(
                self.name, self._probe, self._set_wedged, after=self._wedge_after, every=self._wedge_every
            ),
            name=f"meta-raft-wedge-{self.name}",
        )

    def _build(self) -> None:
        """Blocking part of ``start`` (runs in a worker thread)."""
        first = check_identity(self._data_dir, self.cluster, self.name, rejoin=self._rejoin)
        _, raft_dir, journal_path, dump_path = raft_paths(self._data_dir)
        check_bind(self._bind)
        os.makedirs(raft_dir, exist_ok=True)
        prev = None
        if os.path.exists(dump_path):
            _, _, prev, _ = read_dump(dump_path)  # damaged: refuse now, not after a half start
        handle = JournalHandle(journal_path)
        handle.journal = RaftJournal(journal_path, durable=self._durable, compact_to=prev)
        if first:
            write_identity(self._data_dir, self.cluster, self.name)
        conf = SyncObjConf(
            password=self._secret or None,
            bindAddress=self._bind,
            journalFile=handle,
            fullDumpFile=dump_path,
            serializer=self._serialize,
            deserializer=self._deserialize,
            **self._settings,
        )
        self_addr = self._members[self.name]
        others = [a for n, a in sorted(self._members.items()) if n != self.name]
        try:
            node = RaftNode(self, self_addr, others, conf)
        except BaseException as e:
            handle.journal._destroy()
            if isinstance(e, ImportError):  # pysyncobj needs `cryptography` for the password
                raise MetaRaftError(f"metadata Raft cannot start: {e}") from e
            raise
        # pysyncobj stops ticking once the thread that built it ends; this one is a pool
        # worker, so tie the tick thread to the interpreter's main thread instead.
        node._SyncObj__mainThread = threading.main_thread()
        self._node = node
        node.addOnTickCallback(self._on_tick)

    async def stop(self) -> None:
        """Stop Raft: the tick thread closes sockets and the journal and exits (joined, bounded)."""
        node, self._node = self._node, None
        self._stopped = True
        if self._wedge_task is not None:
            self._wedge_task.cancel()
            try:
                await self._wedge_task
            except asyncio.CancelledError:
                pass
            self._wedge_task = None
        for fut in list(self._pending):
            if not fut.done():
                fut.set_exception(MetaRaftError(f"metadata Raft of {self.name} stopped"))
        self._pending.clear()
        if node is None:
            return
        node.destroy()
        thread = node._SyncObj__thread
        if thread is not None:
            await asyncio.to_thread(thread.join, 5.0)
            if thread.is_alive():
                log.error("meta raft %s: tick thread did not exit within 5 s", self.name)
        notifier = getattr(node, "_SyncObj__pipeNotifier", None)
        for attr in ("_PipeNotifier__pipeR", "_PipeNotifier__pipeW"):
            fd = getattr(notifier, attr, None)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    # ---------------------------------------------------------------- proposing
    async def propose(self, cmd: Command, timeout: float = 3.0) -> Result:
        """Commit ``cmd`` and return its ``Result`` (a rejection is a result, not an error).

        An attempt whose outcome is unknown (leader changed, no answer in time) is re-proposed
        with the *same* request id, so it is applied at most once; an attempt that was never
        appended (no leader, not leader, queue full, denied) is retried with backoff. Raises
        ``MetaUnavailableError`` when the deadline passes without a result.
        """
        raw = encode_envelope(cmd, new_req_id(), time.time_ns())
        return await self._propose_raw(raw, timeout)

    async def _propose_raw(self, raw: bytes, timeout: float) -> Result:
        loop = self._running_loop()
        deadline = loop.time() + timeout
        delay, last, unknown = 0.01, "no attempt", False
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            node = self._require_node()
            fut: asyncio.Future[tuple[Any, int]] = loop.create_future()
            self._pending.add(fut)
            try:
                node._apply(raw, callback=hand_off(loop, fut))
                res, err = await await_answer(
                    fut, deadline, self._view_key, _ATTEMPT_TIMEOUT, _RESUBMIT_AFTER
                )
            except TimeoutError:
                unknown, last = True, "no answer"
                continue
            finally:
                self._pending.discard(fut)
            if err == FAIL_REASON.SUCCESS:
                if not isinstance(res, Result):
                    raise MetaRaftError(f"metadata entry applied with an unexpected result {res!r}")
                return res
            unknown = unknown or err in _UNKNOWN
            last = _CODE_NAMES.get(err, str(err))
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
            delay = min(delay * 2, 0.2)
        raise MetaUnavailableError(
            f"metadata Raft: no result within {timeout:.1f}s (last attempt: {last}; "
            f"leader: {self.leader() or 'none'}, term {self.term})"
            + ("; the command may still be applied" if unknown else ""),
            outcome_unknown=unknown,
        )

    async def barrier(self, timeout: float = 3.0) -> int:
        """Commit a no-op; once this returns, every entry committed before is applied here.
        Returns its log index."""
        res = await self.propose(Barrier(), timeout)
        if not res.ok:
            raise MetaRaftError(f"barrier rejected: {res.error}")
        return res.index

    async def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait until this node has caught up with the leader (a barrier committed and applied
        here). Before that, applied entries are replayed history."""
        loop = self._running_loop()
        deadline = loop.time() + timeout
        while not self._ready:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise MetaUnavailableError(
                    f"metadata Raft of {self.name} not ready within {timeout:.1f}s "
                    f"(leader: {self.leader() or 'none'})",
                    outcome_unknown=False,
                )
            try:
                await self.barrier(remaining)
            except MetaUnavailableError:
                continue
            self._ready = True

    async def wait_applied(self, index: int, timeout: float = 3.0) -> None:
        """Wait until entry ``index`` is applied here (read-your-writes across nodes)."""
        await self._hub.wait_applied(index, timeout)

    def force_compaction(self) -> None:
        """Snapshot the state and cut the log on the next tick (tests, operations)."""
        self._require_node().forceLogCompaction()

    # ---------------------------------------------------------------- views
    @property
    def ready(self) -> bool:
        """True once ``wait_ready`` succeeded."""
        return self._ready

    def leader(self) -> str | None:
        """Name of the Raft leader as this node last learned it (may be stale)."""
        return self._view[0]

    async def wait_own_leadership(self, timeout: float) -> bool:
        """Wait (bounded) until this node's own view says it leads; True if it does."""
        loop = self._running_loop()
        deadline = loop.time() + timeout
        while self._view[0] != self.name:
            left = deadline - loop.time()
            if left <= 0:
                return False
            await self._hub.view_change(min(left, 0.05))
        return True

    @property
    def is_leader(self) -> bool:
        """Raft state is LEADER. Two nodes can both believe it for a moment: fence on epochs
        and ``seconds_since_leader_contact``, never on this alone."""
        node = self._node
        return bool(node is not None and node._isLeader())

    @property
    def term(self) -> int:
        """Current Raft term."""
        node = self._node
        return int(node.raftCurrentTerm) if node is not None else 0

    @property
    def has_quorum(self) -> bool:
        """Connected to a majority (this node included)."""
        node = self._node
        return bool(node is not None and node.hasQuorum)

    @property
    def applied_index(self) -> int:
        """Index of the last applied entry whose ``Applied`` event was dispatched."""
        return self._hub.applied

    def seconds_since_leader_contact(self) -> float:
        """Seconds since this node last had proof of a working Raft leader: as a follower, an
        append from the leader; as the leader, an answer from enough followers for a majority.
        ``inf`` before any. A node over the node timeout must stop acting as a stream leader."""
        node = self._node
        if node is None:
            return math.inf
        return self._contact.age(bool(node._isLeader()), time.monotonic())

    def status(self) -> dict[str, Any]:
        """Role, leader, term, commit/applied index, quorum, readiness and each member's link."""
        node = self._node
        if node is None:
            return {"name": self.name, "role": "stopped", "members": dict(self._members)}
        for _ in range(5):  # getStatus iterates dicts the tick thread may resize
            try:
                st = node.getStatus()
                break
            except RuntimeError:
                continue
        else:
            st = {}
        return {
            "name": self.name,
            "cluster": self.cluster,
            **status_view(st, self.name, self._members),
            "leader": self.leader(),
            "ready": self._ready,
            "wedged": self._wedged,
            "fatal": self._fatal or None,
            "seconds_since_leader_contact": self.seconds_since_leader_contact(),
        }

    def subscribe(self) -> asyncio.Queue[MetaEvent]:
        """A new unbounded queue of ``Applied``/``LeaderChanged`` events (call before ``start``
        to also see the replay). The consumer must keep draining it."""
        return self._hub.subscribe()

    def unsubscribe(self, q: asyncio.Queue[MetaEvent]) -> None:
        """Stop feeding ``q``."""
        self._hub.unsubscribe(q)

    # ---------------------------------------------------------------- leadership
    async def transfer_leadership(self, to: str | None = None, timeout: float = 3.0) -> str:
        """Hand Raft leadership to ``to`` (a member name; None = the most caught-up follower) and
        wait until another node leads. Returns the new leader's name. Only the leader may ask
        (``MetaNotLeaderError`` otherwise)."""
        if to is not None and (to not in self._members or to == self.name):
            raise MetaRaftError(f"cannot transfer leadership to {to!r}")
        if not self.is_leader:
            raise MetaNotLeaderError(f"{self.name} is not the metadata leader (leader: {self.leader()})")
        loop = self._running_loop()
        deadline = loop.time() + timeout
        target = self._members[to] if to else None
        while loop.time() < deadline:
            leader, leading, _ = self._view
            if not leading:
                if leader is None or leader == self.name:
                    await self._hub.view_change(deadline - loop.time())  # an election is under way
                    continue
                if to in (None, leader):
                    return leader
                raise MetaUnavailableError(f"leadership went to {leader}, not {to}", outcome_unknown=False)
            fut: asyncio.Future[tuple[Any, int]] = loop.create_future()
            cb = hand_off(loop, fut)
            node = self._require_node()
            self._call_on_tick(functools.partial(node.transferLeadership, target, callback=cb))
            try:
                _, err = await asyncio.wait_for(fut, max(0.01, deadline - loop.time()))
            except TimeoutError:
                break
            # SUCCESS only means "sent"; DENIED: the target is not caught up yet; NOT_LEADER: our
            # view is behind. Give the election a moment, then look again.
            wait = 1.0 if err == FAIL_REASON.SUCCESS else 0.05
            await self._hub.view_change(min(deadline - loop.time(), wait))
        raise MetaUnavailableError(
            f"metadata leadership did not move within {timeout:.1f}s", outcome_unknown=False
        )

    # ---------------------------------------------------------------- tick thread
    def _on_apply(self, raw: bytes, index: int) -> Result:
        try:
            res, changed = self.state.apply_entry(raw, index)
        except Exception as e:  # apply_entry is total; this is a last line against a wedge
            log.exception("meta raft %s: apply of entry %d raised", self.name, index)
            res, changed = Result(ok=False, code="internal", error=repr(e), index=index), ()
        self._post(self._hub.dispatch, Applied(index, changed))
        return res

    def _on_tick(self) -> None:
        try:
            while self._tick_calls:
                self._tick_calls.popleft()()
            node = self._node
            if node is None:
                return
            ld = node._getLeader()
            view = (
                self._addr_to_name.get(ld.id, ld.id) if ld is not None else None,
                node._isLeader(),
                node.raftCurrentTerm,
            )
            if view != self._view:
                if view[1] and not self._view[1]:
                    self._contact.became_leader(time.monotonic())
                self._view = view
                self._post(self._hub.dispatch, LeaderChanged(*view))
        except Exception:
            log.exception("meta raft %s: tick hook failed", self.name)

    def _on_message(self, node: Any, mtype: Any) -> None:
        raft = self._node
        if raft is None:
            return
        if mtype == "append_entries":
            if raft._getLeader() == node:
                self._contact.heard_leader(time.monotonic())
        elif mtype == "next_node_idx" and raft._isLeader():
            self._contact.heard_follower(node.id, time.monotonic())

    def _serialize(self, filename: str, data: Any) -> None:
        last, prev, cluster = data
        write_dump(filename, self.state.snapshot(), last, prev, [n.id for n in cluster])

    def _deserialize(self, filename: str) -> tuple[Any, Any, set[Any]]:
        try:
            state, last, prev, cluster = read_dump(filename, sync=self._durable)
            changed = self.state.restore(state)
        except Exception as e:
            # pysyncobj swallows this and goes on with whatever state it has: refuse to act.
            self._fatal = f"metadata snapshot {filename} could not be loaded: {e}; wipe raft/ and rejoin"
            log.critical("meta raft %s: %s", self.name, self._fatal)
            raise
        self._post(self._hub.dispatch, Applied(last[1], changed, reset=True))
        return last, prev, {TCPNode(a) for a in cluster}

    def _post(self, fn: Callable[[Any], None], arg: Any) -> None:
        loop = self._loop
        if loop is None or self._stopped:
            return
        try:
            loop.call_soon_threadsafe(fn, arg)
        except RuntimeError:
            pass  # loop closed

    def _call_on_tick(self, fn: Callable[[], None]) -> None:
        self._tick_calls.append(fn)

    # ---------------------------------------------------------------- loop thread
    def _probe(self) -> tuple[bool, int, int] | None:
        node = self._node
        if node is None:
            return None
        return bool(node.tick_thread_alive()), int(node.raftCommitIndex), int(node.raftLastApplied)

    def _view_key(self) -> tuple[str | None, int]:
        return self._view[0], self._view[2]

    def _set_wedged(self, wedged: bool) -> None:
        self._wedged = wedged

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise MetaRaftError("metadata Raft not started")
        return self._loop

    def _require_node(self) -> RaftNode:
        if self._fatal:
            raise MetaRaftError(self._fatal)
        node = self._node
        if node is None:
            raise MetaRaftError(f"metadata Raft of {self.name} is not running")
        return node
