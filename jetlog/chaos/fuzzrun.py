"""Sends one fuzz sequence (:mod:`jetlog.chaos.fuzzgen`) to one target and classifies every
answer.

The client is a minimal asyncio NATS connection (:class:`RawClient`): header blocks and bodies
go out byte for byte (nats-py would refuse or rewrite some of them), and every request gets its
own reply subscription, dropped once answered or timed out — so a pull request the target keeps
waiting loses its interest the same way on every target.

Ordering: requests that change state (``barrier``) are sent alone, after every earlier request
was answered or timed out; read-only requests go out up to ``window`` at a time. The order of
state changes, and so each answer, is then the same on every target.

Answers (:class:`Answer.sig`): ``none`` (nothing within ``answer_timeout``), ``json-ok``,
``json-err:<err_code>``, ``status:<code>``, ``msg`` (a data message), ``empty``, ``nonjson``.
A reply that arrives after the timeout (within ``late_grace``) is kept as answered, ``late``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from jetlog.chaos import fuzzgen as G
from jetlog.chaos import fuzzreq as R
from jetlog.errors import JetlogError
from jetlog.spark.natsproto import Msg, new_inbox

__all__ = ["Answer", "FuzzError", "RawClient", "TargetResult", "classify", "run_target"]


class FuzzError(JetlogError):
    """The fuzzer itself could not run (target unreachable, set-up refused)."""


class RawClient:
    """A minimal NATS client connection (see the module docstring)."""

    def __init__(self) -> None:
        self.info: dict[str, Any] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._subs: dict[int, Callable[[Msg], None]] = {}  # sid -> handler (one per request)
        self._sid = 0
        self._pongs: deque[asyncio.Future[None]] = deque()
        self.error: str = ""
        self.closed = asyncio.Event()

    @property
    def max_payload(self) -> int:
        """The server's max_payload."""
        return int(self.info.get("max_payload", 1 << 20))

    async def connect(self, url: str, timeout: float = 5.0) -> None:
        """Connect and handshake; raise :class:`FuzzError` when that fails."""
        u = urlsplit(url if "://" in url else "nats://" + url)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(u.hostname or "127.0.0.1", u.port or 4222), timeout
            )
            self._reader, self._writer = reader, writer
            line = await asyncio.wait_for(reader.readline(), timeout)
        except (OSError, TimeoutError) as e:
            raise FuzzError(f"cannot connect to {url}: {e or 'timeout'}") from e
        if not line.startswith(b"INFO "):
            raise FuzzError(f"{url} is not a NATS server (first line {line[:40]!r})")
        self.info = json.loads(line[5:])
        opts: dict[str, Any] = {
            "verbose": False,
            "pedantic": False,
            "headers": True,
            "no_responders": True,
            "protocol": 1,
            "name": "jetlog-fuzz",
            "lang": "python",
            "version": "0",
        }
        if u.username:
            if u.password is None:
                opts["auth_token"] = u.username
            else:
                opts["user"], opts["pass"] = u.username, u.password
        writer.write(b"CONNECT " + json.dumps(opts).encode() + b"\r\n")
        self._task = asyncio.create_task(self._read())
        try:
            await self.flush(timeout)
        except FuzzError:
            await self.close()
            raise

    async def _read(self) -> None:
        assert self._reader is not None
        reader = self._reader
        try:
            while True:
                line = await reader.readuntil(b"\r\n")
                head = line[:4].upper()
                if head in (b"MSG ", b"HMSG"):
                    # Replies are routed by subscription id: a pull consumer's deliveries carry
                    # the stream subject, not the inbox they were sent to.
                    args = line[4:].split()
                    sid = int(args[1])
                    hsize = int(args[-2]) if head == b"HMSG" else 0
                    size = int(args[-1])
                    body = await reader.readexactly(size + 2)
                    reply = args[2].decode() if len(args) == (5 if hsize else 4) else None
                    msg = Msg(args[0].decode(errors="replace"), reply, body[:hsize], body[hsize:size])
                    handler = self._subs.get(sid)
                    if handler is not None:
                        handler(msg)
                elif head == b"PING":
                    self._write(b"PONG\r\n")
                elif head == b"PONG":
                    if self._pongs:
                        fut = self._pongs.popleft()
                        if not fut.done():
                            fut.set_result(None)
                elif head == b"-ERR":
                    self.error = line[4:].decode(errors="replace").strip()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError) as e:
            self.error = self.error or f"connection failed: {e!r}"
        finally:
            self.closed.set()
            for fut in self._pongs:
                if not fut.done():
                    fut.set_exception(FuzzError(self.error or "connection closed"))
            self._pongs.clear()

    def _write(self, data: bytes) -> None:
        if self._writer is None or self.closed.is_set():
            raise FuzzError(self.error or "not connected")
        self._writer.write(data)

    def subscribe(self, subject: str, cb: Callable[[Msg], None]) -> int:
        """Subscribe ``subject``; messages go to ``cb``."""
        self._sid += 1
        self._subs[self._sid] = cb
        self._write(b"SUB %s %d\r\n" % (subject.encode(), self._sid))
        return self._sid

    def unsubscribe(self, sid: int) -> None:
        """Drop a subscription (the server stops routing replies to it)."""
        self._subs.pop(sid, None)
        if not self.closed.is_set():
            self._write(b"UNSUB %d\r\n" % sid)

    def publish(self, subject: str, payload: bytes, reply: str = "", hdr: bytes = b"") -> None:
        """``PUB``/``HPUB`` exactly these bytes."""
        s = subject.encode("utf-8", "surrogateescape")
        r = (b" " + reply.encode()) if reply else b""
        if hdr:
            self._write(
                b"HPUB %s%s %d %d\r\n%s%s\r\n" % (s, r, len(hdr), len(hdr) + len(payload), hdr, payload)
            )
        else:
            self._write(b"PUB %s%s %d\r\n%s\r\n" % (s, r, len(payload), payload))

    async def flush(self, timeout: float = 5.0) -> None:
        """PING/PONG round trip: the server has processed everything sent before."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pongs.append(fut)
        self._write(b"PING\r\n")
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError as e:
            raise FuzzError("no PONG from the server") from e

    async def request(self, subject: str, payload: bytes, timeout: float, hdr: bytes = b"") -> Msg | None:
        """One request; the first reply or None."""
        inbox = new_inbox()
        fut: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

        def got(m: Msg) -> None:
            if not fut.done():
                fut.set_result(m)

        sid = self.subscribe(inbox, got)
        try:
            self.publish(subject, payload, inbox, hdr)
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            self.unsubscribe(sid)

    async def close(self) -> None:
        """Close the connection."""
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def classify(kind: str, msg: Msg | None) -> str:
    """The answer signature of a reply (see the module docstring)."""
    if msg is None:
        return "none"
    if msg.status:
        return f"status:{msg.status}"
    if kind in (R.KIND_DIRECT, R.KIND_NEXT, R.KIND_JETLOG):
        return "msg"
    if not msg.data:
        return "empty"
    try:
        obj = json.loads(msg.data)
    except ValueError:
        return "nonjson"
    if not isinstance(obj, dict):
        return "nonjson"
    err = obj.get("error")
    if isinstance(err, dict):
        return f"json-err:{err.get('err_code')}"
    return "json-ok"


@dataclass(slots=True)
class Answer:
    """What one request got."""

    req: R.FuzzRequest
    sig: str = "none"
    late: bool = False
    latency: float = 0.0
    first: bytes = b""

    @property
    def answered(self) -> bool:
        return self.sig != "none"


@dataclass
class TargetResult:
    """One target's run."""

    name: str
    url: str
    seed: int
    count: int
    max_payload: int
    answers: list[Answer] = field(default_factory=list)
    probes: list[float] = field(default_factory=list)  # liveness round trips, seconds
    failed_probes: int = 0
    crashed: str = ""  # why the node counts as crashed ("" = it did not)
    healthy: bool = False
    health_detail: str = ""
    seconds: float = 0.0
    client_errors: list[str] = field(default_factory=list)
    node_errors: list[str] = field(default_factory=list)  # ERROR lines / tracebacks of the node
    link_drops: list[str] = field(default_factory=list)  # the node lost an upstream link

    def count_sig(self, pred: Callable[[Answer], bool]) -> int:
        """How many answers satisfy ``pred``."""
        return sum(1 for a in self.answers if pred(a))

    @property
    def non_json(self) -> list[Answer]:
        """Replies to JSON API requests (and PubAcks) that are not JSON objects."""
        return [
            a
            for a in self.answers
            if a.req.kind in (R.KIND_JSON, R.KIND_PUB) and a.sig in ("nonjson", "empty", "msg")
        ]


