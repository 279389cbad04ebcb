"""``MemStore``: the memory-storage implementation of ``MsgStore``.

Same index and the same read/purge code as the file store (``base.IndexedStore``), so state,
reads and sequences behave identically; payloads live in the index blocks. Nothing is durable:
``committed_seq`` is always ``last_seq`` and commit listeners run on the next loop iteration
after a mutation (or synchronously when no loop is running), mimicking a group commit.

``MemStore(replicated=True)`` also implements ``store.ReplicaLog``: it keeps its batches encoded
as a file store stores them (``memreplica.MemLog``), sealed at each of those commits. Without the
flag it keeps nothing more and the replication methods raise ``ReplicaError``.
"""

from __future__ import annotations

import asyncio

from jetlog.errors import StreamUnavailableError
from jetlog.log.base import IndexedStore
from jetlog.log.index import Block, Index
from jetlog.log.memreplica import MemLog
from jetlog.log.replica import cap_raw, check_max_batch
from jetlog.log.store import NO_FLOOR, Pos, ReplicaError, ReplicaRead, StoredMsg
from jetlog.wire import records as rc

__all__ = ["MemStore"]


class MemStore(IndexedStore):
    """In-memory ``MsgStore`` (and ``ReplicaLog`` when ``replicated``)."""

    def __init__(self, first_seq: int = 1, *, replicated: bool = False) -> None:
        super().__init__(Index(first_seq, payload=True))
        self._closed = False
        self._notify_scheduled = False
        self._notified = self._ix.last_seq
        self._log = MemLog(self._ix.last_seq) if replicated else None
        self.compact_floor = NO_FLOOR  # nothing is ever rewritten in memory

    @classmethod
    async def open(
        cls, path: str | None = None, *, first_seq: int = 1, replicated: bool = False, **_options: object
    ) -> MemStore:
        """Same shape as ``FileStore.open`` (``path`` and file options are ignored)."""
        return cls(first_seq, replicated=replicated)

    @property
    def committed_seq(self) -> int:
        return self._ix.last_seq

    def _check_writable(self) -> None:
        if self._closed:
            raise StreamUnavailableError("memory store is closed")

    def append(self, subject: str, hdr: bytes, data: bytes, ts: int, ttl: int = 0) -> int:
        if self._closed:
            self._check_writable()
        ix = self._ix
        subj = ix.subjects
        sid = subj.ids.get(subject)
        if sid is None:
            sid = subj.intern(subject)
        seq = ix.last_seq + 1
        if self._log is not None:
            self._log.record(ix, rc.encode_record(seq, ts, subj.raw[sid], hdr, data, ts + ttl if ttl else 0))
        ix.last_seq = seq
        ix.last_ts = ts
        blk = ix.add(seq, ts, sid, len(subj.raw[sid]) + len(hdr) + len(data) + 16, 0, 0)
        blk.payload.append((hdr, data))  # type: ignore[union-attr]
        if ttl:
            ix.ttl[seq] = ts + ttl
        if self._listeners or self._log is not None:
            self._schedule_notify()
        return seq

    def append_run(self, subjects: list[str], datas: list[bytes], ts: int) -> int:
        seq = self._ix.last_seq
        for subject, data in zip(subjects, datas, strict=True):
            seq = self.append(subject, b"", data, ts)
        return seq

    def _skipped(self) -> None:
        if self._listeners or self._log is not None:
            self._schedule_notify()

    def _log_removal(self, ranges: list[tuple[int, int]], erase: bool) -> None:
        if self._log is not None:
            self._log.removed(self._ix, ranges)
            self._schedule_notify()

    def _schedule_notify(self) -> None:
        if self._notify_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._do_notify()
            return
        self._notify_scheduled = True
        loop.call_soon(self._do_notify)

    def _do_notify(self) -> None:
        self._notify_scheduled = False
        if self._log is not None and not self._closed:
            self._log.close(self._ix)  # the "group commit" seals the batch being filled
        seq = self._ix.last_seq
        if seq > self._notified:
            self._notified = seq
            self._notify(seq)

    def _read(self, blk: Block, i: int) -> StoredMsg:
        hdr, data = blk.payload[i]  # type: ignore[index,misc]
        return StoredMsg(blk.seqs[i], self._ix.subjects.names[blk.sid[i]], hdr, data, blk.ts[i])

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        self._closed = True

    async def destroy(self) -> None:
        self._closed = True
        self._ix = Index(self._ix.last_seq + 1, payload=True)

    # ---- replication (``store.ReplicaLog``; the work is in ``memreplica.py``) ----------------
    def _rep(self) -> MemLog:
        if self._log is None:
            raise ReplicaError("memory store created without replicated=True")
        return self._log

    @property
    def max_batch_bytes(self) -> int:
        return self._rep().max_body + rc.HEADER_SIZE

    @max_batch_bytes.setter
    def max_batch_bytes(self, value: int) -> None:
        self._rep().max_body = check_max_batch(value) - rc.HEADER_SIZE

    @property
    def epoch(self) -> int:
        """The epoch stamped on new batches (set by ``begin_epoch``)."""
        return self._rep().epoch

    def log_end(self) -> Pos:
        return self._rep().end

    def durable_end(self) -> Pos:
        return self._rep().end

    def seal(self) -> Pos:
        rep = self._rep()
        if not self._closed:
            rep.close(self._ix)
        return rep.end

    def read_batches(self, after: Pos, max_bytes: int, offset: int = 0, max_raw: int = 0) -> ReplicaRead:
        return cap_raw(after, self._rep().read(after, max_bytes, offset), max_raw)

    def append_batches(self, data: bytes) -> Pos:
        rep = self._rep()
        self._check_writable()
        end = rep.append(self._ix, data)
        self._ix.prune()
        self._schedule_notify()
        return end

    async def truncate(self, to: Pos) -> None:
        rep = self._rep()
        self._check_writable()
        rep.close(self._ix)
        self._ix = rep.truncate(self._ix, to)
        self._notified = min(self._notified, self._ix.last_seq)

    def epochs(self) -> list[tuple[int, Pos]]:
        rep = self._rep()
        return rep.epochs.view(rep.start, rep.first)

    async def begin_epoch(self, epoch: int) -> None:
        self._check_writable()
        self._rep().begin_epoch(self._ix, epoch)

    def epoch_end(self, epoch: int) -> tuple[int, Pos]:
        rep = self._rep()
        return rep.epochs.end_of(epoch, rep.start, rep.first, rep.end)

    async def reset(self, first_seq: int) -> None:
        rep = self._rep()
        self._check_writable()
        if first_seq < 1:
            raise ValueError("first_seq must be at least 1")
        self._ix = Index(first_seq, payload=True)
        self._log = MemLog(self._ix.last_seq)
        self._log.max_body = rep.max_body
        self._notified = self._ix.last_seq
