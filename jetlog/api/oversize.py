"""Replies that do not fit in the upstream's ``max_payload``.

nats-server publishes its JetStream replies internally, with no size cap: a ``STREAM.MSG.GET`` of
a message near ``max_payload`` returns a JSON reply about 4/3 of the message (base64), and a Direct
Get reply is the stored message plus ``Nats-Stream``/``Nats-Subject``/``Nats-Sequence``/
``Nats-Time-Stamp`` headers, so both exceed ``max_payload`` for messages near the limit (measured
against nats-server 2.15.1 with ``max_payload: 65536``: MSG.GET of a 65 336-byte message answered
87 260 bytes; Direct Get answered 65 336 + 101 header bytes). jetlog answers on ordinary
connections, where the server closes the connection on any message above ``max_payload``. So
where nats-server would send more than a connection may, jetlog answers with an error that says
why instead:

* JSON API replies (``STREAM.MSG.GET``, and any other reply that outgrows the limit, such as a
  large ``STREAM.LIST`` page): the endpoint's response type with error ``400 / 10054``
  (``JSStreamMessageExceedsMaximumErr``, "message size exceeds maximum allowed", the closest
  code nats-server has), the description extended with the sizes.
* Raw replies (Direct Get single, batch and ``multi_last``): the first frame that does not fit
  is replaced by the status ``NATS/1.0 413 Message Size Exceeds Max Payload`` and nothing
  follows it (no ``204 EOB``): a batch reader sees an error, not a short batch it would retry
  forever. 413 is the status Direct Get already uses for a result that is too large
  ("Too Many Results").
"""

from __future__ import annotations

import logging

import msgspec

from jetlog.errors import E

log = logging.getLogger("jetlog.api")

Frame = tuple[bytes, bytes]

TOO_LARGE_STATUS: Frame = (b"NATS/1.0 413 Message Size Exceeds Max Payload\r\n\r\n", b"")

_TYPE_PREFIX = b'{"type":"'


def json_too_large(body: bytes, limit: int) -> bytes:
    """The error reply that replaces the JSON reply ``body`` (longer than ``limit``)."""
    rtype = ""
    if body.startswith(_TYPE_PREFIX):
        end = body.find(b'"', len(_TYPE_PREFIX))
        if end > 0:
            rtype = body[len(_TYPE_PREFIX) : end].decode(errors="replace")
    spec = E.STREAM_MESSAGE_EXCEEDS_MAXIMUM
    desc = f"{spec.template}: the {len(body)}-byte reply exceeds the upstream max_payload of {limit} bytes"
    if rtype.endswith("stream_msg_get_response"):
        desc += "; Direct Get returns messages without base64"
    err = {"code": spec.code, "err_code": spec.err_code, "description": desc}
    out: dict[str, object] = {"type": rtype, "error": err} if rtype else {"error": err}
    log.info(
        "API reply %s of %d bytes exceeds max_payload %d: answered 10054", rtype or "?", len(body), limit
    )
    return msgspec.json.encode(out)


def fit_frames(frames: list[Frame], limit: int) -> list[Frame]:
    """``frames`` up to the first one above ``limit`` (header + payload), which becomes
    :data:`TOO_LARGE_STATUS`; ``limit`` 0 means unknown (unchecked)."""
    if not limit:
        return frames
    for i, (hdr, payload) in enumerate(frames):
        if len(hdr) + len(payload) > limit:
            log.info(
                "raw reply frame %d of %d bytes exceeds max_payload %d: answered 413",
                i,
                len(hdr) + len(payload),
                limit,
            )
            return [*frames[:i], TOO_LARGE_STATUS]
    return frames
