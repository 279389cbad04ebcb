"""Node configuration: a TOML file validated by msgspec, with command-line overrides.

Every value is checked at start; a bad one raises :class:`jetlog.errors.ConfigError` naming the
key (``upstream.url``) and the reason, and the CLI exits with status 2.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

import msgspec

from jetlog.errors import ConfigError

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_HOSTPORT_RE = re.compile(r"^[A-Za-z0-9.\-\[\]:]*:\d{1,5}$")


class Upstream(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """How to reach the nats-server jetlog sits beside (both links)."""

    url: str = "nats://127.0.0.1:4222"
    """Client URL(s), comma separated (API, stream subscriptions on reserved namespaces)."""
    leafnode_url: str = "nats-leaf://127.0.0.1:7422"
    """The upstream's leafnode listener (deliveries, stream capture, interest)."""
    user: str | None = None
    """User name on both links (or ``$JETLOG_UPSTREAM_USER``)."""
    password: str | None = None
    """Password on both links (or ``$JETLOG_UPSTREAM_PASSWORD``)."""
    token: str | None = None
    """Token (client link; nats-server's leafnode port has none) (or ``$JETLOG_UPSTREAM_TOKEN``)."""
    nkey_seed: str | None = None
    """NKey user seed, ``SU…`` (or ``$JETLOG_UPSTREAM_NKEY_SEED``)."""
    creds_file: str | None = None
    """``.creds`` file: user JWT and seed, operator mode (or ``$JETLOG_UPSTREAM_CREDS_FILE``)."""
    tls_ca: str | None = None
    """CA certificate(s) to verify the server with (PEM)."""
    tls_cert: str | None = None
    """Client certificate (PEM), for servers that verify clients."""
    tls_key: str | None = None
    """The client certificate's key (PEM)."""
    tls_insecure: bool = False
    """Do not verify the server's certificate (tests only)."""
    connect_timeout: float = 5.0
    """Seconds to wait for each link at start."""
    max_reconnect_attempts: int = -1
    """Reconnect attempts of both links after a loss (backoff 0.1 s doubling to 2 s); -1: forever."""


