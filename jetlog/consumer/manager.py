"""The consumers of one stream: lifecycle, persistence, ack routing and retention.

Retention (spec §9): on a work-queue stream a message is removed when its consumer acks or
terminates it; on an interest stream when no consumer whose filter matches it still needs it
("needs" = above its ack floor and not yet delivered, still pending, or held past max_deliver).
Deleting the last consumer of an interest stream purges it.

Acks with a reply subject ("double acks") are answered only after the ack is durable in the
consumer-state log: a client that saw the confirmation never gets the message again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jetlog.consumer import frames as F
from jetlog.consumer.consumer import Consumer
from jetlog.consumer.pull import Waiting
from jetlog.consumer.state import ACK_NONE, ConsumerState
from jetlog.consumer.store import ConsumerLog
from jetlog.errors import JetlogError
from jetlog.observe import advisory

if TYPE_CHECKING:
    from jetlog.consumer.host import ConsumerStream

log = logging.getLogger("jetlog.consumer")


class ConsumerSet:
    """Every consumer of ``stream``."""

    def __init__(
        self,
        stream: ConsumerStream,
        leaf: Any,
        clog: ConsumerLog | None,
        *,
        decode_config: Callable[[bytes], Any],
        encode_config: Callable[[Any], bytes],
        parse_pull: Callable[[Consumer, bytes, bytes], Waiting | bytes],
    ) -> None:
        self.stream = stream
        self.leaf = leaf
        self.clog = clog
        self.decode_config = decode_config
        self.encode_config = encode_config
        self.parse_pull = parse_pull
        self.consumers: dict[str, Consumer] = {}
        self._prefixes: dict[str, bytes] = {}
        self._demand: dict[Consumer, None] = {}  # consumers to kick on commit (see on_commit)
        self._replies: list[str] = []
        self._reply_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False
        self.on_close: Callable[[], None] | None = None  # drops the stream's ack subscription
        self._compacting = False
        if clog is not None:
            clog.on_large = self._compact_soon
        stream.add_commit_listener(self.on_commit)
        stream.set_interest_check(self.interested if stream.policy.interest else None)

    # ---- lifecycle -------------------------------------------------------------------------

    def recover(self) -> None:
        """Re-create the durable consumers recorded in the consumer-state log."""
        if self.clog is None:
            return
        for name, r in sorted(self.clog.recovered.items()):
            try:
                cfg = self.decode_config(r.config)
            except (ValueError, JetlogError) as e:
                log.error(
                    "stream %s: consumer %s has an unreadable config, skipped: %s", self.stream.name, name, e
                )
                continue
            c = Consumer(self, name, cfg, r.created, r.state, r.cid, r.pause_until)
            self.consumers[name] = c
            c.start()
            log.info(
                "consumer %s > %s recovered: delivered %d/%d, ack floor %d/%d, %d pending",
                self.stream.name,
                name,
                r.state.dseq,
                r.state.sseq,
                r.state.floor_dseq,
                r.state.floor_sseq,
                len(r.state.pending),
            )
        self.clog.recovered = {}

    def create(self, name: str, config: Any, durable: bool) -> Consumer:
        """Create and start a consumer from a validated config."""
        created = time.time_ns()
        st = ConsumerState(str(getattr(config, "ack_policy", "none") or "none"))
        c = Consumer(self, name, config, created, st)
        c.position_new()
        persist = durable and self.clog is not None and not getattr(config, "mem_storage", False)
        if persist:
            assert self.clog is not None
            c.cid = self.clog.create(name, st.ack_policy, self.encode_config(config), created)
            self.clog.start(c.cid, st.sseq + 1)
            pause = getattr(config, "pause_until", None)
            if pause:
                from jetlog.wire.timefmt import parse_time

                c.paused_until = parse_time(pause)
                self.clog.pause(c.cid, c.paused_until)
        elif getattr(config, "pause_until", None):
            from jetlog.wire.timefmt import parse_time

            c.paused_until = parse_time(config.pause_until)
        self.consumers[name] = c
        c.start()
        self.advisory_action(c, "create")
        return c

    def update(self, c: Consumer, config: Any) -> None:
        """Apply a validated update."""
        if c.cid and self.clog is not None:
            self.clog.update(c.cid, self.encode_config(config))
        c.update(config)

    def delete(self, name: str) -> bool:
        """Delete a consumer (``409 Consumer Deleted`` to its waiting requests)."""
        c = self.consumers.pop(name, None)
        if c is None:
            return False
        c.close(deleted=True)
        if c.cid and self.clog is not None:
            self.clog.delete(c.cid)
        self.advisory_action(c, "delete")
        if self.stream.policy.interest:
            self._reevaluate_interest()
        return True

    def delete_inactive(self, c: Consumer) -> None:
        """Inactivity cleanup of an ephemeral (or thresholded durable) consumer."""
        if self.consumers.get(c.name) is c:
            self.delete(c.name)

    async def close(self, deleted: bool = False) -> None:
        """Stop every consumer; flush the state log."""
        self.closed = True
        on_close, self.on_close = self.on_close, None
        if on_close is not None:
            on_close()  # no more acks for this node: another writer (or none) takes them
        for c in self.consumers.values():
            c.close(deleted)
        if deleted:
            self.consumers.clear()
        for t in list(self._tasks):
            t.cancel()
        if self.clog is not None:
            with contextlib.suppress(JetlogError):
                # A log that did not change since it was opened (or last compacted) is left as
                # it is, unless it grew large: most streams on a stop.
                if not deleted and (not self.clog.unchanged() or self.clog.wants_compaction()):
                    await self.compact()
            await self.clog.close()

    def _compact_soon(self) -> None:
        if self._compacting or self.closed:
            return
        self._compacting = True

        async def run() -> None:
            try:
                await self.compact()
            finally:
                self._compacting = False

        task = asyncio.get_running_loop().create_task(run(), name=f"compact-consumers:{self.stream.name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("stream %s: consumer task failed", self.stream.name, exc_info=task.exception())

    def _durable_states(self) -> list[tuple[int, str, bytes, int, ConsumerState, int]]:
        return [
            (c.cid, c.name, self.encode_config(c.config), c.created, c.state, c.paused_until)
            for c in self.consumers.values()
            if c.cid
        ]

    async def compact(self) -> None:
        """Rewrite the state log as one snapshot per durable consumer."""
        if self.clog is None:
            return
        await self.clog.compact(self._durable_states)

    def image(self) -> tuple[bytes, int]:
        """The compacted state log of every durable consumer, and the number of records the
        log had when it was taken (a follower continues from there)."""
        from jetlog.consumer.records import encode_image

        assert self.clog is not None
        return encode_image(self._durable_states()), self.clog.appended

    # ---- routing ---------------------------------------------------------------------------

    def ack_prefix(self, name: str) -> bytes:
        """``$JS.ACK.<stream>.<consumer>.`` (cached)."""
        p = self._prefixes.get(name)
        if p is None:
            p = self._prefixes[name] = f"$JS.ACK.{self.stream.name}.{name}.".encode()
        return p

    def pull_request(self, c: Consumer, reply: str, body: bytes, hdr: bytes) -> None:
        """A ``MSG.NEXT`` (or ``+NXT``) request for ``c``."""
        if c.p.push:
            self.leaf.publish(reply, b"", hdr=F.PUSH_BASED)
            return
        w = self.parse_pull(c, body, hdr)
        if isinstance(w, bytes):
            self.leaf.publish(reply, b"", hdr=w)
            return
        w.reply = reply
        if c.p.max_waiting and len(c.waiting) >= c.p.max_waiting:
            c.make_room()
            if len(c.waiting) >= c.p.max_waiting:
                c.note_max_waiting()
                if not w.heartbeat:
                    self.leaf.publish(reply, b"", hdr=F.MAX_WAITING)
                return
        c.add_request(w)

    def wants_commits(self, c: Consumer) -> None:
        """``c`` gained demand (a pull request, push interest): see :meth:`on_commit`."""
        self._demand[c] = None

    def on_commit(self, committed: int) -> None:
        """New messages are durable: wake consumers that have somewhere to deliver.

        Only consumers that gained demand since they were last seen without it are looked at
        (``_demand``, pruned here): with 10,000 idle consumers on a stream a commit used to
        cost 10,000 checks. Every way a consumer gains demand calls :meth:`wants_commits`
        (``Consumer.add_request``, the ``active`` setter)."""
        demand = self._demand
        if not demand:
            return
        for c in list(demand):
            if c.closed or not (c.active if c.p.push else c.waiting):
                del demand[c]
            else:
                c.kick()

    def on_interest(self, event: str, subject: str) -> None:
        """The hub's interest changed (LS+/LS- ``subject``)."""
        for c in list(self.consumers.values()):
            c.on_interest_change(event, subject)

    def kick_all(self) -> None:
        """Deliveries held by the replication side may resume."""
        for c in list(self.consumers.values()):
            c.kick()

    def on_link_up(self) -> None:
        """The leaf link is back: deliveries held while it was down resume."""
        for c in list(self.consumers.values()):
            c.on_interest_change()
            c.kick()

    def on_purge(self, first_seq: int) -> None:
        """The stream was purged (or compacted) below ``first_seq``."""
        for c in self.consumers.values():
            c.on_purge(first_seq)

    # ---- retention -------------------------------------------------------------------------

    def interested(self, subject: str) -> bool:
        """Interest retention: does any consumer want messages on ``subject``?"""
        return any(c.p.wants(subject) for c in self.consumers.values())

    @staticmethod
    def _needs(c: Consumer, seq: int) -> bool:
        st = c.state
        if seq <= st.floor_sseq:
            return False
        if c.p.ack_policy == ACK_NONE:
            return seq > st.sseq
        return seq > st.sseq or seq in st.pending or seq in st.redelivered

    def on_acked(self, c: Consumer, seqs: list[int]) -> None:
        """Messages ``c`` finished with: remove them where retention says so."""
        pol = self.stream.policy
        if pol.workqueue:
            for s in seqs:
                self.stream.store.remove(s)
        elif pol.interest:
            self._release(c, seqs)

    def on_delivered_none(self, c: Consumer, seq: int) -> None:
        """An ack-none consumer delivered ``seq``: on interest streams that releases it."""
        if self.stream.policy.interest:
            self._release(c, [seq])
        elif self.stream.policy.workqueue:
            self.stream.store.remove(seq)

    def _release(self, c: Consumer, seqs: list[int]) -> None:
        store = self.stream.store
        others = [o for o in self.consumers.values() if o is not c]
        for s in seqs:
            m = store.load(s)
            if m is None:
                continue
            if not any(o.p.wants(m.subject) and self._needs(o, s) for o in others):
                store.remove(s)

    def _reevaluate_interest(self) -> None:
        store = self.stream.store
        if not self.consumers:
            store.purge(None)
            return
        seq = store.first_seq
        while True:
            m = store.load_next(seq)
            if m is None:
                break
            seq = m.seq + 1
            if not any(o.p.wants(m.subject) and self._needs(o, m.seq) for o in self.consumers.values()):
                store.remove(m.seq)

    # ---- double-ack replies ----------------------------------------------------------------

    def reply_after_sync(self, c: Consumer, reply: str) -> None:
        """Send the empty ack reply once the ack is durable (immediately if not persisted)."""
        if not c.cid or self.clog is None:
            self.leaf.publish(reply, b"")
            return
        self._replies.append(reply)
        if self._reply_task is None or self._reply_task.done():
            self._reply_task = asyncio.get_running_loop().create_task(self._flush_replies())

    async def _flush_replies(self) -> None:
        while self._replies:
            batch, self._replies = self._replies, []
            assert self.clog is not None
            try:
                await self.clog.sync()
            except JetlogError as e:
                # Not durable: do not confirm; the client's ack_sync times out and it can retry.
                log.error(
                    "stream %s: consumer state not durable, %d ack replies withheld: %s",
                    self.stream.name,
                    len(batch),
                    e,
                )
                continue
            for r in batch:
                self.leaf.publish(r, b"")

    # ---- advisories ------------------------------------------------------------------------

    def _advise(self, subject: str, body: dict[str, Any]) -> None:
        kind = body.pop("type").rsplit(".", 1)[1]
        advisory.send(self.leaf, subject.removeprefix(advisory.PREFIX), kind, body)

    def advisory_action(self, c: Consumer, action: str) -> None:
        kind = "CREATED" if action == "create" else "DELETED"
        self._advise(
            f"$JS.EVENT.ADVISORY.CONSUMER.{kind}.{self.stream.name}.{c.name}",
            {
                "type": "io.nats.jetstream.advisory.v1.consumer_action",
                "stream": self.stream.name,
                "consumer": c.name,
                "action": action,
            },
        )

    def advisory_max_deliveries(self, c: Consumer, seq: int, deliveries: int) -> None:
        self._advise(
            f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{self.stream.name}.{c.name}",
            {
                "type": "io.nats.jetstream.advisory.v1.max_deliver",
                "stream": self.stream.name,
                "consumer": c.name,
                "stream_seq": seq,
                "deliveries": deliveries,
            },
        )

    def advisory_terminated(self, c: Consumer, seq: int, dseq: int, deliveries: int, reason: str) -> None:
        self._advise(
            f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{self.stream.name}.{c.name}",
            {
                "type": "io.nats.jetstream.advisory.v1.terminated",
                "stream": self.stream.name,
                "consumer": c.name,
                "consumer_seq": dseq,
                "stream_seq": seq,
                "deliveries": deliveries,
                **({"reason": reason} if reason else {}),  # omitted when empty, as nats-server does
            },
        )

    def advisory_nak(self, c: Consumer, seq: int, dseq: int, deliveries: int) -> None:
        self._advise(
            f"$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.{self.stream.name}.{c.name}",
            {
                "type": "io.nats.jetstream.advisory.v1.nak",
                "stream": self.stream.name,
                "consumer": c.name,
                "consumer_seq": dseq,
                "stream_seq": seq,
                "deliveries": deliveries,
            },
        )

    def advisory_pause(self, c: Consumer) -> None:
        from jetlog.wire.timefmt import format_time

        self._advise(
            f"$JS.EVENT.ADVISORY.CONSUMER.PAUSE.{self.stream.name}.{c.name}",
            {
                "type": "io.nats.jetstream.advisory.v1.consumer_pause",
                "stream": self.stream.name,
                "consumer": c.name,
                "paused": bool(c.paused_until),
                "pause_until": format_time(c.paused_until),
            },
        )
