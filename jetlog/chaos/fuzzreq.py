"""What the fuzzer sends and the state it starts from: :class:`FuzzRequest`, the kinds of
answer a request is owed (``KIND_*``), and :data:`SETUP` with the names of the streams and
consumers it creates.

Kept apart from ``fuzzgen.py`` (the seeded generator): the runner and the report
(``fuzzrun.py``, ``fuzz.py``) work on these and need nothing of the generator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KIND_DIRECT",
    "KIND_JETLOG",
    "KIND_JSON",
    "KIND_NEXT",
    "KIND_PUB",
    "KIND_UNKNOWN",
    "SETUP",
    "FuzzRequest",
]

KIND_JSON = "json"  # a JSON API request: every reply must be a JSON object
KIND_PUB = "pub"  # a publish to a stream subject: PubAck JSON (or no responders)
KIND_DIRECT = "direct"  # Direct Get: raw messages and status replies
KIND_NEXT = "next"  # pull request: messages and status replies
KIND_JETLOG = "jetlog"  # $JETLOG.API.*: jetlog's own endpoints (nats-server has none)
KIND_UNKNOWN = "unknown"  # not a served API subject

BASE_STREAMS = ("FZ", "FZB", "FZW", "KV_FZK")
BASE_CONSUMERS = {"FZ": ("P1", "P2", "PU1"), "FZW": ("W1",), "KV_FZK": (), "FZB": ()}
HOUR = 3_600_000_000_000


def _j(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


#: ``(subject, body)`` requests every run starts with; each must succeed on every target.
SETUP: list[tuple[str, bytes]] = [
    (
        "$JS.API.STREAM.CREATE.FZ",
        _j(
            {
                "name": "FZ",
                "subjects": ["fz.>"],
                "allow_direct": True,
                "allow_rollup_hdrs": True,
                "max_bytes": 48 << 20,
            }
        ),
    ),
    ("$JS.API.STREAM.CREATE.FZB", _j({"name": "FZB", "subjects": ["big.>"], "max_msgs": 4})),
    ("$JS.API.STREAM.CREATE.FZW", _j({"name": "FZW", "subjects": ["fw.>"], "retention": "workqueue"})),
    (
        "$JS.API.STREAM.CREATE.KV_FZK",
        _j(
            {
                "name": "KV_FZK",
                "subjects": ["$KV.FZK.>"],
                "allow_direct": True,
                "allow_rollup_hdrs": True,
                "deny_delete": True,
                "max_msgs_per_subject": 5,
                "discard": "new",
            }
        ),
    ),
    (
        "$JS.API.CONSUMER.CREATE.FZ.P1",
        _j({"stream_name": "FZ", "config": {"durable_name": "P1", "ack_policy": "none"}}),
    ),
    (
        "$JS.API.CONSUMER.CREATE.FZ.P2",
        _j(
            {
                "stream_name": "FZ",
                "config": {
                    "durable_name": "P2",
                    "ack_policy": "explicit",
                    "ack_wait": HOUR,
                    "max_ack_pending": 5,
                },
            }
        ),
    ),
    (
        "$JS.API.CONSUMER.CREATE.FZ.PU1",
        _j({"stream_name": "FZ", "config": {"durable_name": "PU1", "deliver_subject": "fzdl.pu1"}}),
    ),
    (
        "$JS.API.CONSUMER.CREATE.FZW.W1",
        _j(
            {
                "stream_name": "FZW",
                "config": {"durable_name": "W1", "ack_policy": "explicit", "ack_wait": HOUR},
            }
        ),
    ),
    ("fz.a", b"one"),
    ("fz.a", b"two"),
    ("fz.b.c", b"three"),
    ("fw.x", b"work"),
    ("$KV.FZK.k1", b"v1"),
]


@dataclass(frozen=True, slots=True)
class FuzzRequest:
    """One request: what to send, what kind of answer it is owed, and how it was made."""

    index: int
    op: str
    mutation: str
    subject: str
    payload: bytes
    hdr: bytes = b""
    kind: str = KIND_JSON
    reply: bool = True
    barrier: bool = False

    def describe(self, limit: int = 160) -> str:
        """A short printable summary (for reports)."""
        body = self.payload[:limit]
        more = f"…(+{len(self.payload) - limit} B)" if len(self.payload) > limit else ""
        hdr = f" hdr={self.hdr[:80]!r}" if self.hdr else ""
        noreply = " (no reply subject)" if not self.reply else ""
        return f"#{self.index} {self.op}/{self.mutation} {self.subject[:120]!r} {body!r}{more}{hdr}{noreply}"
