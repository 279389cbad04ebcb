"""nats-server's monitoring documents, built from a node: ``/jsz``, ``/varz`` and ``/healthz``.

Operators already watch NATS with prometheus-nats-exporter, nats-surveyor and dashboards that
read these JSON documents; jetlog answers them with nats-server's field names and nesting (the
tests compare the key sets with a real ``nats-server -js`` monitoring port), so those tools read
a jetlog node unchanged. Values are jetlog's own: ``server_id`` is the node name, the account
is the global one (``$G``), stream and consumer details are exactly the JetStream API's
STREAM.INFO / CONSUMER.INFO bodies (which is what nats-server embeds as well).

Sans-I/O apart from reading the host: the HTTP side (``observe/http.py``) parses the query and
writes the bytes.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from jetlog import __version__
from jetlog.wire.timefmt import format_time

API_LEVEL = 5


class _Store(Protocol):
    @property
    def msgs(self) -> int: ...
    @property
    def bytes(self) -> int: ...


class _StreamConfig(Protocol):
    @property
    def storage(self) -> str: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def num_replicas(self) -> int: ...


class MonStream(Protocol):
    """What the monitor reads of one stream replica."""

    @property
    def name(self) -> str: ...
    @property
    def config(self) -> _StreamConfig: ...
    @property
    def store(self) -> _Store: ...
    @property
    def consumer_count(self) -> int: ...


class MonitorHost(Protocol):
    """The node as the monitor sees it (``jetlog.node.Node`` satisfies it)."""

    def mon_streams(self) -> Mapping[str, MonStream]:
        """The stream replicas this node holds."""
        ...

    def mon_stream_info(self, stream: MonStream, config: bool) -> dict[str, Any]:
        """STREAM.INFO's body for ``stream`` (``config`` False: without the config)."""
        ...

    def mon_consumer_infos(self, stream: MonStream, config: bool) -> list[dict[str, Any]]:
        """CONSUMER.INFO bodies of the consumers this node runs for ``stream``."""
        ...

    def mon_api_stats(self) -> tuple[int, int]:
        """API replies sent and error replies sent."""
        ...

    def mon_meta(self) -> dict[str, Any] | None:
        """The metadata group (``meta_cluster``) when clustered."""
        ...

    def mon_leads(self, name: str) -> bool:
        """Whether this node leads stream ``name`` (always True for a single node)."""
        ...

    def mon_config(self) -> dict[str, Any]:
        """Node facts: name, data_dir, sync ("always"/"interval"), sync_interval, domain,
        upstream url, max_payload, http host/port, link states."""
        ...

    def ready(self) -> tuple[bool, str]:
        """Readiness and why not."""
        ...


def _flag(query: Mapping[str, list[str]], name: str) -> bool:
    v = query.get(name)
    if not v:
        return False
    return v[-1].strip().lower() in ("1", "true", "yes", "")


def _int(query: Mapping[str, list[str]], name: str) -> int:
    v = query.get(name)
    try:
        return max(0, int(v[-1])) if v else 0
    except ValueError:
        return 0


