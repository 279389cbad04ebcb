"""Consumer config defaults: nats-server's ``setStaticConsumerMetadata`` and
``setConsumerConfigDefaults`` (nats-server 2.15.1), the limits and names they use. Part of
:mod:`jetlog.consumer.config` (which re-exports the public names).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from jetlog.api.models_consumer import ConsumerConfig, ConsumerConfigRequest, go_time, time_ns
from jetlog.api.models_stream import StreamConfig
from jetlog.errors import ApiError, E

MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4096
MAX_METADATA_LEN = 128 * 1024
DEFAULT_ACK_WAIT = 30_000_000_000
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
DEFAULT_INACTIVE_THRESHOLD = 5_000_000_000
DEFAULT_PINNED_TTL = 120_000_000_000
SOURCE_HEALTH_HB = 1_000_000_000
_MS, _MS100 = 1_000_000, 100_000_000

_BAD_NAME_CHARS = frozenset(" \t\r\n\f.*>\\/")
_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")

_SLICES = ("backoff", "filter_subjects", "priority_groups")
_LEVEL_KEY, _VER_KEY, _SRV_LEVEL_KEY = "_nats.req.level", "_nats.ver", "_nats.level"
_NAME_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def valid_group_name(group: str) -> bool:
    """nats-server's ``validGroupName`` (priority group names)."""
    return _GROUP_NAME.fullmatch(group) is not None


def _valid_asset_name(name: str) -> bool:
    return bool(name) and _BAD_NAME_CHARS.isdisjoint(name)


def _blen(s: str) -> int:
    return len(s.encode("utf-8", "surrogateescape"))


def random_consumer_name(taken: Mapping[str, Any] | None = None) -> str:
    """A legacy ephemeral's name: 8 base-62 characters like ``SfEqXaMn``, not in ``taken``."""
    while True:
        name = "".join(secrets.choice(_NAME_CHARS) for _ in range(8))
        if not taken or name not in taken:
            return name


