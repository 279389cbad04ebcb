"""Pieces of the leaf link that are not the connection logic itself: its lifecycle states,
counters, the subscription handle, and the per-TCP-connection asyncio protocol.

The handle and the protocol call back into the link through two narrow Protocols
(:class:`SubscriptionOwner`, :class:`ConnectionOwner`), which ``LeafConnection`` satisfies
structurally, so this module does not import ``leaf.py``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from jetlog.errors import ProtocolError, TransportError
from jetlog.wire import leaf as wire

log = logging.getLogger("jetlog.transport.leaf")

MsgCallback = Callable[[str, str | None, bytes, bytes], None]
RunCallback = Callable[[list[wire.Event]], None]
"""Takes consecutive ``MSG`` events of one socket read that only its subscription matches."""
"""``cb(subject, reply, hdr, payload)``; called synchronously from the reader."""


class SubscriptionOwner(Protocol):
    """What a :class:`LeafSubscription` uses of its link."""

    def unsubscribe(self, sub: LeafSubscription) -> None: ...


class ConnectionOwner(Protocol):
    """What a :class:`LeafProtocol` uses of its link."""

    @property
    def max_control_line(self) -> int: ...

    @property
    def write_high_water(self) -> int: ...

    def _on_events(self, proto: LeafProtocol, events: list[wire.Event], start: int = 0) -> None: ...
    def _on_connection_lost(self, proto: LeafProtocol, exc: Exception | None) -> None: ...


class LinkState(enum.StrEnum):
    """Lifecycle of the link, reported to ``on_state_change``."""

    DISCONNECTED = "disconnected"  # not yet connected, or lost and about to retry
    CONNECTING = "connecting"  # handshake in progress
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"  # lost; backing off between attempts
    CLOSED = "closed"  # close() called or reconnect attempts exhausted


@dataclass(slots=True)
class LeafStats:
    """Counters. Bytes count header + payload, like nats-server's in/out bytes."""

    msgs_in: int = 0
    bytes_in: int = 0
    msgs_out: int = 0
    bytes_out: int = 0
    reconnects: int = 0
    callback_errors: int = 0  # a subscription callback raised (logged)
    stale_deliveries: int = 0  # consumer deliveries dropped after waiting out a stall (see LeafOut)


class LeafSubscription:
    """Handle returned by :meth:`LeafConnection.subscribe`."""

    __slots__ = ("_link", "active", "cb", "queue", "run_cb", "subject")

    def __init__(
        self,
        link: SubscriptionOwner,
        subject: str,
        queue: str | None,
        cb: MsgCallback,
        run_cb: RunCallback | None = None,
    ) -> None:
        self._link = link
        self.subject = subject
        self.queue = queue
        self.cb = cb
        self.run_cb = run_cb  # optional: many messages in one call (see ``LeafIO._on_events``)
        self.active = True

    def unsubscribe(self) -> None:
        """Same as ``link.unsubscribe(self)``."""
        self._link.unsubscribe(self)

    def __repr__(self) -> str:
        q = f" queue={self.queue}" if self.queue else ""
        return f"<LeafSubscription {self.subject}{q}{'' if self.active else ' (inactive)'}>"


class LeafProtocol(asyncio.Protocol):
    """Per-TCP-connection glue; a stale protocol (after reconnect) is ignored by the link."""

    def __init__(self, link: ConnectionOwner) -> None:
        self.link = link
        self.parser = wire.LeafParser(link.max_control_line)
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.reading_paused = False  # the link paused reading to process a large read in slices
        self.resumed: asyncio.Future[None] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.handshake: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.handshake_stage = "info"  # info -> pong -> done
        self.failure: Exception | None = None  # why we aborted the connection, if we did

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence a cast, not an isinstance.
        tr = cast(asyncio.Transport, transport)
        self.transport = tr
        # pause_writing() (and so drain()) kicks in above the link's high-water mark.
        tr.set_write_buffer_limits(high=self.link.write_high_water)

    def data_received(self, data: bytes) -> None:
        try:
            events = self.parser.feed(data)
        except ProtocolError as e:
            # Reported once, as the reason in the link's "down" line.
            log.debug("leaf link: protocol error from hub: %s", e)
            self._fail(ProtocolError(f"protocol error from the hub: {e}"))
            return
        self.link._on_events(self, events)

    def _fail(self, exc: Exception) -> None:
        self.failure = exc
        if not self.handshake.done():
            self.handshake.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(TransportError(f"connection lost during handshake: {exc or 'EOF'}"))
        if not self.lost.done():
            self.lost.set_result(None)
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)
        self.link._on_connection_lost(self, exc or self.failure)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)


def fitting_frames(frames: list[bytes], max_payload: int, name: str) -> list[bytes]:
    """The buffered frames the hub accepts now: ``max_payload`` may have shrunk across the
    reconnect, and one oversize frame would make the hub close the link again, forever."""
    if not max_payload:
        return frames
    out = []
    for f in frames:
        if f.startswith((b"LMSG ", b"HMSG ")):
            line = f[: f.find(b"\r\n")]
            size = int(line.rsplit(b" ", 1)[1])
            if size > max_payload:
                log.warning(
                    "leaf link %s: dropping a buffered %d-byte message: the server's max_payload is now %d",
                    name,
                    size,
                    max_payload,
                )
                continue
        out.append(f)
    return out