class Storage(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Storage settings shared by every stream of the node."""

    fsync: Literal["always", "interval"] = "always"
    """``always``: a PubAck means fsynced (group commit). ``interval`` is an explicit opt-in
    that can lose acknowledged messages on power failure."""
    sync_interval: float = 1.0
    """Seconds between fsyncs when ``fsync = "interval"``."""
    segment_bytes: int = 64 * 1024 * 1024
    """Size at which a stream's log rolls to a new segment file."""
    verify_on_open: Literal["lazy", "full"] = "lazy"
    """``lazy``: at start, a segment of a single-node stream whose index file vouches for it
    (size and content CRC) is not read; a background scrub checks it afterwards, reads check
    every record's CRC, damage is quarantined at the next start. ``full``: every segment's CRC
    is checked before the node serves (slower restarts; damage quarantined at once). Replicas
    in a cluster always check in full, so that a damaged one is rebuilt from its leader."""


class Http(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The HTTP endpoint: /metrics, /healthz, /readyz. Empty listen disables it."""

    listen: str = ""
    """``host:port`` of the HTTP endpoint (status page, /metrics, /jsz, /varz, /healthz, /readyz);
    empty: off."""


class Api(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """JetStream API options."""

    domain: str = ""
    """JetStream domain: also serve ``$JS.<domain>.API.>`` and report it in PubAcks."""
    max_streams: int = -1
    """Streams this node (cluster) accepts; -1: no limit (JetStream's 10027 beyond it)."""
    default_max_consumers: int = 1000
    """Consumers a stream accepts when its ``max_consumers`` is unset (<= 0), as nats-server
    2.15's ``jetstream { limits { default_max_consumers } }``; -1: no default limit."""


class Logging(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Logs on stderr."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    """Lowest level logged."""
    format: Literal["text", "json"] = "text"
    """``json``: one JSON object per line (time, level, logger, message, exception) for log
    shippers; ``text``: for people."""


class Cluster(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Cluster membership and replication settings (empty ``peers``: a single node, no Raft).

    The cluster secret authenticates the Raft transport. It never comes from the command line
    (it would show in ``ps``): ``secret_file`` names a file holding it, or the environment
    variable ``JETLOG_CLUSTER_SECRET`` carries it. With more than one peer it is mandatory.
    """

    name: str = "jetlog"
    """Cluster name (reported in STREAM.INFO's ``cluster`` block; part of internal subjects)."""
    peers: list[str] = msgspec.field(default_factory=list)
    """Every member as ``<node name>@<host>:<raft port>``, this node included (same list on
    every node)."""
    raft_bind: str = ""
    """Address the Raft port binds to (default: this node's address in ``peers``)."""
    secret_file: str = ""
    """File holding the cluster secret (else ``$JETLOG_CLUSTER_SECRET``)."""
    default_replicas: int = 1
    """Replicas of a stream whose config does not say (``num_replicas`` 0 or absent)."""
    min_insync: int = 0
    """In-sync replicas a publish needs; 0 means a majority of the stream's replicas."""
    node_timeout: float = 1.0
    """Seconds without a heartbeat before the controller counts a node as gone."""
    isr_lag_time: float = 2.0
    """Seconds a follower may go without catching up before the leader drops it from the ISR."""
    rejoin: bool = False
    """Start although this node's Raft state is gone while its identity file says it was a
    member (a replaced disk): it then takes the metadata from the others. Only with the other
    members healthy, one node at a time (``--rejoin``)."""

    def members(self) -> dict[str, str]:
        """``{node name: "host:port"}`` parsed from ``peers`` (validated at load)."""
        out: dict[str, str] = {}
        for p in self.peers:
            name, _, addr = p.partition("@")
            out[name] = addr
        return out

    def secret(self) -> str:
        """The cluster secret from ``secret_file`` or the environment ("" if neither)."""
        if self.secret_file:
            with open(self.secret_file, encoding="utf-8") as f:
                return f.read().strip()
        return os.environ.get("JETLOG_CLUSTER_SECRET", "").strip()


class NodeConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The whole node configuration (the TOML file's shape)."""

    name: str = "jetlog-1"
    """This node's name (1-64 of ``A-Z a-z 0-9 _ -``; in a cluster, its name in ``peers``)."""
    data_dir: str = "./data"
    """Where streams, consumer state and Raft state live (marked with its format, ``FORMAT``)."""
    upstream: Upstream = msgspec.field(default_factory=Upstream)
    storage: Storage = msgspec.field(default_factory=Storage)
    http: Http = msgspec.field(default_factory=Http)
    api: Api = msgspec.field(default_factory=Api)
    logging: Logging = msgspec.field(default_factory=Logging)
    cluster: Cluster = msgspec.field(default_factory=Cluster)

    @property
    def clustered(self) -> bool:
        """True when this node is one member of a multi-node cluster."""
        return len(self.cluster.peers) > 1


def _validate_cluster(cfg: NodeConfig) -> None:
    cl = cfg.cluster
    if not _NAME_RE.match(cl.name):
        raise ConfigError("cluster.name", "must be 1-64 characters of A-Z a-z 0-9 _ -")
    seen: set[str] = set()
    for p in cl.peers:
        name, sep, addr = p.partition("@")
        if not sep or not _NAME_RE.match(name) or not _HOSTPORT_RE.match(addr):
            raise ConfigError("cluster.peers", f"expected <node name>@<host>:<port>, got {p!r}")
        if name in seen:
            raise ConfigError("cluster.peers", f"node {name!r} is listed twice")
        seen.add(name)
    if cl.peers and cfg.name not in seen:
        raise ConfigError("cluster.peers", f"this node ({cfg.name!r}) is not among the peers")
    if cl.raft_bind and not _HOSTPORT_RE.match(cl.raft_bind):
        raise ConfigError("cluster.raft_bind", f"expected host:port, got {cl.raft_bind!r}")
    n = max(1, len(cl.peers))
    if not 1 <= cl.default_replicas <= n:
        raise ConfigError("cluster.default_replicas", f"must be between 1 and the cluster size ({n})")
    if cl.min_insync < 0 or cl.min_insync > n:
        raise ConfigError("cluster.min_insync", f"must be between 0 (majority) and the cluster size ({n})")
    if cl.node_timeout <= 0:
        raise ConfigError("cluster.node_timeout", "must be > 0")
    if cl.isr_lag_time <= 0:
        raise ConfigError("cluster.isr_lag_time", "must be > 0")
    if cl.secret_file and not os.path.exists(cl.secret_file):
        raise ConfigError("cluster.secret_file", f"file not found: {cl.secret_file}")
    if len(cl.peers) > 1:
        try:
            secret = cl.secret()
        except OSError as e:
            raise ConfigError("cluster.secret_file", f"cannot read: {e}") from None
        if len(secret) < 16:
            raise ConfigError(
                "cluster.secret_file",
                "a cluster of more than one node needs a secret of at least 16 characters "
                "(cluster.secret_file or $JETLOG_CLUSTER_SECRET): it authenticates the Raft "
                "transport, which would otherwise accept commands from anyone who can reach it",
            )


def _validate(cfg: NodeConfig) -> NodeConfig:
    if not _NAME_RE.match(cfg.name):
        raise ConfigError("name", "must be 1-64 characters of A-Z a-z 0-9 _ -")
    if not cfg.data_dir:
        raise ConfigError("data_dir", "must not be empty")
    for key, url, schemes in (
        ("upstream.url", cfg.upstream.url, ("nats", "tls")),
        ("upstream.leafnode_url", cfg.upstream.leafnode_url, ("nats-leaf", "nats", "tls")),
    ):
        for one in url.split(","):
            scheme, sep, rest = one.strip().partition("://")
            if not sep or scheme not in schemes or not _HOSTPORT_RE.match(rest.rsplit("@", 1)[-1]):
                raise ConfigError(key, f"expected {'|'.join(schemes)}://host:port, got {one.strip()!r}")
    if cfg.upstream.connect_timeout <= 0:
        raise ConfigError("upstream.connect_timeout", "must be > 0")
    for key in ("creds_file", "tls_ca", "tls_cert", "tls_key"):
        path = getattr(cfg.upstream, key)
        if path and not os.path.exists(path):
            raise ConfigError(f"upstream.{key}", f"file not found: {path}")
    if cfg.storage.sync_interval <= 0:
        raise ConfigError("storage.sync_interval", "must be > 0")
    if cfg.storage.segment_bytes < 4096:
        raise ConfigError("storage.segment_bytes", "must be >= 4096")
    if cfg.http.listen and not _HOSTPORT_RE.match(cfg.http.listen):
        raise ConfigError("http.listen", f"expected host:port, got {cfg.http.listen!r}")
    if cfg.api.domain and not _NAME_RE.match(cfg.api.domain):
        raise ConfigError("api.domain", "must be 1-64 characters of A-Z a-z 0-9 _ -")
    _validate_cluster(cfg)
    return cfg


def _path_of(err: msgspec.ValidationError) -> tuple[str, str]:
    """Turn msgspec's "... - at `$.upstream.url`" into ("upstream.url", reason)."""
    text = str(err)
    m = re.search(r"at `\$\.?([^`]*)`", text)
    reason = text.split(" - at ")[0]
    key = m.group(1) if m else ""
    m2 = re.search(r"unknown field `([^`]+)`", text)
    if m2:
        key = f"{key}.{m2.group(1)}" if key else m2.group(1)
        reason = "unknown setting"
    return key or "<root>", reason


SECRET_ENV = {
    "JETLOG_UPSTREAM_USER": "user",
    "JETLOG_UPSTREAM_PASSWORD": "password",
    "JETLOG_UPSTREAM_TOKEN": "token",
    "JETLOG_UPSTREAM_NKEY_SEED": "nkey_seed",
    "JETLOG_UPSTREAM_CREDS_FILE": "creds_file",
}
"""Environment variables carrying the upstream credentials (``[upstream]`` keys)."""


def load_config(path: str | None = None, overrides: dict[str, Any] | None = None) -> NodeConfig:
    """Load the TOML file (if any), apply ``overrides`` (dotted keys), validate."""
    raw: dict[str, Any] = {}
    if path:
        import tomllib  # only with a file: ~5 ms of every start otherwise (docs/internals.md)

        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError("--config", f"file not found: {path}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("--config", f"invalid TOML: {e}") from None
    # Secrets from the environment (a Kubernetes Secret, a systemd EnvironmentFile) rather than
    # the command line, where ``ps`` would show them; they win over the file.
    env = {f"upstream.{key}": os.environ.get(var) for var, key in SECRET_ENV.items()}
    for dotted, value in {**env, **(overrides or {})}.items():
        if value is None:
            continue
        node = raw
        parts = dotted.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    try:
        cfg = msgspec.convert(raw, NodeConfig)
    except msgspec.ValidationError as e:
        key, reason = _path_of(e)
        raise ConfigError(key, reason) from None
    return _validate(cfg)
