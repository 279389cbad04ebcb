"""A flat, fast snapshot of the stream configuration the publish path consults per message."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jetlog.wire.timefmt import parse_duration
from jetlog.wire.transform import SubjectTransform


@dataclass(frozen=True, slots=True)
class StreamPolicy:
    """Derived from a normalised ``StreamConfig``; rebuilt on every update."""

    sealed: bool
    no_ack: bool
    allow_msg_ttl: bool
    allow_rollup: bool
    deny_delete: bool
    deny_purge: bool
    max_msg_size: int
    max_msgs: int
    max_bytes: int
    max_age: int
    max_msgs_per_subject: int
    discard_new: bool
    discard_new_per_subject: bool
    interest: bool
    workqueue: bool
    memory: bool
    duplicate_window: int
    marker_ttl: int
    transform: Callable[[str], str] | None
    republish: Callable[[str], str | None] | None
    republish_headers_only: bool

    @classmethod
    def of(cls, c: Any) -> StreamPolicy:
        """Build the policy of a normalised config."""
        transform = None
        st = getattr(c, "subject_transform", None)
        if st is not None and st.dest:
            tr = SubjectTransform(st.src or ">", st.dest)
            transform = tr.apply_or_same
        republish = None
        headers_only = False
        rp = getattr(c, "republish", None)
        if rp is not None and rp.dest:
            republish = SubjectTransform(rp.src or ">", rp.dest).apply_publishable
            headers_only = bool(rp.headers_only)
        return cls(
            sealed=bool(c.sealed),
            no_ack=bool(c.no_ack),
            allow_msg_ttl=bool(c.allow_msg_ttl),
            allow_rollup=bool(c.allow_rollup_hdrs) and not bool(c.deny_purge),
            deny_delete=bool(c.deny_delete),
            deny_purge=bool(c.deny_purge),
            max_msg_size=c.max_msg_size if c.max_msg_size is not None else -1,
            max_msgs=c.max_msgs,
            max_bytes=c.max_bytes,
            max_age=c.max_age or 0,
            max_msgs_per_subject=c.max_msgs_per_subject,
            discard_new=c.discard == "new",
            discard_new_per_subject=bool(c.discard_new_per_subject),
            interest=c.retention == "interest",
            workqueue=c.retention == "workqueue",
            memory=c.storage == "memory",
            duplicate_window=c.duplicate_window or 0,
            marker_ttl=c.subject_delete_marker_ttl or 0,
            transform=transform,
            republish=republish,
            republish_headers_only=headers_only,
        )


def parse_ttl_seconds(value: str) -> int | None:
    """Parse ``Nats-TTL`` exactly like nats-server's ``parseMessageTTL``.

    Returns whole seconds (``-1`` for ``never``; ``0`` means no TTL) or None when invalid:
    a Go duration below one second, a negative or unparsable integer.
    """
    if value.lower() == "never":
        return -1
    try:
        ns = parse_duration(value)
    except ValueError:
        ns = None
    if ns is not None:
        if ns < 1_000_000_000:
            return None
        return ns // 1_000_000_000
    if value.isdigit():
        return int(value)
    return None