Alive = Callable[[], str]  # "" while the node process runs, else why it does not


async def _probe(client: RawClient, res: TargetResult, timeout: float = 5.0) -> bool:
    """Is the node still answering? ``$JS.API.INFO`` round trip, three tries."""
    for _ in range(3):
        t0 = time.monotonic()
        msg = await client.request("$JS.API.INFO", b"", timeout)
        if msg is not None and classify(R.KIND_JSON, msg) == "json-ok":
            res.probes.append(time.monotonic() - t0)
            return True
        res.failed_probes += 1
    return False


async def _setup(client: RawClient) -> None:
    for subject, body in R.SETUP:
        kind = R.KIND_JSON if subject.startswith("$JS.API.") else R.KIND_PUB
        msg = await client.request(subject, body, 10.0)
        sig = classify(kind, msg)
        if sig != "json-ok":
            detail = msg.data[:300] if msg is not None else b"no reply"
            raise FuzzError(f"set-up request {subject} failed: {sig} {detail!r}")


async def _health(client: RawClient, res: TargetResult) -> None:
    """After the run: STREAM.INFO, a publish and a consume on FZ must work."""
    steps: list[str] = []
    msg = await client.request("$JS.API.STREAM.INFO.FZ", b"", 10.0)
    steps.append(f"STREAM.INFO {classify(R.KIND_JSON, msg)}")
    payload = b"health-" + str(res.seed).encode()
    ack = await client.request("fz.health", payload, 10.0)
    steps.append(f"publish {classify(R.KIND_PUB, ack)}")
    cfg = {
        "stream_name": "FZ",
        "config": {
            "name": "HEALTH",
            "filter_subject": "fz.health",
            "deliver_policy": "last",
            "inactive_threshold": 60_000_000_000,
        },
    }
    made = await client.request("$JS.API.CONSUMER.CREATE.FZ.HEALTH", json.dumps(cfg).encode(), 10.0)
    steps.append(f"consumer {classify(R.KIND_JSON, made)}")
    got = await client.request(
        "$JS.API.CONSUMER.MSG.NEXT.FZ.HEALTH", b'{"batch":1,"expires":3000000000}', 10.0
    )
    consumed = got is not None and not got.status and got.data == payload
    steps.append("consume " + ("ok" if consumed else classify(R.KIND_NEXT, got)))
    res.health_detail = ", ".join(steps)
    res.healthy = steps[:3] == ["STREAM.INFO json-ok", "publish json-ok", "consumer json-ok"] and consumed


