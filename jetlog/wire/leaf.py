"""Leafnode protocol codec, spoke side (sans-I/O).

jetlog dials the upstream nats-server's leafnode port as a *spoke*: the hub (nats-server) sends
``INFO``, ``PING``/``PONG``, ``+OK``, ``-ERR``, ``LS+``/``LS-`` (its subscription interest) and
``LMSG``/``HMSG`` (messages for our ``LS+`` subscriptions); we send ``CONNECT``, ``PING``/``PONG``,
``LS+``/``LS-`` and ``LMSG``/``HMSG``. Grammar, checked against nats-server ``server/leafnode.go``
(``processLeafMsgArgs``, ``processLeafHeaderMsgArgs``, ``processLeafSub``, ``processLeafUnsub``,
``writeLeafSub``) and ``client.go`` (``msgHeaderForRouteOrLeaf``)::

    LMSG <subj> <size>                          no reply
    LMSG <subj> <reply> <size>                  reply
    LMSG <subj> + <reply> <q1> [<q2>...] <size> reply and queue groups
    LMSG <subj> | <q1> [<q2>...] <size>         queue groups, no reply
    HMSG <subj> [<reply> | + <reply> <q>... | | <q>...] <hdr_size> <total_size>
    LS+ <subj> [<queue> <weight>]               (the weight is the queue group's member count)
    LS- <subj> [<queue>]

Arguments are separated by spaces or tabs. ``<size>`` for HMSG is header + payload; the hub's
``max_payload`` check applies to that total. The control line (without the op) may be up to
16 x ``max_control_line`` (4096) = 64 KiB on leaf connections (``overMaxControlLineLimit``), where a
plain client gets 4 KiB.

Queue groups matter in the spoke -> hub direction: the hub delivers a leaf message to its local
queue subscribers **only** if the group is named in the frame (``processMsgResults`` skips queue
subs for LEAF senders with an empty queue filter); plain subscribers get it either way.

Parsing is the capture hot path, so :class:`LeafParser` works on one ``bytes`` buffer with an
offset, uses ``bytes.find``/``split`` and returns plain tuples (no per-message objects beyond the
tuple). Encoders are %-formatting on bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from jetlog.errors import ApiError, E, ProtocolError

# Event kinds: the first element of every tuple returned by LeafParser.feed.
MSG: Final = 0  # (MSG, subject: str, reply: str | None, hdr: bytes, payload: bytes, queues: tuple[str, ...])
INFO: Final = 1  # (INFO, info: dict)
PING: Final = 2  # (PING,)
PONG: Final = 3  # (PONG,)
OK: Final = 4  # (OK,)
ERR: Final = 5  # (ERR, message: str)
LS_ADD: Final = 6  # (LS_ADD, subject: str, queue: str | None, weight: int)
LS_DEL: Final = 7  # (LS_DEL, subject: str, queue: str | None)
CONNECT: Final = 8  # (CONNECT, options: dict) -- only seen by a hub; parsed for tests/fakes

EVENT_NAMES: Final = ("MSG", "INFO", "PING", "PONG", "OK", "ERR", "LS+", "LS-", "CONNECT")

MAX_CONTROL_LINE: Final = 16 * 4096
"""Default limit for one control line, as nats-server enforces it on leaf connections."""

PING_FRAME: Final = b"PING\r\n"
PONG_FRAME: Final = b"PONG\r\n"
OK_FRAME: Final = b"+OK\r\n"
CRLF: Final = b"\r\n"

_EV_PING: Final = (PING,)
_EV_PONG: Final = (PONG,)
_EV_OK: Final = (OK,)
_NOQ: tuple[str, ...] = ()
# The common LMSG line (subject, optional reply, size; single spaces), matched in one C call.
# Anything else (queue groups, tabs, repeated spaces, a bare CR in a subject, a line not yet
# complete) does not match and takes the general path, which decides exactly as before.
_LMSG_LINE = re.compile(rb"LMSG ([^ \t\r\n]+) (?:([^ \t\r\n]+) )?([0-9]+)\r\n")

Event = tuple[Any, ...]


class LeafFrameError(ProtocolError):
    """We were asked to encode a frame the hub would reject (bad token, too long a line)."""

    retriable = False


class PayloadTooLargeError(LeafFrameError):
    """Header + payload exceed the hub's ``max_payload``: the hub would drop the connection."""

    def __init__(self, size: int, max_payload: int) -> None:
        self.size = size
        self.max_payload = max_payload
        super().__init__(f"message size {size} exceeds the server's max_payload {max_payload}")

    def to_api(self) -> ApiError:
        return ApiError(E.STREAM_MESSAGE_EXCEEDS_MAXIMUM)


