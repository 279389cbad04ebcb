"""Consumer wire formats, sans I/O: create subjects, pull requests, acks, status frames.

Ports of nats-server 2.15.1's create-subject rules of ``jsConsumerCreateRequest``
(:func:`create_subject_kind`, :func:`check_create_subject`; also exported by
:mod:`jetlog.consumer.config`), ``nextReqFromMsg`` + the request-time checks of
``processNextMsgRequest`` (spec §6.1, §6.3), ``ackReplyInfo`` (§4), the ack payload switch of
``processAck`` / ``processNak`` (§5.1) and the status header blocks of §6.6. Hot paths
(:func:`ack_subject`, :func:`parse_ack_subject`, :func:`parse_ack_payload`) are a few µs or less.

Pull requests::

    got = parse_pull_request(body, consumer_config, pin_id=current_pin)
    if isinstance(got, Rejection):
        send(reply, got.header)              # e.g. NATS/1.0 409 Exceeded MaxRequestBatch of 10
    else:
        got.batch, got.expires, got.no_wait ...

Acks::

    meta = parse_ack_subject(subject)        # None: not an ack subject nats-server would route
    kind, arg = parse_ack_payload(payload)   # ("ack", None), ("nak", delay_ns | None), ...
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from jetlog.api.models_consumer import PULL_REQUEST_TYPE, ConsumerConfig, CreateConsumerRequest
from jetlog.api.models_godecode import GoType, decode_go, struct_type
from jetlog.api.models_gojson import GoJSONError
from jetlog.errors import E
from jetlog.wire.timefmt import format_duration, parse_duration

__all__ = [
    "ACK",
    "API_LEVEL_REQUIRED",
    "BATCH_COMPLETED",
    "CONSUMER_DELETED",
    "FLOW_CONTROL",
    "LEADERSHIP_CHANGE",
    "MAX_WAITING",
    "NAK",
    "NEXT",
    "NO_MESSAGES",
    "OTHER",
    "PIN_ID_MISMATCH",
    "PUSH_BASED",
    "REQUESTS_PENDING",
    "TERM",
    "WPI",
    "AckMeta",
    "CreateTarget",
    "PullRequest",
    "Rejection",
    "ack_subject",
    "bad_request",
    "batch_completed",
    "check_create_subject",
    "create_subject_kind",
    "fc_subject",
    "go_atoi",
    "go_trim_space",
    "heartbeat",
    "interest_expired",
    "max_bytes_exceeded",
    "no_responders",
    "parse_ack_payload",
    "parse_ack_subject",
    "parse_pull_request",
    "pending_status",
    "request_timeout",
    "required_api_level_rejected",
    "status",
    "wrong_pin_id",
]

# ---------------------------------------------------------------------------------------------
# Status header blocks (§6.6). Empty payload, no reply (except flow control).

NO_MESSAGES = b"NATS/1.0 404 No Messages\r\n\r\n"
REQUESTS_PENDING = b"NATS/1.0 408 Requests Pending\r\n\r\n"
CONSUMER_DELETED = b"NATS/1.0 409 Consumer Deleted\r\n\r\n"
PUSH_BASED = b"NATS/1.0 409 Consumer is push based\r\n\r\n"
MAX_WAITING = b"NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n"
LEADERSHIP_CHANGE = b"NATS/1.0 409 Leadership Change\r\n\r\n"
FLOW_CONTROL = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
API_LEVEL_REQUIRED = b"NATS/1.0 412 Required Api Level\r\n\r\n"
PIN_ID_MISMATCH = b"NATS/1.0 423 Nats-Pin-Id mismatch\r\n\r\n"
BATCH_COMPLETED = "Batch Completed"


def status(code: int, description: str) -> bytes:
    """``NATS/1.0 <code> <description>`` with no headers (request-time rejections)."""
    return b"NATS/1.0 %d %s\r\n\r\n" % (code, description.encode())


def pending_status(code: int, description: str, msgs: int, nbytes: int) -> bytes:
    """A status with ``Nats-Pending-Messages`` / ``Nats-Pending-Bytes`` (requests ending with
    work left: 408 Request Timeout / Interest Expired, 409 MaxBytes / Batch Completed, 423)."""
    return b"NATS/1.0 %d %s\r\nNats-Pending-Messages: %d\r\nNats-Pending-Bytes: %d\r\n\r\n" % (
        code,
        description.encode(),
        msgs,
        nbytes,
    )


def request_timeout(msgs: int, nbytes: int) -> bytes:
    """``408 Request Timeout`` (batch and bytes left; bytes 0 when the request had none)."""
    return pending_status(408, "Request Timeout", msgs, nbytes)


def interest_expired(msgs: int, nbytes: int) -> bytes:
    """``408 Interest Expired`` (cross-account request whose response mapping expired)."""
    return pending_status(408, "Interest Expired", msgs, nbytes)


def max_bytes_exceeded(msgs: int, nbytes: int) -> bytes:
    """``409 Message Size Exceeds MaxBytes``: the next message is larger than the bytes left."""
    return pending_status(409, "Message Size Exceeds MaxBytes", msgs, nbytes)


def batch_completed(nbytes: int) -> bytes:
    """``409 Batch Completed`` right after the last message when max_bytes had room left."""
    return pending_status(409, BATCH_COMPLETED, 0, nbytes)


def wrong_pin_id(msgs: int, nbytes: int) -> bytes:
    """``423 Nats-Wrong-Pin-Id`` for a waiting request holding a stale pin."""
    return pending_status(423, "Nats-Wrong-Pin-Id", msgs, nbytes)


def bad_request(detail: str) -> bytes:
    """``400 Bad Request - <detail>``."""
    return status(400, f"Bad Request - {detail}")


def heartbeat(last_consumer: int, last_stream: int, stalled: str = "") -> bytes:
    """``100 Idle Heartbeat``; ``stalled`` is the outstanding flow-control reply subject."""
    hdr = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n" % (
        last_consumer,
        last_stream,
    )
    if stalled:
        return hdr + b"Nats-Consumer-Stalled: %s\r\n\r\n" % stalled.encode()
    return hdr + b"\r\n"


def no_responders(subject: str) -> bytes:
    """The core no-responders status for an unknown consumer (§0.4)."""
    return b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n" % subject.encode()


_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def fc_subject(stream: str, consumer: str, token: str | None = None) -> str:
    """A v1 flow-control reply ``$JS.FC.<stream>.<consumer>.<4 base-62 chars>``."""
    if token is None:
        token = "".join(secrets.choice(_B62) for _ in range(4))
    return f"$JS.FC.{stream}.{consumer}.{token}"


# ---------------------------------------------------------------------------------------------
# Go helpers

_ASCII_WS = b" \t\n\v\f\r"
_UNICODE_WS = " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
_I64 = 1 << 63
API_LEVEL = 5
_U64 = 1 << 64


def go_trim_space(b: bytes) -> bytes:
    """Go ``bytes.TrimSpace`` (Unicode white space; invalid UTF-8 stops the trim)."""
    b = b.strip(_ASCII_WS)
    if not b or (b[0] < 0x80 and b[-1] < 0x80):
        return b
    return b.decode("utf-8", "surrogateescape").strip(_UNICODE_WS).encode("utf-8", "surrogateescape")


def _wrap64(v: int) -> int:
    """Two's-complement int64 wrap-around (Go integer overflow)."""
    v &= _U64 - 1
    return v - _U64 if v >= _I64 else v


