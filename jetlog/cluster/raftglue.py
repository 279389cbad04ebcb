"""The pysyncobj side of ``MetaRaft`` (:mod:`jetlog.cluster.raft`): the journal hook that hands
pysyncobj our durable ``RaftJournal``, the transport (keepalive on every link, leader-contact
tracking, test-only drops, late acks) and the ``SyncObj`` subclass with the one replicated entry
point. The hazards they wrap are listed in ``raft.py``'s docstring (``shared/notes/pysyncobj.md``
§5): read both before changing anything here.

They reach their ``MetaRaft`` only through :class:`RaftOwner`, so this module does not import
``raft.py``.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import pysyncobj.syncobj as _so
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.transport import TCPTransport

from jetlog.cluster.journal import RaftJournal
from jetlog.cluster.meta import Result

_KEEPALIVE = {"type": "jetlog_keepalive"}


class RaftOwner(Protocol):
    """What the transport and the node use of their ``MetaRaft`` (called on the tick thread)."""

    @property
    def _keepalive_period(self) -> float: ...

    @property
    def _drop(self) -> set[str]: ...

    def _on_message(self, node: Any, mtype: Any) -> None: ...
    def _on_apply(self, raw: bytes, index: int) -> Result: ...


class JournalHandle(str):
    """``conf.journalFile`` carrying our journal object: pysyncobj builds its journal with the
    module-level ``createJournal(conf.journalFile)``, which we wrap below to hand it ours."""

    journal: RaftJournal


_orig_create_journal = _so.createJournal


def _create_journal(journalFile: Any = None) -> Any:
    if isinstance(journalFile, JournalHandle):
        return journalFile.journal
    return _orig_create_journal(journalFile)


_so.createJournal = _create_journal


class _Transport(TCPTransport):
    """Keepalive on every link (notes §3.8) + leader-contact tracking + test-only drops."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        self._jl: RaftOwner = syncObj._jl
        self._jl_last_ka = 0.0
        super().__init__(syncObj, selfNode, otherNodes)

    def _onTick(self) -> None:
        super()._onTick()
        now = time.monotonic()
        if now - self._jl_last_ka >= self._jl._keepalive_period:
            self._jl_last_ka = now
            for node in list(self._nodes):
                self.send(node, _KEEPALIVE)

    def send(self, node: Any, message: Any) -> bool:
        if node.id in self._jl._drop:
            return True  # silently lost, the connection stays up (a partition without FIN)
        return bool(super().send(node, message))

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        if node.id in self._jl._drop:
            return
        if isinstance(message, dict):
            mtype = message.get("type")
            if mtype == "jetlog_keepalive":
                return  # it already refreshed the connection's read time; SyncObj need not see it
            if mtype == "next_node_idx" and self._stale_ack(node, message):
                self._jl._on_message(node, mtype)
                return
        super()._onMessageReceived(node, message)
        if isinstance(message, dict):
            self._jl._on_message(node, message.get("type"))

    def _stale_ack(self, node: Any, message: dict[str, Any]) -> bool:
        """Handle a follower's *late* success answer without moving ``nextIndex`` back.

        With ``appendEntriesUseBatch=False`` the leader sends an append per command, so the
        answers to earlier appends arrive after later appends were sent. pysyncobj sets
        ``nextIndex`` to each answer's value, i.e. backwards, and re-sends entries the follower
        has; the follower then truncates its log after ``prevLogIdx`` (logging CRITICAL
        "truncating already-applied log entries") and appends them again. Besides the churn,
        a re-send cut by ``appendEntriesBatchSizeBytes`` would leave the follower without
        entries it acknowledged. Here such an answer only raises ``matchIndex`` and the
        response time, as pysyncobj would; genuine rejections (``reset``) pass through.
        """
        raft = self._syncObj
        if not raft._isLeader() or not message.get("success") or message.get("reset"):
            return False
        nxt = raft._SyncObj__raftNextIndex
        match = raft._SyncObj__raftMatchIndex
        new_next = message.get("next_node_idx")
        if node not in nxt or node not in match or not isinstance(new_next, int) or new_next >= nxt[node]:
            return False
        if match[node] < new_next - 1:
            match[node] = new_next - 1
        raft._SyncObj__lastResponseTime[node] = time.monotonic()
        return True


class RaftNode(SyncObj):
    def __init__(self, owner: RaftOwner, self_addr: str, others: list[str], conf: SyncObjConf) -> None:
        self._jl = owner  # before SyncObj.__init__: its tick thread may apply entries at once
        super().__init__(self_addr, others, conf, transportClass=_Transport)

    @replicated
    def _apply(self, raw: bytes) -> Result:
        # Tick thread. The index of the entry being applied is raftLastApplied + 1.
        return self._jl._on_apply(raw, self.raftLastApplied + 1)
