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
* A supervisor task reconnects with bounded exponential backoff and jitter, forever by default;
  subscriptions are re-sent on every (re)connect; publishes made while disconnected are kept
  (bounded) and sent after the handshake, except frames the hub's (possibly new) max_payload no
  longer allows. One log line per transition: down (with the reason), reconnecting, up.
* Every frame is checked against the hub's ``max_payload`` before it is queued: the hub closes a
  leaf connection on an oversize ``LMSG``/``HMSG`` ("Maximum Payload Violation", verified with
  nats-server 2.15.1), so :meth:`LeafConnection.publish` refuses it with a log line and
  :class:`~jetlog.wire.leaf.PayloadTooLargeError` instead.
* The hub's interest view is rebuilt from scratch on each connect: the hub sends every ``LS+``
  between our CONNECT and its PONG; at that PONG the new view replaces the old one and listeners
  see only the net difference (no "-"/"+" storm for interest that survived a reconnect).

Code: this module connects, runs the handshake and supervises the link; ``leaf_io.LeafIO``
(its base class) holds the state and reads the frames (dispatch, subscriptions, interest), and
its own base ``leaf_out.LeafOut`` writes them (queueing, flushing, backpressure, PING/PONG
flushes); ``leaf_proto`` has the per-connection asyncio protocol and the small types.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import ssl
from collections.abc import Coroutine
from typing import Any

from jetlog.errors import TransportError
from jetlog.transport.leaf_auth import Endpoint, nkey_public, read_creds, sign
from jetlog.transport.leaf_io import LeafIO
from jetlog.transport.leaf_proto import (
    LeafProtocol,
    LeafStats,
    LeafSubscription,
    LinkState,
    MsgCallback,
    fitting_frames,
)
from jetlog.wire import leaf as wire

log = logging.getLogger(__name__)

__all__ = ["LeafConnection", "LeafStats", "LeafSubscription", "LinkState", "MsgCallback"]

VERSION = "2.15.1"  # reported in CONNECT; the hub may enforce leafnodes.min_version

STILL_DOWN_EVERY = 60.0
"""While reconnecting, remind the log this often (seconds) with the last error."""


class LeafConnection(LeafIO):
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
        self._wbuf_lease = math.inf
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
        ep = self._endpoints[self._ep_index]
        assert self._loop is not None
        down = (
            f"; down {self._loop.time() - self._down_since:.1f}s, {self._attempts} attempts"
            if reconnect
            else ""
        )
        log.info(
            "leaf link %s up: %s:%s (server %s%s)",
            self.name,
            ep.host,
            ep.port,
            self.server_info.get("server_name", "?"),
            down,
        )
        if self._pending:
            frames = fitting_frames(self._pending, self.max_payload, self.name)
            self._pending.clear()
            self._pending_bytes = 0
            assert proto.transport is not None
            proto.transport.write(b"".join(frames))
        self._set_state(LinkState.CONNECTED)

    # ------------------------------------------------------------------------ supervision

    async def _supervise(self) -> None:
        """Wait for the connection to drop, then reconnect with backoff until closed."""
        while not self.closed:
            proto = self._proto
            if proto is not None:
                await asyncio.shield(proto.lost)
            if self.closed:
                return
            loop = asyncio.get_running_loop()
            self._down_since = last_note = loop.time()
            self._attempts = 0
            self._set_state(LinkState.RECONNECTING)
            log.info(
                "leaf link %s reconnecting to %s (backoff %.1fs..%.1fs)",
                self.name,
                ", ".join(f"{e.host}:{e.port}" for e in self._endpoints),
                self.reconnect_delay,
                self.reconnect_max_delay,
            )
            while not self.closed:
                attempt = self._attempts
                if 0 <= self.max_reconnect_attempts <= attempt:
                    log.error("leaf link %s: giving up after %d reconnect attempts", self.name, attempt)
                    await self._give_up()
                    return
                delay = min(self.reconnect_max_delay, self.reconnect_delay * (2 ** min(attempt, 30)))
                # Full jitter in [delay/2, delay]: several jetlog nodes must not reconnect in lockstep.
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
                self._attempts = attempt = attempt + 1
                try:
                    await asyncio.wait_for(self._attempt(), max(5.0, self.reconnect_max_delay))
                except (TransportError, OSError, TimeoutError) as e:
                    # Failures are not transitions: debug, plus a reminder while it stays down.
                    log.debug("leaf link %s: reconnect attempt %d failed: %s", self.name, attempt, e)
                    if loop.time() - last_note >= STILL_DOWN_EVERY:
                        last_note = loop.time()
                        log.warning(
                            "leaf link %s still down after %.0fs (%d attempts): %s",
                            self.name,
                            last_note - self._down_since,
                            attempt,
                            e,
                        )
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
                # Reported as the reason in the "down" line.
                proto.failure = TransportError(f"{self._pings_out} PINGs unanswered (stale connection)")
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
            self._wbuf_lease = math.inf
        self._fail_pongs(TransportError("leaf link connection lost"))
        if was_connected:
            why = str(exc) if exc else "closed by the server"
            if self._hub_error:
                why = f"{why} (after hub error: {self._hub_error})"
            self._hub_error = ""
            log.warning("leaf link %s down: %s", self.name, why)
            self._set_state(LinkState.DISCONNECTED)