def go_atoi(s: str | bytes) -> int | None:
    """Go ``strconv.Atoi``: optional sign, ASCII digits, int64 range; ``None`` on error."""
    digits = s[1:] if s[:1] in ("+", "-", b"+", b"-") else s
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    v = int(s)
    return v if -_I64 <= v < _I64 else None


def required_api_level_rejected(value: str | bytes | None) -> bool:
    """``errorOnRequiredApiLevel``: a ``Nats-Required-Api-Level`` header that is not an integer
    or is above the server's API level (5) is rejected (412; 10185 on the JSON API)."""
    if not value:
        return False
    level = go_atoi(value)
    return level is None or level > API_LEVEL


# ---------------------------------------------------------------------------------------------
# Subject forms (jsConsumerCreateRequest)


@dataclass(frozen=True, slots=True)
class CreateTarget:
    """What the create subject names: ``kind`` is ``legacy_ephemeral`` (``CREATE.<s>``),
    ``new`` (``CREATE.<s>.<c>[.<filter>]``) or ``legacy_durable`` (``DURABLE.CREATE.<s>.<d>``);
    ``name`` is the consumer name ("" for a legacy ephemeral without ``config.name``)."""

    kind: str
    stream: str
    name: str
    filter: str = ""


def create_subject_kind(tokens: Sequence[str]) -> str | None:
    """Which create form ``tokens`` (``$JS.API.CONSUMER...`` split on ``.``) is, or ``None``
    when nats-server has no subscription for it (no reply at all): it serves
    ``CONSUMER.CREATE.*``, ``CONSUMER.CREATE.*.>`` and ``CONSUMER.DURABLE.CREATE.*.*``."""
    n = len(tokens)
    if n < 5 or tokens[0] != "$JS" or tokens[1] != "API" or tokens[2] != "CONSUMER":
        return None
    if tokens[3] == "CREATE":
        return "legacy_ephemeral" if n == 5 else "new"
    if tokens[3] == "DURABLE" and tokens[4] == "CREATE" and n == 7:
        return "legacy_durable"
    return None