def _dec(b: bytes) -> str:
    # Subjects are bytes on the wire; surrogateescape keeps invalid UTF-8 round-trippable.
    try:
        return b.decode()
    except UnicodeDecodeError:
        return b.decode("utf-8", "surrogateescape")


class LeafParser:
    """Incremental parser for frames a hub sends to a spoke (and, for fakes, the reverse).

    ``feed(data)`` consumes any chunk (split anywhere, or holding many frames) and returns the
    complete frames as event tuples, in wire order; see the ``MSG``/``INFO``/... constants for the
    shapes. Incomplete input is kept until the next ``feed``. Malformed input raises
    :class:`~jetlog.errors.ProtocolError`; after that the parser state is undefined (drop the
    connection).
    """

    __slots__ = ("_chunks", "_have", "_need", "max_control_line")

    def __init__(self, max_control_line: int = MAX_CONTROL_LINE) -> None:
        self.max_control_line = max_control_line
        self._chunks: list[bytes] = []  # unconsumed input, oldest first
        self._have = 0  # total length of _chunks
        self._need = 0  # bytes needed in _chunks before parsing can progress

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return self._have

    def reset(self) -> None:
        """Forget buffered input (for a new connection)."""
        self._chunks.clear()
        self._have = self._need = 0

    def feed(self, data: bytes) -> list[Event]:
        """Parse ``data`` (appended to any held-back input) and return the complete frames."""
        if type(data) is not bytes:
            data = bytes(data)
        chunks = self._chunks
        if not chunks:
            return self._rest(data, 0, [])
        self._have += len(data)
        if self._have < self._need:
            # Waiting for a payload of known size: no re-scan, no join (linear for big payloads).
            chunks.append(data)
            return []
        if self._need == 0:
            nl = data.find(b"\n")
            if nl < 0:
                # Waiting for the end of a control line, and this chunk does not end it.
                chunks.append(data)
                if self._have > self.max_control_line + 8:
                    raise ProtocolError(f"control line exceeds {self.max_control_line} bytes")
                return []
            k = nl + 1  # the held-back control line ends in data[:k]
        else:
            k = len(data) - (self._have - self._need)  # the held-back frame ends at data[k]
        # Join only what completes the held-back input, then parse the rest of ``data`` where
        # it is. Joining the whole read copied every byte of it once more: with large messages
        # nearly every read starts inside one, so that was a copy of everything received.
        out: list[Event] = []
        lo = 0
        while True:
            chunks.append(data[lo:k])
            head = b"".join(chunks)
            chunks.clear()
            self._have = 0
            pos = self._parse(head, out)
            if pos == len(head):
                return self._rest(data, k, out)
            rest = head[pos:]
            need = self._need
            if need == 0 or len(rest) + len(data) - k < need:
                # Still incomplete (a frame whose payload goes on past this read, or a line
                # not ended yet): hold it with the rest of the read, as before.
                return self._rest(rest + data[k:], 0, out)
            # The control line that ``head`` completed opens a frame that ends in this read.
            chunks.append(rest)
            lo, k = k, k + need - len(rest)

    def _rest(self, buf: bytes, pos: int, out: list[Event]) -> list[Event]:
        """Parse ``buf`` from ``pos`` into ``out``; hold back what is left (an incomplete
        frame)."""
        pos = self._parse(buf, out, pos)
        if pos < len(buf):
            rest = buf[pos:] if pos else buf
            self._chunks.append(rest)
            self._have = len(rest)
        return out

    def _parse(self, buf: bytes, out: list[Event], pos: int = 0) -> int:
        """Parse whole frames from ``buf`` (from ``pos``); return the offset of the first
        unconsumed byte."""
        n = len(buf)
        find = buf.find
        append = out.append
        mcl = self.max_control_line
        self._need = 0
        lmsg = _LMSG_LINE.match
        # The last LMSG control line without a reply (CRLF included) and what it parsed to: a
        # publisher's messages of one size to one subject (a capture flood) repeat it byte for
        # byte, and an equal line parses the same, so it skips the match, decode and int. Its
        # bounds and CRLF checks repeat the matched path's on purpose: sharing them through a
        # sentinel cost ~45 ns per message (+12 %) in either path.
        same = b""
        startswith = buf.startswith
        s_subj = ""
        s_len = s_size = 0
        while pos < n:
            if buf[pos] == 76:  # "L"
                if s_len and startswith(same, pos):
                    start = pos + s_len
                    end = start + s_size
                    if end + 2 > n:
                        self._need = end + 2 - pos
                        return pos
                    if buf[end] != 13 or buf[end + 1] != 10:
                        raise ProtocolError(
                            f"payload not terminated by CRLF after {_snip(buf, pos, start - 2)}"
                        )
                    append((MSG, s_subj, None, b"", buf[start:end], _NOQ))
                    pos = end + 2
                    continue
                m = lmsg(buf, pos)
                if m is not None:
                    start = m.end()
                    if start - 2 - pos > mcl + 8:
                        raise ProtocolError(f"control line exceeds {mcl} bytes")
                    sb, rb, szb = m.groups()
                    end = start + int(szb)
                    if end + 2 > n:
                        self._need = end + 2 - pos
                        return pos
                    if buf[end] != 13 or buf[end + 1] != 10:
                        raise ProtocolError(
                            f"payload not terminated by CRLF after {_snip(buf, pos, start - 2)}"
                        )
                    try:
                        subj = sb.decode()
                        reply = None if rb is None else rb.decode()
                    except UnicodeDecodeError:
                        subj = _dec(sb)
                        reply = None if rb is None else _dec(rb)
                    append((MSG, subj, reply, b"", buf[start:end], _NOQ))
                    if rb is None:  # a reply differs per message (requests, PubAck inboxes)
                        same = buf[pos:start]
                        s_subj, s_len, s_size = subj, start - pos, end - start
                    pos = end + 2
                    continue
            eol = find(b"\r\n", pos)
            if eol < 0:
                if n - pos > mcl + 8:
                    raise ProtocolError(f"control line exceeds {mcl} bytes")
                return pos
            # The line limit applies to the arguments; +8 covers the longest op name ("CONNECT ").
            if eol - pos > mcl + 8:
                raise ProtocolError(f"control line exceeds {mcl} bytes")
            c0 = buf[pos]
            if c0 == 76 and buf[pos + 1] == 77 and buf[pos + 4] == 32:  # "LMSG ": the hot path
                # Split on " " only: bytes.split() would also split on \v and \f, which the
                # hub allows inside subjects. Tabs or repeated spaces take the exact slow path.
                line = buf[pos + 5 : eol]
                args = line.split(b" ")
                if b"" in args or b"\t" in line:
                    args = _split_args(line)
                na = len(args)
                if na == 2:
                    reply = None
                    queues = _NOQ
                elif na == 3:
                    reply = _dec(args[1])
                    queues = _NOQ
                elif na < 2:
                    raise ProtocolError(f"malformed {_snip(buf, pos, eol)}")
                else:
                    reply, queues = _queue_args(args, na - 1, buf, pos, eol)
                szb = args[-1]
                if not szb.isdigit():
                    raise ProtocolError(f"bad size in {_snip(buf, pos, eol)}")
                start = eol + 2
                end = start + int(szb)
                if end + 2 > n:
                    self._need = end + 2 - pos
                    return pos
                if buf[end] != 13 or buf[end + 1] != 10:
                    raise ProtocolError(f"payload not terminated by CRLF after {_snip(buf, pos, eol)}")
                try:
                    # Strict UTF-8 is twice as fast as an error handler; odd bytes take the slow path.
                    subj = args[0].decode()
                except UnicodeDecodeError:
                    subj = _dec(args[0])
                append((MSG, subj, reply, b"", buf[start:end], queues))
                pos = end + 2
            elif c0 == 72 and buf[pos + 1] == 77 and buf[pos + 4] == 32:  # "HMSG "
                line = buf[pos + 5 : eol]
                args = line.split(b" ")
                if b"" in args or b"\t" in line:
                    args = _split_args(line)
                na = len(args)
                if na == 3:
                    reply = None
                    queues = _NOQ
                elif na == 4:
                    reply = _dec(args[1])
                    queues = _NOQ
                elif na < 3:
                    raise ProtocolError(f"malformed {_snip(buf, pos, eol)}")
                else:
                    reply, queues = _queue_args(args, na - 2, buf, pos, eol)
                hdb = args[-2]
                szb = args[-1]
                if not (hdb.isdigit() and szb.isdigit()):
                    raise ProtocolError(f"bad size in {_snip(buf, pos, eol)}")
                hsz = int(hdb)
                start = eol + 2
                end = start + int(szb)
                if hsz > end - start:
                    raise ProtocolError(f"header size larger than total size: {_snip(buf, pos, eol)}")
                if end + 2 > n:
                    self._need = end + 2 - pos
                    return pos
                if buf[end] != 13 or buf[end + 1] != 10:
                    raise ProtocolError(f"payload not terminated by CRLF after {_snip(buf, pos, eol)}")
                hend = start + hsz
                try:
                    subj = args[0].decode()
                except UnicodeDecodeError:
                    subj = _dec(args[0])
                append((MSG, subj, reply, buf[start:hend], buf[hend:end], queues))
                pos = end + 2
            else:
                self._control(buf, pos, eol, append)
                pos = eol + 2
        return pos

    @staticmethod
    def _control(buf: bytes, pos: int, eol: int, append: Any) -> None:
        """One non-message control line ``buf[pos:eol]``."""
        line = buf[pos:eol]
        op, sep, rest = line.partition(b" ")
        if not sep and b"\t" in op:
            op, _, rest = line.partition(b"\t")
        op = op.upper()  # nats-server accepts ops in any case
        if op == b"PING":
            append(_EV_PING)
        elif op == b"PONG":
            append(_EV_PONG)
        elif op == b"LS+":
            args = _split_args(rest)
            if len(args) == 1:
                append((LS_ADD, _dec(args[0]), None, 1))
            elif len(args) == 3 and args[2].isdigit():
                append((LS_ADD, _dec(args[0]), _dec(args[1]), int(args[2])))
            else:
                raise ProtocolError(f"malformed {_snip(buf, pos, eol)}")
        elif op == b"LS-":
            args = _split_args(rest)
            # writeLeafSub sends "LS- subj [queue]"; tolerate a trailing weight.
            if len(args) == 1:
                append((LS_DEL, _dec(args[0]), None))
            elif len(args) in (2, 3):
                append((LS_DEL, _dec(args[0]), _dec(args[1])))
            else:
                raise ProtocolError(f"malformed {_snip(buf, pos, eol)}")
        elif op == b"INFO" or op == b"CONNECT":
            try:
                obj = json.loads(rest)
            except ValueError as e:
                raise ProtocolError(f"bad {op.decode()} JSON: {e}") from None
            if not isinstance(obj, dict):
                raise ProtocolError(f"{op.decode()} is not a JSON object")
            append((INFO if op == b"INFO" else CONNECT, obj))
        elif op == b"+OK":
            append(_EV_OK)
        elif op == b"-ERR":
            msg = rest.strip().decode("utf-8", "replace")
            if len(msg) >= 2 and msg[0] == msg[-1] == "'":
                msg = msg[1:-1]
            append((ERR, msg))
        elif op in (b"LMSG", b"HMSG"):
            raise ProtocolError(f"malformed {_snip(buf, pos, eol)}")
        else:
            raise ProtocolError(f"unknown protocol operation: {_snip(buf, pos, eol)}")


