"""Many replication messages in one NATS payload (sans-I/O): the framing of
``jetlog.cluster.mux``.

Replication runs per stream (``wire/repl.py``): each follower long-polls its stream's leader
with one request at a time, and each request and reply is a NATS message relayed by the
upstream server. With many streams written at once that is two messages per stream per
commit, each a relay hop and a Python wake-up on both ends. The mux sends everything one node
has for another in one loop pass as one message instead; each item keeps its own id and its
own per-stream meaning (the streams' replication protocol does not change).

A mux message (little-endian)::

    request: MAGIC_REQ | ret_len u16 | ret (the requester's reply subject, UTF-8) | frames
    reply:   MAGIC_REP | frames
    frame:   id u64 | len u32 | payload (one ``wire/repl`` message)

Both magics read as a ``u32`` head length of over 1 GiB, which no plain replication message
(``u32 head_len | msgpack head | body``, head of a few dozen bytes) and no NATS payload can
have: a receiver tells the two kinds apart by the first four bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from jetlog.errors import JetlogError

MAGIC_REQ = b"\xffJMQ"
MAGIC_REP = b"\xffJMR"
_FRAME = struct.Struct("<QI")
_RET = struct.Struct("<H")
FRAME_OVERHEAD = _FRAME.size
"""Bytes a frame adds to its payload."""
MAX_RET = 1024
"""Longest reply subject a request message may name."""

Item = tuple[int, bytes]


class MuxError(JetlogError):
    """A mux message could not be decoded."""


def is_request(data: bytes | memoryview) -> bool:
    """``data`` is a mux request message (not a plain replication message)."""
    return bytes(data[:4]) == MAGIC_REQ


def is_reply(data: bytes | memoryview) -> bool:
    """``data`` is a mux reply message."""
    return bytes(data[:4]) == MAGIC_REP


def _pack(head: bytes, items: Iterable[Item], limit: int) -> list[tuple[bytes, list[int]]]:
    """``items`` framed after ``head``, split into messages of at most ``limit`` bytes where
    that is possible (an item too big to share a message travels alone, over the limit: the
    caller bounds item sizes, and the transport refuses what the server would); each message
    with the ids it carries."""
    out: list[tuple[bytes, list[int]]] = []
    parts: list[bytes] = [head]
    ids: list[int] = []
    size = len(head)
    for rid, payload in items:
        need = FRAME_OVERHEAD + len(payload)
        if ids and size + need > limit:
            out.append((b"".join(parts), ids))
            parts, ids, size = [head], [], len(head)
        parts.append(_FRAME.pack(rid, len(payload)))
        parts.append(payload)
        ids.append(rid)
        size += need
    if ids:
        out.append((b"".join(parts), ids))
    return out


def encode_requests(ret: str, items: Iterable[Item], limit: int) -> list[tuple[bytes, list[int]]]:
    """Request messages carrying ``items`` (``(id, replication request)``), replies to ``ret``;
    each with the ids it carries."""
    r = ret.encode()
    if len(r) > MAX_RET:
        raise MuxError(f"reply subject of {len(r)} bytes (at most {MAX_RET})")
    return _pack(MAGIC_REQ + _RET.pack(len(r)) + r, items, limit)


def encode_replies(items: Iterable[Item], limit: int) -> list[bytes]:
    """Reply messages carrying ``items`` (``(id, replication reply)``)."""
    return [msg for msg, _ in _pack(MAGIC_REP, items, limit)]


def _frames(data: bytes, p: int) -> list[Item]:
    out: list[Item] = []
    n = len(data)
    while p < n:
        if p + FRAME_OVERHEAD > n:
            raise MuxError("mux frame header truncated")
        rid, ln = _FRAME.unpack_from(data, p)
        p += FRAME_OVERHEAD
        if p + ln > n:
            raise MuxError("mux frame truncated")
        out.append((rid, data[p : p + ln]))
        p += ln
    return out


def decode_request(data: bytes) -> tuple[str, list[Item]]:
    """The reply subject and the items of a request message."""
    if not is_request(data):
        raise MuxError("not a mux request")
    p = len(MAGIC_REQ)
    if p + _RET.size > len(data):
        raise MuxError("mux request truncated")
    (rl,) = _RET.unpack_from(data, p)
    p += _RET.size
    if rl > MAX_RET or p + rl > len(data):
        raise MuxError("mux reply subject truncated")
    try:
        ret = data[p : p + rl].decode()
    except UnicodeDecodeError:
        raise MuxError("mux reply subject is not UTF-8") from None
    if not ret or any(c in ret for c in " \t\r\n"):
        raise MuxError("mux reply subject is not a subject")
    return ret, _frames(data, p + rl)


def decode_replies(data: bytes) -> list[Item]:
    """The items of a reply message."""
    if not is_reply(data):
        raise MuxError("not a mux reply")
    return _frames(data, len(MAGIC_REP))