def check_create_subject(
    tokens: Sequence[str], req: CreateConsumerRequest
) -> tuple[CreateTarget, CreateConsumerRequest]:
    """The subject-form rules in nats-server's order; returns the target and the request with
    ``config.name`` forced as the server does. Raises 10016, 10056, 10127, 10018, 10017, 10020,
    10137, 10131."""
    n = len(tokens)
    cfg = req.config
    flt = ""
    if n == 5:
        kind, stream, name = "legacy_ephemeral", tokens[4], cfg.name
    elif tokens[3] == "DURABLE":
        if n != 7:
            raise E.CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT()
        kind, stream, name = "legacy_durable", tokens[5], tokens[6]
    else:
        kind, stream, name = "new", tokens[4], tokens[5]
        if n > 6:
            flt = ".".join(tokens[6:])
    if stream != req.stream_name:
        raise E.STREAM_MISMATCH()
    if name and ("/" in name or "\\" in name):
        raise E.CONSUMER_NAME_CONTAINS_PATH_SEPARATORS()
    if kind == "legacy_durable":
        if not cfg.durable_name:
            raise E.CONSUMER_DURABLE_NAME_NOT_SET()
        if name != cfg.durable_name:
            raise E.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT()
        cfg = msgspec.structs.replace(cfg, name=name)
    elif kind == "new":
        if cfg.durable_name and name != cfg.durable_name:
            raise E.CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT()
        cfg = msgspec.structs.replace(cfg, name=name)
    elif cfg.durable_name:
        raise E.CONSUMER_EPHEMERAL_WITH_DURABLE_NAME()
    if flt and cfg.filter_subjects:
        raise E.CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED()
    if flt and cfg.filter_subject != flt:
        raise E.CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH()
    return CreateTarget(kind, stream, name, flt), msgspec.structs.replace(req, config=cfg)


# ---------------------------------------------------------------------------------------------
# Pull requests (§6.1, §6.3)


