"""``FaultProxy``: an asyncio TCP proxy that can break the connections it carries.

Put it between a client and a server (``FaultProxy(host, port)``, then point the client at
``127.0.0.1:proxy.port``) and inject the faults real networks produce:

* :meth:`FaultProxy.cut` — every current connection is closed abortively (``SO_LINGER`` 0, so
  both peers get a TCP RST, as when a middlebox or a crashed host drops it); new connections are
  still accepted.
* :meth:`FaultProxy.block` — a partition without FIN: nothing is forwarded in either direction,
  sockets stay open, so the peers only notice through their own timeouts (PINGs). New
  connections are accepted and held, not forwarded (the upstream never sees them). Bytes already
  read stay buffered and are delivered on :meth:`heal`, as TCP retransmission would after a
  partition heals.
* :meth:`FaultProxy.refuse` — new connections are reset right after accept (a port that is
  up but refuses service), existing ones are untouched.
* :meth:`FaultProxy.heal` — forward again: ends ``block`` and ``refuse``.
* :meth:`FaultProxy.inject` (extra) — write raw bytes into every current connection, towards the
  client or the server (protocol garbage, for parser-error paths).

Forwarding keeps per-direction backpressure: when one side's write buffer is above its
high-water mark, reading from the other side pauses.

    proxy = FaultProxy("127.0.0.1", server_port)
    await proxy.start()
    ... connect to 127.0.0.1:proxy.port ...
    proxy.cut(); proxy.block(); proxy.heal()
    await proxy.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from typing import Any, cast

log = logging.getLogger("jetlog.chaos")

__all__ = ["FaultProxy"]

WRITE_HIGH_WATER = 256 * 1024


def _rst(transport: asyncio.BaseTransport | None) -> None:
    """Close ``transport`` so that the peer gets a TCP RST, not a FIN."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    cast(asyncio.Transport, transport).abort()


class _Side(asyncio.Protocol):
    """One socket of a proxied connection (the accepted client side or the upstream side)."""

    def __init__(self, conn: _Conn | None, proxy: FaultProxy, downstream: bool) -> None:
        self.conn = conn
        self.proxy = proxy
        self.downstream = downstream
        self.transport: asyncio.Transport | None = None
        self.backpressured = False  # reading paused because the peer's write buffer is full
        self.reading = True
        self.early: list[bytes] = []  # read while the peer is not connected yet

    # -- asyncio callbacks --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        if self.downstream:
            self.proxy._accepted(self)

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is None:
            return
        conn.forward(self, data)

    def eof_received(self) -> bool | None:
        if self.conn is not None:
            self.conn.close_gracefully()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.conn.side_lost(self)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.backpressure(self, True)

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.backpressure(self, False)

    # -- helpers --

    def set_reading(self, want: bool) -> None:
        tr = self.transport
        if tr is None or tr.is_closing() or want == self.reading:
            return
        self.reading = want
        if want:
            tr.resume_reading()
        else:
            tr.pause_reading()