def _queue_args(
    args: list[bytes], last: int, buf: bytes, pos: int, eol: int
) -> tuple[str | None, tuple[str, ...]]:
    """The ``+ <reply> <q>...`` / ``| <q>...`` forms: args[1] is the indicator, queues end before ``last``."""
    ind = args[1]
    if ind == b"+":
        # Like the hub, accept "+ <reply>" with an empty queue list.
        return _dec(args[2]), tuple(_dec(q) for q in args[3:last])
    if ind == b"|":
        return None, tuple(_dec(q) for q in args[2:last])
    raise ProtocolError(f"bad or missing reply indicator in {_snip(buf, pos, eol)}")


_ARG_RE = re.compile(rb"[^ \t]+")


def _split_args(line: bytes) -> list[bytes]:
    """Arguments as the hub splits them: on runs of spaces and tabs only."""
    return _ARG_RE.findall(line)


def _snip(buf: bytes, pos: int, eol: int) -> str:
    return repr(buf[pos : min(eol, pos + 128)])


# ---------------------------------------------------------------------------------------------
# Encoders (spoke -> hub)


def check_token(s: str, what: str = "subject") -> None:
    """Raise :class:`LeafFrameError` unless ``s`` is a non-empty protocol token.

    The hub splits control lines on space, tab, CR and LF, so any of those inside a subject,
    reply or queue name would shift the arguments (wrong delivery or a dropped connection).
    """
    if not s:
        raise LeafFrameError(f"empty {what}")
    # Fast path: isprintable() is False for \t \r \n (and other controls); space needs its own test.
    if " " in s or (not s.isprintable() and ("\t" in s or "\r" in s or "\n" in s)):
        raise LeafFrameError(f"{what} {s!r} contains whitespace")