class PullRequest(msgspec.Struct, gc=False):
    """A parsed ``CONSUMER.MSG.NEXT`` request. ``expires``/``idle_heartbeat`` in ns (0 = none;
    a negative ``expires`` is already expired). ``batch`` is as sent (Go's value: the JSON form
    with no ``batch`` gives 0, which nats-server serves as one message; it may be negative).
    ``is_json``: the body was a JSON object (only then do the priority fields apply)."""

    batch: int = 1
    expires: int = 0
    max_bytes: int = 0
    no_wait: bool = False
    idle_heartbeat: int = 0
    group: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    id: str = ""
    priority: int = 0
    is_json: bool = False


class Rejection(NamedTuple):
    """A pull request answered at once with a status (no pending headers)."""

    code: int
    description: str

    @property
    def header(self) -> bytes:
        """The header block to send (empty payload, no reply subject)."""
        return status(self.code, self.description)


class _Next(msgspec.Struct):
    expires: int = 0
    batch: int = 0
    max_bytes: int = 0
    no_wait: bool = False
    idle_heartbeat: int = 0
    group: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    id: str = ""
    priority: int = 0


_NEXT_DECODER = msgspec.json.Decoder(_Next)
_NEXT_KEYS = frozenset(_Next.__struct_fields__)
_KEY_RE = re.compile(rb'"([^"]*)"[ \t\r\n]*:')
_OFFSET_RE = re.compile(r" at offset \d+$")
_HB_TOO_LARGE = Rejection(400, "Bad Request - heartbeat value too large")
_PUSH = Rejection(409, "Consumer is push based")
_API_LEVEL = Rejection(412, "Required Api Level")
#: nats-server compares absolute deadlines taken a few µs apart: expires must exceed
#: max_expires by more than the time between its two clock reads to be rejected.
EXPIRES_SLACK = 1_000


def _decode_next(body: bytes) -> _Next | str:
    """``json.Unmarshal`` into ``JSApiConsumerGetNextRequest``: the request or Go's error."""
    if b"\\" not in body:
        try:
            req = _NEXT_DECODER.decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError):
            pass
        else:
            keys = _KEY_RE.findall(body)
            if (
                len(keys) == len(set(keys))
                and all(k.decode("utf-8", "replace") in _NEXT_KEYS for k in keys)
                and all(
                    -_I64 <= v < _I64
                    for v in (req.expires, req.batch, req.max_bytes, req.idle_heartbeat, req.priority)
                )
                and -_I64 <= req.min_pending < _I64
                and -_I64 <= req.min_ack_pending < _I64
            ):
                return req
    try:
        data = decode_go(body, PULL_REQUEST_TYPE, strict=False, stream=False)
    except GoJSONError as e:
        text = str(e)
        return "unexpected end of JSON input" if text == "unexpected EOF" else _OFFSET_RE.sub("", text)
    return msgspec.convert(data, _Next)


