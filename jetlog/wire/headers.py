"""NATS message header blocks (``NATS/1.0[ <code>[ <description>]]\\r\\nKey: Value\\r\\n...\\r\\n``).

Header blocks are kept as raw bytes everywhere (stored verbatim, as nats-server does) and only
looked into with :func:`get`, which matches nats-server's lookup: the key is case-sensitive, must
start a line and be followed by ``:``; leading spaces of the value are skipped. Status replies
(``NATS/1.0 404 No Messages``) are built with :func:`status`.
"""

from __future__ import annotations

from collections.abc import Iterable

PREFIX = b"NATS/1.0"
_CRLF = b"\r\n"
_BLOCK_START = PREFIX + _CRLF
_EMPTY_BLOCK = b"NATS/1.0\r\n\r\n"

# Header names JetStream interprets.
MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJ_SEQ_SUBJ = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"
TTL = "Nats-TTL"
MARKER_REASON = "Nats-Marker-Reason"
INCR = "Nats-Incr"
SCHEDULE = "Nats-Schedule"
STREAM_SOURCE = "Nats-Stream-Source"
BATCH_ID = "Nats-Batch-Id"
REQUIRED_API_LEVEL = "Nats-Required-Api-Level"


def get(hdr: bytes, key: str) -> str | None:
    """Value of header ``key`` in the block ``hdr`` (first occurrence), or None."""
    if not hdr:
        return None
    bkey = key.encode()
    klen = len(bkey)
    hlen = len(hdr)
    offset = 0
    while True:
        idx = hdr.find(bkey, offset)
        if idx < 2:
            return None
        if hdr[idx - 2 : idx] != _CRLF or idx + klen >= hlen or hdr[idx + klen] != 0x3A:  # ':'
            offset = idx + klen
            continue
        start = idx + klen + 1
        while start < hlen and hdr[start] == 0x20:
            start += 1
        end = hdr.find(_CRLF, start)
        if end < 0:
            end = hlen
        return hdr[start:end].decode("utf-8", "replace")


def has_any(hdr: bytes, marker: bytes = b"Nats-") -> bool:
    """Cheap pre-check: could ``hdr`` contain a header starting with ``marker``?"""
    return bool(hdr) and marker in hdr


def parse(hdr: bytes) -> tuple[int, str, list[tuple[str, str]]]:
    """Split a header block into (status code or 0, description, [(key, value), ...])."""
    if not hdr:
        return 0, "", []
    text = hdr.decode("utf-8", "replace")
    lines = text.split("\r\n")
    first = lines[0]
    code, desc = 0, ""
    if first.startswith("NATS/1.0"):
        rest = first[8:].strip()
        if rest:
            parts = rest.split(" ", 1)
            if parts[0].isdigit():
                code = int(parts[0])
                desc = parts[1] if len(parts) > 1 else ""
    pairs: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(":")
        if sep:
            pairs.append((k, v.lstrip(" ")))
    return code, desc, pairs


def encode(pairs: Iterable[tuple[str, str]], code: int = 0, description: str = "") -> bytes:
    """Build a header block from pairs, optionally with a status line."""
    first = PREFIX
    if code:
        first += b" %d" % code
        if description:
            first += b" " + description.encode()
    body = b"".join(f"{k}: {v}\r\n".encode("utf-8", "surrogateescape") for k, v in pairs)
    return first + _CRLF + body + _CRLF


def status(code: int, description: str = "", pairs: Iterable[tuple[str, str]] = ()) -> bytes:
    """A status-only header block such as ``NATS/1.0 404 No Messages``."""
    return encode(pairs, code, description)


def append(hdr: bytes, pairs: Iterable[tuple[str, str]]) -> bytes:
    """Append headers after the existing ones of ``hdr`` (creating a block if empty).

    Direct Get replies carry the stored headers verbatim, then ``Nats-Stream`` & co.
    """
    return append_lines(hdr, b"".join(f"{k}: {v}\r\n".encode("utf-8", "surrogateescape") for k, v in pairs))


def append_lines(hdr: bytes, lines: bytes) -> bytes:
    """:func:`append` of header lines already encoded (``Key: value\\r\\n`` each)."""
    if not hdr:
        return _BLOCK_START + lines + _CRLF
    if hdr.endswith(b"\r\n\r\n"):
        return hdr[:-2] + lines + _CRLF
    # A block without the terminating blank line (tolerated on input): close it properly.
    if hdr.endswith(_CRLF):
        return hdr + lines + _CRLF
    return hdr + _CRLF + lines + _CRLF


def is_empty_block(hdr: bytes) -> bool:
    """True if the block carries no status and no headers."""
    return not hdr or hdr == _EMPTY_BLOCK


def replace(hdr: bytes, key: str, value: str) -> bytes:
    """Return ``hdr`` with the first ``key`` header's value replaced (appended if absent)."""
    code, desc, pairs = parse(hdr)
    for i, (k, _) in enumerate(pairs):
        if k == key:
            pairs[i] = (k, value)
            break
    else:
        pairs.append((key, value))
    return encode(pairs, code, desc)


def remove(hdr: bytes, key: str) -> bytes:
    """Return ``hdr`` without any ``key`` header (the block is kept even if it becomes empty)."""
    if not hdr or get(hdr, key) is None:
        return hdr
    code, desc, pairs = parse(hdr)
    return encode([(k, v) for k, v in pairs if k != key], code, desc)