# ---------------------------------------------------------------------------------------------
# setStaticConsumerMetadata + setConsumerConfigDefaults


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Server (``jetstream { limits {} }``) and account limits consulted on create; zero/-1
    mean unset. ``clustered`` turns off the single-server replicas rule."""

    max_ack_pending: int = 0
    max_request_batch: int = 0
    account_max_ack_pending: int = -1
    account_max_consumers: int = -1
    default_max_consumers: int = 1000
    """The per-stream limit when the stream's ``max_consumers`` is unset (nats-server 2.15's
    ``default_max_consumers``, 1000 unless configured); <= 0: none."""
    clustered: bool = False


DEFAULT_LIMITS = ServerLimits()


def _static_metadata(c: ConsumerConfigRequest) -> dict[str, str]:
    md = {k: v for k, v in (c.metadata or {}).items() if k not in (_VER_KEY, _SRV_LEVEL_KEY)}
    level = 0
    if c.pause_until is not None and time_ns(c.pause_until) != time_ns("0001-01-01T00:00:00Z"):
        level = 1
    if c.priority_policy != "none" or c.priority_timeout != 0 or c.priority_groups:
        level = 1
    if c.ack_policy == "flow_control":
        level = 4
    md[_LEVEL_KEY] = str(level)
    return md


def with_pause(cfg: ConsumerConfig, pause_until: str | None) -> ConsumerConfig:
    """The config after ``CONSUMER.PAUSE``: nats-server keeps ``pause_until`` (UTC; ``None`` for
    the zero time) in the config and re-stamps ``_nats.req.level`` (setStaticConsumerMetadata)."""
    md = {k: v for k, v in (cfg.metadata or {}).items() if k not in (_VER_KEY, _SRV_LEVEL_KEY)}
    level = 1 if pause_until is not None else 0
    if cfg.priority_policy != "none" or cfg.priority_timeout != 0 or cfg.priority_groups:
        level = 1
    if cfg.ack_policy == "flow_control":
        level = 4
    md[_LEVEL_KEY] = str(level)
    return _stamp(cfg, pause_until=pause_until, metadata=md)


def _pedantic(msg: str) -> ApiError:
    return E.PEDANTIC(err=msg)


def normalize_consumer_config(
    req: ConsumerConfigRequest,
    *,
    stream_config: StreamConfig,
    pedantic: bool = False,
    limits: ServerLimits = DEFAULT_LIMITS,
) -> ConsumerConfig:
    """``setStaticConsumerMetadata`` then ``setConsumerConfigDefaults``: every default of spec
    §1.1 (zero = unset), stream ``consumer_limits``, and the ``10157`` pedantic-mode errors."""
    c = req
    md = _static_metadata(c)

    def non_negative(v: int, key: str) -> int:
        if v < 0:
            if pedantic:
                raise _pedantic(f"{key} must not be negative")
            return 0
        return v

    max_deliver = c.max_deliver
    if max_deliver == 0 or max_deliver < -1:
        if pedantic and max_deliver < -1:
            raise _pedantic("max_deliver must be set to -1")
        max_deliver = -1
    max_waiting = non_negative(c.max_waiting, "max_waiting")
    max_ack_pending = c.max_ack_pending
    if max_ack_pending < -1:
        if pedantic:
            raise _pedantic("max_ack_pending must be set to -1")
        max_ack_pending = -1
    max_batch = non_negative(c.max_batch, "max_batch")
    max_expires = non_negative(c.max_expires, "max_expires")
    max_bytes = non_negative(c.max_bytes, "max_bytes")
    heartbeat = non_negative(c.idle_heartbeat, "idle_heartbeat")
    inactive = non_negative(c.inactive_threshold, "inactive_threshold")
    pinned_ttl = non_negative(c.priority_timeout, "priority_timeout")

    if not c.deliver_subject and max_waiting == 0:
        max_waiting = DEFAULT_MAX_WAITING
    ack_wait = c.ack_wait
    if ack_wait == 0 and c.ack_policy in ("explicit", "all"):
        ack_wait = DEFAULT_ACK_WAIT
    if c.backoff:
        if pedantic and ack_wait != c.backoff[0]:
            raise _pedantic("first backoff value has to equal batch AckWait")
        ack_wait = c.backoff[0]
    cl = stream_config.consumer_limits
    if max_ack_pending == 0:
        if pedantic and cl.max_ack_pending > 0:
            raise _pedantic("max_ack_pending must be set if it's configured in stream limits")
        max_ack_pending = cl.max_ack_pending
    if inactive == 0:
        if pedantic and cl.inactive_threshold > 0:
            raise _pedantic("inactive_threshold must be set if it's configured in stream limits")
        inactive = cl.inactive_threshold
    if max_ack_pending == 0 and c.ack_policy != "none":
        max_ack_pending = DEFAULT_MAX_ACK_PENDING
        for lim in (limits.max_ack_pending, limits.account_max_ack_pending):
            if 0 < lim < max_ack_pending:
                max_ack_pending = lim
    if not c.deliver_subject and max_batch == 0 and limits.max_request_batch > 0:
        if pedantic:
            raise _pedantic("max_request_batch must be set if it's JetStream limits are set")
        max_batch = limits.max_request_batch
    if c.priority_policy == "pinned_client" and pinned_ttl == 0:
        pinned_ttl = DEFAULT_PINNED_TTL
    flow_control = c.flow_control
    if c.ack_policy == "flow_control" and not pedantic:
        flow_control, heartbeat = True, SOURCE_HEALTH_HB

    fields = msgspec.structs.asdict(c)
    fields.update(
        opt_start_time=None if c.opt_start_time is None else go_time(c.opt_start_time),
        ack_wait=ack_wait,
        max_deliver=max_deliver,
        backoff=list(c.backoff or ()),
        filter_subjects=list(c.filter_subjects or ()),
        max_waiting=max_waiting,
        max_ack_pending=max_ack_pending,
        flow_control=flow_control,
        max_batch=max_batch,
        max_expires=max_expires,
        max_bytes=max_bytes,
        idle_heartbeat=heartbeat,
        inactive_threshold=inactive,
        metadata=md,
        pause_until=None if c.pause_until is None else go_time(c.pause_until),
        priority_groups=list(c.priority_groups or ()),
        priority_timeout=pinned_ttl,
    )
    cfg = ConsumerConfig(**fields)
    empty = frozenset(k for k in _SLICES if getattr(c, k) == [])
    if empty:
        cfg._explicit_empty = empty  # type: ignore[attr-defined]
    return cfg


def _stamp(cfg: ConsumerConfig, **changes: Any) -> ConsumerConfig:
    marks = getattr(cfg, "_explicit_empty", None)
    out = msgspec.structs.replace(cfg, **changes)
    if marks:
        out._explicit_empty = marks  # type: ignore[attr-defined]
    return out
