"""Node configuration: a TOML file validated by msgspec, with command-line overrides.

Every value is checked at start; a bad one raises :class:`jetlog.errors.ConfigError` naming the
key (``upstream.url``) and the reason, and the CLI exits with status 2.
"""

from __future__ import annotations

import os
import re
import tomllib
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
    password: str | None = None
    token: str | None = None
    nkey_seed: str | None = None
    creds_file: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_insecure: bool = False
    connect_timeout: float = 5.0
    max_reconnect_attempts: int = -1


class Storage(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Storage settings shared by every stream of the node."""

    fsync: Literal["always", "interval"] = "always"
    """``always``: a PubAck means fsynced (group commit). ``interval`` is an explicit opt-in
    that can lose acknowledged messages on power failure."""
    sync_interval: float = 1.0
    """Seconds between fsyncs when ``fsync = "interval"``."""
    segment_bytes: int = 64 * 1024 * 1024


class Http(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The HTTP endpoint: /metrics, /healthz, /readyz. Empty listen disables it."""

    listen: str = ""


class Api(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """JetStream API options."""

    domain: str = ""
    """JetStream domain: also serve ``$JS.<domain>.API.>`` and report it in PubAcks."""
    max_streams: int = -1


class Logging(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    level: Literal["debug", "info", "warning", "error"] = "info"


class NodeConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The whole node configuration (the TOML file's shape)."""

    name: str = "jetlog-1"
    data_dir: str = "./data"
    upstream: Upstream = msgspec.field(default_factory=Upstream)
    storage: Storage = msgspec.field(default_factory=Storage)
    http: Http = msgspec.field(default_factory=Http)
    api: Api = msgspec.field(default_factory=Api)
    logging: Logging = msgspec.field(default_factory=Logging)


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


def load_config(path: str | None = None, overrides: dict[str, Any] | None = None) -> NodeConfig:
    """Load the TOML file (if any), apply ``overrides`` (dotted keys), validate."""
    raw: dict[str, Any] = {}
    if path:
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError("--config", f"file not found: {path}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("--config", f"invalid TOML: {e}") from None
    for dotted, value in (overrides or {}).items():
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