def parse_pull_request(
    body: bytes,
    config: ConsumerConfig | None = None,
    *,
    pin_id: str = "",
    required_api_level: str | bytes | None = None,
) -> PullRequest | Rejection:
    """Parse a pull request body like nats-server and apply the request-time rejections.

    Without ``config`` only the body is checked (bad JSON, heartbeat too large). With the
    consumer's ``config``: push consumer (409), ``Nats-Required-Api-Level`` (412), then the
    body, ``MaxRequestBatch``/``MaxRequestExpires``/``MaxRequestMaxBytes`` (409) and the
    priority-group checks (400; 423 ``Nats-Pin-Id mismatch`` against the current ``pin_id``).
    Not checked here (consumer state): ``Exceeded MaxWaiting``, no_wait ``404``/``408``.
    """
    if config is not None:
        if config.deliver_subject:
            return _PUSH
        if required_api_level and required_api_level_rejected(required_api_level):
            return _API_LEVEL
    req = go_trim_space(body)
    if not req:
        out = PullRequest()
    elif req[0] == 0x7B:  # '{'
        got = _decode_next(req)
        if isinstance(got, str):
            return Rejection(400, f"Bad Request - {got}")
        hb = got.idle_heartbeat
        if hb > 0 and _wrap64(hb * 2) > got.expires:
            return _HB_TOO_LARGE
        out = PullRequest(
            got.batch,
            got.expires,
            got.max_bytes,
            got.no_wait,
            hb,
            got.group,
            got.min_pending,
            got.min_ack_pending,
            got.id,
            got.priority,
            True,
        )
    else:
        n = go_atoi(req)
        out = PullRequest(1 if n is None else n)
    if config is None:
        return out
    mb = config.max_batch
    if mb > 0 and out.batch > mb:
        return Rejection(409, f"Exceeded MaxRequestBatch of {mb}")
    me = config.max_expires
    if out.expires != 0 and me > 0 and out.expires > me + EXPIRES_SLACK:
        return Rejection(409, f"Exceeded MaxRequestExpires of {format_duration(me)}")
    mx = config.max_bytes
    if out.max_bytes > 0 and mx > 0 and out.max_bytes > mx:
        return Rejection(409, f"Exceeded MaxRequestMaxBytes of {mx}")
    if out.is_json:
        policy = config.priority_policy
        if (out.min_pending != 0 or out.min_ack_pending != 0) and policy != "overflow":
            return Rejection(400, "Bad Request - Not a Overflow Priority consumer")
        if out.id and policy != "pinned_client":
            return Rejection(400, "Bad Request - Not a Pinned Client Priority consumer")
        if not 0 <= out.priority <= 9:
            return Rejection(400, "Bad Request - Priority must be between 0 and 9")
        if policy != "none":
            if not out.group:
                return Rejection(400, "Bad Request - Priority Group missing")
            if out.group not in config.priority_groups:
                return Rejection(400, "Bad Request - Invalid Priority Group")
            if pin_id and out.id and out.id != pin_id:
                return Rejection(423, "Nats-Pin-Id mismatch")
    return out


# ---------------------------------------------------------------------------------------------
# Ack subjects (§4)


def ack_subject(
    stream: str, consumer: str, delivered: int, sseq: int, cseq: int, ts: int, pending: int
) -> str:
    """The v1 (9-token) reply subject of a delivery:
    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>``."""
    return f"$JS.ACK.{stream}.{consumer}.{delivered}.{sseq}.{cseq}.{ts}.{pending}"


class AckMeta(msgspec.Struct, gc=False):
    """An ack subject as nats-server reads it (``ackReplyInfo``). Numbers that are empty or not
    all ASCII digits read as Go's ``-1``: ``2**64-1`` for the unsigned members (so the ack looks
    "from the future" and is ignored, though ``+NXT`` still pulls and other payloads are still
    replied to), ``-1`` for ``timestamp``. v2 subjects also give ``domain`` ("" for ``_``) and
    ``account`` (the account hash)."""

    stream: str
    consumer: str
    delivered: int
    stream_seq: int
    consumer_seq: int
    timestamp: int
    pending: int
    domain: str = ""
    account: str = ""


def _ack_num(tok: str) -> int:
    """``parseAckReplyNum``: ASCII digits with int64 wrap-around, else -1."""
    if not tok or not tok.isascii() or not tok.isdigit():
        return -1
    return _wrap64(int(tok))


def _slow_nums(*toks: str) -> tuple[int, int, int, int, int]:
    dc, sseq, dseq, ts, pending = (_ack_num(v) for v in toks)
    return dc % _U64, sseq % _U64, dseq % _U64, ts, pending % _U64


