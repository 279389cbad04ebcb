"""Capturing a run of messages in one call: what ``Stream.process`` does once per message,
done once per socket read for the messages that need none of its per-message checks.

The leaf link hands a stream the consecutive messages of one socket read that only this stream
captures (``LeafSubscription.run_cb``). Messages without a header block, within
``max_msg_size``, on a stream whose configuration asks for nothing per message (no transform,
republish, interest retention, discard new, seal) are stored with one ``MsgStore.append_run``;
limits are enforced once after them, and their PubAcks are queued for the group commit as
usual. Everything else goes through ``process`` one message at a time, in order.

The result is the one ``process`` would give message by message: the same sequences, records
and PubAcks, and after the run the same messages are left under the limits (discard old always
removes the oldest first, so removing after the run or after each message leaves the same set).
All messages of a run get one store time (``process`` may too: it never lets time go back).
:class:`StreamRuns` is a base class of ``jetlog.stream.stream.Stream``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jetlog.api.models import encode_puback, encode_puback_error
from jetlog.errors import JetlogError
from jetlog.stream.commit import StreamCommit
from jetlog.stream.held import HeldCaptures
from jetlog.stream.seams import FOLLOWER, StreamStats

log = logging.getLogger("jetlog.stream")

U64 = (1 << 64) - 1
"""Sequences are u64 on disk: the highest one a stream can assign."""

CapturedMsg = tuple[Any, str, "str | None", bytes, bytes, Any]
"""A leaf link ``MSG`` event: ``(kind, subject, reply, header block, payload, queues)``."""


class StreamRuns(StreamCommit):
    """The run path of a stream's capture (the state used is set by ``Stream.__init__``)."""

    domain: str | None
    stats: StreamStats
    failed: JetlogError | None
    last_msg_id: str
    held: HeldCaptures

    if TYPE_CHECKING:  # defined by ``Stream``

        def process(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None: ...

    def process_run(self, events: Sequence[CapturedMsg]) -> None:
        """Handle messages captured in one socket read, in order (the leaf link's run
        callback). Never raises, like ``process``."""
        if self.role == FOLLOWER:
            return  # every replica captures; only the leader appends (docs/cluster.md §4)
        p = self.policy
        slow = (
            self.failed is not None
            or p.sealed
            or p.interest
            or p.discard_new
            or p.transform is not None
            or p.republish is not None
            or self.store.last_seq + len(events) >= U64
        )
        repl = self.repl
        if not slow and repl is not None:
            # Fenced, or holding what came while fenced: one by one through ``process``, which
            # holds them, in order, behind the held ones (``stream/held.py``).
            slow = bool(self.held) or repl.fenced() or repl.publish_error() is not None
        if slow:
            for ev in events:
                self.process(ev[1], ev[2], ev[3], ev[4])
            return
        max_size = p.max_msg_size
        subjects: list[str] = []
        datas: list[bytes] = []
        replies: list[str | None] = []
        for ev in events:
            data = ev[4]
            if ev[3] or (max_size >= 0 and len(data) > max_size):
                # Headers (ids, expectations, TTLs, rollups) or an error: one by one, in order.
                if datas:
                    self._store_run(subjects, datas, replies)
                    subjects, datas, replies = [], [], []
                self.process(ev[1], ev[2], ev[3], data)
                continue
            subjects.append(ev[1])
            datas.append(data)
            replies.append(ev[2])
        if datas:
            self._store_run(subjects, datas, replies)

    def _store_run(self, subjects: list[str], datas: list[bytes], replies: list[str | None]) -> None:
        if self.failed is not None:  # a message just before failed the stream: answer each
            for subject, reply, data in zip(subjects, replies, datas, strict=True):
                self.process(subject, reply, b"", data)
            return
        p = self.policy
        stats = self.stats
        k = len(datas)
        stats.received += k
        now = self.clock()
        ts = now if now > self._last_ts else self._last_ts
        self._last_ts = ts
        respond = not p.no_ack
        try:
            last = self.store.append_run(subjects, datas, ts)
        except JetlogError as e:  # storage failure: nothing of the run was stored
            stats.rejected += k
            log.error("stream %s: store failed: %s", self.name, e)
            if respond:
                body = encode_puback_error(self.name, e.to_api(), self.domain)
                for reply in replies:
                    if reply:
                        self.out.send(reply, body)
            return
        first = last - k + 1
        if self._expiry_idle and p.max_age > 0:
            self._expiry_idle = False  # the expiry loop sleeps without a deadline while empty
            self._expiry_wake.set()
        if p.max_msgs_per_subject > 0:
            for subject in dict.fromkeys(subjects):
                self._enforce_after_store(subject)
        elif p.max_msgs > 0 or p.max_bytes > 0:
            self._enforce_after_store(subjects[0])
        self.last_msg_id = ""
        stats.stored += k
        for listener in self._stored_listeners:
            for seq, subject in zip(range(first, last + 1), subjects, strict=True):
                listener(seq, subject)
        if respond:
            name, domain, queue = self.name, self.domain, self._queue
            acks = 0
            for seq, reply in zip(range(first, last + 1), replies, strict=True):
                if reply:
                    queue(seq, reply, encode_puback(name, seq, False, domain))
                    acks += 1
            stats.pubacks += acks
