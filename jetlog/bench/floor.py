"""The relay floor: the least a process answering JetStream from behind nats-server can cost.

jetlog serves the JetStream API from a process of its own beside an unmodified nats-server, so
every request, publish and reply crosses the upstream server twice more than nats-server's own
JetStream (client → server → node → server → client). What those two crossings cost on a given
machine bounds every ratio ``jetlog bench`` reports. This module measures that bound with the
same client and the same cases, instead of leaving it to argument:

``python -m jetlog.bench.floor HOST PORT DIR`` is a *stand-in*: one uvloop process on a raw
socket to a plain nats-server (JetStream off) that answers just enough JetStream for the
publish and get cases of ``jetlog bench`` (:data:`CASES`), with nothing a real store needs:

* ``STREAM.CREATE`` / ``INFO`` / ``DELETE`` (config echoed, state counted), and a
  subscription on each stream's subjects;
* publishes on those subjects: kept in memory, and written **durably** as a group per socket
  read (one ``pwritev`` into preallocated space, one ``fdatasync``) before their PubAcks
  leave, so a PubAck means what jetlog's means (``fsync = always``);
* ``STREAM.MSG.GET`` and ``DIRECT.GET`` by sequence or last by subject (KV get), with the reply
  shapes nats-server sends.

No validation, limits, retention, dedup, consumers or recovery: what is left is the relay, one
socket read and write per batch, the sync and a few microseconds of Python. ``jetlog bench
--floor`` runs it as the ``floor`` target beside jetlog and nats-server; ``floor / nats`` is
the highest ratio any process behind the relay reaches on that machine, ``jetlog / floor``
what jetlog's own work costs on top of it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, cast

from jetlog.wire.timefmt import format_time

CASES = ("pub-sync", "kv-put", "pub-async", "msg-get", "direct-get", "kv-get")
"""Cases of ``jetlog bench`` the stand-in answers (by name prefix); the others need consumers."""

_API = "$JS.API."
_API_SID = 1
_LOG_BYTES = 64 << 20  # preallocated once, written round and round: syncs never extend the file
_T = "io.nats.jetstream.api.v1."
_CRLF = b"\r\n"


def supports(case: str) -> bool:
    """Whether the stand-in can run the bench case named ``case``."""
    return case.startswith(CASES)


@dataclass
class _Stream:
    name: str
    config: dict[str, Any]
    sids: list[int]
    created: int
    msgs: list[tuple[str, bytes, bytes, int]] = field(default_factory=list)  # subject, hdr, data, ts
    last: dict[str, int] = field(default_factory=dict)  # subject → seq
    nbytes: int = 0


def _error(code: int, err_code: int, description: str) -> bytes:
    return json.dumps({"error": {"code": code, "err_code": err_code, "description": description}}).encode()


class Floor(asyncio.Protocol):
    """The stand-in's connection to the upstream nats-server."""

    def __init__(self, log_fd: int, ready: asyncio.Future[None]) -> None:
        self._fd = log_fd
        self._off = 0
        self._ready = ready
        self._buf = bytearray()
        self._streams: dict[str, _Stream] = {}
        self._by_sid: dict[int, _Stream] = {}
        self._next_sid = _API_SID + 1
        self._t: asyncio.Transport | None = None
        self._out: list[bytes] = []  # replies of this read, written after its sync
        self._pending: list[bytes] = []  # payloads of this read's publishes, synced as one
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # ---- connection -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._t = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._t.write(
            b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
            b'"protocol":1,"name":"jetlog-floor"}\r\nSUB $JS.API.> 1\r\nPING\r\n'
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        """Parse every complete operation of this read, then sync its publishes once and
        write every reply in one go (the group commit). The parse is its own, not the Spark
        reader's ``natsproto.Parser``: it routes publishes by subscription id and builds no
        message object, so the bound stays the least a Python responder costs."""
        self._buf += data
        buf = self._buf
        pos = 0
        while True:
            eol = buf.find(_CRLF, pos)
            if eol < 0:
                break
            line = bytes(buf[pos:eol])
            op = line[:4].upper()
            if op in (b"MSG ", b"HMSG"):
                args = line.split()
                hsize = int(args[-2]) if op == b"HMSG" else 0
                size = int(args[-1])
                end = eol + 2 + size
                if len(buf) < end + 2:
                    break
                body = bytes(buf[eol + 2 : end])
                reply = (
                    args[-3 if op == b"HMSG" else -2].decode()
                    if len(args) == (6 if op == b"HMSG" else 5)
                    else ""
                )
                self._on_msg(args[1].decode(), int(args[2]), reply, body[:hsize], body[hsize:])
                pos = end + 2
                continue
            pos = eol + 2
            if op == b"PING":
                self._out.append(b"PONG\r\n")
            elif op == b"PONG" and not self._ready.done():
                self._ready.set_result(None)
            elif op == b"-ERR":
                print(f"floor: server error {line.decode(errors='replace')}", file=sys.stderr, flush=True)
        del buf[:pos]
        self._flush()

    def _flush(self) -> None:
        if self._pending:
            n = sum(len(p) for p in self._pending)
            if self._off + n > _LOG_BYTES:
                self._off = 0
            os.pwritev(self._fd, self._pending, self._off)
            os.fdatasync(self._fd)
            self._off += n
            self._pending = []
        if self._out and self._t is not None:
            self._t.write(b"".join(self._out))
            self._out = []

    def _send(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        s = subject.encode()
        if hdr:
            self._out.append(
                b"HPUB %s %d %d\r\n%s%s\r\n" % (s, len(hdr), len(hdr) + len(payload), hdr, payload)
            )
        else:
            self._out.append(b"PUB %s %d\r\n%s\r\n" % (s, len(payload), payload))

    def _sub(self, subject: str) -> int:
        sid = self._next_sid
        self._next_sid += 1
        self._out.append(b"SUB %s %d\r\n" % (subject.encode(), sid))
        return sid

    # ---- messages ---------------------------------------------------------------------------

    def _on_msg(self, subject: str, sid: int, reply: str, hdr: bytes, data: bytes) -> None:
        if sid != _API_SID:
            st = self._by_sid.get(sid)
            if st is not None:
                self._publish(st, subject, reply, hdr, data)
            return
        if not reply:
            return
        try:
            self._api(subject[len(_API) :], reply, data)
        except (ValueError, KeyError, TypeError) as e:  # a request the stand-in cannot read
            self._send(reply, _error(400, 10025, f"floor: {e}"))

    def _publish(self, st: _Stream, subject: str, reply: str, hdr: bytes, data: bytes) -> None:
        ts = time.time_ns()
        st.msgs.append((subject, hdr, data, ts))
        seq = len(st.msgs)
        st.last[subject] = seq
        st.nbytes += len(data) + len(hdr) + len(subject)
        self._pending.append(data)
        if reply:
            self._send(reply, b'{"stream":"%s","seq":%d}' % (st.name.encode(), seq))

    def _api(self, rest: str, reply: str, data: bytes) -> None:
        parts = rest.split(".", 2)
        if parts[0] == "STREAM" and len(parts) == 3:
            op, name = parts[1], parts[2]
            if op == "CREATE":
                self._create(name, reply, data)
            elif op == "DELETE":
                self._delete(name, reply)
            elif op == "INFO":
                st = self._streams.get(name)
                if st is None:
                    self._send(reply, _error(404, 10059, "stream not found"))
                else:
                    self._send(reply, json.dumps(self._info(st, "stream_info_response")).encode())
            elif op == "MSG" and name.startswith("GET."):
                self._msg_get(name[4:], reply, data)
            else:
                self._send(reply, _error(503, 10001, f"floor: STREAM.{op} not served"))
        elif parts[0] == "DIRECT" and len(parts) == 3 and parts[1] == "GET":
            self._direct_get(parts[2], reply, data)
        else:
            self._send(reply, _error(503, 10001, f"floor: {rest} not served"))

    def _info(self, st: _Stream, rtype: str) -> dict[str, Any]:
        n = len(st.msgs)
        zero = "0001-01-01T00:00:00Z"
        return {
            "type": _T + rtype,
            "config": st.config,
            "created": format_time(st.created),
            "state": {
                "messages": n,
                "bytes": st.nbytes,
                "first_seq": 1 if n else 0,
                "first_ts": format_time(st.msgs[0][3]) if n else zero,
                "last_seq": n,
                "last_ts": format_time(st.msgs[-1][3]) if n else zero,
                "consumer_count": 0,
            },
            "ts": format_time(time.time_ns()),
        }

    def _create(self, name: str, reply: str, data: bytes) -> None:
        if name in self._streams:
            self._send(reply, json.dumps(self._info(self._streams[name], "stream_create_response")).encode())
            return
        config = json.loads(data)
        subjects = config.get("subjects") or [name]
        st = _Stream(name, config, [self._sub(s) for s in subjects], time.time_ns())
        self._streams[name] = st
        for sid in st.sids:
            self._by_sid[sid] = st
        # The SUBs were queued before this reply: nats-server has them when the client hears it.
        self._send(reply, json.dumps(self._info(st, "stream_create_response")).encode())

    def _delete(self, name: str, reply: str) -> None:
        st = self._streams.pop(name, None)
        if st is None:
            self._send(reply, _error(404, 10059, "stream not found"))
            return
        for sid in st.sids:
            self._by_sid.pop(sid, None)
            self._out.append(b"UNSUB %d\r\n" % sid)
        self._send(reply, b'{"type":"%sstream_delete_response","success":true}' % _T.encode())

    def _find(self, st: _Stream, data: bytes, subject: str) -> int:
        if subject:
            return st.last.get(subject, 0)
        if data.startswith(b'{"seq":') and data.endswith(b"}"):  # what the bench's gets send
            seq = int(data[7:-1])
        else:
            req = json.loads(data) if data else {}
            if req.get("last_by_subj"):
                return st.last.get(req["last_by_subj"], 0)
            seq = int(req.get("seq") or 0)
        return seq if 0 < seq <= len(st.msgs) else 0

    def _msg_get(self, name: str, reply: str, data: bytes) -> None:
        st = self._streams.get(name)
        if st is None:
            self._send(reply, _error(404, 10059, "stream not found"))
            return
        seq = self._find(st, data, "")
        if not seq:
            self._send(reply, _error(404, 10037, "no message found"))
            return
        subject, hdr, payload, ts = st.msgs[seq - 1]
        hdrs = b',"hdrs":"%s"' % base64.b64encode(hdr) if hdr else b""
        body = b',"data":"%s"' % base64.b64encode(payload) if payload else b""
        self._send(
            reply,
            b'{"type":"%sstream_msg_get_response","message":{"subject":%s,"seq":%d%s%s,"time":"%s"}}'
            % (_T.encode(), json.dumps(subject).encode(), seq, hdrs, body, format_time(ts).encode()),
        )

    def _direct_get(self, rest: str, reply: str, data: bytes) -> None:
        name, _, subject = rest.partition(".")
        st = self._streams.get(name)
        seq = self._find(st, data, subject) if st is not None else 0
        if st is None or not seq:
            self._send(reply, b"", b"NATS/1.0 404 Message Not Found\r\n\r\n")
            return
        subj, hdr, payload, ts = st.msgs[seq - 1]
        own = hdr[len(b"NATS/1.0\r\n") : -2] if hdr else b""
        head = (
            b"NATS/1.0\r\n%sNats-Stream: %s\r\nNats-Subject: %s\r\nNats-Sequence: %d\r\nNats-Time-Stamp: %s\r\n\r\n"
            % (
                own,
                name.encode(),
                subj.encode(),
                seq,
                format_time(ts).encode(),
            )
        )
        self._send(reply, payload, head)


async def serve(host: str, port: int, directory: str) -> None:
    """Connect to nats-server at ``host:port`` and answer until the connection closes."""
    fd = os.open(os.path.join(directory, "floor.log"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, _LOG_BYTES)
        os.fsync(fd)
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        _t, proto = await loop.create_connection(lambda: Floor(fd, ready), host, port)
        await asyncio.wait_for(ready, 10)
        print("ready", flush=True)
        await proto.closed
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """``python -m jetlog.bench.floor HOST PORT DIR``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m jetlog.bench.floor HOST PORT DIR", file=sys.stderr)
        return 2
    try:
        import uvloop

        uvloop.run(serve(args[0], int(args[1]), args[2]))
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(serve(args[0], int(args[1]), args[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