class _Conn:
    """A client connection and its upstream twin."""

    def __init__(self, proxy: FaultProxy, down: _Side) -> None:
        self.proxy = proxy
        self.down = down
        self.up: _Side | None = None
        self.closed = False
        self.connecting: asyncio.Task[None] | None = None

    def peer(self, side: _Side) -> _Side | None:
        return self.up if side is self.down else self.down

    def forward(self, src: _Side, data: bytes) -> None:
        dst = self.peer(src)
        if dst is None or dst.transport is None:
            src.early.append(data)
            return
        dst.transport.write(data)

    def backpressure(self, side: _Side, on: bool) -> None:
        """``side``'s write buffer crossed its mark: pause or resume reading its peer."""
        src = self.peer(side)
        if src is None:
            return
        src.backpressured = on
        self.update_reading()

    def update_reading(self) -> None:
        """Read from a side only when forwarding is on and its peer can take the bytes."""
        blocked = self.proxy.blocked
        for side in (self.down, self.up):
            if side is None:
                continue
            peer = self.peer(side)
            side.set_reading(not blocked and not side.backpressured and peer is not None)

    async def connect_upstream(self) -> None:
        """Open the upstream socket, flush what the client sent meanwhile, start forwarding."""
        loop = asyncio.get_running_loop()
        up = _Side(self, self.proxy, downstream=False)
        try:
            await loop.create_connection(lambda: up, self.proxy.target_host, self.proxy.target_port)
        except OSError as e:
            log.debug("proxy %d: upstream connect failed: %s", self.proxy.port, e)
            self.close_gracefully()
            return
        if self.closed:
            _rst(up.transport)
            return
        self.up = up
        assert up.transport is not None
        for chunk in self.down.early:
            up.transport.write(chunk)
        self.down.early.clear()
        self.update_reading()

    def abort(self) -> None:
        """RST both sides."""
        if self.closed:
            return
        self.closed = True
        if self.connecting is not None and not self.connecting.done():
            self.connecting.cancel()
        _rst(self.down.transport)
        if self.up is not None:
            _rst(self.up.transport)
        self.proxy._forget(self)

    def close_gracefully(self) -> None:
        """One side ended (EOF or error): close both, flushing what is buffered."""
        if self.closed:
            return
        self.closed = True
        for side in (self.down, self.up):
            if side is not None and side.transport is not None and not side.transport.is_closing():
                side.transport.close()
        self.proxy._forget(self)

    def side_lost(self, side: _Side) -> None:
        if not self.closed:
            # The socket went away under us (reset by the peer): take the other one down too.
            self.closed = True
            other = self.peer(side)
            if other is not None:
                _rst(other.transport)
            self.proxy._forget(self)


class FaultProxy:
    """A TCP proxy to ``target_host:target_port`` with fault injection (see module docstring)."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.listen_host = listen_host
        self._listen_port = listen_port
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.blocked = False
        self.refusing = False
        self.accepted = 0
        """Connections accepted so far (refused ones included)."""

    @property
    def port(self) -> int:
        """The port clients connect to (known after :meth:`start`)."""
        return self._listen_port

    @property
    def connections(self) -> int:
        """Connections currently open through the proxy (held ones included)."""
        return len(self._conns)

    async def start(self) -> None:
        """Listen (on an ephemeral port when ``listen_port`` is 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Side(None, self, downstream=True), self.listen_host, self._listen_port
        )
        self._listen_port = self._server.sockets[0].getsockname()[1]

    def _accepted(self, down: _Side) -> None:
        self.accepted += 1
        if self.refusing or self._server is None:
            _rst(down.transport)
            return
        conn = _Conn(self, down)
        down.conn = conn
        self._conns.add(conn)
        down.set_reading(False)  # nothing to forward to yet
        if not self.blocked:
            self._start_connect(conn)

    def _start_connect(self, conn: _Conn) -> None:
        task = asyncio.get_running_loop().create_task(conn.connect_upstream())
        conn.connecting = task
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("proxy %d: connection task failed", self.port, exc_info=task.exception())

    def _forget(self, conn: _Conn) -> None:
        self._conns.discard(conn)

    def cut(self) -> None:
        """Reset every current connection (TCP RST to both peers); new ones are accepted."""
        for conn in list(self._conns):
            conn.abort()

    def block(self) -> None:
        """Stop forwarding in both directions, silently; sockets stay open."""
        self.blocked = True
        for conn in list(self._conns):
            conn.update_reading()

    def refuse(self, on: bool) -> None:
        """Reset new connections right after accept (``on``), or accept them again."""
        self.refusing = on

    def heal(self) -> None:
        """Forward again: ends :meth:`block` and :meth:`refuse`."""
        self.blocked = False
        self.refusing = False
        for conn in list(self._conns):
            if conn.up is None and conn.connecting is None:
                self._start_connect(conn)
            else:
                conn.update_reading()

    def inject(self, data: bytes, to_client: bool = True) -> int:
        """Write ``data`` into every forwarded connection, towards the client (or the server).
        Returns the number of connections written to."""
        n = 0
        for conn in list(self._conns):
            side = conn.down if to_client else conn.up
            if side is not None and side.transport is not None and not side.transport.is_closing():
                side.transport.write(data)
                n += 1
        return n

    async def close(self) -> None:
        """Stop listening and reset every connection."""
        if self._server is not None:
            self._server.close()
        self.cut()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
