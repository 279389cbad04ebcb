"""Client-protocol frames from a nats-server, split into ours and the rest (sans-I/O).

The client link keeps nats-py for the connection (handshake, auth, TLS, PING/PONG, ``-ERR``)
but takes the messages of its raw subscriptions straight from the socket (see
``transport/client_raw.py``): :class:`ClientSplitter` cuts the server's byte stream into whole
operations, returns the ``MSG``/``HMSG`` frames of the subscription ids it is told about as
parsed tuples, and everything else, byte for byte and in order, as whole operations for
nats-py's own parser. Grammar (nats-server ``client.go``, ``processMsgArgs`` on the client
side)::

    MSG <subject> <sid> [<reply>] <size>\\r\\n<payload>\\r\\n
    HMSG <subject> <sid> [<reply>] <hdr_size> <total_size>\\r\\n<headers><payload>\\r\\n

Every other operation (``INFO``, ``PING``, ``PONG``, ``+OK``, ``-ERR``) is one line. Anything
the splitter cannot read (a malformed line, an over-long one) is handed over unparsed together
with everything after it, for good: nats-py's parser then reports it exactly as it always did.
"""

from __future__ import annotations

import re
from collections.abc import Container
from typing import Final

MAX_LINE: Final = 64 * 1024
"""Longest control line waited for before giving up on splitting (nats-server sends far less)."""

Frame = tuple[int, bytes, bytes, bytes, bytes]
"""(sid, subject, reply (empty: none), header block (empty: none), payload) of one of ours."""

Item = Frame | bytes
"""What :meth:`ClientSplitter.feed` returns: our frames, and other operations as raw bytes."""

# The usual shapes, single spaces; anything else takes the general path below.
_MSG = re.compile(rb"MSG ([^ \t\r\n]+) ([0-9]+) (?:([^ \t\r\n]+) )?([0-9]+)\r\n")
_HMSG = re.compile(rb"HMSG ([^ \t\r\n]+) ([0-9]+) (?:([^ \t\r\n]+) )?([0-9]+) ([0-9]+)\r\n")


class ClientSplitter:
    """Incremental splitter; ``feed`` any chunk, get back complete items in wire order.

    ``ours`` is consulted per frame (a live view: subscriptions come and go). After
    :attr:`gave_up` is set, every byte is returned as is.
    """

    __slots__ = ("_have", "_held", "_need", "gave_up", "ours")

    def __init__(self, ours: Container[int]) -> None:
        self.ours = ours
        self._held: list[bytes] = []  # held-back input, oldest first
        self._have = 0  # its length
        self._need = 0  # bytes the held-back frame needs in total (0: a line's end)
        self.gave_up = False

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of an operation."""
        return self._have

    def feed(self, data: bytes) -> list[Item]:
        """Split ``data`` (after any held-back bytes) into complete items."""
        if self.gave_up:
            return [bytes(data)] if data else []
        held = self._held
        if held:
            held.append(bytes(data))
            self._have += len(data)
            if self._have < self._need or (not self._need and b"\n" not in data and self._have <= MAX_LINE):
                return []  # a payload of known size, or a line, still incomplete: no join
            buf = b"".join(held)
            held.clear()
            self._have = 0
        else:
            buf = bytes(data)
        self._need = 0
        out: list[Item] = []
        n = len(buf)
        pos = 0
        other = -1  # start of a run of other operations not yet emitted
        ours = self.ours
        msg = _MSG.match
        hmsg = _HMSG.match
        while pos < n:
            c = buf[pos]
            m = None
            if c == 77:  # "M"
                m = msg(buf, pos)
            elif c == 72:  # "H"
                m = hmsg(buf, pos)
            if m is None:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > MAX_LINE:
                        return self._give_up(out, buf, pos if other < 0 else other)
                    break
                if c in (77, 72, 109, 104):  # a message in a shape not matched above
                    return self._give_up(out, buf, pos if other < 0 else other)
                if other < 0:
                    other = pos
                pos = eol + 2
                continue
            start = m.end()
            g = m.groups()
            end = start + int(g[-1])
            if end + 2 > n:
                self._need = end + 2 - pos
                break
            if buf[end : end + 2] != b"\r\n":
                return self._give_up(out, buf, pos if other < 0 else other)
            sid = int(g[1])
            if sid not in ours:
                if other < 0:
                    other = pos
                pos = end + 2
                continue
            if other >= 0:
                out.append(buf[other:pos])
                other = -1
            if c == 77:
                out.append((sid, g[0], g[2] or b"", b"", buf[start:end]))
            else:
                hend = start + int(g[3])
                if hend > end:
                    return self._give_up(out, buf, pos)
                out.append((sid, g[0], g[2] or b"", buf[start:hend], buf[hend:end]))
            pos = end + 2
        if other >= 0:
            out.append(buf[other:pos])
        if pos < n:
            rest = buf[pos:] if pos else buf
            held.append(rest)
            self._have = len(rest)
        return out

    def _give_up(self, out: list[Item], buf: bytes, pos: int) -> list[Item]:
        self.gave_up = True
        self._need = 0
        self._held.clear()
        self._have = 0
        out.append(buf[pos:])
        return out