async def run_target(
    name: str,
    url: str,
    seed: int,
    count: int,
    max_payload: int,
    *,
    answer_timeout: float = 0.5,
    late_grace: float = 3.0,
    window: int = 32,
    probe_every: int = 250,
    oversize_reads: bool = False,
    alive: Alive | None = None,
    progress: Callable[[int], None] | None = None,
) -> TargetResult:
    """Run the whole sequence against ``url`` (see the module docstring)."""
    res = TargetResult(name, url, seed, count, max_payload)
    client = RawClient()
    await client.connect(url)
    t_start = time.monotonic()
    linger: deque[tuple[float, int]] = deque()  # (unsubscribe at, sid)
    inflight: set[asyncio.Task[None]] = set()
    loop = asyncio.get_running_loop()

    def reap_lingering(now: float) -> None:
        while linger and linger[0][0] <= now:
            _, sid = linger.popleft()
            client.unsubscribe(sid)

    async def one(a: Answer, fut: asyncio.Future[Msg], sid: int, t0: float) -> None:
        # A body near max_payload takes a Python decoder up to about a second: allow for it.
        wait = answer_timeout + 4.0 * len(a.req.payload) / max_payload
        try:
            msg = await asyncio.wait_for(asyncio.shield(fut), wait)
        except TimeoutError:
            msg = None
            fut.cancel()  # from now on a reply is recorded as late (see got())
        if msg is not None:
            a.latency = time.monotonic() - t0
            a.sig = classify(a.req.kind, msg)
            a.first = msg.hdr[:200] + msg.data[:300]
            client.unsubscribe(sid)
        elif a.req.kind == R.KIND_NEXT:
            # A waiting pull request must lose its interest now, as on every target.
            client.unsubscribe(sid)
        else:
            # Keep listening a while: a slow answer is an answer.
            linger.append((time.monotonic() + late_grace, sid))

    try:
        await _setup(client)
        for req in G.requests(seed, count, max_payload, oversize_reads):
            if client.closed.is_set():
                res.client_errors.append(f"#{req.index}: {client.error}")
                await client.close()
                client = RawClient()
                await client.connect(url)
                linger.clear()
            reap_lingering(time.monotonic())
            if inflight and req.barrier:
                await asyncio.wait(inflight)
            elif len(inflight) >= window:
                await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            a = Answer(req)
            res.answers.append(a)
            if not req.reply:
                client.publish(req.subject, req.payload, "", req.hdr)
                a.sig = "noreply"
            else:
                inbox = new_inbox()
                fut: asyncio.Future[Msg] = loop.create_future()

                def got(
                    m: Msg, a: Answer = a, fut: asyncio.Future[Msg] = fut, t0: float = time.monotonic()
                ) -> None:
                    if not fut.done():
                        fut.set_result(m)
                    elif a.sig == "none":
                        a.sig, a.late, a.latency = classify(a.req.kind, m), True, time.monotonic() - t0
                        a.first = m.hdr[:200] + m.data[:300]

                sid = client.subscribe(inbox, got)
                client.publish(req.subject, req.payload, inbox, req.hdr)
                task = asyncio.create_task(one(a, fut, sid, time.monotonic()))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                if req.barrier:
                    await task
            if progress is not None:
                progress(req.index + 1)
            if probe_every and (req.index + 1) % probe_every == 0:
                if inflight:
                    await asyncio.wait(inflight)
                why = alive() if alive else ""
                if why or not await _probe(client, res):
                    res.crashed = why or f"no answer to $JS.API.INFO after request #{req.index}"
                    break
        if inflight:
            await asyncio.wait(inflight)
        await asyncio.sleep(0)  # deliver replies already read
        if not res.crashed:
            why = alive() if alive else ""
            if why or not await _probe(client, res):
                res.crashed = why or "no answer to $JS.API.INFO at the end"
        if not res.crashed:
            await _health(client, res)
        if linger:
            # Late answers: wait out the grace period of the last lingering requests.
            await asyncio.sleep(max(0.0, linger[-1][0] - time.monotonic()))
    finally:
        res.seconds = time.monotonic() - t_start
        for t in inflight:
            t.cancel()
        await client.close()
    return res