class Monitor:
    """Builds the documents; one per node, created with the HTTP endpoint."""

    def __init__(self, host: MonitorHost, *, clock: Any = time.time_ns) -> None:
        self.host = host
        self.clock = clock
        self.started = clock()
        self.requests: dict[str, int] = {}

    def count(self, path: str) -> None:
        """One more request on ``path`` (``http_req_stats``)."""
        self.requests[path] = self.requests.get(path, 0) + 1

    # ---- /jsz --------------------------------------------------------------------------------

    def _totals(self, streams: Iterable[MonStream]) -> dict[str, Any]:
        memory = storage = reserved_mem = reserved_sto = ha = 0
        for s in streams:
            cfg = s.config
            if cfg.storage == "memory":
                memory += s.store.bytes
                reserved_mem += max(0, cfg.max_bytes)
            else:
                storage += s.store.bytes
                reserved_sto += max(0, cfg.max_bytes)
            if cfg.num_replicas > 1:
                ha += 1
        return {
            "memory": memory,
            "storage": storage,
            "reserved_memory": reserved_mem,
            "reserved_storage": reserved_sto,
            "ha_assets": ha,
        }

    def _js_config(self) -> dict[str, Any]:
        c = self.host.mon_config()
        out: dict[str, Any] = {"max_memory": -1, "max_storage": -1, "store_dir": c["data_dir"]}
        if c.get("domain"):
            out["domain"] = c["domain"]
        if c.get("sync") == "interval":
            out["sync_interval"] = int(float(c.get("sync_interval", 0)) * 1e9)
        else:
            out["sync_always"] = True
        out["strict"] = True
        return out

    def jsz(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        """``/jsz``: JetStream totals; ``accounts``/``streams``/``consumers``/``config``/
        ``leader-only``/``acc``/``offset``/``limit`` as on nats-server (streams imply accounts,
        consumers imply streams; offset and limit page the accounts)."""
        streams = dict(self.host.mon_streams())
        total, errors = self.host.mon_api_stats()
        totals = self._totals(streams.values())
        out: dict[str, Any] = {
            "memory": totals["memory"],
            "storage": totals["storage"],
            "reserved_memory": totals["reserved_memory"],
            "reserved_storage": totals["reserved_storage"],
            "accounts": 1,
            "ha_assets": totals["ha_assets"],
            "api": {"level": API_LEVEL, "total": total, "errors": errors},
            "server_id": self.host.mon_config()["name"],
            "now": format_time(self.clock()),
            "config": self._js_config(),
            "limits": {},
            "streams": len(streams),
            "consumers": sum(s.consumer_count for s in streams.values()),
            "messages": sum(s.store.msgs for s in streams.values()),
            "bytes": sum(s.store.bytes for s in streams.values()),
        }
        meta = self.host.mon_meta()
        if meta is not None:
            out["meta_cluster"] = meta
        consumers = _flag(query, "consumers")
        with_streams = consumers or _flag(query, "streams")
        accounts = with_streams or _flag(query, "accounts") or bool(query.get("acc"))
        acc = (query.get("acc") or [""])[-1]
        # offset/limit page the accounts, as on nats-server (there is one: ``$G``; a limit of
        # 0 means none, so only the offset can leave it out).
        if accounts and acc in ("", "$G") and _int(query, "offset") == 0:
            api = {"level": 0, "total": total, "errors": errors}
            out["account_details"] = [self._account(streams, query, with_streams, consumers, totals, api)]
        out["total"] = 1
        return out

    def _account(
        self,
        streams: dict[str, MonStream],
        query: Mapping[str, list[str]],
        with_streams: bool,
        consumers: bool,
        totals: dict[str, Any],
        api: dict[str, int],
    ) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "name": "$G",
            "id": "$G",
            "memory": totals["memory"],
            "storage": totals["storage"],
            "reserved_memory": totals["reserved_memory"],
            "reserved_storage": totals["reserved_storage"],
            "accounts": 0,
            "ha_assets": 0,
            "api": api,
        }
        if not with_streams:
            return detail
        config = _flag(query, "config")
        leader_only = _flag(query, "leader-only") or _flag(query, "leader_only")
        names = sorted(n for n in streams if not leader_only or self.host.mon_leads(n))
        out = []
        for name in names:
            s = streams[name]
            info = self.host.mon_stream_info(s, config)
            d: dict[str, Any] = {"name": name, "created": info.get("created")}
            if "cluster" in info:
                d["cluster"] = info["cluster"]
            if config and "config" in info:
                d["config"] = info["config"]
            d["state"] = info.get("state", {})
            if consumers:
                cds = self.host.mon_consumer_infos(s, config)
                if cds:
                    d["consumer_detail"] = cds
            out.append(d)
        if out:
            detail["stream_detail"] = out
        return detail

    # ---- /status.json (the status page) -------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What the status page shows: members and roles, streams with leader/ISR/lag, the
        consumers this node runs."""
        c = self.host.mon_config()
        ok, why = self.host.ready()
        meta = self.host.mon_meta()
        members: list[dict[str, Any]] = []
        if meta is not None:
            leader = meta.get("leader")
            names = sorted({*(r["name"] for r in meta.get("replicas", [])), *([leader] if leader else [])})
            current = {r["name"]: r.get("current", False) for r in meta.get("replicas", [])}
            for n in names:
                role = "Raft leader" if n == leader else "member"
                if n == c["name"]:
                    role += " (this node)"
                members.append({"name": n, "role": role, "alive": current.get(n, True)})
        streams = []
        consumers: list[dict[str, Any]] = []
        for name, s in sorted(self.host.mon_streams().items()):
            info = self.host.mon_stream_info(s, False)
            cl = info.get("cluster") or {}
            reps = cl.get("replicas") or []
            lead = cl.get("leader", "")
            streams.append(
                {
                    "name": name,
                    "messages": s.store.msgs,
                    "bytes": s.store.bytes,
                    "leader": lead,
                    "replicas": 1 + len(reps) if lead else s.config.num_replicas,
                    "isr": ([lead] if lead else []) + [r["name"] for r in reps if r.get("current")],
                    "lag": {r["name"]: r.get("lag", 0) for r in reps},
                }
            )
            keys = ("num_pending", "num_ack_pending", "num_redelivered")
            consumers.extend(
                {"stream": name, "name": ci.get("name", ""), **{k: ci.get(k, 0) for k in keys}}
                for ci in self.host.mon_consumer_infos(s, False)
            )
        return {
            "node": c["name"],
            "version": __version__,
            "ready": ok,
            "why": "" if ok else why,
            "members": members,
            "streams": streams,
            "consumers": consumers,
        }

    # ---- /varz -------------------------------------------------------------------------------

    def varz(self) -> dict[str, Any]:
        """``/varz``: the general document, with the ``jetstream`` block of nats-server."""
        c = self.host.mon_config()
        streams = dict(self.host.mon_streams())
        total, errors = self.host.mon_api_stats()
        totals = self._totals(streams.values())
        now = self.clock()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        links = c.get("links", {})
        out: dict[str, Any] = {
            "server_id": c["name"],
            "server_name": c["name"],
            "version": __version__,
            "proto": 1,
            "host": c.get("http_host", ""),
            "http_host": c.get("http_host", ""),
            "http_port": c.get("http_port", 0),
            "max_payload": c.get("max_payload", 0),
            "jetstream": {
                "config": self._js_config(),
                "stats": {
                    "memory": totals["memory"],
                    "storage": totals["storage"],
                    "reserved_memory": totals["reserved_memory"],
                    "reserved_storage": totals["reserved_storage"],
                    "accounts": 1,
                    "ha_assets": totals["ha_assets"],
                    "api": {"level": API_LEVEL, "total": total, "errors": errors},
                },
                "limits": {},
            },
            "start": format_time(self.started),
            "now": format_time(now),
            "uptime": _uptime((now - self.started) / 1e9),
            "mem": _rss_bytes(ru),
            "cores": os.cpu_count() or 1,
            "cpu": 0,
            "connections": sum(1 for up in links.values() if up),
            "leafnodes": 1 if links.get("leafnode") else 0,
            "http_req_stats": dict(self.requests),
        }
        meta = self.host.mon_meta()
        if meta is not None:
            out["jetstream"]["meta"] = meta
        return out

    # ---- /healthz ----------------------------------------------------------------------------

    def healthz(self, query: Mapping[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """``/healthz``: the process answers (liveness). ``js-enabled-only``: the JetStream API
        is being served. ``js-server-only``: also ready (links up, cluster joined) — what
        nats-server's Helm chart probes."""
        if _flag(query, "js-enabled-only") or _flag(query, "js-server-only"):
            ok, why = self.host.ready()
            if not ok and (_flag(query, "js-server-only") or why == "starting"):
                return 503, {"status": "unavailable", "status_code": 503, "error": why}
        return 200, {"status": "ok"}


def _uptime(seconds: float) -> str:
    """nats-server's uptime text: ``1d2h3m4s``."""
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    out = f"{d}d" if d else ""
    if d or h:
        out += f"{h}h"
    if d or h or m:
        out += f"{m}m"
    return out + f"{s}s"


def _rss_bytes(ru: Any) -> int:
    """Resident set size now (``/proc``), else the peak (``ru_maxrss`` is KiB on Linux)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return int(ru.ru_maxrss) * 1024
