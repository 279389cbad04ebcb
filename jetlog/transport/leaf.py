"""``LeafConnection``: jetlog's leafnode (spoke) link to the upstream nats-server.

Why it exists (see ``shared/spec/delivered-subject.md``): a CLIENT connection may not publish
with a ``$JS.ACK.`` reply, and only messages arriving on a non-client connection get the
``$JS.ACK...@<stream subject>`` reply decoded into "delivered subject = stream subject". So every
consumer delivery (and its heartbeats / status frames, which must stay in order with the data)
goes out as ``LMSG``/``HMSG`` on this link. The link also captures plain publishes on stream
subjects (``subscribe``) and mirrors the hub's subscription interest (``LS+``/``LS-``), which is
how jetlog learns whether a deliver subject or pull inbox is still listened to.

Design:

* One asyncio ``Protocol``; ``data_received`` feeds the sans-I/O :class:`~jetlog.wire.leaf.LeafParser`
  and dispatches synchronously (no task hop per message).
* Writes: ``publish`` encodes and appends to a list; one ``transport.write`` per loop tick
  (``call_soon``), so frames leave in call order and bursts coalesce. Control frames (LS+/LS-,
  PING, PONG) are written immediately together with whatever data precedes them.
* A supervisor task reconnects with bounded exponential backoff and jitter; subscriptions are
  re-sent on every (re)connect; publishes made while disconnected are kept (bounded) and sent
  after the handshake.
* The hub's interest view is rebuilt from scratch on each connect: the hub sends every ``LS+``
  between our CONNECT and its PONG; at that PONG the new view replaces the old one and listeners
  see only the net difference (no "-"/"+" storm for interest that survived a reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from jetlog.errors import TransportError
from jetlog.transport.interest import InterestListener, InterestView
from jetlog.transport.leaf_auth import Endpoint, nkey_public, parse_url, read_creds, sign
from jetlog.transport.leaf_proto import LeafProtocol, LeafStats, LeafSubscription, LinkState
from jetlog.wire import leaf as wire
from jetlog.wire.subjects import Sublist, is_literal, is_valid_subject

log = logging.getLogger(__name__)

__all__ = ["LeafConnection", "LeafStats", "LeafSubscription", "LinkState", "MsgCallback"]

MsgCallback = Callable[[str, str | None, bytes, bytes], None]
"""``cb(subject, reply, hdr, payload)``; called synchronously from the reader."""


EVENT_SLICE = 1024
"""Inbound frames handled per loop callback before yielding (see ``_on_events``)."""

VERSION = "2.15.1"  # reported in CONNECT; the hub may enforce leafnodes.min_version

# Subjects the hub denies on leaf connections unless JetStream is extended (denyAllClientJs).
# An LS+ on a *literal* subject in these namespaces makes the hub close the whole link
# (leafSubPermViolation); a wildcard is accepted but never gets messages.
DENIED_PREFIXES = ("$JS.API.", "$KV.", "$OBJ.")


class LeafConnection:
    """A leafnode (spoke) connection to a hub nats-server, with reconnect and interest tracking.

    ``url`` is ``nats-leaf://host:port``, ``nats://...`` or ``tls://...`` (TLS required),
    optionally with ``user:pass@`` or ``token@``; a list of URLs is tried in rotation.
    Explicit ``user``/``password``/``token`` win over URL credentials. ``nkey_seed`` (an ``SU...``
    seed) signs the INFO nonce and sends the public key; ``creds_file`` sends the user JWT and
    the nonce signature (operator mode). ``tls`` is the client context (``None`` means the
    system default when TLS is needed); ``tls_handshake_first`` does TLS before the hub's INFO
    (hub ``leafnodes { tls { handshake_first: true } }``).

    Each account needs its own link; ``name`` must be unique per hub, because the hub evicts an
    older leaf with the same name and account.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        name: str,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        nkey_seed: str | bytes | None = None,
        creds_file: str | None = None,
        tls: ssl.SSLContext | None = None,
        tls_hostname: str | None = None,
        tls_handshake_first: bool = False,
        ping_interval: float = 20.0,
        max_outstanding_pings: int = 3,
        reconnect_delay: float = 0.1,
        reconnect_max_delay: float = 5.0,
        max_reconnect_attempts: int = -1,
        max_pending_bytes: int = 8 * 1024 * 1024,
        write_high_water: int = 1024 * 1024,
        max_control_line: int = wire.MAX_CONTROL_LINE,
        on_state_change: Callable[[LinkState], None] | None = None,
    ) -> None:
        urls = [u.strip() for u in url.split(",")] if isinstance(url, str) else list(url)
        if not urls:
            raise TransportError("no leafnode URL")
        self._endpoints = [parse_url(u) for u in urls]
        self.name = name
        self._user, self._password, self._token = user, password, token
        self._nkey_seed = nkey_seed.encode() if isinstance(nkey_seed, str) else nkey_seed
        self._creds_file = creds_file
        self._tls = tls
        self._tls_hostname = tls_hostname
        self._tls_first = tls_handshake_first
        self.ping_interval = ping_interval
        self.max_outstanding_pings = max_outstanding_pings
        self.reconnect_delay = reconnect_delay
        self.reconnect_max_delay = reconnect_max_delay
        self.max_reconnect_attempts = max_reconnect_attempts
        self.max_pending_bytes = max_pending_bytes
        self.write_high_water = write_high_water
        self.max_control_line = max_control_line
        self.on_state_change = on_state_change

        self.stats = LeafStats()
        self.server_info: dict[str, Any] = {}
        self.max_payload = 0  # from INFO; 0 until connected
        self._state = LinkState.DISCONNECTED
        self._proto: LeafProtocol | None = None
        self._ep_index = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._supervisor: asyncio.Task[None] | None = None
        self._state_waiters: list[asyncio.Future[None]] = []

        # Outgoing data: _wbuf while connected (flushed once per tick), _pending otherwise.
        self._wbuf: list[bytes] = []
        self._wbuf_bytes = 0
        self._flush_scheduled = False
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pongs: deque[asyncio.Future[None] | None] = deque()
        self._pings_out = 0
        self._had_connection = False

        # Local subscriptions.
        self._subs: Sublist[LeafSubscription] = Sublist()
        self._sub_keys: dict[tuple[str, str | None], list[LeafSubscription]] = {}
        self._has_queue_subs = 0
        self._rr = 0

        # The hub's interest, rebuilt on every (re)connect.
        self.interest_view = InterestView(name)

    # ------------------------------------------------------------------------------- state

    @property
    def state(self) -> LinkState:
        """Current :class:`LinkState`."""
        return self._state

    @property
    def connected(self) -> bool:
        """True while the handshake is complete and the socket is up."""
        return self._state is LinkState.CONNECTED

    @property
    def closed(self) -> bool:
        """True after :meth:`close` (or when reconnect attempts ran out)."""
        return self._state is LinkState.CLOSED

    @property
    def interest_current(self) -> bool:
        """False while disconnected: the interest view is then the last one known."""
        return self.connected

    def _set_state(self, state: LinkState) -> None:
        if state is self._state:
            return
        self._state = state
        log.debug("leaf link %s: %s", self.name, state.value)
        for f in self._state_waiters:
            if not f.done():
                f.set_result(None)
        self._state_waiters.clear()
        if self.on_state_change is not None:
            try:
                self.on_state_change(state)
            except Exception:
                log.exception("leaf link %s: on_state_change hook failed", self.name)

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the link is connected; TransportError if it closes or on timeout."""

        async def _wait() -> None:
            while not self.connected:
                if self.closed:
                    raise TransportError("leaf link closed")
                fut = asyncio.get_running_loop().create_future()
                self._state_waiters.append(fut)
                await fut

        try:
            await asyncio.wait_for(_wait(), timeout)
        except TimeoutError:
            raise TransportError(f"leaf link not connected within {timeout}s") from None

    # --------------------------------------------------------------------------- lifecycle

    async def connect(self, timeout: float = 10.0) -> None:
        """Connect and complete the handshake (INFO, TLS, CONNECT, PING/PONG).

        Raises :class:`TransportError` with the hub's message on ``-ERR`` (for example
        ``Authorization Violation``), on timeout or when the hub is unreachable. Once connected,
        losses are handled by the background reconnect loop.
        """
        if self.closed:
            raise TransportError("leaf link closed")
        if self._supervisor is not None:
            raise TransportError("leaf link already connected")
        self._loop = asyncio.get_running_loop()
        err: BaseException | None = None
        for _ in range(len(self._endpoints)):
            try:
                await asyncio.wait_for(self._attempt(), timeout)
                break
            except (TransportError, OSError, TimeoutError) as e:
                err = e
                self._ep_index = (self._ep_index + 1) % len(self._endpoints)
        else:
            self._set_state(LinkState.DISCONNECTED)
            if isinstance(err, TransportError):
                raise err
            raise TransportError(f"leaf link {self.name}: cannot connect: {err!r}") from err
        self._supervisor = self._spawn(self._supervise(), "leaf-supervisor")
        self._spawn(self._pinger(), "leaf-pinger")

    async def close(self) -> None:
        """Flush what is buffered (best effort), close the socket and stop every task. Idempotent."""
        if self.closed:
            return
        self._set_state(LinkState.CLOSED)
        proto = self._proto
        self._proto = None
        if proto is not None and proto.transport is not None:
            if self._wbuf:
                with contextlib.suppress(Exception):
                    proto.transport.write(b"".join(self._wbuf))
            proto.transport.close()
        self._wbuf.clear()
        self._wbuf_bytes = 0
        self._fail_pongs(TransportError("leaf link closed"))
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        if proto is not None and proto.transport is not None and not proto.lost.done():
            # Give the transport a moment to flush and close; abort if the peer is stuck.
            try:
                await asyncio.wait_for(asyncio.shield(proto.lost), 1.0)
            except TimeoutError:
                proto.transport.abort()

    async def __aenter__(self) -> LeafConnection:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=f"{name}:{self.name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("leaf link %s: task %s failed", self.name, task.get_name(), exc_info=task.exception())

    # --------------------------------------------------------------------------- handshake

    async def _attempt(self) -> None:
        """One connection attempt to the current endpoint, up to the handshake's PONG."""
        ep = self._endpoints[self._ep_index]
        loop = asyncio.get_running_loop()
        self._set_state(LinkState.CONNECTING)
        want_tls = ep.tls or self._tls is not None or self._tls_first
        ctx = self._tls or (ssl.create_default_context() if want_tls else None)
        hostname = self._tls_hostname or ep.host
        proto = LeafProtocol(self)
        self._proto = proto
        try:
            if self._tls_first:
                assert ctx is not None
                await loop.create_connection(
                    lambda: proto, ep.host, ep.port, ssl=ctx, server_hostname=hostname
                )
            else:
                await loop.create_connection(lambda: proto, ep.host, ep.port)
            info = await proto.handshake  # the first INFO
            if not self._tls_first and (want_tls or info.get("tls_required")):
                if not (info.get("tls_required") or info.get("tls_available")):
                    raise TransportError(f"TLS wanted but the hub at {ep.host}:{ep.port} does not offer it")
                if ctx is None:
                    ctx = ssl.create_default_context()
                assert proto.transport is not None
                # Nothing else arrives before the TLS handshake: the hub waits for it after INFO.
                new_tr = await loop.start_tls(proto.transport, proto, ctx, server_hostname=hostname)
                if new_tr is None:
                    raise TransportError("TLS upgrade failed")
                proto.transport = new_tr
            proto.handshake = loop.create_future()
            proto.handshake_stage = "pong"
            self.interest_view.begin_rebuild()
            assert proto.transport is not None
            frames = [wire.encode_connect(self._connect_options(info, ep))]
            # Subscriptions go before our PING, so the PONG also confirms the hub has them.
            for (subject, queue), subs in self._sub_keys.items():
                frames.append(
                    wire.encode_sub(subject, queue, len(subs)) if queue else wire.encode_sub(subject)
                )
            frames.append(wire.PING_FRAME)
            proto.transport.write(b"".join(frames))
            await proto.handshake  # PONG, or -ERR / EOF
        except BaseException:
            if self._proto is proto:
                self._proto = None
            self.interest_view.abort_rebuild()
            if proto.transport is not None:
                proto.transport.abort()
            raise
        proto.handshake_stage = "done"
        self._on_handshake_done(proto)

    def _connect_options(self, info: dict[str, Any], ep: Endpoint) -> dict[str, Any]:
        # No "lang": it makes the hub think a client dialed the leafnode port. No
        # "compress_mode": the hub then leaves compression off. No "remote_account" (a duplicate
        # name + account would evict another leaf) and no "cluster" (may clash with the hub's).
        opts: dict[str, Any] = {"name": self.name, "headers": True, "version": VERSION, "protocol": 1}
        user = self._user if self._user is not None else ep.user
        password = self._password if self._password is not None else ep.password
        token = self._token if self._token is not None else ep.token
        if user is not None:
            opts["user"] = user
            opts["pass"] = password or ""
        if token is not None:
            opts["auth_token"] = token
        nonce = info.get("nonce", "")
        if self._creds_file is not None:
            jwt, seed = read_creds(self._creds_file)
            opts["jwt"] = jwt
            opts["sig"] = sign(seed, nonce)
        elif self._nkey_seed is not None:
            opts["nkey"], opts["sig"] = nkey_public(self._nkey_seed), sign(self._nkey_seed, nonce)
        return opts

    def _on_handshake_done(self, proto: LeafProtocol) -> None:
        reconnect = self._had_connection
        self._had_connection = True
        self._pings_out = 0
        # Swap in the interest the hub just re-announced; tell listeners only the difference.
        self.interest_view.finish_rebuild()
        self._set_state(LinkState.CONNECTED)
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
            assert proto.transport is not None
            proto.transport.write(data)
        log.info(
            "leaf link %s: %s %s:%s (server %s)",
            self.name,
            "reconnected to" if reconnect else "connected to",
            self._endpoints[self._ep_index].host,
            self._endpoints[self._ep_index].port,
            self.server_info.get("server_name", "?"),
        )

    # ------------------------------------------------------------------------ supervision

    async def _supervise(self) -> None:
        """Wait for the connection to drop, then reconnect with backoff until closed."""
        while not self.closed:
            proto = self._proto
            if proto is not None:
                await asyncio.shield(proto.lost)
            if self.closed:
                return
            self._set_state(LinkState.RECONNECTING)
            attempt = 0
            while not self.closed:
                if 0 <= self.max_reconnect_attempts <= attempt:
                    log.error("leaf link %s: giving up after %d reconnect attempts", self.name, attempt)
                    await self._give_up()
                    return
                delay = min(self.reconnect_max_delay, self.reconnect_delay * (2 ** min(attempt, 30)))
                # Full jitter in [delay/2, delay]: several jetlog nodes must not reconnect in lockstep.
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
                attempt += 1
                try:
                    await asyncio.wait_for(self._attempt(), max(5.0, self.reconnect_max_delay))
                except (TransportError, OSError, TimeoutError) as e:
                    log.warning("leaf link %s: reconnect attempt %d failed: %s", self.name, attempt, e)
                    self._ep_index = (self._ep_index + 1) % len(self._endpoints)
                    if not self.closed:
                        self._set_state(LinkState.RECONNECTING)
                    continue
                self.stats.reconnects += 1
                break

    async def _give_up(self) -> None:
        self._set_state(LinkState.CLOSED)
        self._pending.clear()
        self._pending_bytes = 0
        self._fail_pongs(TransportError("leaf link closed: reconnect attempts exhausted"))
        for t in list(self._tasks):
            if t is not asyncio.current_task():
                t.cancel()

    async def _pinger(self) -> None:
        """Our keepalive: PING every ping_interval; too many unanswered PINGs = dead link."""
        while not self.closed:
            await asyncio.sleep(self.ping_interval)
            proto = self._proto
            if not self.connected or proto is None or proto.transport is None:
                continue
            if self._pings_out >= self.max_outstanding_pings:
                log.warning(
                    "leaf link %s: %d PINGs unanswered, dropping the connection", self.name, self._pings_out
                )
                proto.transport.abort()
                continue
            self._pings_out += 1
            self._pongs.append(None)
            self._send_control(wire.PING_FRAME)

    def _on_connection_lost(self, proto: LeafProtocol, exc: Exception | None) -> None:
        if proto is not self._proto:
            return
        self._proto = None
        was_connected = self.connected
        # Data accepted but not yet written survives into the pending buffer (it may exceed the
        # bound once; the next publish then fails loudly). Bytes already handed to the socket are
        # lost like on any NATS connection (at-most-once).
        if self._wbuf:
            self._pending[:0] = self._wbuf
            self._pending_bytes += self._wbuf_bytes
            self._wbuf.clear()
            self._wbuf_bytes = 0
        self._fail_pongs(TransportError("leaf link connection lost"))
        if was_connected:
            log.warning("leaf link %s: connection lost: %s", self.name, exc or "EOF")
            self._set_state(LinkState.DISCONNECTED)

    def _fail_pongs(self, exc: TransportError) -> None:
        while self._pongs:
            f = self._pongs.popleft()
            if f is not None and not f.done():
                f.set_exception(exc)
        self._pings_out = 0

    # ---------------------------------------------------------------------------- reading

    def _on_events(self, proto: LeafProtocol, events: list[wire.Event], start: int = 0) -> None:
        if proto is not self._proto:
            return
        MSG = wire.MSG
        end = min(len(events), start + EVENT_SLICE)
        for i in range(start, end):
            ev = events[i]
            if ev[0] == MSG:
                self._dispatch(ev[1], ev[2], ev[3], ev[4], ev[5])
            else:
                self._on_control(proto, ev)
        if end < len(events) and proto.transport is not None:
            # One socket read can hold thousands of messages (milliseconds of work). Yield to
            # the loop between slices so fsync completions, timers (heartbeats, ack waits) and
            # acks on other links are not held up; reading stays paused meanwhile, so the rest
            # of this read is processed before anything that arrives after it.
            if not proto.reading_paused:
                proto.reading_paused = True
                proto.transport.pause_reading()
            loop = self._loop
            assert loop is not None
            loop.call_soon(self._continue_events, proto, events, end)
        elif proto.reading_paused and proto.transport is not None:
            proto.reading_paused = False
            proto.transport.resume_reading()

    def _continue_events(self, proto: LeafProtocol, events: list[wire.Event], start: int) -> None:
        self._on_events(proto, events, start)

    def _dispatch(
        self, subject: str, reply: str | None, hdr: bytes, payload: bytes, queues: tuple[str, ...]
    ) -> None:
        stats = self.stats
        stats.msgs_in += 1
        stats.bytes_in += len(hdr) + len(payload)
        subs = self._subs.match(subject)
        if not subs:
            return
        if not self._has_queue_subs:
            for s in subs:
                try:
                    s.cb(subject, reply, hdr, payload)
                except Exception:
                    stats.callback_errors += 1
                    log.exception("leaf link %s: callback for %s failed", self.name, s.subject)
            return
        # Plain subscribers always get it; a local queue group only when the hub picked this
        # link for that group (the group is named in the frame), and then one member of it.
        picked: dict[str, list[LeafSubscription]] = {}
        for s in subs:
            if s.queue is None:
                self._call(s, subject, reply, hdr, payload)
            elif s.queue in queues:
                picked.setdefault(s.queue, []).append(s)
        for members in picked.values():
            self._rr += 1
            self._call(members[self._rr % len(members)], subject, reply, hdr, payload)

    def _call(self, s: LeafSubscription, subject: str, reply: str | None, hdr: bytes, payload: bytes) -> None:
        try:
            s.cb(subject, reply, hdr, payload)
        except Exception:
            self.stats.callback_errors += 1
            log.exception("leaf link %s: callback for %s failed", self.name, s.subject)

    def _on_control(self, proto: LeafProtocol, ev: wire.Event) -> None:
        kind = ev[0]
        if kind == wire.LS_ADD:
            self.interest_view.add(ev[1], ev[2], ev[3])
        elif kind == wire.LS_DEL:
            self.interest_view.remove(ev[1], ev[2])
        elif kind == wire.PING:
            self._send_control(wire.PONG_FRAME, proto)
        elif kind == wire.PONG:
            if proto.handshake_stage == "pong":
                if not proto.handshake.done():
                    proto.handshake.set_result(None)
                return
            self._pings_out = 0
            if self._pongs:
                f = self._pongs.popleft()
                if f is not None and not f.done():
                    f.set_result(None)
        elif kind == wire.INFO:
            info = ev[1]
            self.server_info.update(info)
            if "max_payload" in info:
                self.max_payload = int(info["max_payload"])
            if proto.handshake_stage == "info" and not proto.handshake.done():
                proto.handshake.set_result(info)
        elif kind == wire.ERR:
            msg = ev[1]
            if proto.handshake_stage != "done":
                if not proto.handshake.done():
                    proto.handshake.set_exception(
                        TransportError(f"leaf link {self.name}: hub refused: {msg}")
                    )
            else:
                # Most -ERRs on a leaf connection are followed by the hub closing it.
                log.error("leaf link %s: hub error: %s", self.name, msg)
        elif kind == wire.OK:
            pass
        else:
            log.warning("leaf link %s: unexpected frame from hub: %r", self.name, ev[:2])

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
        data = self._wbuf[0] if len(self._wbuf) == 1 else b"".join(self._wbuf)
        self._wbuf.clear()
        self._wbuf_bytes = 0
        proto.transport.write(data)

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
        frame = wire.encode_msg(subject, payload, reply, hdr, queues, self.max_payload, self.max_control_line)
        if self._state is LinkState.CONNECTED:
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
        stats = self.stats
        stats.msgs_out += 1
        stats.bytes_out += len(hdr) + len(payload)

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

    # ------------------------------------------------------------------------ subscriptions

    def subscribe(self, subject: str, cb: MsgCallback, queue: str | None = None) -> LeafSubscription:
        """Ask the hub for messages on ``subject`` (``LS+``); ``cb(subject, reply, hdr, payload)``.

        Several local subscriptions on one (subject, queue) share one hub subscription. With a
        ``queue`` the hub counts this link as ``weight`` = local member count in that group.
        Literal subjects under ``$JS.API.``, ``$KV.``, ``$OBJ.`` are refused: the hub would
        close the link (those are captured over the client connection instead).
        """
        if not is_valid_subject(subject):
            raise wire.LeafFrameError(f"invalid subject {subject!r}")
        if queue is not None:
            wire.check_token(queue, "queue group")
        if subject.startswith(DENIED_PREFIXES):
            if is_literal(subject):
                raise wire.LeafFrameError(
                    f"{subject!r} is denied on leaf connections; the hub would close the link"
                )
            log.warning(
                "leaf link %s: %s is denied by the hub on leaf links; it will get nothing", self.name, subject
            )
        if self.closed:
            raise TransportError(f"leaf link {self.name} is closed")
        sub = LeafSubscription(self, subject, queue, cb)
        key = (subject, queue)
        members = self._sub_keys.setdefault(key, [])
        members.append(sub)
        self._subs.insert(subject, sub)
        if queue is not None:
            self._has_queue_subs += 1
            self._send_control(wire.encode_sub(subject, queue, len(members)))
        elif len(members) == 1:
            self._send_control(wire.encode_sub(subject))
        return sub

    def unsubscribe(self, sub: LeafSubscription) -> None:
        """Remove a local subscription; ``LS-`` goes out when the last one on its key goes."""
        if not sub.active:
            return
        sub.active = False
        key = (sub.subject, sub.queue)
        members = self._sub_keys.get(key)
        if not members or sub not in members:
            return
        members.remove(sub)
        self._subs.remove(sub.subject, sub)
        if sub.queue is not None:
            self._has_queue_subs -= 1
        if not members:
            del self._sub_keys[key]
            self._send_control(wire.encode_unsub(sub.subject, sub.queue))
        elif sub.queue is not None:
            self._send_control(wire.encode_sub(sub.subject, sub.queue, len(members)))

    # ----------------------------------------------------------------------------- interest

    def has_interest(self, subject: str) -> bool:
        """True if some hub subscription (plain or queue) matches the literal ``subject``."""
        return self.interest_view.has_interest(subject)

    def queue_groups(self, subject: str) -> set[str]:
        """Queue groups on the hub with a subscription matching the literal ``subject``."""
        return self.interest_view.queue_groups(subject)

    def queue_weight(self, subject: str, queue: str) -> int:
        """The hub-announced member count of ``queue`` on exactly the subscription ``subject``."""
        return self.interest_view.queue_weight(subject, queue)

    def interest(self) -> dict[tuple[str, str | None], int]:
        """Snapshot of the hub's application interest: (subject, queue) -> weight (1 for plain)."""
        return self.interest_view.snapshot()

    def add_interest_listener(self, cb: InterestListener) -> Callable[[], None]:
        """Call ``cb("+"|"-", subject, queue)`` when a hub subscription key appears or goes;
        returns a function that removes the listener."""
        return self.interest_view.add_listener(cb)