def _enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


DELIVERY_LINE_SLACK = 40
"""Room ``encode_delivery`` leaves in the control line for the op, spaces and sizes."""


def encode_delivery(
    target: str,
    ack: bytes,
    subject: str,
    hdr: bytes,
    payload: bytes,
    max_control_line: int = MAX_CONTROL_LINE,
) -> bytes | None:
    """A consumer delivery frame: ``payload`` (and header block) to ``target`` with reply
    ``<ack>@<subject>`` (the hub delivers with the stream subject after the ``@``).

    The hot path of consumers, so it checks nothing ``encode_msg`` would: every part is a
    token already checked where it came from (the deliver subject or a pull request's inbox,
    the ``$JS.ACK`` prefix of valid stream and consumer names, a stored subject). Returns None
    when the control line might be longer than ``max_control_line`` (``encode_msg`` decides)."""
    t = target.encode("utf-8", "surrogateescape")
    s = subject.encode("utf-8", "surrogateescape")
    if len(t) + len(ack) + len(s) > max_control_line - DELIVERY_LINE_SLACK:
        return None
    return delivery_frame(t, ack, s, hdr, payload)


def delivery_frame(target: bytes, ack: bytes, subject: bytes, hdr: bytes, payload: bytes) -> bytes:
    """The frame of ``encode_delivery`` from encoded parts, unchecked: for a caller that
    bounded the control line itself (a consumer's delivery run encodes the target once)."""
    if hdr:
        hlen = len(hdr)
        return b"HMSG %b %b@%b %d %d\r\n%b%b\r\n" % (
            target,
            ack,
            subject,
            hlen,
            hlen + len(payload),
            hdr,
            payload,
        )
    return b"LMSG %b %b@%b %d\r\n%b\r\n" % (target, ack, subject, len(payload), payload)


