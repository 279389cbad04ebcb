"""A jetlog node: the two upstream links, the stream catalog, the API and the HTTP endpoint.

Start-up order matters: the client link and the leaf link connect first, streams are loaded and
their subjects subscribed (and flushed, so the upstream knows about the interest), and only then
is ``$JS.API.>`` subscribed. A client that sees the API answering can therefore publish to any
existing stream without racing the capture subscriptions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from typing import TYPE_CHECKING, Any

import msgspec

from jetlog.config import NodeConfig
from jetlog.errors import JetlogError, TransportError
from jetlog.observe.monitor import Monitor
from jetlog.stream.manager import StreamManager
from jetlog.transport.capture import Capture, Egress
from jetlog.transport.client import ClientLink
from jetlog.transport.leaf import LeafConnection

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from jetlog.observe.http import HttpEndpoint

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
            # Both links retry with the same backoff (0.1 s doubling up to 2 s), forever by default.
            reconnect_max_delay=2.0,
            max_reconnect_attempts=up.max_reconnect_attempts,
        )
        self.egress = Egress(self.leaf, self.client)
        self.capture = Capture(self.leaf, self.client)
        self.streams: StreamManager | None = None
        self.consumers: Any = None
        self.api: Any = None
        self.cluster: Any = None
        self.decode_config: Any = None
        self.registry: CollectorRegistry | None = None  # with the HTTP endpoint only
        self.http: HttpEndpoint | None = None
        self._stopped = asyncio.Event()
        self._started = False

    @property
    def url(self) -> str:
        """The upstream client URL stock clients use."""
        return self.cfg.upstream.url.split(",")[0].strip()

    def ready(self) -> tuple[bool, str]:
        """Readiness: both links up (the client link counts as up once its subscriptions are
        re-registered after a reconnect), the API serving, and in a cluster: joined, in contact
        with Raft, every replica held here in sync with its leader."""
        if not self._started:
            return False, "starting"
        if not self.client.connected:
            return False, "client link down"
        if not self.leaf.connected:
            return False, "leafnode link down"
        if self.cluster is not None and not self.cluster.ready:
            return False, "cluster not joined"
        if self.cluster is not None and self.cluster.fenced():
            return False, "no contact with the cluster's Raft group"
        if self.cluster is not None:
            behind = self.cluster.catching_up()
            if behind:
                # Not ready until every replica it holds is back in its ISR: a rolling restart
                # gated on readiness (Kubernetes, the docs' procedure) then never takes a second
                # node down while this one still lacks data, which could leave a stream with
                # fewer in-sync replicas than min_insync.
                more = f" (+{len(behind) - 3} more)" if len(behind) > 3 else ""
                return False, "catching up: " + ", ".join(behind[:3]) + more
        return True, "ready"

    # ---- monitoring (observe.monitor.MonitorHost) ----------------------------------------------

    def mon_streams(self) -> dict[str, Any]:
        """The stream replicas this node holds."""
        return dict(self.streams.streams) if self.streams is not None else {}

    def mon_stream_info(self, stream: Any, config: bool) -> dict[str, Any]:
        """STREAM.INFO's body (with the ``cluster`` block; a single node names itself leader,
        as nats-server does)."""
        if self.api is None:
            return {}
        info: dict[str, Any] = self.api.streams.info_dict(stream, cluster=self.cluster is not None)
        if self.cluster is None:
            info["cluster"] = {"leader": self.cfg.name}
        if not config:
            info.pop("config", None)
        return info

    def mon_consumer_infos(self, stream: Any, config: bool) -> list[dict[str, Any]]:
        """CONSUMER.INFO bodies of the consumers this node runs for ``stream`` (its leader's)."""
        from jetlog.api.consumers import consumer_info
        from jetlog.api.models import encode_json

        cset = stream.consumers
        if cset is None:
            return []
        out = []
        for name in sorted(cset.consumers):
            d = msgspec.json.decode(encode_json(consumer_info(cset.consumers[name])))
            if not config:
                d.pop("config", None)
            out.append(d)
        return out

    def mon_api_stats(self) -> tuple[int, int]:
        """API replies and error replies sent."""
        return (int(getattr(self.api, "total", 0)), int(getattr(self.api, "errors", 0)))

    def mon_meta(self) -> dict[str, Any] | None:
        """``meta_cluster`` (nats-server's shape) when clustered."""
        return self.cluster.meta_info() if self.cluster is not None else None

    def mon_leads(self, name: str) -> bool:
        """Whether this node leads ``name``."""
        if self.cluster is None:
            return True
        role = self.cluster.reconciler.role_of(name) if self.cluster.reconciler is not None else None
        return role is not None and role.kind == "leader"

    def mon_config(self) -> dict[str, Any]:
        """Node facts for the monitoring documents."""
        http_host, http_port = "", 0
        if self.http is not None:
            http_host, http_port = self.http.host, self.http.port
        return {
            "name": self.cfg.name,
            "data_dir": os.path.abspath(self.cfg.data_dir),
            "sync": self.cfg.storage.fsync,
            "sync_interval": self.cfg.storage.sync_interval,
            "domain": self.cfg.api.domain,
            "max_payload": self.client.max_payload,
            "http_host": http_host,
            "http_port": http_port,
            "links": {"client": self.client.connected, "leafnode": self.leaf.connected},
        }

    async def start(self) -> None:
        """Connect, load streams, serve the API. Raises JetlogError when it cannot."""
        from jetlog.api.consumers import pull_from_body
        from jetlog.api.models import decode_stored_config, encode_json, encode_stored_config
        from jetlog.api.models_consumer import ConsumerConfig
        from jetlog.api.router import ApiRouter
        from jetlog.consumer.service import ConsumerService
        from jetlog.consumer.store import read_log
        from jetlog.consumer.wire import parse_ack_payload
        from jetlog.datadir import check_and_mark

        # Before anything opens a file: a directory of a newer on-disk format is refused whole.
        await asyncio.to_thread(check_and_mark, self.cfg.data_dir)
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
            read_consumers=read_log,
        )
        self.decode_config = decode_stored_config
        if not self.cfg.clustered:
            # The streams are read from disk while the links connect (~15 ms of waiting for the
            # upstream server at every start). A failed start releases what was read
            # and its directory locks.
            self.streams.read_ahead()
        try:
            await self.client.connect()
            try:
                await self.leaf.connect(timeout=self.cfg.upstream.connect_timeout)
            except TransportError:
                await self.client.close()
                raise
        except BaseException:
            self.streams.abandon_read_ahead()
            raise
        if self.cfg.clustered:
            from jetlog.cluster.service import ClusterNode

            # The cluster's metadata decides which replicas this node opens (not the disk).
            self.cluster = ClusterNode(self)
            await self.cluster.start()
            self.consumers.ack_owner = self.cluster.ack_owner
        else:
            await self.streams.load()
        self.consumers.start(self.streams)
        await self.capture.flush()
        self.api = ApiRouter(self)
        if self.cluster is not None:
            self.cluster.attach_api(self.api)
        await self.api.start()
        if self.cfg.http.listen:
            # Imported only when the endpoint is on: prometheus_client (with http.server) was
            # ~25 ms of every start, for metrics nobody could scrape.
            from prometheus_client import CollectorRegistry

            from jetlog.observe.http import HttpEndpoint
            from jetlog.observe.metrics import NodeCollector

            self.registry = CollectorRegistry()
            self.registry.register(NodeCollector(self))
            self.http = HttpEndpoint(self.cfg.http.listen, self.registry, self.ready, Monitor(self))
            await self.http.start()
        self._started = True
        log.info("node %s serving JetStream API via %s", self.cfg.name, self.url)

    async def stop(self) -> None:
        """Stop serving, flush and close every stream, close the links. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._started = False
        took: dict[str, float] = {}
        loop = asyncio.get_running_loop()

        async def stage(name: str, aw: Any, bound: float | None) -> None:
            # Each stage is timed, and the ones that only wait for others (in-flight API
            # handlers, cluster roles) are bounded: a stop must end within a supervisor's grace
            # period (systemd, Kubernetes: 30 s). Stores are never cut short.
            t0 = loop.time()
            try:
                await (asyncio.wait_for(aw, bound) if bound else aw)
            except TimeoutError:
                log.warning("stopping: %s did not finish within %.0fs; going on", name, bound)
            except JetlogError as e:
                log.warning("stopping: %s failed: %s", name, e)
            took[name] = loop.time() - t0

        if self.http is not None:
            await stage("http", self.http.close(), 2.0)
        if self.api is not None:
            await stage("api", self.api.stop(), 5.0)
        if self.consumers is not None:
            self.consumers.stop()
        if self.cluster is not None:
            await stage("cluster", self.cluster.stop(), 10.0)
        if self.streams is not None:
            await stage("streams", self.streams.close(), None)
        # Let the last acks leave before the links close.
        await stage("flush", self.leaf.flush(2), 3.0)
        await stage("leaf link", self.leaf.close(), 3.0)
        await stage("client link", self.client.close(), 3.0)
        total = sum(took.values())
        if total > 3.0:
            detail = ", ".join(f"{k} {v:.1f}s" for k, v in took.items() if v >= 0.1)
            log.info("node %s stopped in %.1fs (%s)", self.cfg.name, total, detail)
        else:
            log.info("node %s stopped", self.cfg.name)

    async def wait_stopped(self) -> None:
        """Block until ``stop`` was called."""
        await self._stopped.wait()
