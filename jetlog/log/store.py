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
  fenced the store, or None), ``epoch`` (leader epoch stamped on new batches; settable),
  ``await compact()`` (run retention and compaction now), ``segments``, ``maintenance``,
  ``syncer``, ``syncs`` (segment fdatasyncs done by the commit path).
- ``MemStore(first_seq=1)`` (or ``await MemStore.open(first_seq=1)``): commits are reported
  on the next loop iteration after a mutation.
- A failed store (write or fsync error) raises ``StreamUnavailableError`` on every mutation and
  on ``flush``; reads keep working. Reads raise ``CorruptSegmentError`` rather than return
  bytes whose record CRC does not match.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple, Protocol


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

    def iter_range(self, start: int, last: int) -> Iterator[StoredMsg]:
        """Live messages with ``start <= seq <= last`` in order (bulk reads). The store must not
        be mutated while the iterator is in use."""
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
