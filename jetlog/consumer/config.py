"""Consumer creation: subject forms, defaults, validation and update rules exactly as nats-server.

A port of ``jsConsumerCreateRequest`` (jetstream_api.go), ``setConsumerConfigDefaults`` /
``checkConsumerCfg`` / ``addConsumerWithAssignment`` / ``checkNewConsumerConfig`` (consumer.go)
and ``setStaticConsumerMetadata`` (nats-server 2.15.1, single server). Which error a client sees
depends on the order of the checks, so every step raises the server's ``ApiError`` in its order.

What the API router does for ``$JS.API.CONSUMER.CREATE.*`` / ``DURABLE.CREATE.*.*``::

    plan = prepare_consumer_create(
        subject.split("."), body,
        lookup=lambda s: (stream_cfg, {name: cfg, ...}) if s == "ORDERS" else None,
        required_api_level=headers.get("Nats-Required-Api-Level"),
        has_interest=lambda subj: sublist.has_interest(subj),
    )                                   # ApiError → encode_error(ConsumerCreateResponse, err)
    if plan is None: ...                # a subject nats-server does not serve: no reply at all
    plan.name, plan.durable, plan.config  # the consumer to create (or update if plan.existing)

``plan.config`` is what to store and to return (add ``_nats.ver``/``_nats.level`` with
:func:`jetlog.api.models_consumer.info_response`). ``plan.existing`` is the stored config when
the consumer exists: an update, or an idempotent ``action: "create"`` (then ``config`` is equal).

The steps are also exported one by one: :func:`create_subject_kind`,
:func:`check_create_subject`, :func:`normalize_consumer_config` (static metadata + defaults,
pedantic mode), :func:`validate_consumer_config` (``checkConsumerCfg``),
:func:`same_consumer_config` (``action: "create"``), :func:`check_consumer_update`
(immutables), :func:`check_workqueue` and :func:`partition_unique`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from jetlog.api.models_consumer import (
    ConsumerConfig,
    ConsumerConfigRequest,
    CreateConsumerRequest,
    decode_create_request,
    go_time,
    time_ns,
)
from jetlog.api.models_gojson import go_quote
from jetlog.api.models_stream import StreamConfig
from jetlog.consumer.wire import (
    CreateTarget,
    check_create_subject,
    create_subject_kind,
    go_atoi,
    required_api_level_rejected,
)
from jetlog.errors import ApiError, E
from jetlog.wire.subjects import collide, is_literal, is_subset, is_valid_subject
from jetlog.wire.timefmt import format_duration

__all__ = [
    "ConsumerCreatePlan",
    "CreateTarget",
    "ServerLimits",
    "check_consumer_update",
    "check_create_subject",
    "check_workqueue",
    "create_subject_kind",
    "decode_create_request",
    "go_time",
    "normalize_consumer_config",
    "partition_unique",
    "plan_consumer_create",
    "prepare_consumer_create",
    "random_consumer_name",
    "required_api_level_rejected",
    "same_consumer_config",
    "time_ns",
    "validate_consumer_config",
]

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


# ---------------------------------------------------------------------------------------------
# checkConsumerCfg


def _cfg_error(msg: str) -> ApiError:
    return E.STREAM_INVALID_CONFIG(err=msg)


def _sampling_error(freq: str) -> str | None:
    s = freq.removesuffix("%")
    v = go_atoi(s)
    if v is not None:
        return "<nil>" if v < 0 else None
    digits = s[1:] if s[:1] in ("+", "-") else s
    why = "value out of range" if digits and digits.isascii() and digits.isdigit() else "invalid syntax"
    return f"strconv.Atoi: parsing {go_quote(s)}: {why}"


_DP_TEXT = {
    "all": "all",
    "last": "last",
    "new": "new",
    "last_per_subject": "last per subject",
    "by_start_sequence": "by start sequence",
    "by_start_time": "by start time",
}


def _policy_error(cfg: ConsumerConfig) -> str | None:
    dp, seq, start = cfg.deliver_policy, cfg.opt_start_seq, cfg.opt_start_time
    text = _DP_TEXT[dp]

    def bad(what: str) -> str:
        return f"consumer delivery policy is deliver {text}, but optional start {what} is also set"

    def unset(what: str) -> str:
        return f"consumer delivery policy is deliver {text}, but optional {what} is not set"

    if dp in ("all", "last", "new", "last_per_subject"):
        if seq > 0:
            return bad("sequence")
        if start is not None:
            return bad("time")
        if dp == "last_per_subject" and not cfg.filter_subject and not cfg.filter_subjects:
            return unset("filter subject")
    elif dp == "by_start_sequence":
        if seq == 0:
            return unset("start sequence")
        if start is not None:
            return bad("time")
    elif start is None:
        return unset("start time")
    elif seq != 0:
        return bad("start sequence")
    return None


def validate_consumer_config(
    cfg: ConsumerConfig, *, stream_config: StreamConfig, limits: ServerLimits = DEFAULT_LIMITS
) -> None:
    """``checkConsumerCfg``: every rule of spec §1.1/§1.2 in nats-server's order."""
    sc = stream_config
    if cfg.name and not _valid_asset_name(cfg.name):
        raise _cfg_error("consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.durable_name and not _valid_asset_name(cfg.durable_name):
        raise _cfg_error("consumer durable name can not contain '.', '*', '>', '\\', '/'")
    replicas = cfg.num_replicas
    if replicas > 0 and replicas > sc.num_replicas:
        raise E.CONSUMER_REPLICAS_EXCEEDS_STREAM()
    if replicas < 0:
        raise E.REPLICAS_COUNT_CANNOT_BE_NEGATIVE()
    if sc.retention != "limits" and replicas not in (0, sc.num_replicas):
        raise E.CONSUMER_REPLICAS_SHOULD_MATCH_STREAM()
    if any(b < 0 for b in cfg.backoff):
        raise E.CONSUMER_BACK_OFF_NEGATIVE()
    if cfg.ack_wait < 0:
        raise E.CONSUMER_ACK_WAIT_NEGATIVE()
    if cfg.ack_policy == "flow_control":
        if not cfg.deliver_subject:
            raise E.CONSUMER_ACK_FC_REQUIRES_PUSH()
        if not cfg.flow_control:
            raise E.CONSUMER_ACK_FC_REQUIRES_FC()
        if cfg.idle_heartbeat != SOURCE_HEALTH_HB:
            raise _cfg_error("flow control ack policy heartbeat needs to be 1s")
        if cfg.max_ack_pending <= 0:
            raise E.CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING()
        if cfg.ack_wait != 0 or cfg.backoff:
            raise E.CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT()
        if cfg.max_deliver > 0:
            raise E.CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER()
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise E.CONSUMER_MAX_DELIVER_BACKOFF()
    if _blen(cfg.description) > MAX_DESCRIPTION_LEN:
        raise E.CONSUMER_DESCRIPTION_TOO_LONG(max=MAX_DESCRIPTION_LEN)
    if cfg.deliver_subject:
        ds = cfg.deliver_subject
        if not is_literal(ds):
            raise E.CONSUMER_DELIVER_TO_WILDCARDS()
        if not is_valid_subject(ds):
            raise E.CONSUMER_INVALID_DELIVER_SUBJECT()
        if any(is_subset(ds, s) for s in sc.subjects):
            raise E.CONSUMER_DELIVER_CYCLE()
        if cfg.max_waiting != 0:
            raise E.CONSUMER_PUSH_MAX_WAITING()
        if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
            raise E.CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED()
        if 0 < cfg.idle_heartbeat < _MS100:
            raise E.CONSUMER_SMALL_HEARTBEAT()
    else:
        if cfg.ack_policy == "none" and sc.retention == "workqueue":
            raise E.CONSUMER_PULL_REQUIRES_ACK()
        if cfg.rate_limit_bps > 0:
            raise E.CONSUMER_PULL_WITH_RATE_LIMIT()
        if cfg.max_waiting < 0:
            raise E.CONSUMER_MAX_WAITING_NEGATIVE()
        if cfg.idle_heartbeat > 0:
            raise E.CONSUMER_HB_REQUIRES_PUSH()
        if cfg.flow_control:
            raise E.CONSUMER_FC_REQUIRES_PUSH()
        if cfg.max_batch < 0:
            raise E.CONSUMER_MAX_REQUEST_BATCH_NEGATIVE()
        if cfg.max_expires != 0 and cfg.max_expires < _MS:
            raise E.CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL()
        if 0 < limits.max_request_batch < cfg.max_batch:
            raise E.CONSUMER_MAX_REQUEST_BATCH_EXCEEDED(limit=limits.max_request_batch)
    for lim in (limits.max_ack_pending, limits.account_max_ack_pending, sc.consumer_limits.max_ack_pending):
        if 0 < lim < cfg.max_ack_pending:
            raise E.CONSUMER_MAX_PENDING_ACK_EXCESS(limit=lim)
    it_lim = sc.consumer_limits.inactive_threshold
    if 0 < it_lim < cfg.inactive_threshold:
        raise E.CONSUMER_INACTIVE_THRESHOLD_EXCESS(limit=format_duration(it_lim))
    if cfg.direct:
        if not cfg.deliver_subject:
            raise E.CONSUMER_DIRECT_REQUIRES_PUSH()
        if cfg.durable_name:
            raise E.CONSUMER_DIRECT_REQUIRES_EPHEMERAL()
    if cfg.filter_subject and cfg.filter_subjects:
        raise E.CONSUMER_DUPLICATE_FILTER_SUBJECTS()
    if cfg.filter_subject and not is_valid_subject(cfg.filter_subject):
        raise _cfg_error("invalid subject")
    if "" in cfg.filter_subjects:
        raise E.CONSUMER_EMPTY_FILTER()
    filters = cfg.filters
    for i, subj in enumerate(filters):
        if not is_valid_subject(subj):
            raise _cfg_error("invalid subject")
        if any(j != i and is_subset(subj, other) for j, other in enumerate(filters)):
            raise E.CONSUMER_OVERLAPPING_SUBJECT_FILTERS()
    problem = _policy_error(cfg)
    if problem is not None:
        raise E.CONSUMER_INVALID_POLICY(err=problem)
    if cfg.sample_freq:
        sampling = _sampling_error(cfg.sample_freq)
        if sampling is not None:
            raise E.CONSUMER_INVALID_SAMPLING(err=sampling)
    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise E.CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS()
    if cfg.durable_name and cfg.name and cfg.name != cfg.durable_name:
        raise E.CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH()
    if sum(_blen(k) + _blen(v) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise E.CONSUMER_METADATA_LENGTH(limit=f"{MAX_METADATA_LEN // 1024}KB")
    if cfg.priority_policy != "none":
        if cfg.deliver_subject:
            raise E.CONSUMER_PUSH_WITH_PRIORITY_GROUP()
        if not cfg.priority_groups:
            raise E.CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP()
        for group in cfg.priority_groups:
            if not group:
                raise E.CONSUMER_EMPTY_GROUP_NAME()
            if not _GROUP_NAME.fullmatch(group):
                raise E.CONSUMER_INVALID_GROUP_NAME()
    else:
        if cfg.priority_groups:
            raise E.CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE()
        if cfg.priority_timeout > 0:
            raise E.CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE()
    if sc.placement is not None and sc.placement.preferred:
        raise _cfg_error("preferred server not permitted in placement")


# ---------------------------------------------------------------------------------------------
# Existing consumers: idempotent create, updates, work queues


def _nil_or_empty(cfg: ConsumerConfig) -> tuple[bool, ...]:
    marks: frozenset[str] = getattr(cfg, "_explicit_empty", frozenset())
    return tuple(k in marks for k in _SLICES if not getattr(cfg, k))


def same_consumer_config(old: ConsumerConfig, new: ConsumerConfig) -> bool:
    """``action: "create"`` on an existing consumer: ``copyConsumerMetadata`` then Go's
    ``reflect.DeepEqual`` (``_nats.ver``/``_nats.level`` dropped, ``_nats.req.level`` taken
    from ``old``; a slice sent as ``[]`` differs from one left out)."""
    md = {k: v for k, v in new.metadata.items() if k not in (_VER_KEY, _SRV_LEVEL_KEY, _LEVEL_KEY)}
    if _LEVEL_KEY in old.metadata:
        md[_LEVEL_KEY] = old.metadata[_LEVEL_KEY]
    cand = msgspec.structs.replace(new, metadata=md)
    return cand == old and _nil_or_empty(new) == _nil_or_empty(old)


def check_consumer_update(
    old: ConsumerConfig, new: ConsumerConfig, *, has_interest: Callable[[str], bool] | None = None
) -> None:
    """``checkNewConsumerConfig``: immutable members (500/10012 with the plain text), a push
    deliver subject change while the old one has interest (10013), backoff vs max_deliver
    (10116). ``has_interest(subject)`` answers for the old deliver subject."""
    if old == new:
        return

    def fail(msg: str) -> ApiError:
        return E.CONSUMER_CREATE(err=msg)

    pairs = (
        ("deliver_policy", "deliver policy"),
        ("mem_storage", "storage type"),
        ("direct", "direct"),
        ("sourcing", "sourcing"),
        ("opt_start_seq", "start sequence"),
    )
    for key, what in pairs:
        if getattr(old, key) != getattr(new, key):
            raise fail(f"{what} can not be updated")
    ot, nt = old.opt_start_time, new.opt_start_time
    if (ot is None) != (nt is None) or (ot is not None and nt is not None and time_ns(ot) != time_ns(nt)):
        raise fail("start time can not be updated")
    for key, what in (
        ("ack_policy", "ack policy"),
        ("replay_policy", "replay policy"),
        ("idle_heartbeat", "heart beats"),
        ("flow_control", "flow control"),
    ):
        if getattr(old, key) != getattr(new, key):
            raise fail(f"{what} can not be updated")
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            raise fail("can not update pull consumer to push based")
        if not new.deliver_subject:
            raise fail("can not update push consumer to pull based")
        if has_interest is not None and has_interest(old.deliver_subject):
            raise E.CONSUMER_NAME_EXIST()
    if old.max_waiting != new.max_waiting:
        raise fail("max waiting can not be updated")
    if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
        raise E.CONSUMER_MAX_DELIVER_BACKOFF()


def partition_unique(name: str, filters: Sequence[str], consumers: Mapping[str, ConsumerConfig]) -> bool:
    """``partitionUnique``: no other (non direct/sourcing) consumer is unfiltered or has a
    filter colliding with one of ``filters``."""
    for part in filters:
        for other_name, other in consumers.items():
            if other_name == name or other.direct or other.sourcing:
                continue
            theirs = other.filters
            if not theirs or any(collide(part, f) for f in theirs):
                return False
    return True


def check_workqueue(cfg: ConsumerConfig, name: str, consumers: Mapping[str, ConsumerConfig]) -> None:
    """Work-queue rules for a *new* consumer: 10098, 10101, 10099, 10100 (in that order).
    ``consumers`` are the stream's other consumers."""
    if cfg.direct or cfg.sourcing:
        return
    if cfg.ack_policy not in ("explicit", "flow_control"):
        raise E.CONSUMER_WQ_REQUIRES_EXPLICIT_ACK()
    if cfg.deliver_policy != "all":
        raise E.CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL()
    if any(not c.direct and not c.sourcing for c in consumers.values()):
        filters = cfg.filters
        if not filters:
            raise E.CONSUMER_WQ_MULTIPLE_UNFILTERED()
        if not partition_unique(name, filters, consumers):
            raise E.CONSUMER_WQ_CONSUMER_NOT_UNIQUE()


# ---------------------------------------------------------------------------------------------
# The whole create


@dataclass(frozen=True, slots=True)
class ConsumerCreatePlan:
    """Outcome of a successful create request.

    ``config`` is the config to store and return (ephemerals carry the 5 s
    ``inactive_threshold``; a legacy ephemeral's config keeps ``name`` empty, like nats-server,
    while ``name`` here is the generated one). ``existing`` is the stored config when the
    consumer already exists (update or idempotent create), else ``None``."""

    stream: str
    name: str
    durable: bool
    config: ConsumerConfig
    action: str
    existing: ConsumerConfig | None = None
    empty_reply: bool = False
    """nats-server creates the consumer but cannot encode its reply (a time with a 24h zone
    offset, memory store): it answers with an empty payload."""

    @property
    def is_update(self) -> bool:
        """True when an existing consumer is (re)configured rather than created."""
        return self.existing is not None


def _unstorable(cfg: ConsumerConfig) -> bool:
    for t in (cfg.opt_start_time, cfg.pause_until):
        if t is not None and t[-1] != "Z" and int(t[-5:-3]) >= 24:
            return True
    return False


def _stamp(cfg: ConsumerConfig, **changes: Any) -> ConsumerConfig:
    marks = getattr(cfg, "_explicit_empty", None)
    out = msgspec.structs.replace(cfg, **changes)
    if marks:
        out._explicit_empty = marks  # type: ignore[attr-defined]
    return out


def plan_consumer_create(
    target: CreateTarget,
    req: CreateConsumerRequest,
    *,
    stream_config: StreamConfig,
    consumers: Mapping[str, ConsumerConfig],
    limits: ServerLimits = DEFAULT_LIMITS,
    has_interest: Callable[[str], bool] | None = None,
    new_name: Callable[[Mapping[str, Any]], str] = random_consumer_name,
) -> ConsumerCreatePlan:
    """Everything after the stream lookup, in ``addConsumerWithAssignment``'s order. ``req`` is
    the request returned by :func:`check_create_subject`; ``consumers`` the stream's consumers
    (name → stored config). ``stream_config.max_consumers`` and the account limit give 10026."""
    creq = req.config
    if creq.direct and creq.sourcing and creq.name:
        # A stream source's consumer: durable with flow-control acks on interest/WQ streams,
        # otherwise its stable name gets a random suffix.
        if not limits.clustered and stream_config.retention != "limits":
            creq = msgspec.structs.replace(
                creq,
                direct=False,
                durable_name=creq.name,
                ack_policy="flow_control",
                ack_wait=0,
                max_deliver=0,
                inactive_threshold=0,
            )
        else:
            creq = msgspec.structs.replace(creq, name=f"{creq.name}-{new_name(consumers)}")
            target = CreateTarget(target.kind, target.stream, creq.name, target.filter)
    existing = consumers.get(target.name) if target.name else None
    if existing is not None:
        creq = msgspec.structs.replace(creq, pause_until=existing.pause_until)
    cfg = normalize_consumer_config(creq, stream_config=stream_config, pedantic=req.pedantic, limits=limits)
    validate_consumer_config(cfg, stream_config=stream_config, limits=limits)
    wq = stream_config.retention == "workqueue"
    cname = cfg.durable_name or cfg.name
    old = consumers.get(cname) if cname else None
    if old is not None:
        if req.action == "create" and not same_consumer_config(old, cfg):
            raise E.CONSUMER_ALREADY_EXISTS()
        if wq and not partition_unique(cname, cfg.filters, consumers):
            raise E.CONSUMER_WQ_CONSUMER_NOT_UNIQUE()
        if req.action == "create":
            cfg = _stamp(cfg, metadata=old.metadata)
        check_consumer_update(old, cfg, has_interest=has_interest)
        if cfg.pause_until is not None:
            cfg = _stamp(cfg, pause_until=go_time(cfg.pause_until, utc=True))
        # updateInactiveThreshold runs on a change and looks at the *old* config's durability.
        it = cfg.inactive_threshold
        if it != old.inactive_threshold and it <= 0 and not old.durable_name:
            cfg = _stamp(cfg, inactive_threshold=DEFAULT_INACTIVE_THRESHOLD)
        return ConsumerCreatePlan(target.stream, cname, bool(cfg.durable_name), cfg, req.action, old)
    if req.action == "update":
        raise E.CONSUMER_DOES_NOT_EXIST()
    limitable = sum(1 for c in consumers.values() if not c.direct and not c.sourcing)
    maxc = stream_config.max_consumers
    acc = limits.account_max_consumers
    if maxc <= 0 or 0 < acc < maxc:
        maxc = acc
    if maxc > 0 and limitable >= maxc:
        raise E.MAXIMUM_CONSUMERS_LIMIT()
    if wq:
        check_workqueue(cfg, cname, consumers)
    if cfg.durable_name:
        if _blen(cfg.durable_name) > MAX_NAME_LEN:
            raise E.CONSUMER_NAME_TOO_LONG(max=MAX_NAME_LEN)
        name = cfg.durable_name
    elif cfg.name:
        name = cfg.name
    else:
        # nats-server copies the config before naming it: a legacy ephemeral's config keeps
        # an empty name (its info shows the generated one).
        name = new_name(consumers)
    if not _valid_asset_name(name):
        raise E.CONSUMER_BAD_DURABLE_NAME()
    if (
        stream_config.storage == "file"
        and not cfg.mem_storage
        and (_blen(name) > MAX_NAME_LEN or _unstorable(cfg))
    ):
        # nats-server's file store cannot create the consumer's directory (name too long) or
        # write its config (Go's time.MarshalJSON rejects a zone offset of 24h or more).
        raise E.CONSUMER_CREATE(err="error creating store for consumer")
    if not cfg.durable_name and cfg.inactive_threshold <= 0:
        cfg = _stamp(cfg, inactive_threshold=DEFAULT_INACTIVE_THRESHOLD)
    return ConsumerCreatePlan(
        target.stream, name, bool(cfg.durable_name), cfg, req.action, None, _unstorable(cfg)
    )


Lookup = Callable[[str], "tuple[StreamConfig, Mapping[str, ConsumerConfig]] | None"]


def prepare_consumer_create(
    tokens: Sequence[str],
    body: bytes,
    *,
    lookup: Lookup,
    required_api_level: str | bytes | None = None,
    limits: ServerLimits = DEFAULT_LIMITS,
    has_interest: Callable[[str], bool] | None = None,
    new_name: Callable[[Mapping[str, Any]], str] = random_consumer_name,
) -> ConsumerCreatePlan | None:
    """A whole consumer create request, in nats-server's order: ``None`` if the subject is not
    served (no reply); decode (10025); ``Nats-Required-Api-Level`` (412/10185); subject rules;
    replicas > 1 on a single server (10074); ``lookup(stream)`` → ``(stream config, {name:
    consumer config})`` or ``None`` (10059); then :func:`plan_consumer_create`."""
    if create_subject_kind(tokens) is None:
        return None
    req = decode_create_request(body)
    if required_api_level_rejected(required_api_level):
        raise E.REQUIRED_API_LEVEL()
    target, req = check_create_subject(tokens, req)
    if not limits.clustered and req.config.num_replicas > 1:
        raise E.STREAM_REPLICAS_NOT_SUPPORTED()
    found = lookup(target.stream)
    if found is None:
        raise E.STREAM_NOT_FOUND()
    stream_config, consumers = found
    return plan_consumer_create(
        target,
        req,
        stream_config=stream_config,
        consumers=consumers,
        limits=limits,
        has_interest=has_interest,
        new_name=new_name,
    )
