"""One stream: JetStream publish semantics on top of a message store.

The publish path follows nats-server's order (``processJetStreamMsg``), because the order
decides which error a client sees when several apply: sealed → counters → expected stream →
TTL allowed → expected last subject sequence → expected last sequence → schedules/source
headers → duplicate id → expected last msg id → rollup permission → sizes → interest → TTL value
→ store (discard-new checks) → limits (discard old) → dedup + rollup → ack.

Acknowledgements are durable: a PubAck (and a republish) is queued with the log position it
depends on and sent from the store's commit listener, after the group commit that covers it.
Errors are answered at once; they depend on nothing durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from jetlog.api.models import encode_puback, encode_puback_error
from jetlog.errors import ApiError, E, JetlogError
from jetlog.log.store import MsgStore, StoredMsg
from jetlog.stream.dedup import DedupWindow
from jetlog.stream.policy import StreamPolicy, parse_ttl_seconds
from jetlog.wire import headers as H
from jetlog.wire.subjects import matches
from jetlog.wire.timefmt import format_duration, format_time

if TYPE_CHECKING:
    from jetlog.consumer.manager import ConsumerSet

log = logging.getLogger("jetlog.stream")

MAX_HDR = 65535


class Outbound(Protocol):
    """Where a stream sends replies (PubAcks) and republished messages."""

    def send(self, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        """Publish one message (no reply subject). Must not block."""
        ...


StoredListener = Callable[[int, str], None]
"""Called with (seq, subject) after a message is stored (consumers will hook in here)."""


class StreamStats:
    """Plain counters (cheap to bump per message; exported by the metrics collector)."""

    __slots__ = ("duplicates", "received", "rejected", "stored")

    def __init__(self) -> None:
        self.received = 0
        self.stored = 0
        self.duplicates = 0
        self.rejected = 0


class Stream:
    """A stream: configuration, store, duplicate window, expiry, and the publish pipeline."""

    def __init__(
        self,
        config: Any,
        store: MsgStore,
        created: int,
        outbound: Outbound,
        *,
        clock: Callable[[], int] = time.time_ns,
        domain: str | None = None,
    ) -> None:
        self.config = config
        self.name: str = config.name
        self.store = store
        self.created = created
        self.out = outbound
        self.clock = clock
        self.domain = domain
        self.policy = StreamPolicy.of(config)
        self.dedup = DedupWindow(config.duplicate_window or 0)
        self.last_msg_id = ""
        self.closed = False
        self.stats = StreamStats()
        self.failed: JetlogError | None = None
        # (ticket, subject, payload, hdr): sent once committed_seq >= ticket, in order.
        self._pending: deque[tuple[int, str, bytes, bytes]] = deque()
        self._stored_listeners: list[StoredListener] = []
        self.consumers: ConsumerSet | None = None
        self._interest: Callable[[str], bool] | None = None
        self._ttl_heap: list[tuple[int, int]] = []
        self._expiry_wake = asyncio.Event()
        self._expiry_task: asyncio.Task[None] | None = None
        self._expiry_idle = False
        self._last_ts = 0
        store.add_commit_listener(self._on_commit)

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Rebuild derived state after (re)opening the store and start background expiry."""
        st = self.store.state()
        self._last_ts = st.last_ts
        now = self.clock()
        window = self.policy.duplicate_window
        if window > 0 and st.messages:
            # Rebuild the duplicate window from the messages stored within it (nats-server
            # does the same on recovery), plus the id of the very last message for
            # Nats-Expected-Last-Msg-Id.
            seq = self.store.seq_for_time(now - window)
            while True:
                m = self.store.load_next(seq)
                if m is None:
                    break
                mid = H.get(m.hdr, H.MSG_ID)
                if mid:
                    self.dedup.add(mid, m.seq, m.ts)
                seq = m.seq + 1
        last = self.store.load(st.last_seq) if st.last_seq else None
        if last is not None:
            self.last_msg_id = H.get(last.hdr, H.MSG_ID) or ""
        for seq, expires in self.store.ttl_entries():
            heapq.heappush(self._ttl_heap, (expires, seq))
        self.enforce_limits()
        self._expiry_task = asyncio.create_task(self._expiry_loop(), name=f"expiry:{self.name}")
        self._expiry_task.add_done_callback(_log_task_failure)

    async def close(self) -> None:
        """Stop background work, flush and close the store."""
        if self.closed:
            return
        self.closed = True
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry_task
        if self.consumers is not None:
            await self.consumers.close()
        await self.store.close()
        self._flush_pending(self.store.committed_seq)

    async def destroy(self) -> None:
        """Delete the stream's consumers (waiting pulls get ``409 Consumer Deleted``) and data."""
        if self.consumers is not None:
            await self.consumers.close(deleted=True)
            self.consumers = None
        await self.close()
        await self.store.destroy()

    @property
    def consumer_count(self) -> int:
        """Number of consumers."""
        return len(self.consumers.consumers) if self.consumers is not None else 0

    def add_stored_listener(self, listener: StoredListener) -> None:
        """Be told of each stored message (consumers)."""
        self._stored_listeners.append(listener)

    def set_interest_check(self, check: Callable[[str], bool] | None) -> None:
        """For interest retention: does any consumer want messages on this subject?"""
        self._interest = check

    # ---- configuration --------------------------------------------------------------------

    def update_config(self, config: Any) -> None:
        """Apply a validated new configuration; lowered limits take effect at once."""
        self.config = config
        self.policy = StreamPolicy.of(config)
        self.dedup.set_window(self.policy.duplicate_window)
        if self.consumers is not None:
            self.set_interest_check(self.consumers.interested if self.policy.interest else None)
        self.enforce_limits()
        self._expiry_wake.set()

    # ---- publish path ---------------------------------------------------------------------

    def process(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """Handle one message published on a stream subject (the capture callback).

        Never raises: errors become PubAck errors (or are dropped for publishes without a
        reply subject, as nats-server does).
        """
        respond = bool(reply) and not self.policy.no_ack
        stats = self.stats
        stats.received += 1
        try:
            seq, duplicate = self._store(subject, hdr, data)
        except ApiError as e:
            stats.rejected += 1
            if respond:
                self.out.send(reply, self._error_ack(e))  # type: ignore[arg-type]
            return
        except JetlogError as e:  # storage failure: answer with its API error
            stats.rejected += 1
            log.error("stream %s: store failed: %s", self.name, e)
            if respond:
                self.out.send(reply, self._error_ack(e.to_api()))  # type: ignore[arg-type]
            return
        if duplicate:
            stats.duplicates += 1
        else:
            stats.stored += 1
        if respond:
            body = encode_puback(self.name, seq, duplicate, self.domain)
            self._queue(self.store.last_seq, reply, body)  # type: ignore[arg-type]

    def _error_ack(self, err: ApiError) -> bytes:
        return encode_puback_error(self.name, err, self.domain)

    def _store(self, subject: str, hdr: bytes, data: bytes) -> tuple[int, bool]:
        """Validate and store; return (seq, duplicate). Raises ApiError on rejection."""
        if self.failed is not None:
            raise self.failed
        p = self.policy
        if p.sealed:
            raise E.STREAM_SEALED()
        if p.transform is not None:
            subject = p.transform(subject)
        msg_id = ""
        rollup = ""
        ttl = 0
        now = self.clock()
        if hdr and b"Nats-" in hdr:
            if H.get(hdr, H.INCR) is not None:
                raise E.MESSAGE_INCR_DISABLED()
            exp_stream = H.get(hdr, H.EXPECTED_STREAM)
            if exp_stream and exp_stream != self.name:
                raise E.STREAM_NOT_MATCH()
            ttl_hdr = H.get(hdr, H.TTL)
            if ttl_hdr:
                parsed = parse_ttl_seconds(ttl_hdr)
                # Like the server: an unparsable TTL counts as 0 here (not "disabled") and is
                # reported as invalid later, after the size and interest checks.
                ttl = -2 if parsed is None else parsed
                if ttl not in (0, -2) and not p.allow_msg_ttl:
                    raise E.MESSAGE_TTL_DISABLED()
            exp_subj_seq = H.get(hdr, H.EXPECTED_LAST_SUBJ_SEQ)
            exp_subj = H.get(hdr, H.EXPECTED_LAST_SUBJ_SEQ_SUBJ)
            if exp_subj_seq is not None:
                want = _parse_uint(exp_subj_seq)
                last = self.store.load_last(exp_subj or subject)
                actual = last.seq if last is not None else 0
                if want is None or actual != want:
                    raise E.STREAM_WRONG_LAST_SEQUENCE(seq=actual)
            elif exp_subj:
                raise E.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID()
            exp_last = H.get(hdr, H.EXPECTED_LAST_SEQ)
            if exp_last is not None:
                want = _parse_uint(exp_last)
                if want is None or want != self.store.last_seq:
                    raise E.STREAM_WRONG_LAST_SEQUENCE(seq=self.store.last_seq)
            if H.get(hdr, H.SCHEDULE) is not None or H.get(hdr, "Nats-Scheduler") is not None:
                raise E.MESSAGE_SCHEDULES_DISABLED()
            if H.get(hdr, H.STREAM_SOURCE) is not None:
                raise E.MESSAGE_SOURCE_HDR_NOT_ALLOWED()
            msg_id = H.get(hdr, H.MSG_ID) or ""
            if msg_id:
                dup = self.dedup.seq_of(msg_id, now)
                if dup:
                    return dup, True
            exp_id = H.get(hdr, H.EXPECTED_LAST_MSG_ID)
            if exp_id and exp_id != self.last_msg_id:
                raise E.STREAM_WRONG_LAST_MSG_ID(id=self.last_msg_id)
            rv = H.get(hdr, H.ROLLUP)
            if rv is not None and rv != "":
                if not p.allow_rollup:
                    raise E.STREAM_ROLLUP_FAILED(err="rollup not permitted")
                rollup = rv.lower()
                if rollup not in ("sub", "all"):
                    raise E.STREAM_ROLLUP_FAILED(err=f'rollup value invalid: "{rv}"')
        hlen, dlen = len(hdr), len(data)
        if p.max_msg_size >= 0 and (hlen > p.max_msg_size or dlen > p.max_msg_size - hlen):
            raise E.STREAM_MESSAGE_EXCEEDS_MAXIMUM()
        if hlen > MAX_HDR:
            raise E.STREAM_HEADER_EXCEEDS_MAXIMUM()
        if p.interest and not (self._interest is not None and self._interest(subject)):
            # Interest retention and nobody interested: consume a sequence, store nothing.
            seq = self.store.skip(1)
            self.last_msg_id = msg_id
            if msg_id:
                self.dedup.add(msg_id, seq, now)
            return seq, False
        if ttl == -2:
            raise E.MESSAGE_TTL_INVALID()
        if ttl > 0 and p.marker_ttl > 0 and p.max_msgs_per_subject != 1:
            min_ttl = p.marker_ttl // 1_000_000_000
            if ttl < min_ttl:
                ttl = min_ttl
                hdr = H.append(H.remove(hdr, H.TTL), [(H.TTL, str(ttl))])
        ttl_ns = ttl * 1_000_000_000 if ttl > 0 else 0
        last_on_subject = 0
        if p.republish is not None:
            prev = self.store.load_last(subject)
            last_on_subject = prev.seq if prev is not None else 0
        if p.discard_new:
            self._check_discard_new(subject, hdr, data)
        ts = now if now > self._last_ts else self._last_ts
        self._last_ts = ts
        seq = self.store.append(subject, hdr, data, ts, ttl_ns)
        if ttl_ns:
            self._add_ttl(ts + ttl_ns, seq)
        elif self._expiry_idle and p.max_age > 0:
            # The expiry loop sleeps without a deadline while the stream is empty.
            self._expiry_idle = False
            self._expiry_wake.set()
        self._enforce_after_store(subject)
        self.last_msg_id = msg_id
        if msg_id:
            self.dedup.add(msg_id, seq, ts)
        if rollup == "sub":
            self.store.purge(subject, keep=1)
        elif rollup == "all":
            self.store.purge(None, keep=1)
        if p.republish is not None:
            self._republish(subject, hdr, data, seq, ts, last_on_subject)
        for listener in self._stored_listeners:
            listener(seq, subject)
        return seq, False

    def _check_discard_new(self, subject: str, hdr: bytes, data: bytes) -> None:
        p, store = self.policy, self.store
        at_subject_limit = False
        ss = None
        if p.max_msgs_per_subject > 0:
            ss = store.subjects_state(subject).get(subject)
            at_subject_limit = ss is not None and ss.msgs >= p.max_msgs_per_subject
        if at_subject_limit and p.discard_new_per_subject and H.get(hdr, H.ROLLUP) is None:
            raise E.STREAM_STORE_FAILED(err="maximum messages per subject exceeded")
        if p.max_msgs > 0 and store.msgs >= p.max_msgs and not at_subject_limit:
            raise E.STREAM_STORE_FAILED(err="maximum messages exceeded")
        if p.max_bytes > 0:
            size = self._size_of(subject, hdr, data)
            if store.bytes + size > p.max_bytes:
                if not at_subject_limit or ss is None:
                    raise E.STREAM_STORE_FAILED(err="maximum bytes exceeded")
                # At the per-subject limit the oldest of this subject will be replaced: allowed
                # only if it frees at least as many bytes as the new message takes.
                if store.msg_size(ss.first) < size:
                    raise E.STREAM_STORE_FAILED(err="maximum bytes exceeded")

    def _size_of(self, subject: str, hdr: bytes, data: bytes) -> int:
        if self.policy.memory:
            return len(subject) + len(hdr) + len(data) + 16
        size = 22 + len(subject) + len(data) + 8
        if hdr:
            size += 4 + len(hdr)
        return size

    def _enforce_after_store(self, subject: str) -> None:
        p, store = self.policy, self.store
        if p.max_msgs_per_subject > 0:
            ss = store.subjects_state(subject).get(subject)
            while ss is not None and ss.msgs > p.max_msgs_per_subject:
                if not store.remove(ss.first):
                    break
                ss = store.subjects_state(subject).get(subject)
        if not p.discard_new:
            if p.max_msgs > 0:
                while store.msgs > p.max_msgs and store.remove(store.first_seq):
                    pass
            if p.max_bytes > 0:
                while store.bytes > p.max_bytes and store.remove(store.first_seq):
                    pass

    def enforce_limits(self) -> None:
        """Bring the stream within its limits (after an update lowered them, or at start)."""
        p, store = self.policy, self.store
        if p.max_msgs_per_subject > 0:
            for subj, ss in store.subjects_state(None).items():
                extra = ss.msgs - p.max_msgs_per_subject
                if extra > 0:
                    store.purge(subj, keep=p.max_msgs_per_subject)
        if p.max_msgs > 0 and store.msgs > p.max_msgs:
            store.purge(None, keep=p.max_msgs)
        if p.max_bytes > 0:
            while store.bytes > p.max_bytes and store.remove(store.first_seq):
                pass
        if p.max_age > 0:
            self._expire_age(self.clock())

    def _republish(self, subject: str, hdr: bytes, data: bytes, seq: int, ts: int, last: int) -> None:
        rp = self.policy.republish
        assert rp is not None
        dest = rp(subject)
        if dest is None:
            return
        pairs = [
            ("Nats-Stream", self.name),
            ("Nats-Subject", subject),
            ("Nats-Sequence", str(seq)),
            ("Nats-Time-Stamp", format_time(ts)),
            ("Nats-Last-Sequence", str(last)),
        ]
        payload = data
        if self.policy.republish_headers_only:
            pairs.append(("Nats-Msg-Size", str(len(data))))
            payload = b""
        self._queue(self.store.last_seq, dest, payload, H.append(hdr, pairs))

    # ---- acks after durability ------------------------------------------------------------

    def _queue(self, ticket: int, subject: str, payload: bytes, hdr: bytes = b"") -> None:
        if self.store.committed_seq >= ticket and not self._pending:
            self.out.send(subject, payload, hdr)
        else:
            self._pending.append((ticket, subject, payload, hdr))

    def _on_commit(self, committed: int) -> None:
        self._flush_pending(committed)

    def _flush_pending(self, committed: int) -> None:
        pending, send = self._pending, self.out.send
        while pending and pending[0][0] <= committed:
            _, subject, payload, hdr = pending.popleft()
            try:
                send(subject, payload, hdr)
            except JetlogError as e:
                # The upstream link is down: the client will time out and retry (with
                # Nats-Msg-Id the retry is deduplicated). The data itself is durable.
                log.warning("stream %s: could not send ack to %s: %s", self.name, subject, e)

    # ---- API operations -------------------------------------------------------------------

    def purge(self, subject: str | None, seq: int, keep: int) -> int:
        """STREAM.PURGE semantics; returns how many messages were removed."""
        if self.policy.sealed:
            raise E.STREAM_SEALED()
        if self.policy.deny_purge:
            raise E.STREAM_PURGE_FAILED(err="stream purge not permitted")
        n = self.store.purge(subject or None, seq=seq, keep=keep)
        if self.consumers is not None:
            self.consumers.on_purge(self.store.first_seq)
        return n

    def delete_msg(self, seq: int, erase: bool) -> None:
        """STREAM.MSG.DELETE semantics."""
        if self.policy.sealed:
            raise E.STREAM_SEALED()
        if self.policy.deny_delete:
            raise E.STREAM_MSG_DELETE_FAILED(err="message delete not permitted")
        if not self.store.remove(seq, erase=erase):
            raise E.SEQUENCE_NOT_FOUND(seq=seq)

    def get(self, seq: int) -> StoredMsg | None:
        """The live message with this sequence."""
        return self.store.load(seq)

    # ---- expiry (max_age, per-message TTL, subject delete markers) -------------------------

    def _add_ttl(self, expires: int, seq: int) -> None:
        heapq.heappush(self._ttl_heap, (expires, seq))
        if self._ttl_heap[0][1] == seq:
            self._expiry_wake.set()

    def _next_deadline(self) -> int | None:
        deadlines = []
        if self.policy.max_age > 0 and self.store.msgs:
            first = self.store.load_next(self.store.first_seq)
            if first is not None:
                deadlines.append(first.ts + self.policy.max_age)
        if self._ttl_heap:
            deadlines.append(self._ttl_heap[0][0])
        return min(deadlines) if deadlines else None

    async def _expiry_loop(self) -> None:
        while not self.closed:
            deadline = self._next_deadline()
            timeout = None if deadline is None else max(0.0, (deadline - self.clock()) / 1e9)
            self._expiry_idle = deadline is None
            self._expiry_wake.clear()
            if timeout is None or timeout > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._expiry_wake.wait(), timeout)
                continue
            now = self.clock()
            self._expire_age(now)
            self._expire_ttls(now)
            # Granularity: the server checks about once a second; we wake exactly at the
            # deadline but yield so a flood of expiries cannot starve the loop.
            await asyncio.sleep(0)

    def _expire_age(self, now: int) -> None:
        max_age = self.policy.max_age
        if max_age <= 0:
            return
        cutoff = now - max_age
        store = self.store
        seq = store.first_seq
        while store.msgs:
            m = store.load_next(seq)
            if m is None or m.ts > cutoff:
                break
            seq = m.seq + 1
            if m.hdr and (v := H.get(m.hdr, H.TTL)) is not None and v.lower() == "never":
                continue
            self._remove_expired(m, "MaxAge")

    def _expire_ttls(self, now: int) -> None:
        heap = self._ttl_heap
        while heap and heap[0][0] <= now:
            _, seq = heapq.heappop(heap)
            m = self.store.load(seq)
            if m is not None:
                self._remove_expired(m, "MaxAge")

    def _remove_expired(self, m: StoredMsg, reason: str) -> None:
        marker_ttl = self.policy.marker_ttl
        is_marker = bool(m.hdr) and H.get(m.hdr, H.MARKER_REASON) is not None
        last_of_subject = False
        if marker_ttl > 0 and not is_marker:
            ss = self.store.subjects_state(m.subject).get(m.subject)
            last_of_subject = ss is not None and ss.msgs == 1
        self.store.remove(m.seq)
        if last_of_subject:
            # Leave a delete marker so KV watchers learn the key went away (ADR-48).
            hdr = H.encode(
                [
                    (H.MARKER_REASON, reason),
                    (H.TTL, format_duration(marker_ttl)),
                    (H.ROLLUP, "sub"),
                ]
            )
            now = self.clock()
            ts = now if now > self._last_ts else self._last_ts
            self._last_ts = ts
            seq = self.store.append(m.subject, hdr, b"", ts, marker_ttl)
            self._add_ttl(ts + marker_ttl, seq)
            for listener in self._stored_listeners:
                listener(seq, m.subject)


def _parse_uint(value: str) -> int | None:
    value = value.strip()
    return int(value) if value.isdigit() else None


def _log_task_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %s failed", task.get_name(), exc_info=task.exception())


def subject_in_stream(config: Any, subject: str) -> bool:
    """True if a literal subject is captured by the stream's subjects."""
    return any(matches(s, subject) for s in (config.subjects or ()))
