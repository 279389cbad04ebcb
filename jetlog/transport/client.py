"""The nats-py client link: JetStream API requests, capture of reserved namespaces, replies.

nats-py (pinned to 2.16) is extended in two narrow ways, both on its documented-internal seams:

* **raw subscriptions**: for subjects jetlog owns (``$JS.API.>``, captured ``$KV.>``/``$OBJ.>``
  stream subjects) ``_process_msg`` hands the callback the subject, reply, *raw* header block and
  payload synchronously. Headers must be stored verbatim (nats-py would parse them into a dict and
  lose order and duplicates), and skipping the per-message ``Msg`` object and task queue keeps
  the API path lean.
* **raw publish**: ``send`` writes an ``HPUB`` whose header block is ours, so status replies such
  as ``NATS/1.0 404 Message Not Found`` can be sent (``publish(headers=dict)`` cannot).

Everything else (connect, auth, TLS, reconnect and re-subscribe) is nats-py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client

from jetlog.errors import TransportError

log = logging.getLogger("jetlog.client")

RawCallback = Callable[[str, "str | None", bytes, bytes], None]


class _RawClient(Client):
    """nats-py client whose chosen subscriptions bypass Msg objects (see module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw_callbacks: dict[int, RawCallback] = {}

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        cb = self.raw_callbacks.get(sid)
        if cb is None:
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        try:
            cb(subject.decode(), reply.decode() if reply else None, headers or b"", data)
        except Exception:  # a handler bug must not kill the connection's reader
            log.exception("handler for %s failed", subject)


class ClientLink:
    """The node's nats-py connection to the upstream server."""

    def __init__(
        self,
        servers: list[str],
        *,
        name: str,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        nkey_seed: str | None = None,
        creds_file: str | None = None,
        tls: ssl.SSLContext | None = None,
        connect_timeout: float = 5.0,
        max_reconnect_attempts: int = -1,
    ) -> None:
        self.nc = _RawClient()
        self._opts: dict[str, Any] = {
            "servers": servers,
            "name": name,
            "connect_timeout": connect_timeout,
            "max_reconnect_attempts": max_reconnect_attempts,
            "reconnect_time_wait": 0.5,
            "allow_reconnect": True,
            # jetlog never needs its own publishes back; a stream capturing '>' must not store
            # the node's own replies.
            "no_echo": True,
            "pending_size": 64 * 1024 * 1024,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnect,
            "reconnected_cb": self._on_reconnect,
        }
        if user:
            self._opts["user"] = user
            self._opts["password"] = password or ""
        if token:
            self._opts["token"] = token
        if nkey_seed:
            self._opts["nkeys_seed_str"] = nkey_seed
        if creds_file:
            self._opts["user_credentials"] = creds_file
        if tls is not None:
            self._opts["tls"] = tls
        self.on_reconnect: list[Callable[[], None]] = []

    @property
    def connected(self) -> bool:
        """True while the connection is up."""
        return bool(self.nc.is_connected)

    @property
    def server_version(self) -> str:
        """The upstream's version string (jetlog reports it as ``_nats.ver``)."""
        info = getattr(self.nc, "_server_info", None) or {}
        return str(info.get("version", "2.15.1"))

    @property
    def max_payload(self) -> int:
        """The upstream's max_payload."""
        return int(self.nc.max_payload or 1024 * 1024)

    async def connect(self) -> None:
        """Connect once; raise TransportError at once when the upstream is unreachable or
        refuses the credentials (a start-up error an operator must see). After that first
        success the connection reconnects on its own (``max_reconnect_attempts``)."""
        # nats-py's server selection retries a failing server until max_reconnect_attempts is
        # exceeded, whatever allow_reconnect says: bound it for this first connect only.
        opts = dict(self._opts, allow_reconnect=False, max_reconnect_attempts=1)
        try:
            await self.nc.connect(**opts)
        except (OSError, TimeoutError, nats.errors.Error) as e:
            with contextlib.suppress(nats.errors.Error):
                await self.nc.close()
            raise TransportError(f"cannot connect to {self._opts['servers']}: {e}") from e
        # nats-py reads these options whenever the connection drops.
        self.nc.options["allow_reconnect"] = True
        self.nc.options["max_reconnect_attempts"] = self._opts["max_reconnect_attempts"]

    async def close(self) -> None:
        """Drain nothing, just close."""
        if not self.nc.is_closed:
            await self.nc.close()

    async def subscribe_raw(self, subject: str, cb: RawCallback, queue: str = "") -> int:
        """Subscribe with a raw synchronous callback; returns the subscription id."""
        sub = await self.nc.subscribe(subject, queue=queue, pending_msgs_limit=-1, pending_bytes_limit=-1)
        self.nc.raw_callbacks[sub._id] = cb
        return int(sub._id)

    async def unsubscribe(self, sid: int) -> None:
        """Remove a raw subscription."""
        self.nc.raw_callbacks.pop(sid, None)
        sub = self.nc._subs.get(sid)
        if sub is not None:
            await sub.unsubscribe()

    async def flush(self, timeout: float = 5.0) -> None:
        """Round trip to the server: everything sent before has been processed."""
        try:
            await self.nc.flush(int(max(1, timeout)))
        except (TimeoutError, nats.errors.Error) as e:
            raise TransportError(f"flush failed: {e}") from e

    def send(self, subject: str, payload: bytes, hdr: bytes = b"", reply: str = "") -> None:
        """Publish now (non-blocking), with an optional raw header block (status lines ok)."""
        nc = self.nc
        if not nc.is_connected and not nc.is_reconnecting:
            raise TransportError("client connection is closed")
        if hdr:
            cmd = b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
                subject.encode(),
                reply.encode(),
                len(hdr),
                len(hdr) + len(payload),
                hdr,
                payload,
            )
        else:
            cmd = b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply.encode(), len(payload), payload)
        if not nc._pending and nc.is_connected and nc._transport is not None:
            # Nothing queued ahead of us: write now instead of waking nats-py's flusher task
            # (one loop hop less on every API reply; order is kept since the queue is empty).
            nc._transport.write(cmd)
            return
        nc._pending.append(cmd)
        nc._pending_data_size += len(cmd)
        q = nc._flush_queue
        if q is not None and q.empty() and nc.is_connected:
            # Wake nats-py's flusher task the way its own publish does.
            q.put_nowait(asyncio.get_running_loop().create_future())

    async def _on_error(self, e: Exception) -> None:
        log.warning("upstream client connection error: %s", e)

    async def _on_disconnect(self) -> None:
        log.warning("upstream client connection lost; reconnecting")

    async def _on_reconnect(self) -> None:
        log.info("upstream client connection re-established")
        for cb in self.on_reconnect:
            cb()
