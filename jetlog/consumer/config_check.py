"""Consumer config validation: nats-server's ``checkConsumerCfg`` (nats-server 2.15.1), every
rule in the server's order, since the order decides which error a client sees. Part of
:mod:`jetlog.consumer.config` (which re-exports :func:`validate_consumer_config`).
"""

from __future__ import annotations

from jetlog.api.models_consumer import ConsumerConfig
from jetlog.api.models_gojson import go_quote
from jetlog.api.models_stream import StreamConfig
from jetlog.consumer.config_defaults import (
    _GROUP_NAME,
    _MS,
    _MS100,
    DEFAULT_LIMITS,
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    SOURCE_HEALTH_HB,
    ServerLimits,
    _blen,
    _valid_asset_name,
)
from jetlog.consumer.wire import go_atoi
from jetlog.errors import ApiError, E
from jetlog.wire.subjects import is_literal, is_subset, is_valid_subject
from jetlog.wire.timefmt import format_duration


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
