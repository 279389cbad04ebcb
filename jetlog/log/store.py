"""The message-store contract shared by the file store and the memory store.

A store holds one stream's messages. It assigns sequences, keeps every per-message index the
stream layer needs (sequence → location, subject, size, timestamp; per-subject first/last/count),
and makes mutations durable. It knows nothing about JetStream policy: the stream layer
(``jetlog.stream``) decides what to append and what to evict, and calls the store.

Threading: every method is called on the event loop thread. A store may run blocking work
(fsync, segment rewrites, cold reads) in worker threads or helper processes internally, but its
in-memory state is only mutated on the loop.

Durability: mutations take effect in memory at once. For a file store they become durable at the
next group commit; ``committed_seq`` and the commit listeners report progress. Everything a
commit covers is durable in log order: when sequence N is durable, every mutation made before
N was appended (removals, purges, skips) is durable too. Listeners are called only when
``committed_seq`` advances (a commit holding only removals calls none; ``flush`` covers those).

Implementations (``jetlog.log``) and what they add beyond this protocol:

- ``await FileStore.open(path, *, compression=False, fsync="always", segment_bytes=64 MiB,
  first_seq=1, sync_interval=1.0, io=None, verify=True, auto_compact=True,
  compact_threshold=0.5, syncer="helper")``; ``fsync="interval"`` reports commits after the
  write and fsyncs at most every ``sync_interval`` seconds (can lose acknowledged data on power
  failure). ``syncer``: who runs fsyncs — ``"helper"`` (a helper process shared by the stores
  of the loop, ``jetlog.log.syncer``), ``"thread"`` or a ``SyncService``.
  Extras: ``recovery`` (the ``RecoveryReport`` of this open), ``failed`` (the I/O error that
  fenced the store, or None), ``epoch`` (leader epoch stamped on new batches; settable, but a
  leader uses ``begin_epoch``),
  ``await compact()`` (run retention and compaction now), ``segments``, ``maintenance``,
  ``syncer``, ``syncs`` (segment fdatasyncs done by the commit path).
- ``MemStore(first_seq=1, replicated=False)`` (or ``await MemStore.open(first_seq=1)``):
  commits are reported on the next loop iteration after a mutation.
- Both implement ``ReplicaLog`` (below; the memory store only with ``replicated=True``).
- A failed store (write or fsync error) raises ``StreamUnavailableError`` on every mutation and
  on ``flush``; reads keep working. Reads raise ``CorruptSegmentError`` rather than return
  bytes whose record CRC does not match.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple, Protocol

from jetlog.errors import StorageError


class StoredMsg(NamedTuple):
    """A stored message exactly as published (subject, raw header block, payload) plus its
    sequence and store timestamp (ns since the epoch)."""

    seq: int
    subject: str
    hdr: bytes
    data: bytes
    ts: int


class SubjectState(NamedTuple):
    """Per-subject summary: live message count and first/last live sequence."""

    msgs: int
    first: int
    last: int


class StoreState(NamedTuple):
    """Stream-level state as JetStream's ``StreamState`` reports it.

    ``first_seq``: oldest live sequence; when the store holds no messages it is ``last_seq + 1``
    (or the configured first sequence of a never-written stream). ``first_ts`` is 0 when empty.
    ``last_seq``/``last_ts``: last *assigned* sequence and its time (kept after purges; 0 if
    never written). ``num_deleted``: interior gaps, ``(last - first + 1) - messages`` while
    messages > 0, else 0. ``lost_seqs``/``lost_bytes``: data a recovery had to give up
    (quarantined corruption), reported as JetStream's ``lost``.
    """

    messages: int
    bytes: int
    first_seq: int
    first_ts: int
    last_seq: int
    last_ts: int
    num_subjects: int
    num_deleted: int
    lost_seqs: tuple[int, ...] = ()
    lost_bytes: int = 0


class RecoveryReport(NamedTuple):
    """What opening a file store found and did."""

    segments: int
    messages: int
    truncated_bytes: int
    rebuilt_indexes: int
    quarantined: tuple[str, ...]
    lost_seqs: tuple[int, ...]


CommitListener = Callable[[int], None]
"""Called on the loop after each group commit with the new ``committed_seq``."""


StoredHeaders = tuple[int, int, bytes]
"""``(seq, ts, header block)`` of one stored message (``MsgStore.iter_headers``)."""


class MsgStore(Protocol):
    """The operations the stream layer uses. Implemented by ``FileStore`` and ``MemStore``."""

    # ---- identity and state -------------------------------------------------------------
    @property
    def last_seq(self) -> int:
        """Last assigned sequence (0 if never written, ``first_seq - 1`` for a fresh stream)."""
        ...

    @property
    def first_seq(self) -> int:
        """First live sequence (``last_seq + 1`` when empty)."""
        ...

    @property
    def msgs(self) -> int:
        """Number of live messages."""
        ...

    @property
    def bytes(self) -> int:
        """Σ message sizes using nats-server's accounting (see ``msg_size``)."""
        ...

    @property
    def committed_seq(self) -> int:
        """Highest sequence whose record (and everything before it) is durable."""
        ...

    def state(self) -> StoreState:
        """A snapshot of the stream state."""
        ...

    # ---- writes -------------------------------------------------------------------------
    def append(self, subject: str, hdr: builtins.bytes, data: builtins.bytes, ts: int, ttl: int = 0) -> int:
        """Store a message with sequence ``last_seq + 1`` and return that sequence.

        ``ts`` is the store time in ns (the caller keeps it non-decreasing). ``ttl`` > 0 is a
        per-message TTL in ns (from ``Nats-TTL``); the store records it so ``ttl_entries``
        survives restarts. Raises ``StreamUnavailableError`` once the store has failed.
        """
        ...

    def append_run(self, subjects: list[str], datas: list[builtins.bytes], ts: int) -> int:
        """Store ``datas[i]`` on ``subjects[i]`` (no header block, no TTL) with the next
        sequences, all at store time ``ts``, and return the last one. Exactly what ``append``
        once per message would store; the capture path uses it for a socket read's worth."""
        ...

    def skip(self, count: int = 1, ts: int = 0) -> int:
        """Consume ``count`` sequences without storing anything; return the new ``last_seq``.

        Used by interest retention when nobody is interested in a message. Durable like an
        append. ``ts`` (ns) becomes ``last_ts``; 0 means the wall clock (as nats-server does).
        """
        ...

    def remove(self, seq: int, erase: bool = False) -> bool:
        """Delete one live message. False if it is not live (never stored, deleted, purged).

        ``erase`` asks for the payload to be overwritten on disk when the segment is next
        rewritten (JetStream's secure erase); the message is gone from reads at once either way.
        """
        ...

    def purge(self, subject: str | None = None, seq: int = 0, keep: int = 0) -> int:
        """Remove live messages; return how many were removed.

        ``subject`` (wildcards allowed) restricts to matching subjects. ``seq`` > 0 removes only
        messages with sequence < ``seq``. ``keep`` > 0 keeps the newest ``keep`` matching
        messages (per the whole filter, not per subject). ``seq`` and ``keep`` are not combined
        by callers. Purging never renumbers: ``last_seq`` is unchanged.
        """
        ...

    async def flush(self) -> None:
        """Wait until every mutation made so far is durable (no-op for memory storage)."""
        ...

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Register a callback run on the loop after each group commit."""
        ...

    # ---- reads (all bounded to live messages; ``max_seq`` 0 means no bound) -------------
    def load(self, seq: int) -> StoredMsg | None:
        """The live message with this sequence, or None."""
        ...

    def load_next(self, start: int, subject: str | None = None, max_seq: int = 0) -> StoredMsg | None:
        """The first live message with sequence ≥ ``start`` whose subject matches ``subject``
        (a filter with wildcards; None = any), not beyond ``max_seq``."""
        ...

    def load_ahead(
        self, start: int, subject: str | None, max_seq: int, limit: int, max_bytes: int
    ) -> list[StoredMsg]:
        """Up to ``limit`` of the messages ``load_next`` would return one after another from
        ``start``, read in one pass: at least the first, when there is one, then until
        ``limit`` messages or ``max_bytes`` of payload and headers."""
        ...

    def removal_mark(self) -> tuple[object, int]:
        """A value that changes whenever a stored message may have stopped being live (removed,
        purged, expired, truncated, the store reset). Equal marks before and after: every
        message live at the first is still live, with the same content."""
        ...

    def is_live(self, seq: int) -> bool:
        """Whether ``seq`` holds a message (not removed, not truncated)."""
        ...

    def iter_range(self, start: int, last: int) -> Iterator[StoredMsg]:
        """Live messages with ``start <= seq <= last`` in order (bulk reads). The store must not
        be mutated while the iterator is in use."""
        ...

    def iter_headers(self, start: int, last: int) -> Iterator[StoredHeaders]:
        """``(seq, ts, header block)`` of the live messages with ``start <= seq <= last`` that
        have a header block, in order (rebuilding the duplicate window reads only these). The
        store must not be mutated while the iterator is in use."""
        ...

    def load_last(self, subject: str | None = None, max_seq: int = 0) -> StoredMsg | None:
        """The last live message matching ``subject`` with sequence ≤ ``max_seq``."""
        ...

    def next_seq(self, start: int, subject: str | None = None, max_seq: int = 0) -> int:
        """Like ``load_next`` but only the sequence (0 if none); reads no payload."""
        ...

    def seq_for_time(self, ts: int) -> int:
        """First live sequence whose timestamp is ≥ ``ts``; ``last_seq + 1`` if none."""
        ...

    def subjects_state(self, subject: str | None = None) -> dict[str, SubjectState]:
        """Per-subject state of every subject with live messages matching the filter."""
        ...

    def subject_state(self, subject: str) -> SubjectState | None:
        """State of one literal subject, None when it has no live message (the per-publish
        limit checks: no filter resolution, no dict)."""
        ...

    def num_pending(self, start: int, subject: str | None = None, last_per_subject: bool = False) -> int:
        """Live messages with sequence ≥ ``start`` matching ``subject``; with
        ``last_per_subject`` count only the last message of each matching subject."""
        ...

    def msg_size(self, seq: int) -> int:
        """Accounted size of a live message (0 if not live).

        File storage: ``22 + len(subject) + len(data) + 8``, plus ``4 + len(hdr)`` when the
        message has headers. Memory storage: ``len(subject) + len(hdr) + len(data) + 16``.
        (nats-server's formulas; they drive ``bytes``, ``max_bytes`` and account usage.)
        """
        ...

    def deleted_seqs(self) -> list[int]:
        """Interior deleted sequences between ``first_seq`` and ``last_seq``, ascending."""
        ...

    def ttl_entries(self) -> Iterable[tuple[int, int]]:
        """``(seq, expires_at_ns)`` for every live message stored with a TTL."""
        ...

    # ---- lifecycle ----------------------------------------------------------------------
    async def close(self) -> None:
        """Flush, persist indexes and release files. Idempotent."""
        ...

    async def destroy(self) -> None:
        """Close and delete all files of this store."""
        ...


# ---- replication ------------------------------------------------------------------------------

Pos = tuple[int, int]
"""Position of a batch in a store's log: ``(last_seq of the batch, k)``, where ``k`` counts the
earlier batches of the log with the same ``last_seq`` (only batches holding nothing but removal
ops share one). Positions increase strictly along the log; replicas holding the same batches
agree on them. ``(F - 1, -1)`` is the position before every batch of a log whose first segment
starts at sequence ``F`` (a fresh store with ``first_seq=F``, or what retention left)."""

NO_FLOOR = 1 << 64
"""``compact_floor`` meaning "no limit" (the default)."""


class ReplicaRead(NamedTuple):
    """One answer of ``read_batches``.

    Whole batches (``size == 0``): ``data`` is ``nbatches`` stored batches, verbatim and back to
    back; ``last`` is the position of the last one (the requested ``after`` when ``nbatches``
    is 0: nothing follows it yet).

    A chunk (``size > 0``): the batch after ``after`` alone is larger than ``max_bytes`` (or the
    caller asked for an ``offset`` inside it). ``data`` is its bytes ``[offset, offset +
    len(data))``, ``size`` its full stored size and ``last`` its position; ``nbatches`` is 0. The
    reader asks again with the same ``after`` and ``offset + len(data)`` until it holds all
    ``size`` bytes, then appends the reassembled batch (``complete``).
    """

    data: bytes
    nbatches: int
    last: Pos
    offset: int = 0
    size: int = 0

    @property
    def partial(self) -> bool:
        """True when ``data`` is a chunk of one batch rather than whole batches."""
        return self.size > 0

    @property
    def complete(self) -> bool:
        """True when this chunk is the last one of its batch (always True for whole batches)."""
        return self.size == 0 or self.offset + len(self.data) == self.size


class ReplicaError(StorageError):
    """A replication primitive was used in a way the log cannot serve."""


class OutOfRangeError(ReplicaError):
    """The requested position is below the first batch this store still holds (retention
    deleted it, or it lies in a segment compaction rewrote). ``start`` is this store's start
    position: a follower resets to ``start[0] + 1`` and fetches from there."""

    def __init__(self, pos: Pos, start: Pos) -> None:
        self.pos = pos
        self.start = start
        super().__init__(f"position {pos} is below the start of the log {start}")


class PositionError(ReplicaError):
    """``pos`` is not a position of this log: beyond its end (``end``), or no batch ends there
    (a different history, or the middle of a batch)."""

    def __init__(self, pos: Pos, end: Pos, reason: str) -> None:
        self.pos = pos
        self.end = end
        super().__init__(f"position {pos} is not in this log (end {end}): {reason}")


class BatchInputError(ReplicaError):
    """``append_batches`` got bytes it cannot append (damaged, malformed, not continuing the
    log); nothing was applied. ``offset`` is where in the input the problem is."""

    def __init__(self, offset: int, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        super().__init__(f"cannot append replicated batches (input offset {offset}): {reason}")


class EpochError(ReplicaError):
    """``begin_epoch`` with an epoch not above the latest known one."""


class ReplicaLog(Protocol):
    """The storage primitives of leader/follower replication (``docs/cluster.md`` §3-§4).

    Implemented by ``FileStore`` and by ``MemStore(replicated=True)``. A store is used either as
    a *writer* (``append``/``remove``/``purge``/``skip``: a leader or a standalone stream) or as
    a *replica* (``append_batches``: a follower); the owner switches roles (``seal`` before
    appending replicated batches). Both roles share the group commit, ``committed_seq`` and the
    commit listeners.

    The log is a sequence of record batches (``jetlog.wire.records``): records and removal ops,
    stamped with the epoch of the leader that wrote them. Batches are stored and shipped
    verbatim, so every replica holds the same bytes at the same positions (``Pos``).
    """

    ship_first: bool
    """Set while the store is a replicated stream's leader: work already scheduled on the loop
    (fetch replies to followers) runs before a sync that stalls the loop (the inline sync)."""

    compact_floor: int
    """Compaction never rewrites a segment whose last sequence is ≥ this (``NO_FLOOR``: no
    limit). Retention of a dead prefix is still allowed. Positions a follower may still fetch
    then never change. A follower that may be truncated should keep it at or below the
    sequence it can be truncated to (its high-water mark): a rewritten region can no longer be
    truncated into."""

    max_batch_bytes: int
    """The writer cuts batches so their stored size (header, records and ops, before
    compression) stays within this; a single larger record is a batch of its own."""

    def log_end(self) -> Pos:
        """Position of the last batch sealed or queued, durable or not (the start position
        when the log holds no batch)."""
        ...

    def durable_end(self) -> Pos:
        """Position of the last batch of the last group commit (memory: ``log_end``)."""
        ...

    def seal(self) -> Pos:
        """Close the batch being filled now (its records become a batch ``read_batches`` can
        ship at once, without waiting for the flusher); return ``log_end()``."""
        ...

    def read_batches(self, after: Pos, max_bytes: int, offset: int = 0, max_raw: int = 0) -> ReplicaRead:
        """The stored bytes of the whole batches following ``after``, at most ``max_bytes``
        (batches not yet written are served from memory). When the first one alone is larger,
        or ``offset`` > 0, a chunk of it (see ``ReplicaRead``). ``max_raw`` > 0 also bounds
        the whole batches' size once decompressed (at least one batch is returned): it bounds
        the reader's ``append_batches`` work when compression ratios are high. Raises
        ``OutOfRangeError`` below the start, ``PositionError`` for a position not in this log.
        Bounded work: at most ``max_bytes`` read."""
        ...

    def append_batches(self, data: builtins.bytes) -> Pos:
        """Follower side: append whole batches read from a leader, verbatim, and return the new
        ``log_end()``. Every batch is verified (header and body CRC, layout) and must continue
        the log (``base_seq == last_seq``); records and ops are applied to the index exactly as
        recovery would. Durable through the group commit (``flush``, ``committed_seq``,
        listeners). Raises ``BatchInputError`` and applies nothing when any batch is bad.
        Synchronous: its loop time grows with the records in ``data`` (about 1.5-3 us each
        here), which the reader bounds with ``read_batches``' ``max_bytes``/``max_raw``."""
        ...

    async def truncate(self, to: Pos) -> None:
        """Durably remove every batch after ``to`` (a batch position of this log, or the start
        position): the store is then exactly what it was when ``to`` was its end (removals in
        the removed batches are undone). The epoch checkpoint loses the epochs starting at or
        after ``to``. ``committed_seq`` may go down; listeners are not called."""
        ...

    def epochs(self) -> list[tuple[int, Pos]]:
        """The epoch checkpoint: ``(epoch, start)`` pairs, ``start`` being ``log_end()`` when the
        epoch began (its batches follow ``start``). A store with batches but no checkpoint (a
        single-node history) has epoch 0 starting at the start of the log."""
        ...

    async def begin_epoch(self, epoch: int) -> None:
        """Leader: seal, stamp ``epoch`` on every later batch and record ``(epoch, log_end())``
        durably. ``EpochError`` unless ``epoch`` is above every known epoch."""
        ...

    def epoch_end(self, epoch: int) -> tuple[int, Pos]:
        """KIP-279: ``(e, end)`` for the largest known epoch ``e <= epoch``, where ``end`` is the
        start of the next known epoch (``log_end()`` if ``e`` is the latest); ``(-1, start of
        the log)`` when no known epoch is ``<= epoch``."""
        ...

    async def reset(self, first_seq: int) -> None:
        """Wipe everything (batches, indexes, epochs) and continue empty at ``first_seq``."""
        ...
