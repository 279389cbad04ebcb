"""``LeafOut``: the outbound side of the leaf link: queueing frames, writing them once per loop
tick, the backlog kept while disconnected, backpressure and PING/PONG flushes.

Kept apart from ``leaf_io.py`` (reading and dispatch, subscriptions, the hub's interest) because
sending has its own rules: frames leave in call order, nothing may precede our CONNECT, the
backlog kept while disconnected is bounded, and consumer deliveries that waited out a process
stall are dropped instead of written (``stale_after``, :meth:`LeafOut.deliveries_valid_until`).
:class:`LeafOut` is a base class of ``jetlog.transport.leaf_io.LeafIO``: it sets its own
outgoing state (:meth:`LeafOut._init_out`, called by ``LeafIO.__init__``); the rest of the link
state it uses is declared on it and set by ``LeafIO.__init__``. This module does not import
``leaf_io``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jetlog.errors import TransportError
from jetlog.transport.leaf_proto import LeafProtocol, LeafStats, LinkState
from jetlog.wire import leaf as wire

log = logging.getLogger("jetlog.transport.leaf")


class LeafOut:
    """Queueing, writing and flushing the frames of a leaf link; a base of ``LeafIO``, whose
    ``__init__`` sets every attribute below and calls :meth:`_init_out`."""

    name: str
    stats: LeafStats
    max_payload: int
    max_control_line: int
    max_pending_bytes: int
    write_high_water: int
    _state: LinkState
    _proto: LeafProtocol | None
    _loop: asyncio.AbstractEventLoop | None
    _pings_out: int

    if TYPE_CHECKING:

        @property
        def connected(self) -> bool: ...

        @property
        def closed(self) -> bool: ...

        async def wait_connected(self, timeout: float | None = None) -> None: ...

    def _init_out(self) -> None:
        """Set the outgoing state (called once, by ``LeafIO.__init__``)."""
        # Outgoing data: _wbuf while connected (flushed once per tick), _pending otherwise.
        self._wbuf: list[bytes] = []
        self._wbuf_bytes = 0
        self._wbuf_since = 0.0  # time.monotonic() when _wbuf got its first frame
        # Consumer deliveries (frames whose reply is a ``$JS.ACK`` subject) that waited in _wbuf
        # longer than this (seconds; 0: off) are dropped at the flush: the process stalled
        # (frozen, a long pause) between the delivery pass and the write, and a cluster may
        # have moved the stream to another leader meanwhile, which may have seen the message
        # acknowledged (docs/chaos.md, the late frame of seq 1414). The consumer state keeps
        # them pending: redelivered after ack_wait if this node still leads.
        self.stale_after = 0.0
        # The earliest lease a delivery pass noted for the deliveries in _wbuf (see
        # ``deliveries_valid_until``); inf: none noted.
        self._wbuf_lease = math.inf
        self._flush_scheduled = False
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pongs: deque[asyncio.Future[None] | None] = deque()

    # ------------------------------------------------------------------------------ writing

    def _send_control(self, frame: bytes, proto: LeafProtocol | None = None) -> None:
        """Write a control frame now, after any queued data (keeps call order)."""
        proto = proto or self._proto
        # Nothing may precede our CONNECT (the hub answers "Authorization Violation"); frames
        # skipped here are covered by the handshake (subscriptions) or moot (PING/PONG).
        if (
            proto is None
            or proto.transport is None
            or proto.handshake_stage == "info"
            or proto.transport.is_closing()
        ):
            return
        if self._wbuf and proto is self._proto:
            self._wbuf.append(frame)
            self._flush()
        else:
            proto.transport.write(frame)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._wbuf:
            return
        proto = self._proto
        if proto is None or proto.transport is None or not self.connected:
            return  # kept in _wbuf; moved to _pending by _on_connection_lost
        now = time.monotonic()
        if now > self._wbuf_lease or (self.stale_after and now - self._wbuf_since > self.stale_after):
            self._drop_stale_deliveries()
        data = self._wbuf[0] if len(self._wbuf) == 1 else b"".join(self._wbuf)
        self._wbuf.clear()
        self._wbuf_bytes = 0
        self._wbuf_lease = math.inf
        proto.transport.write(data)

    def deliveries_valid_until(self, until: float) -> None:
        """The consumer deliveries queued so far were decided under a lease that ends at
        ``until`` (``time.monotonic``): if they are still unwritten by then, they are dropped
        like stale ones. The process can stall (SIGSTOP, a long pause) *inside* a delivery pass,
        after its lease check and before its frames are queued; ``stale_after`` counts from
        the queueing and cannot see that stall (chaos: a deposed leader's pass resumed after a
        1.5 s freeze sent two deliveries its successor had already seen acknowledged)."""
        if self._wbuf and until < self._wbuf_lease:
            self._wbuf_lease = until

    def _drop_stale_deliveries(self) -> None:
        """Drop the consumer deliveries from _wbuf (rare path: after a stall, see ``stale_after``)."""
        keep = [f for f in self._wbuf if not (wire.frame_reply(f) or b"").startswith(b"$JS.ACK.")]
        dropped = len(self._wbuf) - len(keep)
        if not dropped:
            return
        self._wbuf[:] = keep
        self._wbuf_bytes = sum(len(f) for f in keep)
        self.stats.stale_deliveries += dropped
        now = time.monotonic()
        log.warning(
            "leaf link %s: %d consumer deliveries waited %.1fs to be written, %.3fs past their "
            "lease (the process stalled): dropped, they stay pending",
            self.name,
            dropped,
            now - self._wbuf_since,
            max(0.0, now - self._wbuf_lease),
        )

    def publish(
        self,
        subject: str,
        payload: bytes,
        reply: str | None = None,
        hdr: bytes = b"",
        queues: Sequence[str] = (),
    ) -> None:
        """Queue one LMSG/HMSG frame (non-blocking; frames leave in call order).

        ``queues`` names hub queue groups to serve (one member each); without it hub queue
        subscribers never get the message. Raises :class:`~jetlog.wire.leaf.PayloadTooLargeError`
        above the hub's max_payload, :class:`TransportError` when closed or when disconnected
        with a full pending buffer. Call :meth:`drain` for backpressure.
        """
        try:
            frame = wire.encode_msg(
                subject, payload, reply, hdr, queues, self.max_payload, self.max_control_line
            )
        except wire.PayloadTooLargeError as e:
            # The guard of the send path: the hub would close the whole link for this frame.
            log.warning(
                "leaf link %s: refusing to send a %d-byte message to %s: the server's max_payload is %d",
                self.name,
                e.size,
                subject,
                e.max_payload,
            )
            raise
        self._queue_frame(frame)
        stats = self.stats
        stats.msgs_out += 1
        stats.bytes_out += len(hdr) + len(payload)

    def publish_frame(self, frame: bytes, size: int) -> None:
        """Queue a frame made by ``wire.encode_delivery`` (its size limit checked by the caller;
        ``size``: header + payload bytes, for the counters). Raises like :meth:`publish`."""
        self._queue_frame(frame)
        stats = self.stats
        stats.msgs_out += 1
        stats.bytes_out += size

    def publish_frames(self, frames: list[bytes], size: int) -> None:
        """Queue frames made by ``wire.encode_delivery``, in order (a consumer's delivery run;
        ``size``: their header + payload bytes). Raises like :meth:`publish`; when
        disconnected, the frames before the one that overflows the pending buffer stay queued."""
        if self._state is LinkState.CONNECTED:
            if not self._wbuf:
                self._wbuf_since = time.monotonic()
            self._wbuf.extend(frames)
            self._wbuf_bytes += sum(map(len, frames))
            if not self._flush_scheduled:
                self._flush_scheduled = True
                loop = self._loop
                assert loop is not None
                loop.call_soon(self._flush)
        else:
            for f in frames:
                self._queue_frame(f)
        stats = self.stats
        stats.msgs_out += len(frames)
        stats.bytes_out += size

    def _queue_frame(self, frame: bytes) -> None:
        if self._state is LinkState.CONNECTED:
            if not self._wbuf:
                self._wbuf_since = time.monotonic()
            self._wbuf.append(frame)
            self._wbuf_bytes += len(frame)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                loop = self._loop
                assert loop is not None
                loop.call_soon(self._flush)
        elif self._state is LinkState.CLOSED:
            raise TransportError(f"leaf link {self.name} is closed")
        else:
            if self._pending_bytes + len(frame) > self.max_pending_bytes:
                raise TransportError(
                    f"leaf link {self.name} disconnected and {self._pending_bytes} bytes already pending"
                )
            self._pending.append(frame)
            self._pending_bytes += len(frame)

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted but not yet handed to the socket (buffer + disconnected backlog)."""
        return self._wbuf_bytes + self._pending_bytes

    async def drain(self) -> None:
        """Backpressure: return once the outgoing buffers are below the high-water mark.

        While disconnected with a backlog above the mark, waits for the reconnect.
        """
        if self._wbuf_bytes >= self.write_high_water:
            self._flush()
        while True:
            if self.closed:
                raise TransportError(f"leaf link {self.name} is closed")
            proto = self._proto
            if self.connected and proto is not None:
                if not proto.paused:
                    return
                if proto.resumed is None or proto.resumed.done():
                    proto.resumed = asyncio.get_running_loop().create_future()
                await proto.resumed
            elif self._pending_bytes < self.write_high_water:
                return
            else:
                await self.wait_connected()

    async def flush(self, timeout: float = 5.0) -> None:
        """PING/PONG round trip: everything published before has reached the hub."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not self.connected:
            await self.wait_connected(timeout)
        fut: asyncio.Future[None] = loop.create_future()
        self._pongs.append(fut)
        self._send_control(wire.PING_FRAME)
        try:
            await asyncio.wait_for(fut, max(0.0, deadline - loop.time()))
        except TimeoutError:
            raise TransportError(f"leaf link {self.name}: flush timed out after {timeout}s") from None

    def _fail_pongs(self, exc: TransportError) -> None:
        while self._pongs:
            f = self._pongs.popleft()
            if f is not None and not f.done():
                f.set_exception(exc)
        self._pings_out = 0
