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
(immutables), :func:`check_workqueue` and :func:`partition_unique`. The defaults live in
:mod:`jetlog.consumer.config_defaults`, the checks in :mod:`jetlog.consumer.config_check`; this
module re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from jetlog.api.models_consumer import (
    ConsumerConfig,
    CreateConsumerRequest,
    decode_create_request,
    go_time,
    time_ns,
)
from jetlog.api.models_stream import StreamConfig
from jetlog.consumer.config_check import validate_consumer_config
from jetlog.consumer.config_defaults import (
    _LEVEL_KEY,
    _SLICES,
    _SRV_LEVEL_KEY,
    _VER_KEY,
    DEFAULT_INACTIVE_THRESHOLD,
    DEFAULT_LIMITS,
    MAX_NAME_LEN,
    ServerLimits,
    _blen,
    _stamp,
    _valid_asset_name,
    normalize_consumer_config,
    random_consumer_name,
    valid_group_name,
    with_pause,
)
from jetlog.consumer.wire import (
    CreateTarget,
    check_create_subject,
    create_subject_kind,
    required_api_level_rejected,
)
from jetlog.errors import ApiError, E
from jetlog.wire.subjects import collide

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
    "valid_group_name",
    "validate_consumer_config",
    "with_pause",
]

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
    maxc = stream_config.max_consumers
    if maxc <= 0:
        # nats-server 2.15 substitutes its default for an unset (or -1) stream limit.
        maxc = limits.default_max_consumers
    acc = limits.account_max_consumers
    if maxc <= 0 or 0 < acc < maxc:
        maxc = acc
    # Counting the limited consumers walks them all: only needed near the limit.
    if maxc > 0 and len(consumers) >= maxc:
        limitable = sum(1 for c in consumers.values() if not c.direct and not c.sourcing)
        if limitable >= maxc:
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
