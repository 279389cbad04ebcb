"""A flat snapshot of a consumer's configuration for the delivery hot path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jetlog.wire.subjects import is_literal, matches

DEFAULT_ACK_WAIT = 30_000_000_000


def _n(v: Any) -> int:
    return int(v) if v else 0


@dataclass(frozen=True, slots=True)
class ConsumerPolicy:
    """Derived from a normalised ``ConsumerConfig``; rebuilt on every update."""

    name: str
    durable: bool
    ack_policy: str
    ack_wait: int
    backoff: tuple[int, ...]
    max_deliver: int
    filters: tuple[str, ...]
    max_ack_pending: int
    headers_only: bool
    push: bool
    deliver_subject: str
    deliver_group: str
    idle_heartbeat: int
    flow_control: bool
    rate_limit_bps: int
    replay_original: bool
    max_batch: int
    max_expires: int
    max_bytes: int
    max_waiting: int
    inactive_threshold: int
    mem_storage: bool
    deliver_policy: str

    @classmethod
    def of(cls, c: Any) -> ConsumerPolicy:
        """Build from a normalised config (attributes named as the JSON fields)."""
        filters: tuple[str, ...] = ()
        if getattr(c, "filter_subjects", None):
            filters = tuple(c.filter_subjects)
        elif getattr(c, "filter_subject", None):
            filters = (c.filter_subject,)
        if filters == (">",):
            filters = ()
        backoff = tuple(int(b) for b in (getattr(c, "backoff", None) or ()))
        ack_wait = _n(getattr(c, "ack_wait", 0)) or DEFAULT_ACK_WAIT
        if backoff:
            ack_wait = backoff[0]
        max_deliver = _n(getattr(c, "max_deliver", 0))
        return cls(
            name=c.name or c.durable_name or "",
            durable=bool(getattr(c, "durable_name", None)),
            ack_policy=str(getattr(c, "ack_policy", "none") or "none"),
            ack_wait=ack_wait,
            backoff=backoff,
            max_deliver=max_deliver if max_deliver > 0 else 0,
            filters=filters,
            max_ack_pending=max(_n(getattr(c, "max_ack_pending", 0)), 0),
            headers_only=bool(getattr(c, "headers_only", False)),
            push=bool(getattr(c, "deliver_subject", None)),
            deliver_subject=getattr(c, "deliver_subject", None) or "",
            deliver_group=getattr(c, "deliver_group", None) or "",
            idle_heartbeat=_n(getattr(c, "idle_heartbeat", 0)),
            flow_control=bool(getattr(c, "flow_control", False)),
            rate_limit_bps=_n(getattr(c, "rate_limit_bps", 0)),
            replay_original=getattr(c, "replay_policy", "instant") == "original",
            max_batch=_n(getattr(c, "max_batch", 0)),
            max_expires=_n(getattr(c, "max_expires", 0)),
            max_bytes=_n(getattr(c, "max_bytes", 0)),
            max_waiting=_n(getattr(c, "max_waiting", 0)),
            inactive_threshold=_n(getattr(c, "inactive_threshold", 0)),
            mem_storage=bool(getattr(c, "mem_storage", False)),
            deliver_policy=str(getattr(c, "deliver_policy", "all") or "all"),
        )

    def wait_for(self, deliveries: int) -> int:
        """Ack wait after ``deliveries`` deliveries (backoff: b[n-1], the last one repeating)."""
        b = self.backoff
        if not b:
            return self.ack_wait
        return b[min(max(deliveries, 1) - 1, len(b) - 1)]

    def wants(self, subject: str) -> bool:
        """True if ``subject`` passes the consumer's filter(s)."""
        fs = self.filters
        if not fs:
            return True
        return any(f == subject or (not is_literal(f) and matches(f, subject)) for f in fs)
