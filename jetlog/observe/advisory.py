"""JetStream advisories on ``$JS.EVENT.ADVISORY.>`` in nats-server's shapes (type, id,
timestamp, then the event's fields).

Best effort, as in nats-server: sent only where the upstream has interest (the leaf link knows
it), and a failure to send never fails the operation that caused the event.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any, Protocol

import msgspec

from jetlog.errors import JetlogError
from jetlog.wire.timefmt import format_time

log = logging.getLogger("jetlog.advisory")

PREFIX = "$JS.EVENT.ADVISORY."
TYPE_PREFIX = "io.nats.jetstream.advisory.v1."


class AdvisoryLink(Protocol):
    """The link advisories leave on (the leaf link)."""

    def has_interest(self, subject: str) -> bool:
        """Whether the upstream has a subscription matching ``subject``."""
        ...

    def publish(self, subject: str, payload: bytes, reply: str | None = None) -> None:
        """Send one message."""
        ...


def encode(kind: str, fields: dict[str, Any], now_ns: int | None = None) -> bytes:
    """One advisory's JSON: ``{"type": io.nats.jetstream.advisory.v1.<kind>, "id", "timestamp",
    **fields}``."""
    body = {
        "type": TYPE_PREFIX + kind,
        "id": secrets.token_urlsafe(16),
        "timestamp": format_time(time.time_ns() if now_ns is None else now_ns),
        **fields,
    }
    return msgspec.json.encode(body)


def send(link: AdvisoryLink, subject: str, kind: str, fields: dict[str, Any]) -> None:
    """Publish ``PREFIX + subject`` if anyone listens; never raises."""
    full = PREFIX + subject
    try:
        if not link.has_interest(full):
            return
        link.publish(full, encode(kind, fields))
    except JetlogError as e:
        # A link that is down with a full buffer, or an advisory above max_payload (refused
        # and logged by the link), must not fail the operation that caused it.
        log.debug("advisory %s not sent: %s", full, e)


def stream_action(link: AdvisoryLink, stream: str, action: str, domain: str = "") -> None:
    """``STREAM.CREATED|UPDATED|DELETED.<stream>`` (action ``create``/``modify``/``delete``)."""
    kind = {"create": "CREATED", "modify": "UPDATED", "delete": "DELETED"}[action]
    fields: dict[str, Any] = {"stream": stream, "action": action}
    if domain:
        fields["domain"] = domain
    send(link, f"STREAM.{kind}.{stream}", "stream_action", fields)
