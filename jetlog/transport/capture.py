"""Which upstream link carries what.

* **Capture** of stream subjects: over the leaf link (a lean parser; about twice the rate
  nats-py's subscriber reaches), except subjects in namespaces the hub never forwards to a leaf
  (``$KV.>``, ``$OBJ.>``, ``$JS.API.>``), which are captured on the client link.
* **Egress** (PubAcks, republish, Direct Get replies, statuses): over the leaf link while it is
  up, else over the client link. Both can carry raw header blocks (status lines).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from jetlog.errors import TransportError
from jetlog.transport.client import ClientLink
from jetlog.transport.leaf import LeafConnection
from jetlog.wire.leaf import PayloadTooLargeError
from jetlog.wire.subjects import collide

log = logging.getLogger("jetlog.capture")

# The hub denies these on leaf connections (nats-server leafnode.go, denyAllClientJs).
LEAF_DENIED = ("$JS.API.>", "$KV.>", "$OBJ.>")

CaptureCallback = Callable[[str, "str | None", bytes, bytes], None]
RunCallback = Callable[[list[Any]], None]


def needs_client_link(subject: str) -> bool:
    """True if messages on ``subject`` can only be captured on the client connection."""
    return any(collide(subject, d) for d in LEAF_DENIED)


class Capture:
    """Subscribes stream subjects on the right link."""

    def __init__(self, leaf: LeafConnection, client: ClientLink) -> None:
        self.leaf = leaf
        self.client = client
        self._pending: set[asyncio.Task[Any]] = set()
        # Subscriptions made on each link, and how many of them a completed flush covered: a
        # flush round-trips only the links that got new ones (a stream create on the leaf
        # link no longer waits for a PING/PONG on the client link too, and vice versa).
        self._made = {"leaf": 0, "client": 0}
        self._flushed = {"leaf": 0, "client": 0}

    def subscribe(
        self, subject: str, cb: CaptureCallback, run_cb: RunCallback | None = None
    ) -> tuple[str, Any]:
        """Start capturing ``subject``; messages go to ``cb(subject, reply, hdr, data)``, or on
        the leaf link, a socket read's consecutive ones at a time to ``run_cb`` if given."""
        if needs_client_link(subject):
            # A subject such as '>' also collides with ordinary subjects: capture it on both
            # links then would store messages twice, so it goes to the client link only.
            task = asyncio.ensure_future(self.client.subscribe_raw(subject, cb))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            self._made["client"] += 1
            return ("client", task)
        self._made["leaf"] += 1
        return ("leaf", self.leaf.subscribe(subject, cb, run_cb=run_cb))

    def unsubscribe(self, handle: tuple[str, Any]) -> None:
        """Stop a capture subscription."""
        kind, h = handle
        if kind == "leaf":
            self.leaf.unsubscribe(h)
            return

        async def _unsub() -> None:
            sid = await h
            await self.client.unsubscribe(sid)

        task = asyncio.ensure_future(_unsub())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the upstream has registered every subscription made so far (a round trip
        on each link that got a subscription since a flush that covered it completed)."""
        if self._pending:
            await asyncio.gather(*list(self._pending))
        for name, link in (("client", self.client), ("leaf", self.leaf)):
            # The count is taken before the round trip: a subscription made while it is in
            # flight is not covered by it, and the next flush round-trips again.
            made = self._made[name]
            if self._flushed[name] >= made:
                continue
            await link.flush(timeout)
            self._flushed[name] = max(self._flushed[name], made)


class Egress:
    """Sends replies and other jetlog-originated messages (Outbound for streams)."""

    def __init__(self, leaf: LeafConnection, client: ClientLink) -> None:
        self.leaf = leaf
        self.client = client

    @property
    def max_payload(self) -> int:
        """The largest header + payload the link :meth:`send` would use now accepts."""
        if self.leaf.connected and self.leaf.max_payload:
            return self.leaf.max_payload
        return self.client.max_payload

    def send(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        """Publish without a reply subject, on the leaf link when it is up.

        A message above the server's max_payload (a republish of a message near the limit gains
        headers) is dropped: the link refuses it with a log line, because the server would close
        the connection. Raises TransportError when no link is up.
        """
        try:
            if self.leaf.connected:
                self.leaf.publish(subject, payload, hdr=hdr)
            elif self.client.connected:
                self.client.send(subject, payload, hdr)
            else:
                raise TransportError("no upstream link is connected")
        except PayloadTooLargeError:
            return  # logged by the link's guard

    def send_many(self, subject: str, frames: list[tuple[bytes, bytes]]) -> None:
        """:meth:`send` of ``(header block, payload)`` frames, in order: on the leaf link
        (which coalesces its writes per loop pass) one by one, on the client link as one
        write (:meth:`ClientLink.send_many`)."""
        if self.leaf.connected:
            for hdr, payload in frames:
                self.send(subject, payload, hdr)
        elif self.client.connected:
            self.client.send_many(subject, frames)
        else:
            raise TransportError("no upstream link is connected")
