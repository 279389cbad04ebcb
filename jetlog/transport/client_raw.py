"""nats-py's client with raw subscriptions, and the fast path that reads them off the socket.

Kept apart from ``client.py`` (the link: reconnect supervisor, subscriptions, requests,
writing) because this is where jetlog reaches into nats-py (pinned to 2.16) on its
documented-internal seams:

* **raw subscriptions**: for subjects jetlog owns (``$JS.API.>``, captured ``$KV.>``/``$OBJ.>``
  stream subjects) ``_process_msg`` hands the callback the subject, reply, *raw* header block and
  payload synchronously. Headers must be stored verbatim (nats-py would parse them into a dict and
  lose order and duplicates), and skipping the per-message ``Msg`` object and task queue keeps
  the API path lean.
* **the fast path** (:class:`_FastReader`, installed by ``ClientLink._fast_path``): the messages
  of raw subscriptions are taken from the socket read itself, ahead of nats-py's reader task.
* **server errors**: an ``-ERR`` is only recorded and reported (:class:`ServerError`), not a
  reason to close the client for good as in nats-py: the server closes the connection itself
  after a fatal one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import nats
from nats.aio.client import Client

from jetlog.wire.clientframes import ClientSplitter

log = logging.getLogger("jetlog.client")

RawCallback = Callable[[str, "str | None", bytes, bytes], None]


class _RawClient(Client):
    """nats-py client whose chosen subscriptions bypass Msg objects (see module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw_callbacks: dict[int, RawCallback] = {}
        self.server_error = ""  # the last -ERR text

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        cb = self.raw_callbacks.get(sid)
        if cb is None:
            await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
            return
        self.deliver_raw(cb, subject, reply, headers or b"", data)

    def deliver_raw(self, cb: RawCallback, subject: bytes, reply: bytes, hdr: bytes, data: bytes) -> None:
        """Hand a raw subscription's message to its callback (nats-py's parser or the fast
        path, ``_FastReader``), counted in nats-py's stats."""
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        try:
            cb(subject.decode(), reply.decode() if reply else None, hdr, data)
        except Exception:  # a handler bug must not kill the connection's reader
            log.exception("handler for %s failed", subject)

    async def _process_err(self, err_msg: str) -> None:
        # nats-py closes the client for good on any -ERR but "Stale Connection". nats-server
        # closes the connection itself after a fatal error (the reader then sees EOF and the
        # link reconnects); after a non-fatal one (a permissions violation) it keeps it. Either
        # way the server decides: only record and report the error here.
        text = err_msg.strip().strip("'")
        self.server_error = text
        self._err = nats.errors.Error(f"nats: {text}")
        await self._error_cb(ServerError(text))


class _FastReader(asyncio.Protocol):
    """Sits between the socket and nats-py's stream protocol (see ``ClientLink._fast_path``):
    messages of raw subscriptions are handed to their callbacks in the read itself; every other
    operation goes on to nats-py, whole and in order."""

    def __init__(self, inner: asyncio.Protocol, nc: _RawClient) -> None:
        self.inner = inner
        self.nc = nc
        self.split = ClientSplitter(nc.raw_callbacks)

    def data_received(self, data: bytes) -> None:
        nc = self.nc
        cbs = nc.raw_callbacks
        for item in self.split.feed(data):
            if isinstance(item, bytes):
                self.inner.data_received(item)
                continue
            sid, subject, reply, hdr, payload = item
            cb = cbs.get(sid)
            if cb is not None:  # else unsubscribed by a callback earlier in this read
                nc.deliver_raw(cb, subject, reply, hdr, payload)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class ServerError(nats.errors.Error):
    """An ``-ERR`` from the server (reported through ``error_cb``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text
