"""Node-wide consumer plumbing: attach a ``ConsumerSet`` to each stream, route acks and
flow-control replies that arrive on the leaf link, and pass the hub's interest changes on.

Acks are captured on the leaf link (the hub forwards them to a leaf; only ``$JS.API.>``,
``$KV.>`` and ``$OBJ.>`` are denied) with one subscription per stream whose consumers this
node runs, ``$JS.ACK.<stream>.>``, taken when the stream's consumer set is attached (a writer:
standalone or leader) and dropped when it closes. A wildcard on every node had the upstream
server deliver each ack to all three nodes of a cluster, two of which dropped it: replicated
acks cost three times the relay and parsing. An ack with a reply subject for a consumer of the
stream that does not exist gets an emulated no-responders status; for a stream no node runs
consumers of, the server itself answers no responders, which is what clients see from a real
server (spec §0.4). Flow-control replies (``$JS.FC.>``, one per window) keep one wildcard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jetlog.consumer import frames as F
from jetlog.consumer.manager import ConsumerSet
from jetlog.consumer.pull import Waiting
from jetlog.consumer.store import ConsumerLog, LoadedLog

if TYPE_CHECKING:
    from jetlog.consumer.consumer import Consumer
    from jetlog.stream.manager import StreamManager
    from jetlog.stream.stream import Stream

log = logging.getLogger("jetlog.consumer")

AckParser = Callable[[bytes], tuple[str, Any]]


class ConsumerService:
    """Owns the leaf subscriptions for acks/flow control and the per-stream consumer sets."""

    def __init__(
        self,
        leaf: Any,
        *,
        decode_config: Callable[[bytes], Any],
        encode_config: Callable[[Any], bytes],
        parse_pull: Callable[[Consumer, bytes, bytes], Waiting | bytes],
        parse_ack: AckParser,
    ) -> None:
        self.leaf = leaf
        self.decode_config = decode_config
        self.encode_config = encode_config
        self.parse_pull = parse_pull
        self.parse_ack = parse_ack
        self.streams: StreamManager | None = None
        self.ack_owner: Callable[[str], bool] | None = None
        """Cluster: does this node answer acks for a stream (its leader)? Only writers
        subscribe a stream's acks; a deposed leader may still receive some until its consumer
        set closes, and must not act on them, so exactly one node answers a double ack."""
        self._subs: list[Any] = []
        self._remove_listener: Callable[[], None] | None = None
        self._remove_state_listener: Callable[[], None] | None = None

    async def attach(self, stream: Stream, directory: str | None, loaded: LoadedLog | None = None) -> None:
        """StreamManager hook: give ``stream`` its consumers (recovered from disk if any;
        ``loaded``: the state log already read by ``read_log``)."""
        clog = await ConsumerLog.open(directory, loaded=loaded) if directory else None
        cset = ConsumerSet(
            stream,
            self.leaf,
            clog,
            decode_config=self.decode_config,
            encode_config=self.encode_config,
            parse_pull=self.parse_pull,
        )
        stream.consumers = cset
        sub = self.leaf.subscribe(f"$JS.ACK.{stream.name}.>", self._on_ack, run_cb=self._on_ack_run)
        cset.on_close = lambda: self.leaf.unsubscribe(sub)
        cset.recover()

    def start(self, streams: StreamManager) -> None:
        """Subscribe flow-control replies; follow interest changes (acks: ``attach``)."""
        self.streams = streams
        self._subs.append(self.leaf.subscribe("$JS.FC.>", self._on_fc))
        self._remove_listener = self.leaf.add_interest_listener(self._on_interest)
        self._remove_state_listener = self.leaf.add_state_listener(self._on_link_state)

    def stop(self) -> None:
        """Drop the subscriptions."""
        for s in self._subs:
            self.leaf.unsubscribe(s)
        self._subs.clear()
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        if self._remove_state_listener is not None:
            self._remove_state_listener()
            self._remove_state_listener = None

    def lookup(self, stream: str, consumer: str) -> Consumer | None:
        """The consumer ``consumer`` of ``stream``, or None."""
        if self.streams is None:
            return None
        s = self.streams.get(stream)
        if s is None or s.consumers is None:
            return None
        return s.consumers.consumers.get(consumer)

    # ---- leaf callbacks (synchronous, from the link's reader) ---------------------------------

    def _on_ack(self, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
        self._ack(subject, reply, *self.parse_ack(payload))

    def _ack(self, subject: str, reply: str | None, kind: str, arg: Any) -> None:
        target = self._ack_target(subject, reply)
        if target is not None:
            c, sseq, dseq = target
            c.on_ack(sseq, dseq, kind, arg, reply)

    def _ack_target(self, subject: str, reply: str | None) -> tuple[Consumer, int, int] | None:
        """The consumer an ack subject names and its stream and consumer sequences; None when
        the ack is to be ignored (answering an unknown consumer's acker as the server would)."""
        t = subject.split(".")
        n = len(t)
        if n == 9:
            stream, consumer, dc, sseq, dseq = t[2], t[3], t[4], t[5], t[6]
        elif n >= 11:
            stream, consumer, dc, sseq, dseq = t[4], t[5], t[6], t[7], t[8]
        else:
            return None
        if not (sseq.isdigit() and dseq.isdigit() and dc.isdigit()):
            return None  # nats-server ignores malformed ack subjects (no reply)
        if self.ack_owner is not None and not self.ack_owner(stream):
            return None
        c = self.lookup(stream, consumer)
        if c is None:
            if reply:
                self.leaf.publish(reply, b"", hdr=F.no_responders(subject))
            return None
        return c, int(sseq), int(dseq)

    def _on_ack_run(self, run: list[Any]) -> None:
        """The acks of one stream in one socket read, in order (the leaf link's run of
        ``MSG`` events). Consecutive plain acks of one consumer without a reply subject (what
        a client acking each message sends) are applied together (``Consumer.on_acks``: one
        consumer-log append for all of them); anything else goes through ``_on_ack`` where
        it stands, so the order of every ack is kept."""
        parse = self.parse_ack
        batch: list[tuple[int, int]] = []
        owner: Consumer | None = None  # set while ``batch`` holds its acks
        for ev in run:
            subject, reply = ev[1], ev[2]
            kind, arg = parse(ev[4])
            if reply is None and kind == "ack":
                target = self._ack_target(subject, None)
                if target is None:
                    continue
                c, sseq, dseq = target
                if c is not owner:
                    if owner is not None:
                        owner.on_acks(batch)
                    owner, batch = c, []
                batch.append((sseq, dseq))
                continue
            if owner is not None:
                owner.on_acks(batch)
                owner, batch = None, []
            self._ack(subject, reply, kind, arg)
        if owner is not None:
            owner.on_acks(batch)

    def _on_fc(self, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
        t = subject.split(".")
        if len(t) < 5:
            return
        c = self.lookup(t[2], t[3]) if len(t) == 5 else self.lookup(t[4], t[5])
        if c is not None:
            c.on_flow_control_reply(subject)

    def _on_link_state(self, state: Any) -> None:
        if self.streams is None or state != "connected":
            return
        for s in self.streams.streams.values():
            if s.consumers is not None and s.consumers.consumers:
                s.consumers.on_link_up()

    def _on_interest(self, event: str, subject: str, queue: str | None) -> None:
        if self.streams is None:
            return
        for s in self.streams.streams.values():
            if s.consumers is not None and s.consumers.consumers:
                s.consumers.on_interest(event, subject)
