"""The chaos workload: publishers and consumer workers that record a history, and a reader of
every replica's log from its files.

* :class:`Publisher` — its own connection; publishes ``p<id>-<i>`` one at a time with a
  ``Nats-Msg-Id``, awaiting each PubAck and retrying the *same* message (same id) until it is
  acknowledged, so every acknowledged message must be stored exactly once, in publish order.
* :class:`ConsumerWorker` — its own connection; pulls from a durable explicit-ack consumer
  with raw ``CONSUMER.MSG.NEXT`` requests and acks each delivery, as a double ack (``AckSync``,
  ``+ACK`` with a reply subject) or a plain ack. Deliveries and ack confirmations arrive on one
  subscription, so the worker knows exactly which deliveries its connection received after a
  confirmation (the checker's ``redelivered`` rule).
* :func:`read_replica` — every live message of a stopped node's replica, read from its files.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors

from jetlog.chaos.history import Ack, Confirm, Delivery, Stored, msg_id, payload
from jetlog.log import FileStore

log = logging.getLogger("jetlog.chaos")

__all__ = [
    "ConsumerWorker",
    "Publisher",
    "payload",
    "read_replica",
    "run_publishers",
    "stop_publishers",
]


@dataclass
class Publisher:
    """See the module docstring. ``acked``: msg id -> seq; ``ack_times``: arrival times;
    ``records``: the :class:`~jetlog.chaos.history.Ack` history."""

    js: nats.js.JetStreamContext
    pid: int
    subject: str
    timeout: float = 0.25
    acked: dict[str, int] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    records: list[Ack] = field(default_factory=list)
    errors: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        """Publish until ``stop`` is set (the message in flight is not retried after that)."""
        i = 0
        while not self.stop.is_set():
            mid = msg_id(self.pid, i)
            try:
                ack = await self.js.publish(
                    self.subject, payload(self.pid, i), headers={"Nats-Msg-Id": mid}, timeout=self.timeout
                )
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error):
                self.errors += 1
                await asyncio.sleep(0.02)
                continue
            now = time.monotonic()
            self.acked[mid] = ack.seq
            self.ack_times.append(now)
            self.records.append(Ack(self.pid, i, ack.seq, now, bool(ack.duplicate)))
            i += 1


async def run_publishers(
    url: str, n: int, subject: str, *, timeout: float = 0.25, separate: bool = False
) -> tuple[list[Publisher], list[asyncio.Task[None]], list[nats.NATS]]:
    """Start ``n`` publishers: on one connection, or (``separate``) one connection each."""
    conns: list[nats.NATS] = []
    pubs = []
    for p in range(n):
        if separate or not conns:
            conns.append(await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.1))
        pubs.append(Publisher(conns[-1].jetstream(timeout=2), p, subject, timeout=timeout))
    tasks = [asyncio.create_task(p.run(), name=f"chaos-pub-{p.pid}") for p in pubs]
    return pubs, tasks, conns


async def stop_publishers(
    pubs: list[Publisher], tasks: list[asyncio.Task[None]], conns: list[nats.NATS] | nats.NATS
) -> None:
    """Stop the publishers, wait for their tasks, close their connections."""
    for p in pubs:
        p.stop.set()
    for t in tasks:
        try:
            await asyncio.wait_for(t, 5)
        except (asyncio.CancelledError, TimeoutError):
            pass
        except Exception:
            log.exception("publisher task failed")
    for nc in conns if isinstance(conns, list) else [conns]:
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await nc.close()


class _NextRequest(msgspec.Struct, omit_defaults=True):
    batch: int
    expires: int  # nanoseconds


def ack_subject_tokens(reply: str) -> tuple[int, int, int, int, int] | None:
    """``(delivery count, stream seq, consumer seq, timestamp, pending)`` from a ``$JS.ACK``
    subject: v1 ``$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<cseq>.<ts>.<pending>`` or v2 (domain
    and account hash after ``ACK``, optionally a random token at the end)."""
    t = reply.split(".")
    if len(t) == 9:
        nums = t[4:9]
    elif len(t) >= 11:
        nums = t[6:11]
    else:
        return None
    try:
        dc, sseq, cseq, ts, pending = (int(x) for x in nums)
    except ValueError:
        return None
    return dc, sseq, cseq, ts, pending


class ConsumerWorker:
    """One pulling client of a durable consumer (see the module docstring). History:
    ``deliveries`` and ``confirms``; ``mids``: every message id received."""

    PULL_EXPIRES = 1.0  # seconds a pull request waits at the server
    CONFIRM_TIMEOUT = 2.0  # an AckSync unanswered this long is given up (never confirmed)

    def __init__(
        self, url: str, stream: str, durable: str, worker: int, *, double_ack: bool = True, batch: int = 50
    ) -> None:
        self.url = url
        self.stream = stream
        self.durable = durable
        self.worker = worker
        self.double_ack = double_ack
        self.batch = batch
        self.deliveries: list[Delivery] = []
        self.confirms: list[Confirm] = []
        self.mids: set[str] = set()
        self.stop = asyncio.Event()
        self._order = itertools.count()
        # reply subject -> (mid, stream seq, received, sent)
        self._acks: dict[str, tuple[str, int, float, float]] = {}
        self._nc: nats.NATS | None = None
        self._left = 0  # messages the outstanding pull request may still bring

    async def run(self) -> None:
        """Pull and ack until ``stop`` is set."""
        self._nc = nc = await nats.connect(self.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
        prefix = f"_CHAOS.{uuid.uuid4().hex}"
        sub = await nc.subscribe(prefix + ".>")
        inbox, api = prefix + ".d", f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.durable}"
        req = msgspec.json.encode(_NextRequest(self.batch, int(self.PULL_EXPIRES * 1e9)))
        ack_ids = itertools.count()
        pull_due = 0.0  # when the outstanding pull request is over (0: none outstanding)
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if now >= pull_due:
                    with contextlib.suppress(nats.errors.Error):
                        await nc.publish(api, req, reply=inbox)
                    pull_due = now + self.PULL_EXPIRES + 0.5
                    self._left = self.batch
                self._expire_acks(now)
                try:
                    msg = await sub.next_msg(timeout=0.2)
                except (TimeoutError, nats.errors.TimeoutError):
                    continue
                order = next(self._order)
                now = time.monotonic()
                status = (msg.headers or {}).get("Status")
                if msg.subject.startswith(prefix + ".a."):
                    self._confirmed(msg.subject, order, now, status)
                elif msg.reply and msg.reply.startswith("$JS.ACK."):
                    await self._delivered(nc, msg, order, now, prefix, ack_ids)
                    self._left -= 1
                    if self._left <= 0:
                        pull_due = 0.0  # a full batch ends the request without a status: ask again
                elif status:
                    pull_due = 0.0  # 404/408/409: that pull is over, ask again
        finally:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await nc.close()

    async def _delivered(
        self, nc: nats.NATS, msg: Any, order: int, now: float, prefix: str, ack_ids: itertools.count[int]
    ) -> None:
        tokens = ack_subject_tokens(msg.reply)
        mid = next((v for k, v in (msg.headers or {}).items() if k.lower() == "nats-msg-id"), None)
        if tokens is None or not mid:
            log.warning("worker %d: unexpected delivery %s %s", self.worker, msg.subject, msg.reply)
            return
        dcount, sseq, cseq, ts, pending = tokens
        self.deliveries.append(Delivery(self.worker, order, now, mid, sseq, dcount, cseq, pending, ts))
        self.mids.add(mid)
        try:
            if self.double_ack:
                reply = f"{prefix}.a.{next(ack_ids)}"
                self._acks[reply] = (mid, sseq, now, time.monotonic())
                await nc.publish(msg.reply, b"+ACK", reply=reply)
            else:
                await nc.publish(msg.reply, b"+ACK")
        except nats.errors.Error:
            pass  # not acked: it is redelivered after ack_wait

    def _confirmed(self, subject: str, order: int, now: float, status: str | None) -> None:
        entry = self._acks.pop(subject, None)
        if entry is None or (status and status != "200"):
            return  # late (given up) or an error status such as 503 no responders
        mid, sseq, received, sent = entry
        self.confirms.append(Confirm(self.worker, order, now, mid, sent - received, sseq))

    def _expire_acks(self, now: float) -> None:
        for reply, (_, _, _, sent) in list(self._acks.items()):
            if now - sent > self.CONFIRM_TIMEOUT:
                del self._acks[reply]


async def read_replica(data_dir: str, stream: str) -> dict[int, Stored]:
    """Every live message of a stopped node's replica: seq -> (subject, hdr, data)."""
    path = os.path.join(data_dir, "streams", stream, "log")
    if not os.path.isdir(path):  # noqa: ASYNC240 - one stat of a stopped node's directory
        return {}
    st = await FileStore.open(path, auto_compact=False, syncer="thread")
    try:
        out = {}
        for m in st.iter_range(st.first_seq, st.last_seq):
            out[m.seq] = (m.subject, m.hdr, m.data)
        return out
    finally:
        await st.close()
