"""The committed mark of a stream, and the acknowledgements that wait for it.

Acknowledgements are durable: a PubAck (and a republish) is queued with the log position it
depends on and sent from the store's commit listener, after the group commit that covers it.
Errors are answered at once; they depend on nothing durable.

Kept apart from ``stream.py`` (the publish path that queues the acks): the committed mark moves
here, from the store's commit listener on a standalone stream and from the replication side
(:meth:`StreamCommit.advance`) on a replicated one. :class:`StreamCommit` is a base class of
``jetlog.stream.stream.Stream``; the stream state it uses is declared on it and set by
``Stream.__init__``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from jetlog.errors import JetlogError
from jetlog.stream.limits import StreamLimits
from jetlog.stream.seams import STANDALONE, CommitListener, Outbound, Replication
from jetlog.tasklog import retrieve

log = logging.getLogger("jetlog.stream")


class StreamCommit(StreamLimits):
    """The committed mark and the acks queued until it covers them (the state used is set by
    ``Stream.__init__``)."""

    name: str
    out: Outbound
    role: str
    repl: Replication | None
    _committed: int
    _pending: deque[tuple[int, str, bytes, bytes]]
    _commit_listeners: list[CommitListener]

    @property
    def committed_seq(self) -> int:
        """The highest sequence readers may see and acks may confirm: the store's durable
        sequence on a standalone stream, the replicated high-water mark on a leader, and
        ``min(leader HW, own durable end)`` on a follower."""
        return self._committed

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Be told whenever ``committed_seq`` advances (consumers)."""
        self._commit_listeners.append(listener)

    def advance(self, committed: int) -> None:
        """Move the committed mark (called by the replication side; standalone streams do it
        from the store's commit listener). Never moves backwards."""
        if committed <= self._committed:
            return
        self._committed = committed
        self._flush_pending(committed)
        for fn in self._commit_listeners:
            try:
                fn(committed)
            except Exception:  # one listener's bug must not stop acks for the others
                log.exception("stream %s: commit listener failed", self.name)

    def want_committed(self) -> None:
        """A reader found messages stored here beyond the committed mark (and will ask again):
        have the replication side learn the mark now rather than at its next occasion."""
        if self.repl is not None and self._committed < self.store.last_seq:
            self.repl.committed_wanted()

    def clamp_committed(self) -> None:
        """After a truncation or reset of this replica's log: the committed mark never points
        past what the log holds (the truncated entries were never committed, and their
        sequences will be reused by the leader's entries)."""
        last = self.store.last_seq
        if self._committed > last:
            self._committed = last

    async def wait_committed(self, timeout: float = 5.0) -> None:
        """Wait until everything stored so far is committed (bounded; reads call this so they
        show exactly the committed state without hiding a message one commit away)."""
        target = self.store.last_seq
        if self._committed >= target:
            return
        if self.repl is None:
            # Bounded like the replicated case: a disk that stops answering must not take
            # STREAM.INFO or Direct Get down with it (each waiting request would hold a task
            # for ever); past the bound the caller answers from the committed state. The
            # flush itself goes on, and its failure is the store's to report.
            flush = asyncio.ensure_future(self.store.flush())
            flush.add_done_callback(retrieve)  # its error is the store's to log
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(flush), timeout)
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        # A follower learns HW-only moves late (its leader holds them back to ride on the next
        # message): a read right after a write would wait for that. Ask now.
        self.repl.committed_wanted()

        def check(c: int) -> None:
            if c >= target and not fut.done():
                fut.set_result(None)

        self._commit_listeners.append(check)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, timeout)
        finally:
            self._commit_listeners.remove(check)

    async def sync(self) -> None:
        """Wait until every mutation so far (removals included) is durable: on this node when
        standalone, on every in-sync replica when replicated (API changes such as purge and
        message delete answer after this)."""
        if self.repl is None:
            await self.store.flush()
        else:
            await self.repl.sync()

    # ---- acks after durability ------------------------------------------------------------

    def _queue(self, ticket: int, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        if self._committed >= ticket and not self._pending:
            self.out.send(subject, payload, hdr)
        else:
            self._pending.append((ticket, subject, payload, hdr))

    def _on_commit(self, durable: int) -> None:
        # The store's group commit covered everything up to ``durable``. Only a standalone
        # stream commits on its own durability; a replica between roles (``repl`` None after a
        # demotion, leaderless) commits nothing: its unreplicated tail may be truncated.
        if self.repl is not None:
            self.repl.on_durable(durable)
        elif self.role == STANDALONE:
            self.advance(durable)

    def _flush_pending(self, committed: int) -> None:
        pending, send = self._pending, self.out.send
        while pending and pending[0][0] <= committed:
            _, subject, payload, hdr = pending.popleft()
            try:
                send(subject, payload, hdr)
            except JetlogError as e:
                # The upstream link is down: the client will time out and retry (with
                # Nats-Msg-Id the retry is deduplicated). The data itself is durable.
                log.warning("stream %s: could not send ack to %s: %s", self.name, subject, e)