def encode_msg(
    subject: str,
    payload: bytes,
    reply: str | None = None,
    hdr: bytes = b"",
    queues: Sequence[str] = (),
    max_payload: int = 0,
    max_control_line: int = MAX_CONTROL_LINE,
) -> bytes:
    """One ``LMSG`` (no header block) or ``HMSG`` frame, payload and trailing CRLF included.

    ``queues`` names hub queue groups that may receive the message (one member each); without
    them hub queue subscribers get nothing. ``max_payload`` (0 = unchecked) is the hub's INFO
    ``max_payload``, checked against header + payload like the hub does.
    """
    check_token(subject)
    plen = len(payload)
    if reply:
        check_token(reply, "reply")
    if queues:
        for q in queues:
            check_token(q, "queue group")
        qpart = " ".join(queues).encode()
        mid = b"+ " + _enc(reply) + b" " + qpart if reply else b"| " + qpart
        if hdr:
            hlen = len(hdr)
            total = hlen + plen
            if max_payload and total > max_payload:
                raise PayloadTooLargeError(total, max_payload)
            line = b"HMSG %b %b %d %d\r\n" % (_enc(subject), mid, hlen, total)
            out = b"".join((line, hdr, payload, CRLF))
        else:
            if max_payload and plen > max_payload:
                raise PayloadTooLargeError(plen, max_payload)
            line = b"LMSG %b %b %d\r\n" % (_enc(subject), mid, plen)
            out = b"".join((line, payload, CRLF))
        if len(line) > max_control_line:
            raise LeafFrameError(f"control line of {len(line)} bytes exceeds {max_control_line}")
        return out
    if hdr:
        hlen = len(hdr)
        total = hlen + plen
        if max_payload and total > max_payload:
            raise PayloadTooLargeError(total, max_payload)
        if reply:
            line = b"HMSG %b %b %d %d\r\n" % (_enc(subject), _enc(reply), hlen, total)
        else:
            line = b"HMSG %b %d %d\r\n" % (_enc(subject), hlen, total)
        if len(line) > max_control_line:
            raise LeafFrameError(f"control line of {len(line)} bytes exceeds {max_control_line}")
        return b"".join((line, hdr, payload, CRLF))
    if max_payload and plen > max_payload:
        raise PayloadTooLargeError(plen, max_payload)
    if reply:
        line = b"LMSG %b %b %d\r\n" % (_enc(subject), _enc(reply), plen)
    else:
        line = b"LMSG %b %d\r\n" % (_enc(subject), plen)
    if len(line) > max_control_line:
        raise LeafFrameError(f"control line of {len(line)} bytes exceeds {max_control_line}")
    return b"".join((line, payload, CRLF))


