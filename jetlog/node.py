"""A jetlog node: the two upstream links, the stream catalog, the API and the HTTP endpoint.

Start-up order matters: the client link and the leaf link connect first, streams are loaded and
their subjects subscribed (and flushed, so the upstream knows about the interest), and only then
is ``$JS.API.>`` subscribed. A client that sees the API answering can therefore publish to any
existing stream without racing the capture subscriptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from typing import Any

import msgspec
from prometheus_client import CollectorRegistry

from jetlog.config import NodeConfig
from jetlog.errors import JetlogError, TransportError
from jetlog.observe.http import HttpEndpoint
from jetlog.observe.metrics import NodeCollector
from jetlog.stream.manager import StreamManager
from jetlog.transport.capture import Capture, Egress
from jetlog.transport.client import ClientLink
from jetlog.transport.leaf import LeafConnection

log = logging.getLogger("jetlog.node")


def _tls_context(cfg: NodeConfig) -> ssl.SSLContext | None:
    up = cfg.upstream
    needs = up.tls_ca or up.tls_cert or any(u.strip().startswith("tls://") for u in up.url.split(","))
    if not needs:
        return None
    ctx = ssl.create_default_context(cafile=up.tls_ca) if up.tls_ca else ssl.create_default_context()
    if up.tls_cert:
        ctx.load_cert_chain(up.tls_cert, up.tls_key)
    if up.tls_insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Node:
    """One jetlog process serving JetStream beside an upstream nats-server."""

    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        up = cfg.upstream
        tls = _tls_context(cfg)
        self.client = ClientLink(
            [u.strip() for u in up.url.split(",")],
            name=f"jetlog:{cfg.name}",
            user=up.user,
            password=up.password,
            token=up.token,
            nkey_seed=up.nkey_seed,
            creds_file=up.creds_file,
            tls=tls,
            connect_timeout=up.connect_timeout,
            max_reconnect_attempts=up.max_reconnect_attempts,
        )
        self.leaf = LeafConnection(
            up.leafnode_url,
            name=f"jetlog-{cfg.name}",
            user=up.user,
            password=up.password,
            token=up.token,
            nkey_seed=up.nkey_seed,
            creds_file=up.creds_file,
            # The leaf port has its own TLS setting: only upgrade when its URL asks for it.
            tls=tls if up.leafnode_url.strip().startswith("tls://") else None,
        )
        self.egress = Egress(self.leaf, self.client)
        self.capture = Capture(self.leaf, self.client)
        self.streams: StreamManager | None = None
        self.consumers: Any = None
        self.api: Any = None
        self.registry = CollectorRegistry()
        self.http: HttpEndpoint | None = None
        self._stopped = asyncio.Event()
        self._started = False

    @property
    def url(self) -> str:
        """The upstream client URL stock clients use."""
        return self.cfg.upstream.url.split(",")[0].strip()

    def ready(self) -> tuple[bool, str]:
        """Readiness: both links up and the API serving."""
        if not self._started:
            return False, "starting"
        if not self.client.connected:
            return False, "client link down"
        if not self.leaf.connected:
            return False, "leafnode link down"
        return True, "ready"

    async def start(self) -> None:
        """Connect, load streams, serve the API. Raises JetlogError when it cannot."""
        from jetlog.api.consumers import pull_from_body
        from jetlog.api.models import decode_stored_config, encode_json, encode_stored_config
        from jetlog.api.models_consumer import ConsumerConfig
        from jetlog.api.router import ApiRouter
        from jetlog.consumer.service import ConsumerService
        from jetlog.consumer.wire import parse_ack_payload

        await self.client.connect()
        try:
            await self.leaf.connect(timeout=self.cfg.upstream.connect_timeout)
        except TransportError:
            await self.client.close()
            raise
        self.consumers = ConsumerService(
            self.leaf,
            decode_config=lambda b: msgspec.json.decode(b, type=ConsumerConfig),
            encode_config=encode_json,
            parse_pull=pull_from_body,
            parse_ack=parse_ack_payload,
        )
        self.streams = StreamManager(
            self.cfg.data_dir,
            self.cfg.storage,
            self.egress,
            self.capture,
            decode_config=decode_stored_config,
            encode_config=encode_stored_config,
            domain=self.cfg.api.domain,
            attach_consumers=self.consumers.attach,
        )
        await self.streams.load()
        self.consumers.start(self.streams)
        await self.capture.flush()
        self.api = ApiRouter(self)
        await self.api.start()
        self.registry.register(NodeCollector(self))
        if self.cfg.http.listen:
            self.http = HttpEndpoint(self.cfg.http.listen, self.registry, self.ready)
            await self.http.start()
        self._started = True
        log.info("node %s serving JetStream API via %s", self.cfg.name, self.url)

    async def stop(self) -> None:
        """Stop serving, flush and close every stream, close the links. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._started = False
        if self.http is not None:
            await self.http.close()
        if self.api is not None:
            with contextlib.suppress(JetlogError):
                await self.api.stop()
        if self.consumers is not None:
            self.consumers.stop()
        if self.streams is not None:
            await self.streams.close()
        # Let the last acks leave before the links close.
        with contextlib.suppress(JetlogError, TimeoutError):
            await asyncio.wait_for(self.leaf.flush(2), 3)
        await self.leaf.close()
        await self.client.close()
        log.info("node %s stopped", self.cfg.name)

    async def wait_stopped(self) -> None:
        """Block until ``stop`` was called."""
        await self._stopped.wait()
