"""NATS client protocol pieces of the connector's synchronous client: errors, the message type,
header blocks, and an incremental parser of server→client bytes (``bytes.find`` based)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable

_MAX_CONTROL_LINE = 64 * 1024
_CRLF = b"\r\n"


class NatsError(Exception):
    """A NATS protocol or server error."""


class NatsConnectionError(NatsError):
    """The connection could not be established or was lost."""


class NatsAuthError(NatsConnectionError):
    """The server refused the credentials."""


class NatsTimeout(NatsError, TimeoutError):
    """No reply arrived before the deadline."""


class ProtocolError(NatsConnectionError):
    """The server sent bytes this parser does not understand."""


class Msg:
    """One delivered message. ``hdr`` is the raw header block (``b""`` without headers)."""

    __slots__ = ("_first", "data", "hdr", "reply", "subject")

    def __init__(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        self.subject = subject
        self.reply = reply
        self.hdr = hdr
        self.data = data
        self._first: dict[str, str] | None = None

    @property
    def status(self) -> int:
        """The status code of a status message (``NATS/1.0 503``), else 0."""
        h = self.hdr
        if len(h) >= 12 and h[8] == 0x20 and h[9:12].isdigit():
            return int(h[9:12])
        return 0

    @property
    def description(self) -> str:
        """The status description (``No Responders``), or ``""``."""
        h = self.hdr
        end = h.find(_CRLF)
        line = h[:end] if end >= 0 else h
        return line[13:].decode("utf-8", "replace").strip() if len(line) > 13 else ""

    def header(self, key: str) -> str | None:
        """First value of header ``key`` (case-sensitive, like nats-server), or None."""
        first = self._first
        if first is None:
            # Parsed once per message: a bulk read's reply is asked for five headers.
            first = {}
            for k, v in parse_headers(self.hdr):
                first.setdefault(k, v)
            self._first = first
        return first.get(key)

    def headers(self) -> list[tuple[str, str]]:
        """All headers in order (repeats kept)."""
        return parse_headers(self.hdr)

    def __repr__(self) -> str:
        return f"Msg({self.subject!r}, status={self.status}, hdr={len(self.hdr)}B, data={len(self.data)}B)"


def parse_headers(hdr: bytes) -> list[tuple[str, str]]:
    """Split a header block into (key, value) pairs; the status line is skipped."""
    if not hdr:
        return []
    out: list[tuple[str, str]] = []
    lines = hdr.split(_CRLF)
    for line in lines[1:]:
        if not line:
            continue
        k, sep, v = line.partition(b":")
        if sep:
            out.append((k.decode("utf-8", "replace"), v.lstrip(b" ").decode("utf-8", "replace")))
    return out


def encode_headers(pairs: list[tuple[str, str]]) -> bytes:
    """Build a header block; raises ValueError on keys/values NATS cannot carry."""
    parts = [b"NATS/1.0\r\n"]
    for k, v in pairs:
        if not k or any(c in k for c in ": \t\r\n"):
            raise ValueError(f"invalid NATS header name {k!r}")
        if "\r" in v or "\n" in v:
            raise ValueError(f"NATS header {k!r} has a line break in its value")
        parts.append(f"{k}: {v}\r\n".encode())
    parts.append(_CRLF)
    return b"".join(parts)


# Protocol operations other than messages, as returned by Parser.next().
OP_PING, OP_PONG, OP_OK = "PING", "PONG", "+OK"


class Parser:
    """Incremental parser of server→client protocol bytes.

    :meth:`next` returns a :class:`Msg`, a ``("INFO", dict)`` / ``("-ERR", text)`` tuple, one of
    :data:`OP_PING`/:data:`OP_PONG`/:data:`OP_OK`, or None when more bytes are needed.
    """

    def __init__(self) -> None:
        # Received bytes are ``_buf[_pos:_end]``; the rest of ``_buf`` is room that
        # :meth:`recv_into` reads into directly. WHY: a bulk reply is ~1 MiB; receiving into
        # a fresh ``bytes`` and appending it to a buffer copied every frame twice more than
        # the kernel's copy into this buffer (~a tenth of a Spark task's reading CPU).
        self._buf = bytearray()
        self._pos = 0
        self._end = 0
        self._need = 0  # bytes from _pos the message being received needs, when known

    def _room(self, n: int) -> None:
        """Make ``n`` bytes of room after ``_end`` (moving the unparsed bytes to the front or
        growing the buffer only when there is not)."""
        if self._pos == self._end:
            self._pos = self._end = 0  # all parsed: start over at the front, nothing to move
        if len(self._buf) - self._end >= n:
            return
        live = self._end - self._pos
        if self._pos:
            self._buf[:live] = self._buf[self._pos : self._end]
            self._pos, self._end = 0, live
        if len(self._buf) - live < n:
            self._buf.extend(bytes(max(n + live, 2 * len(self._buf)) - len(self._buf)))

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        n = len(data)
        self._room(n)
        self._buf[self._end : self._end + n] = data
        self._end += n

    def recv_into(self, recv: Callable[[memoryview], int], size: int) -> int:
        """Receive straight into the buffer with ``recv`` (a socket's ``recv_into``): up to
        ``size`` bytes, or the rest of the message being received if that is more. Returns
        what ``recv`` returned (0: the peer closed)."""
        want = max(size, self._need - (self._end - self._pos))
        self._room(want)
        with memoryview(self._buf) as mv:
            got = recv(mv[self._end : self._end + want])
        self._end += got
        return got

    @property
    def buffered(self) -> int:
        """Bytes received but not yet parsed."""
        return self._end - self._pos

    def next(self) -> Msg | tuple[str, object] | str | None:
        """Parse one operation, or return None if it is incomplete."""
        buf = self._buf
        pos = self._pos
        eol = buf.find(_CRLF, pos, self._end)
        if eol < 0:
            if self._end - pos > _MAX_CONTROL_LINE:
                raise ProtocolError("control line too long")
            return None
        head = bytes(buf[pos : pos + 4]).upper()
        if head == b"MSG ":
            args = bytes(buf[pos + 4 : eol]).split()
            if len(args) == 4:
                subject, _sid, reply, size = args
            elif len(args) == 3:
                subject, _sid, size = args
                reply = None
            else:
                raise ProtocolError(f"bad MSG line {bytes(buf[pos:eol])!r}")
            return self._body(eol, subject, reply, 0, int(size))
        if head == b"HMSG":
            args = bytes(buf[pos + 5 : eol]).split()
            if len(args) == 5:
                subject, _sid, reply, hsize, tsize = args
            elif len(args) == 4:
                subject, _sid, hsize, tsize = args
                reply = None
            else:
                raise ProtocolError(f"bad HMSG line {bytes(buf[pos:eol])!r}")
            return self._body(eol, subject, reply, int(hsize), int(tsize))
        line = bytes(buf[pos:eol])
        self._pos = eol + 2
        op = line.upper()
        if op == b"PING":
            return OP_PING
        if op == b"PONG":
            return OP_PONG
        if op == b"+OK":
            return OP_OK
        if op.startswith(b"INFO"):
            try:
                info = json.loads(line[4:].strip() or b"{}")
            except ValueError as e:
                raise ProtocolError(f"bad INFO: {e}") from None
            return ("INFO", info)
        if op.startswith(b"-ERR"):
            return ("-ERR", line[4:].decode("utf-8", "replace").strip().strip("'"))
        raise ProtocolError(f"unknown protocol line {line[:80]!r}")

    def _body(self, eol: int, subject: bytes, reply: bytes | None, hsize: int, tsize: int) -> Msg | None:
        buf = self._buf
        start = eol + 2
        end = start + tsize
        if self._end < end + 2:
            self._need = end + 2 - self._pos
            return None
        self._need = 0
        if buf[end : end + 2] != _CRLF or hsize > tsize:
            raise ProtocolError("message payload not terminated by CRLF")
        # One copy each through a view (a bytearray slice is a copy, and bytes() of it another:
        # two passes over every 1 MiB bulk frame). The view is released before ``feed`` may
        # resize the buffer.
        with memoryview(buf) as mv:
            hdr = bytes(mv[start : start + hsize]) if hsize else b""
            data = bytes(mv[start + hsize : end])
        self._pos = end + 2
        return Msg(subject.decode(), reply.decode() if reply is not None else None, hdr, data)


def new_inbox() -> str:
    """A reply-subject prefix unique across processes.

    Spark forks its Python workers from one daemon, so ``id()`` values and PRNG states repeat
    across tasks: an inbox derived from them once made two tasks read each other's replies.
    ``os.urandom`` is per call from the kernel.
    """
    return "_INBOX." + base64.b32encode(os.urandom(15)).decode().rstrip("=").lower()