def parse_ack_subject(subject: str) -> AckMeta | None:
    """Parse a v1 (exactly 9 tokens) or v2 (11 or more) ``$JS.ACK.`` subject; ``None`` for
    anything else (nats-server has no ack subscription that would match it)."""
    t = subject.split(".")
    n = len(t)
    if n == 9:
        off = 2
    elif n >= 11:
        off = 4
    else:
        return None
    if t[0] != "$JS" or t[1] != "ACK":
        return None
    a, b, c, d, e = t[off + 2], t[off + 3], t[off + 4], t[off + 5], t[off + 6]
    if subject.isascii() and a.isdigit() and b.isdigit() and c.isdigit() and d.isdigit() and e.isdigit():
        dc, sseq, dseq, ts, pending = int(a), int(b), int(c), int(d), int(e)
        if dc >= _I64 or sseq >= _I64 or dseq >= _I64 or ts >= _I64 or pending >= _I64:
            dc, sseq, dseq, ts, pending = _slow_nums(a, b, c, d, e)
    else:
        dc, sseq, dseq, ts, pending = _slow_nums(a, b, c, d, e)
    if off == 2:
        return AckMeta(t[2], t[3], dc, sseq, dseq, ts, pending)
    return AckMeta(t[4], t[5], dc, sseq, dseq, ts, pending, "" if t[2] == "_" else t[2], t[3])


# ---------------------------------------------------------------------------------------------
# Ack payloads (§5.1)

ACK, NAK, WPI, TERM, NEXT, OTHER = "ack", "nak", "wpi", "term", "next", "other"

_EXACT: dict[bytes, tuple[str, Any]] = {
    b"": (ACK, None),
    b"+ACK": (ACK, None),
    b"+OK": (ACK, None),
    b"-NAK": (NAK, None),
    b"+WPI": (WPI, None),
    b"+TERM": (TERM, ""),
    b"+NXT": (NEXT, b""),
}
_NAK_JSON = re.compile(rb'\{[ \t\r\n]*"delay"[ \t\r\n]*:[ \t\r\n]*(-?(?:0|[1-9][0-9]{0,18}))[ \t\r\n]*\}')
_NAK_TYPE: GoType = struct_type("server.ConsumerNakOptions", {"delay": GoType("int", "time.Duration", 64)})


def _nak_delay(rest: bytes) -> int | None:
    """``processNak``'s delay: ``{"delay":ns}`` (``json.Unmarshal``) or a Go duration; ``None``
    (plain NAK) when absent or unparseable."""
    arg = go_trim_space(rest)
    if not arg:
        return None
    if arg[0] == 0x7B:
        m = _NAK_JSON.fullmatch(arg)
        if m is not None:
            v = int(m.group(1))
            return v if -_I64 <= v < _I64 else None
        try:
            data = decode_go(arg, _NAK_TYPE, strict=False, stream=False)
        except GoJSONError:
            return None
        return int(data.get("delay", 0))
    try:
        return parse_duration(arg.decode("utf-8", "surrogateescape"))
    except ValueError:
        return None


def parse_ack_payload(payload: bytes) -> tuple[str, Any]:
    """Classify an ack payload like ``processAck``; returns ``(kind, arg)``:

    * ``("ack", None)`` — empty, ``+ACK``, ``+OK``;
    * ``("nak", delay)`` — ``-NAK``…; ``delay`` in ns (``-NAK {"delay":N}`` / ``-NAK 1s``) or
      ``None`` for an immediate redelivery (also when the delay does not parse);
    * ``("wpi", None)`` — exactly ``+WPI``;
    * ``("term", reason)`` — ``+TERM``… with the trimmed reason ("" if none);
    * ``("next", body)`` — ``+NXT``…: ack, then ``body`` is a pull request
      (:func:`parse_pull_request`) whose reply is the ack's reply subject;
    * ``("other", None)`` — anything else (ignored, but replied to when it has a reply).
    """
    hit = _EXACT.get(payload)
    if hit is not None:
        return hit
    if payload.startswith(b"+NXT"):
        return NEXT, payload[4:]
    if payload.startswith(b"-NAK"):
        return NAK, _nak_delay(payload[4:])
    if payload.startswith(b"+TERM"):
        return TERM, go_trim_space(payload[5:]).decode("utf-8", "replace")
    return OTHER, None