def frame_reply(frame: bytes) -> bytes | None:
    """The reply subject of one ``LMSG``/``HMSG`` frame as :func:`encode_msg` builds it (None:
    another frame, or no reply)."""
    if not frame.startswith((b"LMSG ", b"HMSG ")):
        return None
    args = _split_args(frame[: frame.find(b"\r\n")])
    # LMSG <subject> [<reply>] <size> | HMSG <subject> [<reply>] <hsize> <size>, or with queues
    # "+ <reply> <q>..." / "| <q>..." after the subject.
    if len(args) > 3 and args[2] == b"+":
        return args[3]
    sizes = 2 if args[0] == b"HMSG" else 1
    if args[2:3] == [b"|"] or len(args) != 2 + 1 + sizes:
        return None
    return args[2]


def encode_sub(subject: str, queue: str | None = None, weight: int = 1) -> bytes:
    """``LS+ <subject>`` or ``LS+ <subject> <queue> <weight>``.

    The weight is the number of members of the group behind this link; sending LS+ again for
    the same (subject, queue) updates it on the hub.
    """
    check_token(subject)
    if queue is None:
        return b"LS+ %b\r\n" % _enc(subject)
    check_token(queue, "queue group")
    if weight < 1:
        raise LeafFrameError(f"queue weight must be >= 1, got {weight}")
    return b"LS+ %b %b %d\r\n" % (_enc(subject), _enc(queue), weight)


def encode_unsub(subject: str, queue: str | None = None) -> bytes:
    """``LS- <subject> [<queue>]`` (the hub keys subscriptions by subject + queue, no weight)."""
    check_token(subject)
    if queue is None:
        return b"LS- %b\r\n" % _enc(subject)
    check_token(queue, "queue group")
    return b"LS- %b %b\r\n" % (_enc(subject), _enc(queue))


def encode_connect(options: Mapping[str, Any]) -> bytes:
    """``CONNECT {json}``. A ``lang`` key is refused: the hub would take us for a client on the
    wrong port (``ErrClientConnectedToLeafNodePort``) and close the connection."""
    if "lang" in options:
        raise LeafFrameError("a leafnode CONNECT must not carry 'lang'")
    return b"CONNECT " + json.dumps(dict(options), separators=(",", ":")).encode() + CRLF


def encode_info(info: Mapping[str, Any]) -> bytes:
    """``INFO {json}`` (what a hub sends; used by fakes and tests)."""
    return b"INFO " + json.dumps(dict(info), separators=(",", ":")).encode() + CRLF


def encode_err(message: str) -> bytes:
    """``-ERR '<message>'`` (what a hub sends; used by fakes and tests)."""
    return b"-ERR '" + message.encode() + b"'" + CRLF


def encode_many(frames: Iterable[bytes]) -> bytes:
    """Concatenate frames for one write."""
    return b"".join(frames)
