"""One message per node pair and loop pass for replication traffic (framing: ``wire/repl_mux``).

Every replicated stream runs its own follower loop (``follower.py``): one fetch at a time to
its leader, answered when there is news. With many streams written at once, each commit of
each stream cost two NATS messages per follower (the fetch and its reply), each relayed by the
upstream server and each a wake-up on both nodes: 200 R3 streams under load went at ~3k
msgs/s where a nats-server R3 cluster went at ~16k (docs/internals.md, thirteenth pass).

Here nothing of the per-stream protocol changes; only the transport batches:

* :class:`MuxRequester` (follower side) is the ``request`` callable of every follower on this
  node: the requests made in one loop pass for the same leader node leave as one message (or
  a few, each under the upstream ``max_payload``), each with its own id, timeout and future.
* :class:`MuxReplier` (leader side) does the same for replies: the answers a leader gives in
  one loop pass to the same follower node (released long polls, HW moves) leave together.

The first request (reply) of a pass to a node leaves at once, alone; the ones after it wait
for the pass's end. A lone stream's replication thus never waits for the rest of a pass, and
many streams' still leave in two messages per pass and node pair.

A batch's reply subject is the requester's ``<inbox>.<batch>``: nats-server answers there
with its no-responders status when the leader node is not subscribed (its node is down), and
every request of that batch fails at once as a plain request would (``TransportError``).
Replies themselves go to ``<inbox>.r``, named in the request message. A peer that does not
speak the mux (an older jetlog during a rolling upgrade) answers a batch with a plain error
reply: its subject is then sent plain requests from then on.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable
from typing import Protocol

from jetlog.errors import TransportError
from jetlog.tasklog import expire
from jetlog.transport.client_raw import RawCallback
from jetlog.wire import repl_mux as M
from jetlog.wire.leaf import PayloadTooLargeError

log = logging.getLogger("jetlog.cluster.mux")

BATCHES_KEPT = 4096
"""Batches whose requests may still be failed by a no-responders status (older ones are
forgotten: their requests time out instead)."""


class MuxLink(Protocol):
    """What the mux uses of the client link (``transport.client.ClientLink``)."""

    @property
    def max_payload(self) -> int: ...

    def send(self, subject: str, payload: bytes, hdr: bytes = b"", reply: str = "") -> None: ...

    def subscribe_raw(self, subject: str, cb: RawCallback, queue: str = "") -> Awaitable[int]: ...

    def request(self, subject: str, payload: bytes, timeout: float) -> Awaitable[bytes]: ...


class _PerPass:
    """Items for a subject coalesced per loop pass: the first of a pass for a subject leaves
    at once, alone; the later ones leave together when the pass ends (``_send_items``).

    LATENCY: held to the end, a lone stream's fetch or reply would wait behind whatever else
    that pass runs, such as a leader's inline fsync, which its followers' fsyncs overlap only
    when its fetch replies leave before it (R3 pub-sync p50 +220 µs when every reply waited).
    Per subject, not per pass: a leader answers both followers of a stream in the same pass,
    and the slower of them holds its PubAcks."""

    def __init__(self) -> None:
        self._queued: dict[str, list[M.Item]] = {}
        self._flush_scheduled = False

    def _add(self, subject: str, item: M.Item) -> None:
        queued = self._queued.get(subject)
        if queued is not None:
            queued.append(item)
            return
        self._queued[subject] = []
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        self._send_items(subject, [item])

    def _flush(self) -> None:
        self._flush_scheduled = False
        queued, self._queued = self._queued, {}
        for subject, items in queued.items():
            if items:
                self._send_items(subject, items)

    def _send_items(self, subject: str, items: list[M.Item]) -> None:
        raise NotImplementedError


class MuxRequester(_PerPass):
    """Coalesces the replication requests of one loop pass per destination subject.

    ``request(subject, data, timeout)`` has the contract of ``ClientLink.request``: the reply's
    payload, ``TimeoutError`` after ``timeout``, ``TransportError`` when the link is down or
    nobody listens on ``subject``."""

    def __init__(self, link: MuxLink, inbox: str) -> None:
        super().__init__()
        self._link = link
        self._inbox = inbox
        self._ret = inbox + ".r"
        self._sub: asyncio.Future[int] | None = None
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[bytes]] = {}
        self._next_batch = 0
        self._batches: OrderedDict[int, tuple[str, list[int]]] = OrderedDict()
        self._plain: set[str] = set()
        self.messages_sent = 0
        self.requests_sent = 0

    async def start(self) -> int:
        """Subscribe the inbox (a request waits for this); returns the subscription's id."""
        return await self._subscribed()

    async def _subscribed(self) -> int:
        sub = self._sub
        if sub is None or (sub.done() and (sub.cancelled() or sub.exception() is not None)):
            sub = self._sub = asyncio.ensure_future(
                self._link.subscribe_raw(self._inbox + ".*", self._on_message)
            )
        return await asyncio.shield(sub)

    async def request(self, subject: str, data: bytes, timeout: float) -> bytes:
        """Send ``data`` to ``subject`` with the other requests of this loop pass; its reply."""
        if subject in self._plain:
            return await self._link.request(subject, data, timeout)
        await self._subscribed()
        loop = asyncio.get_running_loop()
        self._next_id += 1
        rid = self._next_id
        fut: asyncio.Future[bytes] = loop.create_future()
        self._waiting[rid] = fut
        timer = loop.call_later(timeout, expire, fut)
        self._add(subject, (rid, data))
        try:
            return await fut
        finally:
            timer.cancel()
            self._waiting.pop(rid, None)

    def _send_items(self, subject: str, items: list[M.Item]) -> None:
        live = [(rid, d) for rid, d in items if rid in self._waiting]  # not cancelled meanwhile
        for msg, ids in M.encode_requests(self._ret, live, self._link.max_payload):
            self._send_batch(subject, msg, ids)

    def _send_batch(self, subject: str, msg: bytes, ids: list[int]) -> None:
        self._next_batch += 1
        batch = self._next_batch
        try:
            self._link.send(subject, msg, reply=f"{self._inbox}.{batch}")
        except (TransportError, PayloadTooLargeError) as e:
            self._fail(ids, TransportError(f"request to {subject} failed: {e}"))
            return
        self.messages_sent += 1
        self.requests_sent += len(ids)
        self._batches[batch] = (subject, ids)
        while len(self._batches) > BATCHES_KEPT:
            self._batches.popitem(last=False)

    def _fail(self, ids: list[int], err: Exception) -> None:
        for rid in ids:
            fut = self._waiting.get(rid)
            if fut is not None and not fut.done():
                fut.set_exception(err)

    def _on_message(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        token = subject[len(self._inbox) + 1 :]
        if token == "r":
            try:
                items = M.decode_replies(data)
            except M.MuxError as e:
                log.warning("dropping a damaged replication reply message: %s", e)
                return
            waiting = self._waiting
            for rid, payload in items:
                fut = waiting.get(rid)
                if fut is not None and not fut.done():
                    fut.set_result(payload)
            return
        try:
            batch = self._batches.pop(int(token))
        except (ValueError, KeyError):
            return  # a batch forgotten (long ago) or a stray message
        dest, ids = batch
        if hdr.startswith(b"NATS/1.0 503"):
            self._fail(ids, TransportError(f"request to {dest} failed: no responders"))
            return
        # A plain reply to a whole batch: the peer does not read mux messages (an older node).
        # Its requests fail now (the followers retry) and go plain from here on.
        log.warning("%s does not take batched replication requests; sending it plain ones", dest)
        self._plain.add(dest)
        self._fail(ids, TransportError(f"request to {dest} failed: batching not supported"))


class MuxReplier(_PerPass):
    """Coalesces the replies of one loop pass per requester (leader side)."""

    def __init__(self, link: MuxLink) -> None:
        super().__init__()
        self._link = link
        self.messages_sent = 0

    def reply(self, subject: str, rid: int, payload: bytes) -> None:
        """Send ``payload`` as the reply to request ``rid`` of the requester at ``subject``: at
        once if it is the first of this loop pass, else with the others at the pass's end."""
        self._add(subject, (rid, payload))

    def _send_items(self, subject: str, items: list[M.Item]) -> None:
        for msg in M.encode_replies(items, self._link.max_payload):
            try:
                self._link.send(subject, msg)
            except (TransportError, PayloadTooLargeError) as e:
                # As for a plain reply: the requesters time out and ask again.
                log.debug("replication replies to %s not sent: %s", subject, e)
                continue
            self.messages_sent += 1
