"""``$JS.API.*`` request routing.

One raw subscription on ``$JS.API.>`` (and ``$JS.<domain>.API.>``) on the client link feeds
:meth:`ApiRouter.on_request` synchronously with the raw header block and payload. Cheap
read-only endpoints answer inline; endpoints that touch disk (create, update, delete, purge,
message delete) run as owned tasks and answer once their change is durable.

Behaviour that clients depend on (spec §1): unknown API subjects get no reply at all; requests
without a reply subject are executed silently; ``Nats-Required-Api-Level`` above 5 is refused with
412/10185; every JSON reply counts in ``api.total`` (errors also in ``api.errors``), except
successful ``STREAM.MSG.GET`` replies and Direct Get.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from jetlog.api import direct, fetch
from jetlog.api.consumers import ConsumerApi
from jetlog.api.streams import StreamApi
from jetlog.errors import ApiError, JetlogError
from jetlog.wire import headers as H

if TYPE_CHECKING:
    from jetlog.node import Node

log = logging.getLogger("jetlog.api")

API_LEVEL = 5
PREFIX = "$JS.API."

SyncHandler = Callable[[list[str], bytes, bytes], "bytes | None"]


class ApiRouter:
    """Dispatches JetStream API requests to handlers and sends their replies."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.total = 0
        self.errors = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sids: list[int] = []
        self.streams = StreamApi(node, self)
        self.consumers = ConsumerApi(node, self)

    async def start(self) -> None:
        """Subscribe the API subjects (after the streams are loaded)."""
        client = self.node.client
        self._sids.append(await client.subscribe_raw("$JS.API.>", self.on_request))
        domain = self.node.cfg.api.domain
        if domain:
            self._sids.append(await client.subscribe_raw(f"$JS.{domain}.API.>", self.on_request))
        # jetlog's own bulk-read endpoints (Spark source). A queue group: any node holding the
        # stream may answer, and only one does.
        self._sids.append(await client.subscribe_raw(fetch.FETCH_PREFIX + "*", self.on_fetch, "jetlog"))
        self._sids.append(await client.subscribe_raw(fetch.OFFSETS_SUBJECT, self.on_offsets, "jetlog"))
        await client.flush()

    async def stop(self) -> None:
        """Unsubscribe and wait for in-flight handlers."""
        for sid in self._sids:
            try:
                await self.node.client.unsubscribe(sid)
            except JetlogError as e:
                log.debug("unsubscribe failed: %s", e)
        self._sids.clear()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ---- replies ---------------------------------------------------------------------------

    def reply_json(self, reply: str | None, body: bytes, *, error: bool = False, count: bool = True) -> None:
        """Send a JSON API reply and count it."""
        if count:
            self.total += 1
            if error:
                self.errors += 1
        if reply:
            self.node.client.send(reply, body)

    def reply_raw(self, reply: str, frames: list[tuple[bytes, bytes]]) -> None:
        """Send raw frames (Direct Get, statuses) in order on one link."""
        out = self.node.egress
        for hdr, payload in frames:
            out.send(reply, payload, hdr)

    def spawn(self, coro: Awaitable[None], what: str) -> None:
        """Run a handler coroutine as an owned task."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("API handler %s failed", what, exc_info=t.exception())

        task.add_done_callback(done)

    # ---- dispatch --------------------------------------------------------------------------

    def on_request(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """Raw callback for ``$JS.API.>`` (and the domain form)."""
        tokens = subject.split(".")
        if len(tokens) < 3:
            return
        if tokens[1] != "API":
            # $JS.<domain>.API.<rest>
            if len(tokens) < 4 or tokens[2] != "API":
                return
            tokens = ["$JS", "API", *tokens[3:]]
        rest = tokens[2:]
        if not rest:
            return
        kind = rest[0]
        too_new = bool(hdr) and _required_level(hdr) > API_LEVEL
        if kind == "DIRECT":
            self._direct(rest, reply, data, too_new)
            return
        if kind == "INFO" and len(rest) == 1:
            self.streams.account_info(reply, too_new)
            return
        if kind == "STREAM":
            self.streams.dispatch(rest, reply, hdr, data, too_new)
            return
        if kind == "CONSUMER":
            level = H.get(hdr, H.REQUIRED_API_LEVEL) if hdr else None
            self.consumers.dispatch(rest, reply, hdr, data, level)
            return
        # Unknown (or system-account-only) API subject: no reply, like nats-server.

    def _direct(self, rest: list[str], reply: str | None, data: bytes, too_new: bool) -> None:
        # DIRECT.GET.<stream>[.<subject...>]
        if len(rest) < 3 or rest[1] != "GET" or not reply:
            return
        name = rest[2]
        stream = self.node.streams.get(name) if self.node.streams else None
        if stream is None or not stream.config.allow_direct:
            # Real JetStream has no responder for this subject: emulate no-responders.
            self.reply_raw(
                reply, [(H.status(503, "", [("Nats-Subject", ".".join(["$JS", "API", *rest]))]), b"")]
            )
            return
        if too_new:
            self.reply_raw(reply, [direct.API_LEVEL])
            return
        key = ".".join(rest[3:]) if len(rest) > 3 else None
        store = stream.store
        if store.committed_seq < store.last_seq:
            # Reads only see durable data. Rather than hide messages that are one group
            # commit away (a 404 right after a plain publish), wait for that commit.
            self.spawn(self._direct_after_flush(name, stream, reply, data, key), "DIRECT.GET")
            return
        self._direct_reply(name, stream, reply, data, key)

    async def _direct_after_flush(
        self, name: str, stream: Any, reply: str, data: bytes, key: str | None
    ) -> None:
        try:
            await stream.store.flush()
        except JetlogError as e:
            log.error("direct get on %s: flush failed: %s", name, e)
        self._direct_reply(name, stream, reply, data, key)

    def _direct_reply(self, name: str, stream: Any, reply: str, data: bytes, key: str | None) -> None:
        try:
            frames = direct.direct_get(name, stream.store, data, key, fetch.committed_hw(stream))
        except JetlogError as e:
            log.error("direct get on %s failed: %s", name, e)
            frames = [direct.NOT_FOUND]
        self.reply_raw(reply, frames)

    # ---- jetlog bulk reads --------------------------------------------------------------------

    def on_fetch(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """``$JETLOG.API.FETCH.<stream>``: one committed range as a JLC1 frame."""
        if not reply:
            return
        name = subject[len(fetch.FETCH_PREFIX) :]
        req = fetch.decode_fetch(data)
        if isinstance(req, str):
            self.reply_raw(reply, [fetch.bad_request(req)])
            return
        stream = self.node.streams.get(name) if self.node.streams else None
        if stream is None:
            self.reply_raw(reply, [fetch.NOT_FOUND])
            return
        try:
            # Bounded by max_payload, so one reply's reads stay short enough for the loop.
            frame = fetch.fetch(
                name, stream.store, fetch.committed_hw(stream), req, self.node.client.max_payload
            )
        except JetlogError as e:
            log.error("fetch on %s failed: %s", name, e)
            frame = (H.status(500, "Internal Error", [("Jl-Error", str(e)[:200])]), b"")
        self.reply_raw(reply, [frame])

    def on_offsets(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """``$JETLOG.API.OFFSETS``: first sequence and committed mark of several streams."""
        if not reply:
            return
        req = fetch.decode_offsets(data)
        if isinstance(req, str):
            self.reply_raw(reply, [fetch.bad_request(req)])
            return
        streams = self.node.streams
        found = {n: (streams.get(n) if streams else None) for n in req.streams}
        self.reply_raw(reply, [(b"", fetch.offsets_reply(found))])


def _required_level(hdr: bytes) -> int:
    v = H.get(hdr, H.REQUIRED_API_LEVEL)
    if v is None:
        return 0
    v = v.strip()
    return int(v) if v.isdigit() else 0


def api_error(err: JetlogError) -> ApiError:
    """The API error for any jetlog error."""
    return err.to_api()
