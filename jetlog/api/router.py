"""``$JS.API.*`` request routing.

One raw subscription on ``$JS.API.>`` (and ``$JS.<domain>.API.>``) on the client link feeds
:meth:`ApiRouter.on_request` synchronously with the raw header block and payload. Cheap
read-only endpoints answer inline; endpoints that touch disk (create, update, delete, purge,
message delete) run as owned tasks and answer once their change is durable.

Behaviour that clients depend on (spec §1): unknown API subjects get no reply at all; requests
without a reply subject are executed silently; a ``Nats-Required-Api-Level`` header that is not
an integer or is above 5 is refused with 412/10185; every JSON reply counts in ``api.total``
(errors also in ``api.errors``), except successful ``STREAM.MSG.GET`` replies and Direct Get.

nats-server keeps subjects starting with ``$JS.API.DIRECT.GET`` and ``$JS.API.CONSUMER.MSG.NEXT.``
away from its API dispatcher (``processServiceImport``): only the per-stream and per-consumer
subscriptions see them, so any other such subject gets the no-responders status (503), which
jetlog sends itself since its ``$JS.API.>`` subscription hides that from the upstream.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from jetlog.api import direct, fetch, oversize
from jetlog.api.consumers import ConsumerApi
from jetlog.api.streams import StreamApi
from jetlog.consumer.wire import required_api_level_rejected
from jetlog.errors import ApiError, JetlogError, TransportError
from jetlog.wire import headers as H

if TYPE_CHECKING:
    from jetlog.api.host import ApiHost

log = logging.getLogger("jetlog.api")
_ERR_CODE = re.compile(rb'"err_code":\s*(\d+)')

API_LEVEL = 5
PREFIX = "$JS.API."
DIRECT_GET_PREFIX = "$JS.API.DIRECT.GET"
NEXT_PREFIX = "$JS.API.CONSUMER.MSG.NEXT."

SyncHandler = Callable[[list[str], bytes, bytes], "bytes | None"]

Route = Callable[[list[str], "str | None", bytes, bytes, bool], bool]
"""Cluster routing hook: ``route(rest, reply, hdr, data, forwarded)`` returns True when it took
the request (forwarded it to another node or handles it through the cluster)."""


class ApiRouter:
    """Dispatches JetStream API requests to handlers and sends their replies."""

    def __init__(self, node: ApiHost) -> None:
        self.node = node
        self.total = 0
        self.errors = 0
        self.errors_by_code: dict[int, int] = {}
        """Error replies by JetStream ``err_code`` (metrics)."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sids: list[int] = []
        self.streams = StreamApi(node, self)
        self.consumers = ConsumerApi(node, self)
        self.route: Route | None = None
        self.fetches = 0
        self.direct_gets = 0
        self.offsets_route: Callable[[str | None, bytes], bool] | None = None
        """Cluster: the node that takes an OFFSETS request gathers what it does not hold."""
        self.clustered = False
        """Cluster: Direct Get and FETCH arrive on per-stream subscriptions of the replicas."""
        self.queue = ""
        """Queue group for the API subscriptions (a cluster's nodes share one)."""

    async def start(self) -> None:
        """Subscribe the API subjects (after the streams are loaded)."""
        client = self.node.client
        self._sids.append(await client.subscribe_raw("$JS.API.>", self.on_request, self.queue))
        domain = self.node.cfg.api.domain
        if domain:
            self._sids.append(await client.subscribe_raw(f"$JS.{domain}.API.>", self.on_request, self.queue))
        # jetlog's own bulk-read endpoints (Spark source). A queue group: any node may answer,
        # and only one does (in a cluster FETCH is on per-stream subscriptions of the replicas).
        if not self.clustered:
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

    def reply_json(
        self,
        reply: str | None,
        body: bytes,
        *,
        error: bool = False,
        count: bool = True,
        ordered: bool = False,
    ) -> None:
        """Send a JSON API reply and count it. A reply the upstream's max_payload cannot carry
        becomes a 10054 error (see :mod:`jetlog.api.oversize`).

        ``ordered``: the reply must not overtake consumer deliveries already sent (consumer
        create/info): it leaves on the leaf link like the deliveries, so the upstream hands
        both to the client in order. nats-py's KV/object watchers decide "no initial values"
        from a consumer info that arrives before the deliveries it counts."""
        client: Any = self.node.client
        if ordered and reply and self.node.egress.leaf.connected:
            client = self.node.egress
        if reply and len(body) > client.max_payload:
            body = oversize.json_too_large(body, client.max_payload)
            error = count = True
        if count:
            self.total += 1
            if error:
                self.errors += 1
                m = _ERR_CODE.search(body)
                if m is not None:
                    code = int(m.group(1))
                    self.errors_by_code[code] = self.errors_by_code.get(code, 0) + 1
        if reply:
            try:
                client.send(reply, body, b"")
            except TransportError as e:
                # The link went down while the request was handled: the client times out.
                log.warning("API reply to %s lost: %s", reply, e)

    def reply_raw(self, reply: str, frames: list[tuple[bytes, bytes]]) -> None:
        """Send raw frames (Direct Get, statuses, bulk reads) in order on one link; a frame
        above the upstream's max_payload ends the reply with a 413 status (see
        :mod:`jetlog.api.oversize`).

        The link is the client link the requests arrive on, as for JSON replies: a reply
        written there leaves at once, where the leaf link's would wait a loop pass for its
        flush (a Direct Get's p50 went from 392-449 to 374-414 µs), and a server that allows
        responses only on the connection that got the request accepts it. The leaf link
        carries them while the client link is down."""
        client = self.node.client
        out: Any = client if client.connected else self.node.egress
        try:
            out.send_many(reply, oversize.fit_frames(frames, out.max_payload))
        except TransportError as e:
            log.warning("reply to %s lost: %s", reply, e)

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
        self.handle(rest, reply, hdr, data, False)

    def handle(self, rest: list[str], reply: str | None, hdr: bytes, data: bytes, forwarded: bool) -> None:
        """Dispatch ``$JS.API.<rest>`` (``forwarded``: another node routed it here)."""
        if self.route is not None and self.route(rest, reply, hdr, data, forwarded):
            return
        kind = rest[0]
        level = H.get(hdr, H.REQUIRED_API_LEVEL) if hdr else None
        too_new = required_api_level_rejected(level)
        api_subject = PREFIX + ".".join(rest)
        if api_subject.startswith(DIRECT_GET_PREFIX):
            self._direct(rest, reply, data, too_new, api_subject)
            return
        if api_subject.startswith(NEXT_PREFIX) and len(rest) != 5:
            self._no_responders(reply, api_subject)
            return
        if kind == "INFO" and len(rest) == 1:
            self.streams.account_info(reply, too_new)
            return
        if kind == "STREAM":
            self.streams.dispatch(rest, reply, hdr, data, too_new)
            return
        if kind == "CONSUMER":
            self.consumers.dispatch(rest, reply, hdr, data, level)
            return
        # Unknown (or system-account-only) API subject: no reply, like nats-server.

    def on_direct(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """Raw callback for a replica's own ``$JS.API.DIRECT.GET.<stream>[.>]`` subscription."""
        tokens = subject.split(".")
        if len(tokens) > 2 and tokens[1] != "API":
            tokens = ["$JS", *tokens[2:]]  # $JS.<domain>.API... -> $JS.API...
        rest = tokens[2:]
        level = H.get(hdr, H.REQUIRED_API_LEVEL) if hdr else None
        self._direct(rest, reply, data, required_api_level_rejected(level), PREFIX + ".".join(rest))

    def _no_responders(self, reply: str | None, api_subject: str) -> None:
        """What the upstream answers when nothing subscribes to ``api_subject``."""
        if reply:
            self.reply_raw(reply, [(H.status(503, "", [("Nats-Subject", api_subject)]), b"")])

    def _direct(
        self, rest: list[str], reply: str | None, data: bytes, too_new: bool, api_subject: str
    ) -> None:
        self.direct_gets += 1
        # DIRECT.GET.<stream>[.<subject...>]
        if not reply:
            return
        stream = None
        if len(rest) >= 3 and rest[1] == "GET" and self.node.streams:
            stream = self.node.streams.get(rest[2])
        if stream is None or not stream.config.allow_direct:
            # Real JetStream has no responder for this subject: emulate no-responders.
            self._no_responders(reply, api_subject)
            return
        name = rest[2]
        if too_new:
            self.reply_raw(reply, [direct.API_LEVEL])
            return
        key = ".".join(rest[3:]) if len(rest) > 3 else None
        if stream.committed_seq < stream.store.last_seq:
            # Reads only see durable data. Rather than hide messages that are one group
            # commit away (a 404 right after a plain publish), wait for that commit.
            self.spawn(self._direct_after_flush(name, stream, reply, data, key), "DIRECT.GET")
            return
        self._direct_reply(name, stream, reply, data, key)

    async def _direct_after_flush(
        self, name: str, stream: Any, reply: str, data: bytes, key: str | None
    ) -> None:
        try:
            await stream.wait_committed()
        except JetlogError as e:
            log.error("direct get on %s: flush failed: %s", name, e)
        self._direct_reply(name, stream, reply, data, key)

    def _direct_reply(self, name: str, stream: Any, reply: str, data: bytes, key: str | None) -> None:
        try:
            frames = direct.direct_get(
                name,
                stream.store,
                data,
                key,
                fetch.committed_hw(stream),
                file_store=stream.config.storage != "memory",
            )
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
        self.fetches += 1
        req = fetch.decode_fetch(data)
        if isinstance(req, str):
            self.reply_raw(reply, [fetch.bad_request(req)])
            return
        stream = self.node.streams.get(name) if self.node.streams else None
        if stream is None:
            self.reply_raw(reply, [fetch.NOT_FOUND])
            return
        # A follower may know its committed mark late; the reader asks again after a short
        # backoff when the reply stops short of what it wanted, by then with the mark learnt.
        stream.want_committed()
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
        if self.offsets_route is not None and self.offsets_route(reply, data):
            return
        req = fetch.decode_offsets(data)
        if isinstance(req, str):
            self.reply_raw(reply, [fetch.bad_request(req)])
            return
        streams = self.node.streams
        found = {n: (streams.get(n) if streams else None) for n in req.streams}
        self.reply_raw(reply, [(b"", fetch.offsets_reply(found))])


def api_error(err: JetlogError) -> ApiError:
    """The API error for any jetlog error."""
    return err.to_api()
