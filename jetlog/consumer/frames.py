"""Status frames a consumer sends on a delivery inbox (spec §6.6, §7.2, §7.4).

Status messages have an empty payload and the code in the header status line; the exact texts
matter (@nats-io/jetstream compares the lower-cased description). Built once where constant.
"""

from __future__ import annotations

NO_MESSAGES = b"NATS/1.0 404 No Messages\r\n\r\n"
REQUESTS_PENDING = b"NATS/1.0 408 Requests Pending\r\n\r\n"
CONSUMER_DELETED = b"NATS/1.0 409 Consumer Deleted\r\n\r\n"
PUSH_BASED = b"NATS/1.0 409 Consumer is push based\r\n\r\n"
MAX_WAITING = b"NATS/1.0 409 Exceeded MaxWaiting\r\n\r\n"
FLOW_CONTROL = b"NATS/1.0 100 FlowControl Request\r\n\r\n"
API_LEVEL = b"NATS/1.0 412 Required Api Level\r\n\r\n"


def heartbeat(last_consumer: int, last_stream: int, stalled: str = "") -> bytes:
    """``100 Idle Heartbeat`` with the consumer's last delivered sequences."""
    extra = b"Nats-Consumer-Stalled: %s\r\n" % stalled.encode() if stalled else b""
    return b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: %d\r\nNats-Last-Stream: %d\r\n%s\r\n" % (
        last_consumer,
        last_stream,
        extra,
    )


def pending_status(code: int, text: str, msgs: int, nbytes: int) -> bytes:
    """A status with ``Nats-Pending-Messages`` / ``Nats-Pending-Bytes`` (408/409 endings)."""
    return b"NATS/1.0 %d %s\r\nNats-Pending-Messages: %d\r\nNats-Pending-Bytes: %d\r\n\r\n" % (
        code,
        text.encode(),
        msgs,
        nbytes,
    )


def request_timeout(msgs: int, nbytes: int) -> bytes:
    """``408 Request Timeout`` for an expired pull request."""
    return pending_status(408, "Request Timeout", msgs, nbytes)


def bad_request(detail: str) -> bytes:
    """``400 Bad Request - <detail>``."""
    return b"NATS/1.0 400 Bad Request - %s\r\n\r\n" % detail.encode()


def conflict(text: str) -> bytes:
    """``409 <text>`` without pending headers (request-time rejections)."""
    return b"NATS/1.0 409 %s\r\n\r\n" % text.encode()


def no_responders(subject: str) -> bytes:
    """What a client gets when nothing subscribes to ``subject`` (emulated for wildcard subs)."""
    return b"NATS/1.0 503\r\nNats-Subject: %s\r\n\r\n" % subject.encode()


def with_msg_size(hdr: bytes, size: int) -> bytes:
    """``headers_only`` delivery: stored headers plus ``Nats-Msg-Size``."""
    line = b"Nats-Msg-Size: %d\r\n\r\n" % size
    if not hdr:
        return b"NATS/1.0\r\n" + line
    if hdr.endswith(b"\r\n\r\n"):
        return hdr[:-2] + line
    return hdr + b"\r\n" + line
