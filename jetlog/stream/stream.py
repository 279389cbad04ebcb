"""One stream: JetStream publish semantics on top of a message store.

The publish path follows nats-server's order (``processJetStreamMsg``), because the order
decides which error a client sees when several apply: sealed → counters → expected stream →
TTL allowed → expected last subject sequence → expected last sequence → schedules/source
headers → duplicate id → expected last msg id → rollup permission → sizes → interest → TTL value
→ store (discard-new checks) → limits (discard old) → dedup + rollup → ack.

Acknowledgements wait for the commit that covers their message (``commit.py``); errors are
answered at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from jetlog.api.models import encode_puback, encode_puback_error
from jetlog.errors import ApiError, E, JetlogError
from jetlog.log.store import MsgStore, StoredMsg
from jetlog.stream.dedup import DedupWindow, warm_up
from jetlog.stream.held import Held, HeldCaptures, HoldBudget
from jetlog.stream.policy import StreamPolicy, parse_ttl_seconds
from jetlog.stream.runs import U64, StreamRuns
from jetlog.stream.seams import (
    FOLLOWER,
    LEADER,
    STANDALONE,
    CommitListener,
    Outbound,
    Replication,
    StoredListener,
    StreamStats,
)
from jetlog.tasklog import failure_logger
from jetlog.wire import headers as H
from jetlog.wire.subjects import matches
from jetlog.wire.timefmt import format_time

if TYPE_CHECKING:
    from jetlog.consumer.manager import ConsumerSet

log = logging.getLogger("jetlog.stream")
_log_task_failure = failure_logger(log, "background task")

MAX_HDR = 65535
monotonic = time.monotonic  # the held publishes' clock (tests replace it)
GAVE_UP_SAID_EVERY = 5.0
"""Seconds between log lines about held publishes given up on (the counters count each)."""


class Stream(StreamRuns):
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
        hold_budget: HoldBudget | None = None,
    ) -> None:
        """``hold_budget``: the node's bytes for publishes held while fenced, shared by its
        streams (``StreamManager.hold_budget``; a budget of its own if None)."""
        self.config = config
        self.name: str = config.name
        self.store = store
        self.created = created
        self.out = outbound
        self.clock = clock
        self.domain = domain
        self.policy = StreamPolicy.of(config)
        self.dedup = DedupWindow(config.duplicate_window or 0)
        self._last_msg_id = ""
        self._last_msg_id_at = 0  # > 0: ``last_msg_id`` is that stored message's, not read yet
        self.closed = False
        self.stats = StreamStats()
        self.failed: JetlogError | None = None
        # (ticket, subject, payload, hdr): sent once committed_seq >= ticket, in order.
        self._pending: deque[tuple[int, str, bytes, bytes]] = deque()
        self.held = HeldCaptures(hold_budget)  # captures waiting for this leader's fence to lift
        self._gave_up_said = -GAVE_UP_SAID_EVERY
        self._stored_listeners: list[StoredListener] = []
        self.consumers: ConsumerSet | None = None
        self._interest: Callable[[str], bool] | None = None
        self._ttl_heap: list[tuple[int, int]] = []
        self._expiry_wake = asyncio.Event()
        self._expiry_task: asyncio.Task[None] | None = None
        self._dedup_task: asyncio.Task[None] | None = None
        self._expiry_idle = False
        self._last_ts = 0
        self.role = STANDALONE
        self.repl: Replication | None = None
        self._began_epoch = 0  # the last epoch this process began as the stream's writer
        self._committed = store.committed_seq
        self._commit_listeners: list[CommitListener] = []
        store.add_commit_listener(self._on_commit)

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self, role: str = STANDALONE, repl: Replication | None = None) -> None:
        """Rebuild derived state after (re)opening the store and, unless this replica follows
        a leader, start background expiry and enforce limits.

        A follower only stores what its leader sends (deletes, limits and expiry arrive as ops
        in the leader's batches), so it runs none of the writer's background work.
        """
        self.role = role
        self.repl = repl
        # A replica of a replicated stream does not know what is committed until its leader
        # says so: its own durable end may hold entries that were never committed (and may be
        # truncated). Taking it for the committed mark would let a later leadership of this
        # node acknowledge new messages at those sequences without replicating them.
        self._committed = self.store.committed_seq if role == STANDALONE else 0
        if role != FOLLOWER:
            self._start_writer()

    def _start_writer(self) -> None:
        self._rebuild_derived()
        self.enforce_limits()
        self._expiry_task = asyncio.create_task(self._expiry_loop(), name=f"expiry:{self.name}")
        self._expiry_task.add_done_callback(_log_task_failure)

    def delivery_lease(self) -> float | None:
        """Until when (``time.monotonic``) deliveries decided now may be written; None: they
        must wait now (see ``Replication.lease_until``)."""
        return math.inf if self.repl is None else self.repl.lease_until()

    async def promote(self, epoch: int, repl: Replication) -> None:
        """Become the writer (stream leader) at ``epoch``: stamp new batches with it, rebuild
        the state only a writer keeps (duplicate window, last msg id, TTL timers) from the
        log, and start expiry."""
        await self._stop_expiry()
        await self._stop_dedup_warmup()
        begin = getattr(self.store, "begin_epoch", None)
        if begin is not None and epoch != self._began_epoch:
            # EPOCHS: begun once. The same epoch again is a retry of a promotion that failed
            # further on (``cluster/reconcile``): an epoch names one leader once, and a
            # restarted leader never leads at its old epoch (``_reelect``), so nobody else
            # wrote in it meanwhile and its start stays where it was.
            await begin(epoch)
            self._began_epoch = epoch
        self.repl = repl
        self.role = LEADER
        self._start_writer()

    async def demote(self, repl: Replication | None) -> None:
        """Stop writing (another replica leads now). Acks still queued are dropped: their
        messages may be truncated by the new leader, and their clients retry (``Nats-Msg-Id``
        makes the retry safe)."""
        # Drop the queued acks before anything can await: a group commit completing in the
        # await below must not confirm them (chaos finding 8: a resumed stale leader's local
        # fsync released PubAcks naming sequences the new leader then reused).
        self.role = FOLLOWER
        self.repl = repl
        dropped = len(self._pending)
        self._pending.clear()
        if dropped:
            log.info("stream %s: no longer leader, %d unconfirmed acks dropped", self.name, dropped)
        # Held while fenced: the new leader answers publishes now (or their clients retry).
        held = self.held.clear()
        if held:
            log.info("stream %s: no longer leader, %d publishes held while fenced dropped", self.name, held)
        await self._stop_expiry()
        await self._stop_dedup_warmup()
        seal = getattr(self.store, "seal", None)
        if seal is not None:
            seal()  # the writer's open batch becomes a batch of the log (truncated if it diverged)

    @property
    def last_msg_id(self) -> str:
        """The ``Nats-Msg-Id`` of the last message published (``""``: none)."""
        at = self._last_msg_id_at
        if at:
            self._last_msg_id_at = 0
            last = self.store.load(at)
            self._last_msg_id = (H.get(last.hdr, H.MSG_ID) or "") if last is not None else ""
        return self._last_msg_id

    @last_msg_id.setter
    def last_msg_id(self, value: str) -> None:
        self._last_msg_id, self._last_msg_id_at = value, 0

    def _rebuild_derived(self) -> None:
        st = self.store.state()
        self._last_ts = st.last_ts
        now = self.clock()
        self.dedup = DedupWindow(self.config.duplicate_window or 0)
        window = self.policy.duplicate_window
        if window > 0 and st.messages:
            # The duplicate window is read back from the messages stored within it (as
            # nats-server does), in the background: see DedupWindow.begin_rebuild.
            self.dedup.begin_rebuild(self.store.seq_for_time(now - window), st.last_seq, self._stored_ids)
            if self.dedup.rebuilding:
                self._dedup_task = asyncio.create_task(warm_up(lambda: self.dedup), name=f"dedup:{self.name}")
                self._dedup_task.add_done_callback(_log_task_failure)
        # The id of the last message is read when a publish first asks for it
        # (``Nats-Expected-Last-Msg-Id``): a restart need not read one message per stream.
        self._last_msg_id, self._last_msg_id_at = "", st.last_seq
        self._ttl_heap.clear()
        for seq, expires in self.store.ttl_entries():
            heapq.heappush(self._ttl_heap, (expires, seq))

    def _stored_ids(self, first: int, last: int) -> Iterator[tuple[int, int, str]]:
        # Only messages with headers can carry an id: the store scans for those.
        for seq, ts, hdr in self.store.iter_headers(first, last):
            mid = H.get(hdr, H.MSG_ID)
            if mid:
                yield seq, ts, mid

    async def _stop_dedup_warmup(self) -> None:
        task, self._dedup_task = self._dedup_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        """Stop background work, flush and close the store."""
        if self.closed:
            return
        self.closed = True
        await self._stop_expiry()
        await self._stop_dedup_warmup()
        if self.consumers is not None:
            await self.consumers.close()
        await self.store.close()
        if self.role == STANDALONE:
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

    def append_verbatim(self, data: bytes) -> Any:
        """Follower: store the leader's batches exactly as they are (records and removal ops);
        returns the new log-end position. Durable at the next group commit."""
        pos = self.store.append_batches(data)  # type: ignore[attr-defined]
        self._last_ts = self.store.state().last_ts
        return pos

    def add_stored_listener(self, listener: StoredListener) -> None:
        """Be told of each stored message (consumers, a replication leader)."""
        self._stored_listeners.append(listener)

    def remove_stored_listener(self, listener: StoredListener) -> None:
        """Undo :meth:`add_stored_listener`."""
        if listener in self._stored_listeners:
            self._stored_listeners.remove(listener)

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
        if self.role == FOLLOWER:
            return  # limits and expiry are the leader's: their removals arrive as ops
        self.enforce_limits()
        self._expiry_wake.set()

    # ---- publish path ---------------------------------------------------------------------

    def process(self, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        """Handle one message published on a stream subject (the capture callback).

        Never raises: errors become PubAck errors (or are dropped for publishes without a
        reply subject, as nats-server does).
        """
        if self.role == FOLLOWER:
            return  # every replica captures; only the leader appends (docs/cluster.md §4)
        repl = self.repl
        if repl is not None:
            if repl.fenced():
                self._hold(repl, subject, reply, hdr, data)
                return
            if self.held:
                # The fence lifted: what was held goes first, in arrival order.
                self.release_held()
                if self.held:  # fenced again meanwhile: this one waits behind them
                    self._hold(repl, subject, reply, hdr, data)
                    return
        respond = bool(reply) and not self.policy.no_ack
        stats = self.stats
        stats.received += 1
        if repl is not None:
            refused = repl.publish_error()
            if refused is not None:
                stats.rejected += 1
                if respond:
                    self.out.send(reply, self._error_ack(refused))  # type: ignore[arg-type]
                return
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
            stats.pubacks += 1
            body = encode_puback(self.name, seq, duplicate, self.domain)
            self._queue(self.store.last_seq, reply, body)  # type: ignore[arg-type]

    def release_held(self) -> None:
        """Handle the publishes held while this leader was fenced (``stream/held.py``), in
        order, once the fence has lifted; while it holds, only give up on those held too long.
        Called on each capture and on the leader's tick."""
        held = self.held
        if not held:
            return
        repl = self.repl
        if self.role != LEADER or repl is None:
            held.clear()
            return
        self._give_up(repl, held.expire(monotonic()))
        if repl.fenced():
            return
        for _, subject, reply, hdr, data in held.take():
            self.process(subject, reply, hdr, data)

    def _hold(self, repl: Replication, subject: str, reply: str | None, hdr: bytes, data: bytes) -> None:
        now = monotonic()
        held = self.held
        if held:
            self._give_up(repl, held.expire(now))
        if not held.hold(now, subject, reply, hdr, data):
            self._give_up(repl, [(now, subject, reply, hdr, data)])

    def _give_up(self, repl: Replication, gone: list[Held]) -> None:
        """Held publishes that are not stored: answered with ``repl.unanswered_error()`` (nobody
        else can answer them), or dropped unanswered (another node may lead and answer)."""
        if not gone:
            return
        self.stats.received += len(gone)
        err = repl.unanswered_error()
        if err is not None:
            body = self._error_ack(err)
            if not self.policy.no_ack:
                for _, _, reply, _, _ in gone:
                    if reply:
                        self.out.send(reply, body)
            self.stats.rejected += len(gone)
        # Once per GAVE_UP_SAID_EVERY at most: a long fence gives up on a publish per capture.
        now = monotonic()
        if now - self._gave_up_said >= GAVE_UP_SAID_EVERY:
            self._gave_up_said = now
            log.info(
                "stream %s: publishes held while fenced given up on (%d since start): %s",
                self.name,
                self.held.dropped,
                "dropped unanswered" if err is None else f"answered {err.description!r}",
            )

    def _error_ack(self, err: ApiError) -> bytes:
        return encode_puback_error(self.name, err, self.domain)

    def _store(self, subject: str, hdr: bytes, data: bytes) -> tuple[int, bool]:
        """Validate and store; return (seq, duplicate). Raises ApiError on rejection."""
        if self.failed is not None:
            raise self.failed
        p = self.policy
        if p.sealed:
            raise E.STREAM_SEALED()
        if self.store.last_seq >= U64:
            # Sequences are u64 on disk. nats-server wraps around to 0 here (and its state
            # stops making sense); jetlog refuses instead of failing every later publish.
            raise E.STREAM_STORE_FAILED(err="stream sequence space exhausted")
        if p.transform is not None:
            subject = p.transform(subject)
        msg_id = ""
        rollup = ""
        ttl = 0
        now = self.clock()
        hlen, dlen = len(hdr), len(data)
        if p.max_msg_size >= 0 and (hlen > p.max_msg_size or dlen > p.max_msg_size - hlen):
            # nats-server 2.15.1 checks the stream's max_msg_size right after "sealed", before
            # any header (an oversize duplicate or bad expected sequence is still 10054).
            raise E.STREAM_MESSAGE_EXCEEDS_MAXIMUM()
        if hdr and b"Nats-" in hdr:
            if H.get(hdr, H.BATCH_ID):
                # nats-server takes every message with a batch id to its atomic batch path,
                # which refuses it: no jetlog stream allows atomic publish.
                raise E.ATOMIC_PUBLISH_DISABLED()
            incr = H.get(hdr, H.INCR)
            if incr:
                # big.Int.SetString(v, 10) first (10171), then "counters disabled" (10168).
                digits = incr[1:] if incr[0] in "+-" else incr
                if not (digits.isascii() and digits.isdigit()):
                    raise E.MESSAGE_INCR_INVALID()
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
            want = _expected_seq(exp_subj_seq)
            if want is not None:
                last = self.store.load_last(exp_subj or subject)
                actual = last.seq if last is not None else 0
                if actual != want:
                    raise E.STREAM_WRONG_LAST_SEQUENCE(seq=actual)
            elif exp_subj:
                raise E.STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID()
            want = _expected_seq(H.get(hdr, H.EXPECTED_LAST_SEQ))
            if want is not None and want != self.store.last_seq:
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
        if len(hdr) > MAX_HDR:
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

    # ---- API operations -------------------------------------------------------------------

    def purge(self, subject: str | None, seq: int, keep: int) -> int:
        """STREAM.PURGE semantics; returns how many messages were removed."""
        if self.policy.sealed:
            raise E.STREAM_SEALED()
        if self.policy.deny_purge:
            raise E.STREAM_PURGE_FAILED(err="stream purge not permitted")
        n = self.store.purge(subject or None, seq=seq, keep=keep)
        last = self.store.last_seq
        if seq > last + 1 and subject in (None, "", ">"):
            # nats-server compacts up to ``seq``: purging past the end moves the stream on, so
            # the next message gets ``seq`` (first_seq = seq, last_seq = seq - 1).
            self.store.skip(seq - 1 - last)
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
            store = self.store
            if self.config.storage != "memory" and (
                seq == 0 or not store.msgs or seq < store.first_seq or seq > store.last_seq
            ):
                # nats-server's file store reports a sequence outside the stored range as a
                # store error; only a gap inside it is "not found" (its memory store: always).
                err = "stream store EOF" if seq > store.last_seq else "no message found"
                raise E.STREAM_MSG_DELETE_FAILED(err=err)
            raise E.SEQUENCE_NOT_FOUND(seq=seq)

    def get(self, seq: int) -> StoredMsg | None:
        """The live message with this sequence."""
        return self.store.load(seq)


def _expected_seq(value: str | None) -> int | None:
    """An ``Nats-Expected-Last-*Sequence`` value as nats-server reads it (``parseInt64`` cast to
    uint64): ``None`` when absent or empty; a value that is not all ASCII digits is -1, i.e.
    2**64-1, which no sequence matches; overlong digit strings wrap like Go's int64."""
    if not value:
        return None
    n = 0
    for ch in value:
        if not "0" <= ch <= "9":
            return U64
        n = (n * 10 + ord(ch) - 48) & U64  # int64 arithmetic wraps; the cast reads it unsigned
    return n


def subject_in_stream(config: Any, subject: str) -> bool:
    """True if a literal subject is captured by the stream's subjects."""
    return any(matches(s, subject) for s in (config.subjects or ()))
